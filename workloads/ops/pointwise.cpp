// Pointwise ops: one row each (see op.hpp). The reference computes in float64; the eager kernel
// computes in float32 opmath (float64 if an operand is float64), as PyTorch does.
#include <cmath>

#include "workloads/ops/eigen_ref.hpp"

namespace replay {
namespace {

using ref::ArrayXd;

// --- parsers -----------------------------------------------------------------------------------

void parse_unary(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
}

void parse_convert(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "a")}};
  n.dtype = a.dtype(1, "dtype");
}

void parse_clone(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  a.ignore("memory_format");  // the recorded output strides say what it did
}

void parse_pow_scalar(ArgReader& a, const Graph&, Node& n) {
  Operand e;
  e.scalar = a.scalar(1, "exponent");
  n.operands = {{a.tensor(0, "self")}, e};
}

// add/sub: a + alpha * b (alpha keyword-only in ATen; accepted positionally as before)
void parse_binary_alpha(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "self")}, a.operand(1, "other")};
  n.alpha = a.opt_scalar(2, "alpha").value_or(1.0);
}

void parse_binary(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "self")}, a.operand(1, "other")};
}

// --- shape rules -------------------------------------------------------------------------------

std::vector<OutSpec> infer_same(const Graph& g, const Node& n) {
  return {{g.meta(n.operands[0].value).shape, std::nullopt}};
}

std::vector<OutSpec> infer_convert(const Graph& g, const Node& n) {
  return {{g.meta(n.operands[0].value).shape, n.dtype}};
}

std::vector<OutSpec> infer_broadcast(const Graph& g, const Node& n) {
  Shape s;
  bool any = false;
  for (const auto& o : n.operands) {
    if (!o.is_tensor()) continue;
    s = any ? broadcast_shapes(s, g.meta(o.value).shape) : g.meta(o.value).shape;
    any = true;
  }
  return {{s, std::nullopt}};
}

// --- references --------------------------------------------------------------------------------

template <typename F>
std::vector<HostTensor> unary(const RefArgs& a, F f) {
  return {ref::from_array(f(ref::as_array(*a.in[0])), a.out[0])};
}

std::vector<HostTensor> ref_copy(const RefArgs& a) {
  return unary(a, [](const auto& x) { return ArrayXd(x); });
}
std::vector<HostTensor> ref_rsqrt(const RefArgs& a) {
  return unary(a, [](const auto& x) { return ArrayXd(x.rsqrt()); });
}
std::vector<HostTensor> ref_sqrt(const RefArgs& a) {
  return unary(a, [](const auto& x) { return ArrayXd(x.sqrt()); });
}
std::vector<HostTensor> ref_neg(const RefArgs& a) {
  return unary(a, [](const auto& x) { return ArrayXd(-x); });
}
std::vector<HostTensor> ref_abs(const RefArgs& a) {
  return unary(a, [](const auto& x) { return ArrayXd(x.abs()); });
}
std::vector<HostTensor> ref_exp(const RefArgs& a) {
  return unary(a, [](const auto& x) { return ArrayXd(x.exp()); });
}
std::vector<HostTensor> ref_reciprocal(const RefArgs& a) {
  return unary(a, [](const auto& x) { return ArrayXd(x.inverse()); });
}
std::vector<HostTensor> ref_pow_scalar(const RefArgs& a) {
  const double e = a.node.operands[1].scalar;
  return unary(a, [e](const auto& x) { return e == 2 ? ArrayXd(x.square()) : ArrayXd(x.pow(e)); });
}

template <typename F>
std::vector<HostTensor> binary(const RefArgs& a, F f) {
  const Shape& s = a.out[0].shape;
  return {ref::from_array(f(ref::operand(a, 0, s), ref::operand(a, 1, s), a.node.alpha), a.out[0])};
}
std::vector<HostTensor> ref_add(const RefArgs& a) {
  return binary(a,
                [](const ArrayXd& x, const ArrayXd& y, double al) { return ArrayXd(x + al * y); });
}
std::vector<HostTensor> ref_sub(const RefArgs& a) {
  return binary(a,
                [](const ArrayXd& x, const ArrayXd& y, double al) { return ArrayXd(x - al * y); });
}
std::vector<HostTensor> ref_mul(const RefArgs& a) {
  return binary(a, [](const ArrayXd& x, const ArrayXd& y, double) { return ArrayXd(x * y); });
}
std::vector<HostTensor> ref_div(const RefArgs& a) {
  return binary(a, [](const ArrayXd& x, const ArrayXd& y, double) { return ArrayXd(x / y); });
}

// --- the rows ----------------------------------------------------------------------------------

