#include "workloads/ops.hpp"

#include <array>

namespace replay {
namespace {

constexpr std::array<OpInfo, static_cast<size_t>(Op::kCount)> kOpTable = {{
    {Op::kConvertElementType, "prims.convert_element_type.default", OpKind::kUnary, 1},
    {Op::kRsqrt, "aten.rsqrt.default", OpKind::kUnary, 1},
    {Op::kSqrt, "aten.sqrt.default", OpKind::kUnary, 1},
    {Op::kNeg, "aten.neg.default", OpKind::kUnary, 1},
    {Op::kAbs, "aten.abs.default", OpKind::kUnary, 1},
    {Op::kExp, "aten.exp.default", OpKind::kUnary, 1},
    {Op::kReciprocal, "aten.reciprocal.default", OpKind::kUnary, 1},
    {Op::kPowTensorScalar, "aten.pow.Tensor_Scalar", OpKind::kUnary, 1},
    {Op::kClone, "aten.clone.default", OpKind::kUnary, 1},
    {Op::kAdd, "aten.add.Tensor", OpKind::kBinary, 1},
    {Op::kSub, "aten.sub.Tensor", OpKind::kBinary, 1},
    {Op::kMul, "aten.mul.Tensor", OpKind::kBinary, 1},
    {Op::kDiv, "aten.div.Tensor", OpKind::kBinary, 1},
    {Op::kVarMean, "aten.var_mean.correction", OpKind::kReduction, 2},
    {Op::kMeanDim, "aten.mean.dim", OpKind::kReduction, 1},
    {Op::kSumDim, "aten.sum.dim_IntList", OpKind::kReduction, 1},
    {Op::kAmax, "aten.amax.default", OpKind::kReduction, 1},
    {Op::kView, "aten.view.default", OpKind::kView, 1},
    {Op::kUnsafeView, "aten._unsafe_view.default", OpKind::kView, 1},
    {Op::kReshape, "aten.reshape.default", OpKind::kView, 1},
    {Op::kPermute, "aten.permute.default", OpKind::kView, 1},
    {Op::kUnsqueeze, "aten.unsqueeze.default", OpKind::kView, 1},
    {Op::kExpand, "aten.expand.default", OpKind::kView, 1},
    {Op::kGetItem, "getitem", OpKind::kGetItem, 1},
}};

constexpr bool table_in_enum_order() {
  for (size_t i = 0; i < kOpTable.size(); ++i)
    if (static_cast<size_t>(kOpTable[i].op) != i) return false;
  return true;
}
static_assert(table_in_enum_order(), "kOpTable rows must follow the Op enum order");

}  // namespace

const OpInfo& op_info(Op op) {
  return kOpTable.at(static_cast<size_t>(op));
}

std::optional<Op> parse_op(std::string_view name) {
  for (const auto& i : kOpTable)
    if (i.name == name) return i.op;
  return std::nullopt;
}

}  // namespace replay
