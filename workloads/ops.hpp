// The ATen/prims ops the harness understands: one enum, one name table (ggml style), so that adding
// an op cannot silently miss the table.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace replay {

/// Ops as they appear in a decomposed ATen graph. Names are ATen's (see kOpTable in ops.cpp).
enum class Op : uint8_t {
  // pointwise, one tensor operand
  kConvertElementType,  // prims.convert_element_type.default(x, dtype)
  kRsqrt,               // aten.rsqrt.default
  kSqrt,                // aten.sqrt.default
  kNeg,                 // aten.neg.default
  kAbs,                 // aten.abs.default
  kExp,                 // aten.exp.default
  kReciprocal,          // aten.reciprocal.default
  kPowTensorScalar,     // aten.pow.Tensor_Scalar(x, exponent)
  kClone,               // aten.clone.default
  // pointwise, two operands (either may be a Python scalar), broadcasting
  kAdd,  // aten.add.Tensor(a, b, alpha=1)
  kSub,  // aten.sub.Tensor(a, b, alpha=1)
  kMul,  // aten.mul.Tensor
  kDiv,  // aten.div.Tensor
  // reductions over `dims`
  kVarMean,  // aten.var_mean.correction(x, dims, correction=, keepdim=) -> (var, mean)
  kMeanDim,  // aten.mean.dim(x, dims, keepdim=False)
  kSumDim,   // aten.sum.dim_IntList(x, dims, keepdim=False)
  kAmax,     // aten.amax.default(x, dims, keepdim=False)
  // views: host-side aliases, no kernel
  kView,        // aten.view.default(x, shape)
  kUnsafeView,  // aten._unsafe_view.default(x, shape)
  kReshape,     // aten.reshape.default(x, shape)
  kPermute,     // aten.permute.default(x, dims)
  kUnsqueeze,   // aten.unsqueeze.default(x, dim)
  kExpand,      // aten.expand.default(x, shape)
  // multi-output selection (FX's operator.getitem); resolved away by the loader
  kGetItem,
  kCount
};

enum class OpKind : uint8_t { kUnary, kBinary, kReduction, kView, kGetItem };

struct OpInfo {
  Op op;
  std::string_view name;  ///< ATen spelling, e.g. "aten.var_mean.correction"
  OpKind kind;
  int num_outputs;
};

const OpInfo& op_info(Op op);
inline std::string_view op_name(Op op) {
  return op_info(op).name;
}
/// Look an ATen op name up; std::nullopt for an op the harness does not know.
std::optional<Op> parse_op(std::string_view name);

}  // namespace replay
