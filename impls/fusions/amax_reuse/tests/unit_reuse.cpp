// The reuse rewrite proven on the CPU with the functions the kernels run (amax_keys.hpp): for
// every pair of dim sets A ⊂ B of small random tensors (with -0.0, +0.0, NaN of both signs, ±inf,
// subnormals and many ties), the reduction over B computed from the reduction over A is
// bit-identical to the direct one, for amax and amin, of x and of |x|; both equal ATen's amax /
// amin (NaN propagates; the first extremum in storage order, as the float64 reference takes it)
// except for the sign of a zero extremum where both zeros occur (ATen leaves it to its reduction
// order). And the reason sums are declined: a float32 sum regrouped the same way differs.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "impls/fusions/amax_reuse/amax_keys.hpp"

using namespace replay::amax_reuse;

namespace {

uint32_t bits_of(float f) {
  return std::bit_cast<uint32_t>(f);
}
float float_of(uint32_t b) {
  return std::bit_cast<float>(b);
}

struct Shape {
  std::vector<int64_t> dims;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
};

// Reduces `in` (row-major over `s`) over the dims in `mask` (keepdim: they become 1), with the
// per-element function `f` mapping each output's values in storage order to one result.
template <typename T, typename F>
std::vector<T> reduce(const std::vector<T>& in, const Shape& s, unsigned mask, Shape& out_shape,
                      F f) {
  const int r = static_cast<int>(s.dims.size());
  out_shape = s;
  for (int d = 0; d < r; ++d)
    if (mask >> d & 1) out_shape.dims[d] = 1;
  std::vector<std::vector<T>> groups(static_cast<size_t>(out_shape.numel()));
  std::vector<int64_t> idx(r, 0);
  for (int64_t i = 0; i < s.numel(); ++i) {
    int64_t o = 0;
    for (int d = 0; d < r; ++d) o = o * out_shape.dims[d] + ((mask >> d & 1) ? 0 : idx[d]);
    groups[o].push_back(in[i]);
    for (int d = r - 1; d >= 0; --d) {  // next row-major index
      if (++idx[d] < s.dims[d]) break;
      idx[d] = 0;
    }
  }
  std::vector<T> out;
  for (const auto& g : groups) out.push_back(f(g));
  return out;
}

uint32_t key_max(const std::vector<uint32_t>& ks) {
  uint32_t k = 0;
  for (uint32_t x : ks) k = combine(k, x);
  return k;
}

// ATen's amax / amin on float32 values: NaN propagates, else the first extremum (strict
// comparison), as impls/reference's extreme() takes it.
float aten_extreme(const std::vector<float>& v, bool is_max) {
  float best = v[0];
  for (size_t i = 1; i < v.size() && !std::isnan(best); ++i)
    if (std::isnan(v[i]) || (is_max ? v[i] > best : v[i] < best)) best = v[i];
  return best;
}

float pick(std::mt19937& rng) {
  static const float pool[] = {0.0f,
                               -0.0f,
                               std::numeric_limits<float>::quiet_NaN(),
                               -std::numeric_limits<float>::quiet_NaN(),
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               1.0f,
                               -1.0f,
                               2.5f,
                               -2.5f,
                               1e-40f,
                               -1e-40f,
                               3.0e38f,
                               -3.0e38f};
  std::uniform_int_distribution<int> coin(0, 9);
  const int c = coin(rng);
  if (c < 4) {  // a special value or a tie, often
    std::uniform_int_distribution<size_t> k(0, std::size(pool) - 1);
    float v = pool[k(rng)];
    if (std::isnan(v) && coin(rng) < 8) v = 1.0f;  // NaN in some tensors only
    return v;
  }
  std::normal_distribution<float> n(0.0f, 2.0f);
  return std::round(n(rng) * 4.0f) / 4.0f;  // coarse: ties between elements
}

}  // namespace

TEST(AmaxReuseKeys, OrderIsTotalOrderAndRoundTrips) {
  const float xs[] = {-std::numeric_limits<float>::infinity(),
                      -3.0e38f,
                      -1.0f,
                      -1e-40f,
                      -0.0f,
                      0.0f,
                      1e-40f,
                      1.0f,
                      3.0e38f,
                      std::numeric_limits<float>::infinity()};
  for (Extreme e : {Extreme::kMax, Extreme::kMin})
    for (size_t i = 0; i < std::size(xs); ++i) {
      const uint32_t k = encode(e, bits_of(xs[i]));
      EXPECT_NE(k, 0u);  // 0 is the identity, never an element's key
      EXPECT_LT(k, kNanKey);
      EXPECT_EQ(decode(e, k), bits_of(xs[i])) << xs[i];
      if (i > 0) {  // strictly increasing for max, decreasing for min: -0 < +0
        const uint32_t prev = encode(e, bits_of(xs[i - 1]));
        EXPECT_EQ(e == Extreme::kMax ? prev < k : prev > k, true) << xs[i - 1] << " " << xs[i];
      }
    }
  for (uint32_t nan : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xffffffffu})
    for (Extreme e : {Extreme::kMax, Extreme::kMin}) {
      EXPECT_EQ(encode(e, nan), kNanKey);
      EXPECT_TRUE(std::isnan(float_of(decode(e, kNanKey))));
    }
}

