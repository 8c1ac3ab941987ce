// fp8_quantize arithmetic, one definition for the kernels (kernels.cu) and the CPU tests
// (tests/unit_numerics.cpp): the amax key, the scale and the saturated cast, each exactly as the
// graph computes it (torchao float8_utils: amax -> float64 -> clamp_min(eps) -> reciprocal ->
// * float8 max -> float32; x.float() * scale -> clamp(-max, max) -> float8).
#pragma once

#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define REPLAY_FP8Q_HD __host__ __device__ __forceinline__
#else
#define REPLAY_FP8Q_HD inline
#endif

namespace replay::fp8_quantize {

/// Largest finite value of a float8 format: float8_e4m3fn 448, float8_e5m2 57344.
REPLAY_FP8Q_HD double float8_max(bool e5m2) {
  return e5m2 ? 57344.0 : 448.0;
}

/// Key of `v` for a max taken as an unsigned integer max (atomicMax): order-preserving over the
/// floats, every NaN above +inf (amax propagates NaN, as ATen's does). Key 0 is below every float:
/// the empty max.
REPLAY_FP8Q_HD uint32_t max_key(float v) {
  uint32_t b;
  memcpy(&b, &v, sizeof b);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return 0xFFFFFFFFu;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/// The float a key stands for (NaN for the NaN key).
REPLAY_FP8Q_HD float from_max_key(uint32_t k) {
  uint32_t b = k == 0xFFFFFFFFu ? 0x7FC00000u : (k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k;
  float v;
  memcpy(&v, &b, sizeof v);
  return v;
}

/// The float32 scale of an amax: float32(float8_max * (1 / max(float64(amax), eps))), each step
/// rounded as the graph rounds it (float64 division and product, one rounding to float32); a NaN
/// amax gives a NaN scale (clamp_min propagates NaN).
REPLAY_FP8Q_HD float scale_from_amax(float amax, double eps, double fp8_max) {
  const double a = static_cast<double>(amax);
  const double c = a != a ? a : (a < eps ? eps : a);
  const double r = 1.0 / c;
  return static_cast<float>(r * fp8_max);
}

/// The scale rounded down to a power of two as torchao writes it (`round_scales_to_power_of_2`,
/// float8_utils._round_scale_down_to_power_of_2: exp2(floor(log2(scale))), each op on float32):
/// the same float32 functions the eager executor's log2 / floor / exp2 kernels call, so the bits
/// are the graph's. A scale just below a power of two whose float32 log2 rounds up to the integer
/// keeps that power (as the graph computes it). NaN stays NaN, +inf stays +inf, 0 stays 0.
REPLAY_FP8Q_HD float round_scale_pow2(float s) {
#if defined(__CUDA_ARCH__)
  return exp2f(floorf(log2f(s)));
#else
  return std::exp2(std::floor(std::log2(s)));
#endif
}

/// scale_from_amax, then round_scale_pow2 where the graph rounds the scale (`pow2`).
REPLAY_FP8Q_HD float quant_scale_of(float amax, double eps, double fp8_max, bool pow2) {
  const float s = scale_from_amax(amax, eps, fp8_max);
  return pow2 ? round_scale_pow2(s) : s;
}

/// x * scale (float32, rounded once) clamped to [-fp8_max, fp8_max], NaN kept (ATen's clamp).
REPLAY_FP8Q_HD float scaled_clamped(float x, float scale, float fp8_max) {
  const float v = x * scale;
  if (v != v) return v;
  return v < -fp8_max ? -fp8_max : (v > fp8_max ? fp8_max : v);
}

/// Bits of a clamped value in float8 (round to nearest even). NaN becomes 0x7F with the NaN's
/// sign, as ATen's cast (c10/util/Float8_e4m3fn.h, Float8_e5m2.h) and the eager executor's
/// (cuda_fp8's float64 conversion) write it; every other value is finite and in range here, so
/// saturation never changes a result.
REPLAY_FP8Q_HD uint8_t float8_bits(float v, bool e5m2) {
  if (v != v) {
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    return static_cast<uint8_t>(0x7Fu | ((b >> 24) & 0x80u));
  }
  return static_cast<uint8_t>(
      __nv_cvt_float_to_fp8(v, __NV_SATFINITE, e5m2 ? __NV_E5M2 : __NV_E4M3));
}

}  // namespace replay::fp8_quantize
