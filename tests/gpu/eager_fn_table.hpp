// The pointwise functions the eager kernel tests cover (tests/gpu/test_eager_kernels.cpp): one row
// per PointwiseFn with its operand count, integer form and input domain. Shared with the unit test
// that checks the table covers every function (tests/unit/test_eager_host.cpp).
#pragma once

#include <vector>

#include "workloads/ops/eager_fn.hpp"

namespace replay::test {

/// Input domain of a generated operand.
enum class Dom {
  kAny,       // uniform [-4, 4]
  kPos,       // [1/8, 4]
  kNonZero,   // +-[1/2, 4]
  kLog1p,     // (-0.9, 4]
  kHalfTwo,   // [1/2, 2]
  kInt,       // integers in [-8, 8]
  kSmallInt,  // integers in [0, 3]: ties, zeros, equal pairs
  kProb,      // [0, 1)
  kNormal,    // N(0.3, 1)
  kProd,      // +-1, with a few 2s and 1/2s: exact products
};

struct FnInfo {
  PointwiseFn fn;
  const char* name;
  int tensors;   // tensor operands (then scalars, see make_operands)
  bool has_int;  // an integer form
  bool transcendental;
  Dom dom[3];
};

inline const std::vector<FnInfo>& fn_table() {
  using P = PointwiseFn;
  static const std::vector<FnInfo> t = {
      {P::kCopy, "copy", 1, true, false, {Dom::kAny}},
      {P::kRsqrt, "rsqrt", 1, false, false, {Dom::kPos}},
      {P::kSqrt, "sqrt", 1, false, false, {Dom::kPos}},
      {P::kNeg, "neg", 1, true, false, {Dom::kAny}},
      {P::kAbs, "abs", 1, true, false, {Dom::kAny}},
      {P::kExp, "exp", 1, false, true, {Dom::kAny}},
      {P::kLog, "log", 1, false, true, {Dom::kPos}},
      {P::kLog1p, "log1p", 1, false, true, {Dom::kLog1p}},
      {P::kExpm1, "expm1", 1, false, true, {Dom::kAny}},
      {P::kReciprocal, "reciprocal", 1, false, false, {Dom::kNonZero}},
      {P::kTanh, "tanh", 1, false, true, {Dom::kAny}},
      {P::kSigmoid, "sigmoid", 1, false, true, {Dom::kAny}},
      {P::kErf, "erf", 1, false, true, {Dom::kAny}},
      {P::kSin, "sin", 1, false, true, {Dom::kAny}},
      {P::kCos, "cos", 1, false, true, {Dom::kAny}},
      {P::kSign, "sign", 1, true, false, {Dom::kInt}},
      {P::kRelu, "relu", 1, true, false, {Dom::kAny}},
      {P::kLog2, "log2", 1, false, true, {Dom::kPos}},
      {P::kExp2, "exp2", 1, false, true, {Dom::kAny}},
      {P::kFloor, "floor", 1, true, false, {Dom::kAny}},
      {P::kCeil, "ceil", 1, true, false, {Dom::kAny}},
      {P::kTrunc, "trunc", 1, true, false, {Dom::kAny}},
      {P::kRound, "round", 1, true, false, {Dom::kAny}},
      {P::kPow, "pow", 2, false, true, {Dom::kPos, Dom::kHalfTwo}},
      {P::kAdd, "add", 2, true, false, {Dom::kAny, Dom::kAny}},
      {P::kSub, "sub", 2, true, false, {Dom::kAny, Dom::kAny}},
      {P::kRsub, "rsub", 2, true, false, {Dom::kAny, Dom::kAny}},
      {P::kMul, "mul", 2, true, false, {Dom::kAny, Dom::kAny}},
      {P::kDiv, "div", 2, false, false, {Dom::kAny, Dom::kNonZero}},
      {P::kDivTrunc, "div_trunc", 2, false, false, {Dom::kAny, Dom::kNonZero}},
      {P::kDivFloor, "div_floor", 2, false, false, {Dom::kAny, Dom::kNonZero}},
      {P::kMaximum, "maximum", 2, true, false, {Dom::kInt, Dom::kInt}},
      {P::kMinimum, "minimum", 2, true, false, {Dom::kInt, Dom::kInt}},
      {P::kEq, "eq", 2, true, false, {Dom::kSmallInt, Dom::kSmallInt}},
      {P::kNe, "ne", 2, true, false, {Dom::kSmallInt, Dom::kSmallInt}},
      {P::kLt, "lt", 2, true, false, {Dom::kSmallInt, Dom::kSmallInt}},
      {P::kLe, "le", 2, true, false, {Dom::kSmallInt, Dom::kSmallInt}},
      {P::kGt, "gt", 2, true, false, {Dom::kSmallInt, Dom::kSmallInt}},
      {P::kGe, "ge", 2, true, false, {Dom::kSmallInt, Dom::kSmallInt}},
      {P::kLogicalNot, "logical_not", 1, true, false, {Dom::kSmallInt}},
      {P::kLogicalAnd, "logical_and", 2, true, false, {Dom::kSmallInt, Dom::kSmallInt}},
      {P::kLogicalOr, "logical_or", 2, true, false, {Dom::kSmallInt, Dom::kSmallInt}},
      {P::kLogicalXor, "logical_xor", 2, true, false, {Dom::kSmallInt, Dom::kSmallInt}},
      {P::kWhere, "where", 3, true, false, {Dom::kSmallInt, Dom::kAny, Dom::kAny}},
      {P::kClamp, "clamp", 3, true, false, {Dom::kAny, Dom::kAny, Dom::kAny}},
      {P::kFill, "fill", 0, true, false, {}},
      {P::kIota, "iota", 0, true, false, {}},
      {P::kDropout, "dropout", 2, false, false, {Dom::kAny, Dom::kProb}},
  };
  return t;
}

}  // namespace replay::test