// Example inputs: x ~ N(0, 1); p ~ positive (for rsqrt, sqrt, reciprocal, div).
#define X35 R"({"shape": [3, 5], "dtype": "float32"})"
#define P35 \
  R"({"shape": [3, 5], "dtype": "float32", "stats": {"mean": 2, "std": 0.5, "min": 0.5, "max": 4}})"
#define UNARY_EX(in) R"({"inputs": [)" in R"(], "args": [{"ref": "in0"}]})"

constexpr OpDef kRows[] = {
    {Op::kConvertElementType, "prims.convert_element_type.default", OpKind::kPointwise, 1,
     parse_convert, infer_convert, ref_copy, eager_pointwise(PointwiseFn::kCopy), nullptr,
     R"({"inputs": [)" X35 R"(], "args": [{"ref": "in0"}, {"dtype": "bfloat16"}]})"},
    {Op::kClone, "aten.clone.default", OpKind::kPointwise, 1, parse_clone, infer_same, ref_copy,
     eager_pointwise(PointwiseFn::kCopy), nullptr,
     R"({"inputs": [{"shape": [4, 3], "stride": [1, 4], "dtype": "bfloat16"}],
         "args": [{"ref": "in0"}]})"},
    {Op::kRsqrt, "aten.rsqrt.default", OpKind::kPointwise, 1, parse_unary, infer_same, ref_rsqrt,
     eager_pointwise(PointwiseFn::kRsqrt), nullptr, UNARY_EX(P35)},
    {Op::kSqrt, "aten.sqrt.default", OpKind::kPointwise, 1, parse_unary, infer_same, ref_sqrt,
     eager_pointwise(PointwiseFn::kSqrt), nullptr, UNARY_EX(P35)},
    {Op::kNeg, "aten.neg.default", OpKind::kPointwise, 1, parse_unary, infer_same, ref_neg,
     eager_pointwise(PointwiseFn::kNeg), nullptr, UNARY_EX(X35)},
    {Op::kAbs, "aten.abs.default", OpKind::kPointwise, 1, parse_unary, infer_same, ref_abs,
     eager_pointwise(PointwiseFn::kAbs), nullptr, UNARY_EX(X35)},
    {Op::kExp, "aten.exp.default", OpKind::kPointwise, 1, parse_unary, infer_same, ref_exp,
     eager_pointwise(PointwiseFn::kExp), nullptr, UNARY_EX(X35)},
    {Op::kReciprocal, "aten.reciprocal.default", OpKind::kPointwise, 1, parse_unary, infer_same,
     ref_reciprocal, eager_pointwise(PointwiseFn::kReciprocal), nullptr, UNARY_EX(P35)},
    {Op::kPowTensorScalar, "aten.pow.Tensor_Scalar", OpKind::kPointwise, 1, parse_pow_scalar,
     infer_same, ref_pow_scalar, eager_pointwise(PointwiseFn::kPow), nullptr,
     R"({"inputs": [)" P35 R"(], "args": [{"ref": "in0"}, 3]})"},
    {Op::kAdd, "aten.add.Tensor", OpKind::kPointwise, 1, parse_binary_alpha, infer_broadcast,
     ref_add, eager_pointwise(PointwiseFn::kAdd), nullptr,
     R"({"inputs": [)" X35 R"(, {"shape": [5], "dtype": "bfloat16"}],
         "args": [{"ref": "in0"}, {"ref": "in1"}], "kwargs": {"alpha": 2}})"},
    {Op::kSub, "aten.sub.Tensor", OpKind::kPointwise, 1, parse_binary_alpha, infer_broadcast,
     ref_sub, eager_pointwise(PointwiseFn::kSub), nullptr,
     R"({"inputs": [)" X35 R"(, {"shape": [3, 1], "dtype": "float32"}],
         "args": [{"ref": "in0"}, {"ref": "in1"}]})"},
    {Op::kMul, "aten.mul.Tensor", OpKind::kPointwise, 1, parse_binary, infer_broadcast, ref_mul,
     eager_pointwise(PointwiseFn::kMul), nullptr,
     R"({"inputs": [)" X35 R"(], "args": [{"ref": "in0"}, 0.5]})"},
    {Op::kDiv, "aten.div.Tensor", OpKind::kPointwise, 1, parse_binary, infer_broadcast, ref_div,
     eager_pointwise(PointwiseFn::kDiv), nullptr,
     R"({"inputs": [)" X35 R"(, )" P35 R"(], "args": [{"ref": "in0"}, {"ref": "in1"}]})"},
};
static_assert(rows_cover(kRows, kPointwiseOps), "one row per pointwise op, in enum order");

}  // namespace

std::span<const OpDef> pointwise_op_rows() {
  return kRows;
}

}  // namespace replay
