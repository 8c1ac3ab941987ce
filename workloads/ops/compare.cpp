// Comparison and selection: one row each (see op.hpp). Comparisons and logical ops give bool and
// compare in the promoted dtype of their operands; where and clamp give the promoted dtype of
// their value operands (promote.hpp). max/min/clamp propagate NaN, as PyTorch does.
#include <cmath>

#include "workloads/ops/eigen_ref.hpp"
#include "workloads/ops/promote.hpp"
#include "workloads/ops/row_util.hpp"

namespace replay {
namespace {

using ref::ArrayXd;
using rows::broadcast_operands;

// --- parsers -----------------------------------------------------------------------------------

void parse_binary(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "self")}, a.operand(1, "other")};
}

void parse_binary_scalar(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "self")}, a.scalar_operand(1, "other")};
}

void parse_unary(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
}

// where.self(condition, self, other); a Python number for self/other is accepted (FX graphs of
// torch.where(c, x, 0.0) carry one after decomposition).
void parse_where(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "condition")}, a.operand(1, "self"), a.operand(2, "other")};
  if (g.meta(n.operands[0].value).dtype != DType::kBool)
    a.fail("where's condition '" + g.values[n.operands[0].value].name + "' has dtype " +
           std::string(dtype_name(g.meta(n.operands[0].value).dtype)) + "; expected bool");
}

// clamp(self, min=None, max=None) with numbers; clamp.Tensor with tensors. At least one bound.
void parse_clamp(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "self")}, a.opt_operand(1, "min"), a.opt_operand(2, "max")};
  if (n.operands[1].none && n.operands[2].none)
    a.fail("clamp needs at least one of min and max (PyTorch raises)");
}

void parse_clamp_min(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "self")}, a.scalar_operand(1, "min"), Operand{}};
  n.operands[2].none = true;
}

void parse_clamp_max(ArgReader& a, const Graph&, Node& n) {
  Operand none;
  none.none = true;
  n.operands = {{a.tensor(0, "self")}, none, a.scalar_operand(1, "max")};
}

// --- shape and dtype rules ---------------------------------------------------------------------

std::vector<OutSpec> infer_bool(const Graph& g, const Node& n) {
  result_type(promote_operands(g, n.operands));  // throws for operands that do not promote
  return {{broadcast_operands(g, n), DType::kBool}};
}

std::vector<OutSpec> infer_where(const Graph& g, const Node& n) {
  std::vector<Operand> values(n.operands.begin() + 1, n.operands.end());
  return {{broadcast_operands(g, n), result_type(promote_operands(g, values))}};
}

std::vector<OutSpec> infer_promote(const Graph& g, const Node& n) {
  return {{broadcast_operands(g, n), result_type(promote_operands(g, n.operands))}};
}

// --- references --------------------------------------------------------------------------------

// An elementwise function of the operands broadcast to the output (None operands are NaN, which
// the functions below treat as "no bound"). Tensor operands are cast to the common dtype first,
// as TensorIterator does: the output's, or for bool results (comparisons) the promoted operands'.
template <typename F>
std::vector<HostTensor> nary(const RefArgs& a, F f) {
  std::vector<PromoteOperand> po;
  for (size_t i = 0; i < a.in.size(); ++i)
    if (a.in[i]) po.push_back({a.in[i]->meta.dtype, a.in[i]->meta.shape.empty(), false});
  const DType common =
      a.out[0].dtype != DType::kBool || po.empty() ? a.out[0].dtype : result_type(po);
  return ref_outputs(ref::elementwise(a, a.out[0], common, [&f](const ref::ElementValues& v) {
    return f([&v](size_t k) { return v[k]; });
  }));
}

#define REF(name, expr)                                                      \
  std::vector<HostTensor> name(const RefArgs& a) {                           \
    return nary(a, [](const auto& o) { return static_cast<double>(expr); }); \
  }
REF(ref_eq, o(0) == o(1))
REF(ref_ne, o(0) != o(1))
REF(ref_lt, o(0) < o(1))
REF(ref_le, o(0) <= o(1))
REF(ref_gt, o(0) > o(1))
REF(ref_ge, o(0) >= o(1))
REF(ref_not, o(0) == 0)
REF(ref_and, o(0) != 0 && o(1) != 0)
REF(ref_or, o(0) != 0 || o(1) != 0)
REF(ref_xor, (o(0) != 0) != (o(1) != 0))
REF(ref_where, o(0) != 0 ? o(1) : o(2))
#undef REF

