#include "workloads/loader/philox.hpp"

#include <cmath>
#include <limits>

namespace replay {
namespace {

// Philox4x32 round multipliers and Weyl key increments (SC'11 paper, Table 2; the increments are
// the golden ratio and sqrt(3) - 1 in 0.32 fixed point).
constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;
constexpr uint32_t kWeyl1 = 0xBB67AE85u;

// ln 2 split as hi + lo (Cody & Waite): hi has 32 significant bits, so e * hi is exact for every
// binary64 exponent e, and lo = ln 2 - hi rounded to nearest.
constexpr double kLn2Hi = 0x1.62e42feep-1;
constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;

}  // namespace

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {  // the key schedule advances between rounds, not before the first
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * ctr[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
  }
  return ctr;
}

uint32_t fnv1a_32(std::string_view s) {
  uint32_t h = 0x811C9DC5u;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x01000193u;
  }
  return h;
}

double uniform_pm1(uint32_t lo, uint32_t hi) {
  const uint64_t a = ((static_cast<uint64_t>(hi) << 32) | lo) >> 11;  // 53 bits
  // 2a + 1 - 2^53 is an odd integer of magnitude < 2^53, so the conversion and the scaling by a
  // power of two are exact: no rounding mode or library can change the result.
  const int64_t k = static_cast<int64_t>(2 * a + 1) - (int64_t{1} << 53);
  return static_cast<double>(k) * 0x1p-53;
}

double portable_log(double x) {
  if (!(x > 0) || !std::isfinite(x)) return std::numeric_limits<double>::quiet_NaN();
  int e = 0;
  double m = std::frexp(x, &e);  // exact: x = m * 2^e, m in [0.5, 1)
  // Centre m on 1 so |f| <= (sqrt2 - 1) / (sqrt2 + 1) ~ 0.172 and the series converges fast.
  if (m < 0x1.6a09e667f3bcdp-1) {  // sqrt(1/2) rounded to nearest
    m *= 2;                        // exact
    e -= 1;
  }
  // log(m) = 2 atanh(f) = 2 (f + f^3/3 + f^5/5 + ...), f = (m - 1) / (m + 1). m - 1 is exact
  // (Sterbenz). With g = f^2 <= 0.0295 the first omitted term, f^27/27, is below 2^-70 relative to
  // f, so stopping at 1/25 costs no accuracy.
  const double f = (m - 1) / (m + 1);
  const double g = f * f;
  double p = 1.0 / 25;
  p = 1.0 / 23 + g * p;
  p = 1.0 / 21 + g * p;
  p = 1.0 / 19 + g * p;
  p = 1.0 / 17 + g * p;
  p = 1.0 / 15 + g * p;
  p = 1.0 / 13 + g * p;
  p = 1.0 / 11 + g * p;
  p = 1.0 / 9 + g * p;
  p = 1.0 / 7 + g * p;
  p = 1.0 / 5 + g * p;
  p = 1.0 / 3 + g * p;
  // 2f and e * hi are exact; the small terms are summed first so that only the last two
  // additions round large quantities.
  const double two_f = 2 * f;
  const double de = static_cast<double>(e);
  return de * kLn2Hi + (two_f + (two_f * g * p + de * kLn2Lo));
}

double philox_normal(std::array<uint32_t, 2> key, uint64_t index, uint32_t stream) {
  const uint32_t lo = static_cast<uint32_t>(index), hi = static_cast<uint32_t>(index >> 32);
  // Rejection happens with probability 1 - pi/4 per attempt, so 2^32 attempts never run out.
  for (uint32_t attempt = 0;; ++attempt) {
    const std::array<uint32_t, 4> w = philox4x32_10({lo, hi, stream, attempt}, key);
    const double u = uniform_pm1(w[0], w[1]);
    const double v = uniform_pm1(w[2], w[3]);
    const double s = u * u + v * v;
    if (s > 0 && s < 1) return u * std::sqrt((-2 * portable_log(s)) / s);
  }
}

}  // namespace replay
