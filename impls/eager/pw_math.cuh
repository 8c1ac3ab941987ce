// The eager executor's elementwise functions, as one table: each row is (PointwiseFn name, whether
// it has an integer form, its expression in x, y, z, alpha, index of the compute type T). Two
// users expand it: impls/eager/kernels.cu (one Pw<F>::f per row, every compute type) and the
// pointwise fusion's generated kernels (impls/fusions/pointwise/codegen.cpp embeds this file's
// text and compiles it with NVRTC, T = float), so a fused chain computes every op with the same
// expression, hence the same bits, as the eager kernel of that op. Self-contained on purpose (no
// includes: NVRTC compiles it without the host's headers); the math functions are CUDA's.
#pragma once

namespace replay {

template <typename T>
struct pw_is_int {
  static constexpr bool value = false;
};
template <>
struct pw_is_int<int> {
  static constexpr bool value = true;
};
template <>
struct pw_is_int<long> {
  static constexpr bool value = true;
};
template <>
struct pw_is_int<long long> {
  static constexpr bool value = true;
};

template <typename T>
__device__ __forceinline__ bool is_nan(T v) {
  return v != v;  // false for integers
}

// a + b rounded on its own, never contracted with a product that computed a or b. Under nvcc's
// default --fmad=true the last multiply inside exp would fuse into `1 + exp(-x)`, and the
// generated kernels compile with --fmad=false (no contraction across ops): a row whose value
// depended on that would differ between the two (the unit test PointwiseCodegen.
// TableRowsDoNotDependOnContraction compiles every row both ways).
template <typename T>
__device__ __forceinline__ T pw_add_rn(T a, T b) {
  return a + b;
}
template <>
__device__ __forceinline__ float pw_add_rn<float>(float a, float b) {
  return __fadd_rn(a, b);
}
template <>
__device__ __forceinline__ double pw_add_rn<double>(double a, double b) {
  return __dadd_rn(a, b);
}

// Integer forms of pow and rounding division (int64 opmath), float forms as ATen computes them.
// ATen's pow kernels special-case these exponents (rsqrt(-0) = -inf, unlike pow).
template <typename T>
__device__ __forceinline__ T pw_pow(T x, T y) {
  if constexpr (pw_is_int<T>::value) {
    if (y < 0) return x == 1 ? T(1) : (x == -1 ? (y % 2 ? T(-1) : T(1)) : T(0));
    T r = 1;
    for (; y > 0; y >>= 1, x *= x)
      if (y & 1) r *= x;
    return r;
  } else {
    return y == T(2)      ? x * x
           : y == T(3)    ? x * x * x
           : y == T(0.5)  ? sqrt(x)
           : y == T(-0.5) ? T(1) / sqrt(x)
           : y == T(-1)   ? T(1) / x
           : y == T(-2)   ? T(1) / (x * x)
                          : pow(x, y);
  }
}
template <typename T>
__device__ __forceinline__ T pw_div_trunc(T x, T y) {
  if constexpr (pw_is_int<T>::value)
    return y == 0 ? T(0) : x / y;
  else
    return trunc(x / y);
}
template <typename T>
__device__ __forceinline__ T pw_div_floor(T x, T y) {
  if constexpr (pw_is_int<T>::value) {
    if (y == 0) return T(0);
    const T q = x / y;
    return (x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q;
  } else {
    return floor(x / y);
  }
}

// Rounding functions: an integer is its own floor (ATen returns integer tensors as they are).
template <typename T, typename F>
__device__ __forceinline__ T pw_rounding(T x, F f) {
  if constexpr (pw_is_int<T>::value)
    return x;
  else
    return f(x);
}
}  // namespace replay

// kInt: whether the function has an integer form (computes in int64 for integer and bool compute
// types). Every PointwiseFn has a row (kernels.cu instantiates every one).
#define REPLAY_PW_FUNCTIONS(X)                                                         \
  X(kCopy, true, x)                                                                    \
  X(kRsqrt, false, T(1) / sqrt(x))                                                     \
  X(kSqrt, false, sqrt(x))                                                             \
  X(kNeg, true, -x)                                                                    \
  X(kAbs, true, x < T(0) ? -x : x)                                                     \
  X(kExp, false, exp(x))                                                               \
  X(kLog, false, log(x))                                                               \
  X(kLog1p, false, log1p(x))                                                           \
  X(kExpm1, false, expm1(x))                                                           \
  X(kReciprocal, false, T(1) / x)                                                      \
  X(kTanh, false, tanh(x))                                                             \
  X(kSigmoid, false, T(1) / pw_add_rn(T(1), exp(-x)))                                  \
  X(kErf, false, erf(x))                                                               \
  X(kSin, false, sin(x))                                                               \
  X(kCos, false, cos(x))                                                               \
  X(kSign, true, T((T(0) < x) - (x < T(0)))) /* NaN gives 0, as torch.sign */          \
  X(kRelu, true, is_nan(x) ? x : (x > T(0) ? x : T(0)))                                \
  X(kLog2, false, log2(x))                                                             \
  X(kExp2, false, exp2(x))                                                             \
  X(kFloor, true, pw_rounding(x, [](auto v) { return floor(v); }))                     \
  X(kCeil, true, pw_rounding(x, [](auto v) { return ceil(v); }))                       \
  X(kTrunc, true, pw_rounding(x, [](auto v) { return trunc(v); }))                     \
  X(kRound, true, pw_rounding(x, [](auto v) { return rint(v); })) /* half to even */   \
  X(kPow, true, pw_pow(x, y))                                                          \
  X(kAdd, true, x + alpha * y)                                                         \
  X(kSub, true, x - alpha * y)                                                         \
  X(kRsub, true, y - alpha * x)                                                        \
  X(kMul, true, x* y)                                                                  \
  X(kDiv, false, x / y)                                                                \
  X(kDivTrunc, true, pw_div_trunc(x, y))                                               \
  X(kDivFloor, true, pw_div_floor(x, y))                                               \
  X(kMaximum, true, is_nan(x) || is_nan(y) ? (is_nan(x) ? x : y) : (x > y ? x : y))    \
  X(kMinimum, true, is_nan(x) || is_nan(y) ? (is_nan(x) ? x : y) : (x < y ? x : y))    \
  X(kEq, true, T(x == y))                                                              \
  X(kNe, true, T(x != y))                                                              \
  X(kLt, true, T(x < y))                                                               \
  X(kLe, true, T(x <= y))                                                              \
  X(kGt, true, T(x > y))                                                               \
  X(kGe, true, T(x >= y))                                                              \
  X(kLogicalNot, true, T(x == T(0)))                                                   \
  X(kLogicalAnd, true, T(x != T(0) && y != T(0)))                                      \
  X(kLogicalOr, true, T(x != T(0) || y != T(0)))                                       \
  X(kLogicalXor, true, T((x != T(0)) != (y != T(0))))                                  \
  X(kWhere, true, x != T(0) ? y : z)                                                   \
  X(kClamp, true,                                                                      \
    is_nan(x) || is_nan(y) || is_nan(z) ? (is_nan(x) ? x : (is_nan(y) ? y : z))        \
                                        : ((x < y ? y : x) > z ? z : (x < y ? y : x))) \
  X(kFill, true, x)                                                                    \
  X(kIota, true, x + y * T(index))                                                     \
  X(kDropout, false, y < z ? x * alpha : T(0))
