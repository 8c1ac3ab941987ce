// rope arithmetic, one definition for the kernels (kernels.cu) and the CPU model of the tests
// (tests/unit_numerics.cpp): each product and sum rounded as the graph rounds it, the backward's
// association of its summands and the +0 of its scatters into zeros (kernels.hpp, RopeJob).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "impls/fusions/rope/kernels.hpp"

#if defined(__CUDACC__)
#define REPLAY_ROPE_HD __host__ __device__ __forceinline__
#else
#define REPLAY_ROPE_HD inline
#endif

namespace replay::rope {

/// `v` rounded to `t` (round to nearest even) and widened back; float32 (and any other dtype):
/// unchanged.
REPLAY_ROPE_HD float round_to(DType t, float v) {
  switch (t) {
    case DType::kBFloat16:
      return __bfloat162float(__float2bfloat16_rn(v));
    case DType::kFloat16:
      return __half2float(__float2half_rn(v));
    default:
      return v;
  }
}

/// fp32 a * b and a + b, rounded once (never contracted into an FMA: the eager kernels round
/// each op).
REPLAY_ROPE_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  volatile float p = a * b;
  return p;
#endif
}
REPLAY_ROPE_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  volatile float p = a + b;
  return p;
#endif
}

/// A product as the graph rounds it: to the mul's dtype, then to a convert's after it.
REPLAY_ROPE_HD float product(DType mul, DType cvt, float a, float b) {
  return round_to(cvt, round_to(mul, mul_rn(a, b)));
}

/// The sum as the graph rounds it, then a convert after it, then the backward's scatter into
/// zeros (+ 0: a -0 becomes +0). `J`: a RopeJob, or a type whose add_dtype, sum_cvt, zero_add
/// and sum_order are static constexpr (the optimized kernel's fixed forms: the switches fold).
template <typename J>
REPLAY_ROPE_HD float sum(const J& j, float a, float b) {
  float v = round_to(j.sum_cvt, round_to(j.add_dtype, add_rn(a, b)));
  if (j.zero_add) v = add_rn(v, 0.0f);
  return v;
}

/// The backward's dx from t = rotT(y)[c] (`negated`: t is a negated y, placed by the scatter of
/// the negated half) and mc = g * cos, associated as the graph sums them (RopeJob::sum_order).
template <typename J>
REPLAY_ROPE_HD float bwd_sum(const J& j, float t, bool negated, float mc) {
  if (j.sum_order == 0) return sum(j, add_rn(t, 0.0f), mc);  // (t + 0) + mc
  const bool first = negated == (j.sum_order == 1);          // t's scatter meets mc first
  const float v = round_to(j.add_dtype, add_rn(mc, first ? t : 0.0f));
  return sum(j, v, first ? 0.0f : t);
}

/// The pass-through tail element.
REPLAY_ROPE_HD float tail(const RopeJob& j, float x) {
  float v = round_to(j.tail_cvt, x);
  if (j.zero_add) v = add_rn(v, 0.0f);
  return v;
}

/// Element c (< R) of the rotation, one element at a time (the CPU model; the kernels compute the
/// same per element): `x(k)` gives head element k, `cos(k)` / `sin(k)` the table entry for
/// element k (entry k / 2 for a per-pair table).
template <typename X, typename C, typename S>
REPLAY_ROPE_HD float rotated(const RopeJob& j, Style style, bool backward, float sin_sign,
                             int64_t c, X x, C cos, S sin) {
  const int64_t h = j.rotary_dim / 2;
  int64_t p;
  float sign;
  if (style == Style::kRotateHalf) {
    p = c < h ? c + h : c - h;
    sign = c < h ? -1.f : 1.f;
  } else {
    p = c ^ 1;
    sign = (c & 1) == 0 ? -1.f : 1.f;
  }
  const float mc = product(j.mul_cos_dtype, j.mul_cos_cvt, x(c), cos(c));
  if (!backward)
    return sum(j, mc, product(j.mul_sin_dtype, j.mul_sin_cvt, sign * x(p), sin_sign * sin(c)));
  const float y = product(j.mul_sin_dtype, j.mul_sin_cvt, x(p), sin_sign * sin(p));
  const bool negated = sign > 0;  // rotT(y)[c] = -sign * y[p]
  return bwd_sum(j, negated ? -y : y, negated, mc);
}

}  // namespace replay::rope