// B ⊃ A: reduce over B \ A of the reduction over A == reduce over B, bit for bit, for every A ⊂ B
// of every shape below; and the direct result equals ATen's up to the sign of a zero tie.
TEST(AmaxReuseKeys, ReductionOverBFromAEqualsDirectExhaustively) {
  const std::vector<Shape> shapes = {{{7}},       {{3, 4}},    {{4, 1, 3}},
                                     {{2, 3, 4}}, {{1, 5, 1}}, {{2, 2, 2, 2}}};
  std::mt19937 rng(27);
  int64_t compared = 0, zero_sign_ties = 0, nans = 0;
  for (const Shape& s : shapes) {
    const int r = static_cast<int>(s.dims.size());
    const unsigned full = (1u << r) - 1;
    for (int trial = 0; trial < 60; ++trial) {
      std::vector<float> x(static_cast<size_t>(s.numel()));
      for (float& v : x) v = pick(rng);
      for (bool abs : {false, true})
        for (Extreme e : {Extreme::kMax, Extreme::kMin}) {
          std::vector<uint32_t> keys;
          std::vector<float> vals;
          for (float v : x) {
            const uint32_t b = abs ? bits_of(v) & 0x7fffffffu : bits_of(v);
            keys.push_back(encode(e, b));
            vals.push_back(float_of(b));
          }
          for (unsigned B = 1; B <= full; ++B) {
            Shape sb;
            const auto direct = reduce(keys, s, B, sb, key_max);
            const auto aten = reduce(vals, s, B, sb, [&](const std::vector<float>& v) {
              return aten_extreme(v, e == Extreme::kMax);
            });
            // ATen's result, up to the sign of a zero extremum when both zeros are reduced.
            const auto has_both_zeros = reduce(vals, s, B, sb, [](const std::vector<float>& v) {
              bool pos = false, neg = false;
              for (float f : v) (f == 0 && std::signbit(f) ? neg : pos) |= f == 0;
              return pos && neg;
            });
            for (size_t i = 0; i < direct.size(); ++i) {
              const float got = float_of(decode(e, direct[i]));
              if (std::isnan(aten[i])) {
                EXPECT_TRUE(std::isnan(got));
                ++nans;
              } else if (aten[i] == 0 && has_both_zeros[i]) {
                EXPECT_EQ(got, 0.0f);  // the sign: -0 < +0 (amax +0, amin -0)
                EXPECT_EQ(std::signbit(got), e == Extreme::kMin);
                ++zero_sign_ties;
              } else {
                EXPECT_EQ(bits_of(got), bits_of(aten[i])) << "abs " << abs << " B " << B;
              }
            }
            for (unsigned A = (B - 1) & B; A > 0; A = (A - 1) & B) {  // every A ⊂ B, A != B
              Shape sa, sab;
              const auto part = reduce(keys, s, A, sa, key_max);
              const auto reused = reduce(part, sa, B & ~A, sab, key_max);
              ASSERT_EQ(sab.dims, sb.dims);
              for (size_t i = 0; i < direct.size(); ++i)
                ASSERT_EQ(decode(e, reused[i]), decode(e, direct[i]))
                    << "abs " << abs << " A " << A << " B " << B << " at " << i;
              ++compared;
            }
          }
        }
    }
  }
  EXPECT_GT(compared, 10000);
  EXPECT_GT(zero_sign_ties, 0);  // the pool makes both kinds of special case happen
  EXPECT_GT(nans, 0);
}

// Rowwise, columnwise and tensorwise of one |x| (Inductor's reuse pass got three reductions of one
// abs wrong until its fix for pytorch/pytorch#178883): the tensorwise amax from the rows, from the
// columns and direct agree bit for bit.
TEST(AmaxReuseKeys, ThreeReductionsOfOneAbs) {
  std::mt19937 rng(178883);
  const Shape s{{9, 13}};
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<uint32_t> keys;
    for (int64_t i = 0; i < s.numel(); ++i)
      keys.push_back(encode(Extreme::kMax, bits_of(pick(rng)) & 0x7fffffffu));
    Shape sr, sc, s1, s2, s3;
    const auto rows = reduce(keys, s, 2u, sr, key_max);
    const auto cols = reduce(keys, s, 1u, sc, key_max);
    const auto all = reduce(keys, s, 3u, s1, key_max);
    EXPECT_EQ(reduce(rows, sr, 1u, s2, key_max), all);
    EXPECT_EQ(reduce(cols, sc, 2u, s3, key_max), all);
  }
}

// Why sums are never reused: a float32 sum over B regrouped as a sum of the sums over A rounds
// differently from the sum in storage order on ordinary data.
TEST(AmaxReuseKeys, RegroupedFloatSumDiffers) {
  std::mt19937 rng(1);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const Shape s{{64, 64}};
  int differ = 0;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> x(static_cast<size_t>(s.numel()));
    for (float& v : x) v = n(rng);
    auto sum = [](const std::vector<float>& v) {
      float a = 0;
      for (float f : v) a += f;
      return a;
    };
    Shape s1, s2, s3;
    const auto direct = reduce(x, s, 3u, s1, sum);
    const auto rows = reduce(x, s, 2u, s2, sum);
    const auto regrouped = reduce(rows, s2, 1u, s3, sum);
    differ += bits_of(direct[0]) != bits_of(regrouped[0]);
  }
  EXPECT_GT(differ, 0);
}
