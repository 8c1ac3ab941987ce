// Pointwise math: one row each (see op.hpp). The reference computes in float64; the eager kernel
// computes in the opmath of the result dtype (float32 for the narrower floats), as PyTorch does.
// Result dtypes follow PyTorch's type promotion (promote.hpp): arithmetic gives result_type of
// the operands, unary float functions and true division turn integers into float32.
#include <cmath>

#include "workloads/ops/eigen_ref.hpp"
#include "workloads/ops/promote.hpp"
#include "workloads/ops/row_util.hpp"

namespace replay {
namespace {

using rows::broadcast_operands;

// --- parsers -----------------------------------------------------------------------------------

void parse_unary(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
}

void parse_convert(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "a")}};
  n.dtype = a.dtype(1, "dtype");
}

void parse_clone(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  n.dtype = g.meta(n.operands[0].value).dtype;
  a.ignore("memory_format");  // the recorded output strides say what it did
}

// _to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
// memory_format=None): a cast (and a copy); device and layout must stay what they are.
void parse_to_copy(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  n.dtype = a.present(ArgReader::kKwOnly, "dtype") ? a.dtype(ArgReader::kKwOnly, "dtype")
                                                   : g.meta(n.operands[0].value).dtype;
  for (const char* kw : {"layout", "device", "pin_memory", "non_blocking", "memory_format"})
    a.ignore(kw);
}

void parse_pow_scalar(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "self")}, a.scalar_operand(1, "exponent")};
}

void parse_pow_tensor(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "self")}, {a.tensor(1, "exponent")}};
}

void parse_pow_scalar_base(ArgReader& a, const Graph&, Node& n) {
  n.operands = {a.scalar_operand(0, "self"), {a.tensor(1, "exponent")}};
}

// Binary ops take a Python number for either operand: decompositions record e.g.
// aten.sub.Tensor(1, x) (Inductor's GELU/SiLU backward); at least one must be a tensor.
void parse_binary(ArgReader& a, const Graph&, Node& n) {
  n.operands = {a.operand(0, "self"), a.operand(1, "other")};
  if (!n.operands[0].is_tensor() && !n.operands[1].is_tensor())
    a.fail("neither operand is a tensor");
}

// add/sub/rsub: a + alpha * b (alpha keyword-only in ATen; accepted positionally as before)
void parse_binary_alpha(ArgReader& a, const Graph& g, Node& n) {
  parse_binary(a, g, n);
  n.alpha = a.opt_scalar(2, "alpha").value_or(1.0);
}

void parse_div_mode(ArgReader& a, const Graph& g, Node& n) {  // div.Tensor_mode
  parse_binary(a, g, n);
  if (auto m = a.opt_string(ArgReader::kKwOnly, "rounding_mode")) {
    if (*m != "trunc" && *m != "floor")
      a.fail("rounding_mode must be \"trunc\", \"floor\" or null, found \"" + *m + "\"");
    n.mode = *m;
  }
}

// --- shape and dtype rules ---------------------------------------------------------------------

std::vector<OutSpec> infer_same(const Graph& g, const Node& n) {
  return {{g.meta(n.operands[0].value).shape, g.meta(n.operands[0].value).dtype}};
}

std::vector<OutSpec> infer_float_unary(const Graph& g, const Node& n) {
  return {{g.meta(n.operands[0].value).shape, int_to_float(g.meta(n.operands[0].value).dtype)}};
}

std::vector<OutSpec> infer_rounding(const Graph& g, const Node& n) {
  if (g.meta(n.operands[0].value).dtype == DType::kBool)
    throw std::invalid_argument("rounding a bool tensor (PyTorch refuses)");
  return infer_same(g, n);
}

std::vector<OutSpec> infer_cast(const Graph& g, const Node& n) {
  return {{g.meta(n.operands[0].value).shape, n.dtype}};
}

std::vector<OutSpec> infer_neg(const Graph& g, const Node& n) {
  if (g.meta(n.operands[0].value).dtype == DType::kBool)
    throw std::invalid_argument("negation of a bool tensor (PyTorch refuses; use logical_not)");
  return infer_same(g, n);
}

std::vector<OutSpec> infer_promote(const Graph& g, const Node& n) {
  return {{broadcast_operands(g, n), result_type(promote_operands(g, n.operands))}};
}

