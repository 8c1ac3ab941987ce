// amax_reuse: the order every amax / amin of the fusion reduces in, shared by the device kernels
// (multi_amax.cuh) and the CPU proofs (tests/unit_reuse.cpp), so that both compute one function.
//
// A float32 value (a bfloat16 or float16 element is widened to float32 first, exactly) maps to a
// 32-bit key whose unsigned order is the reduction's order; the reduction is then an unsigned max
// of keys, with identity 0. An unsigned max is associative, commutative and exact, so the result
// does not depend on how the elements are grouped: amax over dims B computed from the amaxes over
// A (B ⊃ A: a tensorwise amax from the rowwise ones) is bit-identical to the direct one, and
// atomicMax on keys combines the partial results of many CTAs in any order.
//
// Semantics (ATen's amax / amin / max / min):
//   - NaN propagates: any NaN element makes the result NaN (key 0xffffffff, above every other).
//     The NaN written is the canonical quiet NaN 0x7fc00000; ATen's payload is unspecified.
//   - -0.0 < +0.0 (IEEE 754 totalOrder): amax of {-0, +0} is +0, amin is -0, in every order. ATen
//     leaves the sign of a zero extremum to its reduction order (CUDA: `a > b ? a : b` over a tree
//     it chooses; the float64 reference: the first in storage order); this order fixes it.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define REPLAY_AMAX_HD __host__ __device__ __forceinline__
#else
#define REPLAY_AMAX_HD inline
#endif

namespace replay::amax_reuse {

/// Which extremum a reduction takes: aten.amax / aten.max.default, or aten.amin / aten.min.default.
enum class Extreme : uint8_t { kMax, kMin };

/// The key of NaN for either extremum: the largest, so that NaN propagates.
inline constexpr uint32_t kNanKey = 0xffffffffu;
/// The float32 NaN a reduction that saw a NaN writes.
inline constexpr uint32_t kCanonicalNan = 0x7fc00000u;

/// True for the bits of a float32 NaN (exponent all ones, mantissa nonzero, either sign).
REPLAY_AMAX_HD bool is_nan_bits(uint32_t bits) {
  return (bits & 0x7fffffffu) > 0x7f800000u;
}

/// Float32 bits -> an unsigned key in IEEE totalOrder (-inf < ... < -0 < +0 < ... < +inf).
REPLAY_AMAX_HD uint32_t total_order(uint32_t bits) {
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

/// Inverse of total_order.
REPLAY_AMAX_HD uint32_t from_total_order(uint32_t key) {
  return (key & 0x80000000u) ? (key & 0x7fffffffu) : ~key;
}

/// The key of the float32 value with bits `bits` for extremum `e`: the result of the reduction
/// is the element of the largest key (unsigned). Non-NaN keys are in [1, 0xff800000].
REPLAY_AMAX_HD uint32_t encode(Extreme e, uint32_t bits) {
  if (is_nan_bits(bits)) return kNanKey;
  const uint32_t k = total_order(bits);
  return e == Extreme::kMax ? k : ~k;
}

/// The float32 bits of the value whose key is `key` (kNanKey: the canonical NaN). `key` must be a
/// key encode() gives (never 0, the identity: a reduction over no elements has no value).
REPLAY_AMAX_HD uint32_t decode(Extreme e, uint32_t key) {
  if (key == kNanKey) return kCanonicalNan;
  return from_total_order(e == Extreme::kMax ? key : ~key);
}

/// The reduction of two keys: the larger.
REPLAY_AMAX_HD uint32_t combine(uint32_t a, uint32_t b) {
  return a > b ? a : b;
}

}  // namespace replay::amax_reuse