std::vector<HostTensor> ref_clamp(const RefArgs& a) {
  const bool has_min = !a.node.operands[1].none, has_max = !a.node.operands[2].none;
  return nary(a, [has_min, has_max](const auto& o) {
    double x = o(0);
    if (std::isnan(x)) return x;
    if (has_min && (std::isnan(o(1)) || x < o(1))) x = o(1);
    if (has_max && (std::isnan(o(2)) || x > o(2))) x = o(2);
    return x;
  });
}

// --- the rows ----------------------------------------------------------------------------------

#define X35 R"({"shape": [3, 5], "dtype": "float32"})"
#define B35 \
  R"({"shape": [3, 5], "dtype": "bool", "stats": {"mean": 0, "std": 1, "min": -1, "max": 1}})"
#define CMP_EX          \
  R"({"inputs": [)" X35 \
  R"(, {"shape": [5], "dtype": "bfloat16"}], "args": [{"ref": "in0"}, {"ref": "in1"}]})"
#define CMP_SCALAR_EX R"({"inputs": [)" X35 R"(], "args": [{"ref": "in0"}, 0.25]})"
#define LOGICAL_EX \
  R"({"inputs": [)" B35 R"(, )" X35 R"(], "args": [{"ref": "in0"}, {"ref": "in1"}]})"

#define ROW(op, name, parse, infer, ref, fn, example)                                              \
  {                                                                                                \
    op, name, OpKind::kPointwise, 1, parse, infer, ref, eager_pointwise(PointwiseFn::fn), nullptr, \
        example                                                                                    \
  }
#define CMP(op, sop, stem, ref, fn)                                           \
  ROW(op, "aten." stem ".Tensor", parse_binary, infer_bool, ref, fn, CMP_EX), \
      ROW(sop, "aten." stem ".Scalar", parse_binary_scalar, infer_bool, ref, fn, CMP_SCALAR_EX)

constexpr OpDef kRows[] = {
    CMP(Op::kEq, Op::kEqScalar, "eq", ref_eq, kEq),
    CMP(Op::kNe, Op::kNeScalar, "ne", ref_ne, kNe),
    CMP(Op::kLt, Op::kLtScalar, "lt", ref_lt, kLt),
    CMP(Op::kLe, Op::kLeScalar, "le", ref_le, kLe),
    CMP(Op::kGt, Op::kGtScalar, "gt", ref_gt, kGt),
    CMP(Op::kGe, Op::kGeScalar, "ge", ref_ge, kGe),
    ROW(Op::kLogicalNot, "aten.logical_not.default", parse_unary, infer_bool, ref_not, kLogicalNot,
        R"({"inputs": [)" X35 R"(], "args": [{"ref": "in0"}]})"),
    ROW(Op::kLogicalAnd, "aten.logical_and.default", parse_binary, infer_bool, ref_and, kLogicalAnd,
        LOGICAL_EX),
    ROW(Op::kLogicalOr, "aten.logical_or.default", parse_binary, infer_bool, ref_or, kLogicalOr,
        LOGICAL_EX),
    ROW(Op::kLogicalXor, "aten.logical_xor.default", parse_binary, infer_bool, ref_xor, kLogicalXor,
        LOGICAL_EX),
    ROW(Op::kWhere, "aten.where.self", parse_where, infer_where, ref_where, kWhere,
        R"({"inputs": [)" B35 R"(, )" X35 R"(, {"shape": [1, 5], "dtype": "bfloat16"}],
            "args": [{"ref": "in0"}, {"ref": "in1"}, {"ref": "in2"}]})"),
    ROW(Op::kClamp, "aten.clamp.default", parse_clamp, infer_promote, ref_clamp, kClamp,
        R"({"inputs": [)" X35 R"(], "args": [{"ref": "in0"}, -0.5], "kwargs": {"max": 0.75}})"),
    ROW(Op::kClampTensor, "aten.clamp.Tensor", parse_clamp, infer_promote, ref_clamp, kClamp,
        R"({"inputs": [)" X35 R"(, {"shape": [5], "dtype": "float32"}],
            "args": [{"ref": "in0"}, null, {"ref": "in1"}]})"),
    ROW(Op::kClampMin, "aten.clamp_min.default", parse_clamp_min, infer_promote, ref_clamp, kClamp,
        R"({"inputs": [)" X35 R"(], "args": [{"ref": "in0"}, 1e-12]})"),
    ROW(Op::kClampMax, "aten.clamp_max.default", parse_clamp_max, infer_promote, ref_clamp, kClamp,
        R"({"inputs": [)" X35 R"(], "args": [{"ref": "in0"}, 448.0]})"),
};
static_assert(rows_cover(kRows, kCompareOps), "one row per comparison/selection op, in enum order");

}  // namespace

std::span<const OpDef> compare_op_rows() {
  return kRows;
}

}  // namespace replay
