// Counter-based random numbers for generated inputs, defined bit-for-bit so that every platform
// and standard library produces the same inputs for a seed: Philox4x32-10, an FNV-1a stream id,
// and a normal transform (Marsaglia's polar method) whose every step is an IEEE-754 basic
// operation. traces/SCHEMA.md ("Inputs") specifies the same algorithm in words.
//
// philox.cpp is compiled with -ffp-contract=off (CMakeLists.txt): a fused multiply-add rounds
// once where the specification rounds twice, so contraction would change bits on some targets.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace replay {

/// Philox4x32 with 10 rounds (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as
/// 1, 2, 3", SC'11; the Random123 library): a bijection of the 128-bit counter `ctr` (four 32-bit
/// words) under the 64-bit key `key` (two words). Matches Random123's philox4x32_10 known-answer
/// vectors (tests/kat_vectors) word for word.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key);

/// 32-bit FNV-1a hash of the bytes of `s` (offset basis 0x811C9DC5, prime 0x01000193; Fowler,
/// Noll, Vo). Used as the per-input stream id.
uint32_t fnv1a_32(std::string_view s);

/// Uniform double in the open interval (-1, 1) from 64 random bits `lo` | `hi` << 32: the top 53
/// bits a give (2a + 1 - 2^53) * 2^-53, exactly; the 2^53 values are symmetric about 0, none is
/// 0 or +-1.
double uniform_pm1(uint32_t lo, uint32_t hi);

/// Natural logarithm of a finite `x` > 0, computed only with frexp and IEEE +, -, *, / in a fixed
/// order, so it gives the same bits on every IEEE-754 platform (libm's log may differ in the last
/// bit). Within 2 ulp of glibc's log (10^7 samples over (0, 1)). The steps (2 atanh series,
/// Cody-Waite split of ln 2 as in fdlibm's e_log.c):
///   frexp(x) = m * 2^e, m in [0.5, 1); if m < sqrt(1/2) (0x1.6a09e667f3bcdp-1): m = 2m, e = e - 1;
///   f = (m - 1) / (m + 1); g = f * f;
///   p = 1/25; then p = c + g * p for c = 1/23, 1/21, ..., 1/5, 1/3 (each 1/k rounded to nearest);
///   log(x) = e * hi + (2f + ((2f * g) * p + e * lo)),
///   hi = 0x1.62e42feep-1, lo = 0x1.a39ef35793c76p-33 (hi + lo = ln 2).
/// Returns NaN for x <= 0 or non-finite x (callers never pass those).
double portable_log(double x);

/// One standard normal deviate by Marsaglia's polar method (Marsaglia & Bray 1964), driven by
/// Philox4x32-10 under `key` with counter (index low, index high, stream, attempt):
/// w = philox(ctr); u = uniform_pm1(w0, w1); v = uniform_pm1(w2, w3); s = u*u + v*v; the first
/// attempt (0, 1, 2, ...) with 0 < s < 1 is accepted and gives
/// u * sqrt((-2 * portable_log(s)) / s). Only the u-deviate is used (one value per index).
double philox_normal(std::array<uint32_t, 2> key, uint64_t index, uint32_t stream);

}  // namespace replay