std::vector<OutSpec> infer_true_div(const Graph& g, const Node& n) {
  const DType t = result_type(promote_operands(g, n.operands));
  return {{broadcast_operands(g, n), n.mode.empty() ? int_to_float(t) : t}};
}

// --- references --------------------------------------------------------------------------------

// One operand, no cast first (a conversion reads the input's values; the executor rounds the
// result to the output dtype).
template <typename F>
std::vector<HostTensor> unary(const RefArgs& a, F f) {
  return ref_outputs(ref::elementwise(a, a.out[0], std::nullopt, [f](const ref::ElementValues& v) {
    return static_cast<double>(f(v[0]));
  }));
}

std::vector<HostTensor> ref_copy(const RefArgs& a) {
  return unary(a, [](double v) { return v; });
}
#define REF_UNARY(name, expr)                       \
  std::vector<HostTensor> name(const RefArgs& a) {  \
    return unary(a, [](double v) { return expr; }); \
  }
REF_UNARY(ref_rsqrt, 1 / std::sqrt(v))
REF_UNARY(ref_sqrt, std::sqrt(v))
REF_UNARY(ref_neg, -v)
REF_UNARY(ref_abs, std::fabs(v))
REF_UNARY(ref_exp, std::exp(v))
REF_UNARY(ref_log, std::log(v))
REF_UNARY(ref_log1p, std::log1p(v))
REF_UNARY(ref_expm1, std::expm1(v))
REF_UNARY(ref_reciprocal, 1 / v)
REF_UNARY(ref_tanh, std::tanh(v))
REF_UNARY(ref_sigmoid, 1 / (1 + std::exp(-v)))
REF_UNARY(ref_erf, std::erf(v))
REF_UNARY(ref_sin, std::sin(v))
REF_UNARY(ref_cos, std::cos(v))
REF_UNARY(ref_sign, (v > 0) - (v < 0))  // NaN gives 0, as torch.sign does
REF_UNARY(ref_relu, std::isnan(v) ? v : (v > 0 ? v : 0.0))
REF_UNARY(ref_log2, std::log2(v))
REF_UNARY(ref_exp2, std::exp2(v))
REF_UNARY(ref_floor, std::floor(v))
REF_UNARY(ref_ceil, std::ceil(v))
REF_UNARY(ref_trunc, std::trunc(v))
REF_UNARY(ref_round, std::nearbyint(v))  // half to even (the default rounding mode), as torch.round
#undef REF_UNARY

// An elementwise function of all operands broadcast to the output, plus the node. Tensor operands
// are cast to the result dtype first (ref::elementwise).
template <typename F>
std::vector<HostTensor> nary(const RefArgs& a, F f) {
  return ref_outputs(
      ref::elementwise(a, a.out[0], a.out[0].dtype,
                       [&f, &n = a.node](const ref::ElementValues& o) { return f(o, n); }));
}

// PyTorch computes these exponents with the matching function (ATen's pow kernels), which
// differs from pow() at -0 (rsqrt(-0) = -inf) and in rounding.
double pow_ref(double x, double y) {
  if (y == 2) return x * x;
  if (y == 3) return x * x * x;
  if (y == 0.5) return std::sqrt(x);
  if (y == -0.5) return 1 / std::sqrt(x);
  if (y == -1) return 1 / x;
  if (y == -2) return 1 / (x * x);
  return std::pow(x, y);
}

#define REF_NARY(name, expr)                                                         \
  std::vector<HostTensor> name(const RefArgs& a) {                                   \
    return nary(a, [](const ref::ElementValues& o, [[maybe_unused]] const Node& n) { \
      return static_cast<double>(expr);                                              \
    });                                                                              \
  }
REF_NARY(ref_pow, pow_ref(o[0], o[1]))
REF_NARY(ref_add, o[0] + n.alpha * o[1])
REF_NARY(ref_sub, o[0] - n.alpha * o[1])
REF_NARY(ref_rsub, o[1] - n.alpha * o[0])
REF_NARY(ref_mul, o[0] * o[1])
REF_NARY(ref_div, n.mode == "trunc"   ? std::trunc(o[0] / o[1])
                  : n.mode == "floor" ? std::floor(o[0] / o[1])
                                      : o[0] / o[1])
REF_NARY(ref_maximum, std::isnan(o[0]) || std::isnan(o[1]) ? NAN : std::max(o[0], o[1]))
REF_NARY(ref_minimum, std::isnan(o[0]) || std::isnan(o[1]) ? NAN : std::min(o[0], o[1]))
#undef REF_NARY

// --- the rows ----------------------------------------------------------------------------------

// Example inputs: x ~ N(0, 1); p ~ positive (for rsqrt, sqrt, log, reciprocal, div).
#define X35 R"({"shape": [3, 5], "dtype": "float32"})"
#define P35 \
  R"({"shape": [3, 5], "dtype": "float32", "stats": {"mean": 2, "std": 0.5, "min": 0.5, "max": 4}})"
#define UNARY_EX(in) R"({"inputs": [)" in R"(], "args": [{"ref": "in0"}]})"
#define BINARY_EX \
  R"({"inputs": [)" X35 R"(, )" P35 R"(], "args": [{"ref": "in0"}, {"ref": "in1"}]})"
#define SCALAR_EX(s) R"({"inputs": [)" X35 R"(], "args": [{"ref": "in0"}, )" s R"(]})"

#define PW(op, name, parse, infer, ref, fn, example)                                               \
  {                                                                                                \
    op, name, OpKind::kPointwise, 1, parse, infer, ref, eager_pointwise(PointwiseFn::fn), nullptr, \
        example                                                                                    \
  }
#define FLOAT_UNARY(op, name, ref, fn, in) \
  PW(op, name, parse_unary, infer_float_unary, ref, fn, UNARY_EX(in))

constexpr OpDef kRows[] = {
    PW(Op::kConvertElementType, "prims.convert_element_type.default", parse_convert, infer_cast,
       ref_copy, kCopy,
       R"({"inputs": [)" X35 R"(], "args": [{"ref": "in0"}, {"dtype": "bfloat16"}]})"),
    PW(Op::kClone, "aten.clone.default", parse_clone, infer_cast, ref_copy, kCopy,
       R"({"inputs": [{"shape": [4, 3], "stride": [1, 4], "dtype": "bfloat16"}],
           "args": [{"ref": "in0"}]})"),
    PW(Op::kToCopy, "aten._to_copy.default", parse_to_copy, infer_cast, ref_copy, kCopy,
       R"({"inputs": [)" X35 R"(], "args": [{"ref": "in0"}],
           "kwargs": {"dtype": {"dtype": "float8_e4m3fn"}, "device": {"enum": "cuda:0"}}})"),
    FLOAT_UNARY(Op::kRsqrt, "aten.rsqrt.default", ref_rsqrt, kRsqrt, P35),
    FLOAT_UNARY(Op::kSqrt, "aten.sqrt.default", ref_sqrt, kSqrt, P35),
    PW(Op::kNeg, "aten.neg.default", parse_unary, infer_neg, ref_neg, kNeg, UNARY_EX(X35)),
    PW(Op::kAbs, "aten.abs.default", parse_unary, infer_same, ref_abs, kAbs, UNARY_EX(X35)),
    FLOAT_UNARY(Op::kExp, "aten.exp.default", ref_exp, kExp, X35),
    FLOAT_UNARY(Op::kLog, "aten.log.default", ref_log, kLog, P35),
    FLOAT_UNARY(Op::kLog1p, "aten.log1p.default", ref_log1p, kLog1p, P35),
    FLOAT_UNARY(Op::kExpm1, "aten.expm1.default", ref_expm1, kExpm1, X35),
    FLOAT_UNARY(Op::kReciprocal, "aten.reciprocal.default", ref_reciprocal, kReciprocal, P35),
    FLOAT_UNARY(Op::kTanh, "aten.tanh.default", ref_tanh, kTanh, X35),
    FLOAT_UNARY(Op::kSigmoid, "aten.sigmoid.default", ref_sigmoid, kSigmoid, X35),
    FLOAT_UNARY(Op::kErf, "aten.erf.default", ref_erf, kErf, X35),
    FLOAT_UNARY(Op::kSin, "aten.sin.default", ref_sin, kSin, X35),
    FLOAT_UNARY(Op::kCos, "aten.cos.default", ref_cos, kCos, X35),
    PW(Op::kSign, "aten.sign.default", parse_unary, infer_same, ref_sign, kSign, UNARY_EX(X35)),
    PW(Op::kRelu, "aten.relu.default", parse_unary, infer_same, ref_relu, kRelu, UNARY_EX(X35)),
    FLOAT_UNARY(Op::kLog2, "aten.log2.default", ref_log2, kLog2, P35),
    FLOAT_UNARY(Op::kExp2, "aten.exp2.default", ref_exp2, kExp2, X35),
    // Rounding keeps the dtype (an integer tensor is returned as it is), as ATen's.
    PW(Op::kFloor, "aten.floor.default", parse_unary, infer_rounding, ref_floor, kFloor,
       UNARY_EX(X35)),
    PW(Op::kCeil, "aten.ceil.default", parse_unary, infer_rounding, ref_ceil, kCeil, UNARY_EX(X35)),
    PW(Op::kTrunc, "aten.trunc.default", parse_unary, infer_rounding, ref_trunc, kTrunc,
       UNARY_EX(X35)),
    PW(Op::kRound, "aten.round.default", parse_unary, infer_rounding, ref_round, kRound,
       UNARY_EX(X35)),
    PW(Op::kPowTensorScalar, "aten.pow.Tensor_Scalar", parse_pow_scalar, infer_promote, ref_pow,
       kPow, R"({"inputs": [)" P35 R"(], "args": [{"ref": "in0"}, 3]})"),
    PW(Op::kPowTensorTensor, "aten.pow.Tensor_Tensor", parse_pow_tensor, infer_promote, ref_pow,
       kPow, R"({"inputs": [)" P35 R"(, {"shape": [5], "dtype": "float32"}],
           "args": [{"ref": "in0"}, {"ref": "in1"}]})"),
    PW(Op::kPowScalar, "aten.pow.Scalar", parse_pow_scalar_base, infer_promote, ref_pow, kPow,
       R"({"inputs": [)" X35 R"(], "args": [2.5, {"ref": "in0"}]})"),
    PW(Op::kAdd, "aten.add.Tensor", parse_binary_alpha, infer_promote, ref_add, kAdd,
       R"({"inputs": [)" X35 R"(, {"shape": [5], "dtype": "bfloat16"}],
           "args": [{"ref": "in0"}, {"ref": "in1"}], "kwargs": {"alpha": 2}})"),
    PW(Op::kAddScalar, "aten.add.Scalar", parse_binary_alpha, infer_promote, ref_add, kAdd,
       SCALAR_EX("1.5")),
    PW(Op::kSub, "aten.sub.Tensor", parse_binary_alpha, infer_promote, ref_sub, kSub,
       R"({"inputs": [)" X35 R"(, {"shape": [3, 1], "dtype": "float32"}],
           "args": [{"ref": "in0"}, {"ref": "in1"}]})"),
    PW(Op::kSubScalar, "aten.sub.Scalar", parse_binary_alpha, infer_promote, ref_sub, kSub,
       SCALAR_EX("2")),
    PW(Op::kRsubScalar, "aten.rsub.Scalar", parse_binary_alpha, infer_promote, ref_rsub, kRsub,
       SCALAR_EX("1")),
    PW(Op::kMul, "aten.mul.Tensor", parse_binary, infer_promote, ref_mul, kMul, SCALAR_EX("0.5")),
    PW(Op::kMulScalar, "aten.mul.Scalar", parse_binary, infer_promote, ref_mul, kMul,
       SCALAR_EX("0.5")),
    PW(Op::kDiv, "aten.div.Tensor", parse_binary, infer_true_div, ref_div, kDiv, BINARY_EX),
    PW(Op::kDivScalar, "aten.div.Scalar", parse_binary, infer_true_div, ref_div, kDiv,
       SCALAR_EX("3")),
    PW(Op::kDivMode, "aten.div.Tensor_mode", parse_div_mode, infer_true_div, ref_div, kDiv,
       R"({"inputs": [)" X35 R"(, )" P35 R"(], "args": [{"ref": "in0"}, {"ref": "in1"}],
           "kwargs": {"rounding_mode": "floor"}})"),
    PW(Op::kMaximum, "aten.maximum.default", parse_binary, infer_promote, ref_maximum, kMaximum,
       BINARY_EX),
    PW(Op::kMinimum, "aten.minimum.default", parse_binary, infer_promote, ref_minimum, kMinimum,
       BINARY_EX),
};
static_assert(rows_cover(kRows, kPointwiseOps), "one row per pointwise op, in enum order");

}  // namespace

std::span<const OpDef> pointwise_op_rows() {
  return kRows;
}

}  // namespace replay
