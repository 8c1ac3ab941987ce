// Generated inputs: Philox4x32-10 against Random123's known answers, the portable normal
// transform, pinned bits, the recorded statistics, stride-0 layouts and pack's alias check.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <stdexcept>

#include "workloads/ir/host_tensor.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/philox.hpp"

using namespace replay;

namespace {

// A graph whose only value is the input `name` with `layout` and `stats` (no nodes: generation
// reads only the inputs).
Graph one_input(const std::string& name, TensorMeta layout,
                std::optional<ValueStats> stats = std::nullopt) {
  Graph g;
  Value v;
  v.name = name;
  v.meta = std::move(layout);
  v.stats = stats;
  v.graph_input = true;
  g.values.push_back(v);
  g.inputs = {0};
  return g;
}

TensorMeta contiguous(std::vector<int64_t> shape, DType dtype) {
  std::vector<int64_t> stride = contiguous_strides(shape);
  return TensorMeta{std::move(shape), std::move(stride), dtype};
}

uint64_t bits(double x) {
  uint64_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

}  // namespace

// Random123 (github.com/DEShawResearch/random123, commit 9545ff6), tests/kat_vectors lines 27-29:
// "philox4x32 10" CTR[4] KEY[2] EXPECTED[4].
TEST(Philox, KnownAnswerVectors) {
  using C = std::array<uint32_t, 4>;
  using K = std::array<uint32_t, 2>;
  EXPECT_EQ(philox4x32_10(C{0, 0, 0, 0}, K{0, 0}),
            (C{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(
      philox4x32_10(C{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, K{0xffffffff, 0xffffffff}),
      (C{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(
      philox4x32_10(C{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, K{0xa4093822, 0x299f31d0}),
      (C{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

// FNV-1a 32-bit test vectors of the FNV reference (www.isthe.com/chongo/tech/comp/fnv).
TEST(Philox, Fnv1a) {
  EXPECT_EQ(fnv1a_32(""), 0x811c9dc5u);
  EXPECT_EQ(fnv1a_32("a"), 0xe40c292cu);
  EXPECT_EQ(fnv1a_32("foobar"), 0xbf9cf968u);
}

TEST(Philox, UniformIsOpenAndSymmetric) {
  EXPECT_EQ(uniform_pm1(0, 0), -1 + 0x1p-53);
  EXPECT_EQ(uniform_pm1(0xffffffff, 0xffffffff), 1 - 0x1p-53);
  // The 11 low bits are dropped; the two middle values straddle 0 at +-2^-53.
  EXPECT_EQ(uniform_pm1(0xfffff800, 0x7fffffff), -0x1p-53);
  EXPECT_EQ(uniform_pm1(0x000007ff, 0x80000000), 0x1p-53);
}

TEST(Philox, PortableLogIsAccurate) {
  EXPECT_EQ(portable_log(1.0), 0.0);
  EXPECT_EQ(portable_log(0.5), -0x1.62e42fefa39efp-1);  // -ln 2 rounded to nearest
  EXPECT_TRUE(std::isnan(portable_log(0.0)));
  EXPECT_TRUE(std::isnan(portable_log(-1.0)));
  // Against libm, which is itself within about 1 ulp: ours stays within 2 ulp of it.
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> unif(0, 1);
  for (int i = 0; i < 200000; ++i) {
    const double x = std::ldexp(unif(rng), -static_cast<int>(rng() % 1000));
    if (x == 0) continue;
    const double want = std::log(x);
    const double ulp = std::nextafter(std::fabs(want), INFINITY) - std::fabs(want);
    ASSERT_LE(std::fabs(portable_log(x) - want), 2 * ulp) << std::hexfloat << x;
  }
}

// The bits below were computed once by this implementation and independently by a Python
// implementation written from traces/SCHEMA.md ("Inputs"); both agree on 4 * 10^5 deviates.
TEST(InputGeneration, PinnedBits) {
  const uint32_t stream = fnv1a_32("x");
  const std::array<uint32_t, 2> key = {42, 0};
  EXPECT_EQ(bits(philox_normal(key, 0, stream)), bits(0x1.c3e2a997b9b5dp+0));
  EXPECT_EQ(bits(philox_normal(key, 1, stream)), bits(0x1.fe369b2c2a253p-2));
  EXPECT_EQ(bits(philox_normal(key, 2, stream)), bits(-0x1.067432af762e7p-1));
  EXPECT_EQ(bits(philox_normal(key, 3, stream)), bits(0x1.191e78ded9892p+0));

  Graph g = one_input("x", contiguous({4, 5}, DType::kFloat32), ValueStats{0, 1, -1e30, 1e30});
  const std::vector<double> want = {0x1.c3e2aap+0,  0x1.fe369cp-2,  -0x1.067432p-1, 0x1.191e78p+0,
                                    0x1.a786b6p-2,  -0x1.0e153cp-5, -0x1.1e877p-1,  -0x1.d423aep-2,
                                    0x1.2a0bcep+0,  -0x1.11533ap+1, 0x1.269beap+0,  0x1.337ee8p-2,
                                    0x1.43545ap+1,  0x1.eaf98cp-1,  0x1.4ebcd6p-5,  0x1.227ea2p-1,
                                    -0x1.ab1d5cp-3, 0x1.76bbep+0,   0x1.21879cp-2,  -0x1.2191e8p-1};
  const HostTensor t = generate_inputs(g, 42).at(0);
  ASSERT_EQ(t.data.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(bits(t.data[i]), bits(want[i]))
        << "element " << i << ": " << std::hexfloat << t.data[i];
}

TEST(InputGeneration, UsesAll64SeedBitsAndIsRepeatable) {
  Graph g = one_input("x", contiguous({64}, DType::kFloat32));
  const auto a = generate_inputs(g, 0).at(0).data;
  const auto b = generate_inputs(g, uint64_t{1} << 32).at(0).data;
  const auto c = generate_inputs(g, 0).at(0).data;
  EXPECT_NE(a, b);  // std::seed_seq used to fold these two seeds together
  ASSERT_EQ(a.size(), c.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(bits(a[i]), bits(c[i]));
  // The stream follows the input's name, not its position among the inputs.
  Graph two = one_input("w", contiguous({3}, DType::kFloat32));
  Value x = g.values[0];
  two.values.push_back(x);
  two.inputs.push_back(1);
  EXPECT_EQ(generate_inputs(two, 0).at(1).data, a);
}

TEST(InputGeneration, FollowsStats) {
  // Bounds at +-5 std barely clip, so the sample moments are the recorded ones.
  const ValueStats wide{0.5, 2.0, -9.5, 10.5};
  const int64_t n = 100000;
  const HostTensor x =
      generate_inputs(one_input("wide", contiguous({n}, DType::kBFloat16), wide), 11).at(0);
  double mean = 0, sq = 0;
  for (double v : x.data) mean += v;
  mean /= n;
  for (double v : x.data) sq += (v - mean) * (v - mean);
  EXPECT_NEAR(mean, wide.mean, 0.03);  // 5 standard errors (2 / sqrt(1e5) = 0.0063)
  EXPECT_NEAR(std::sqrt(sq / n), wide.std, 0.03);
  for (double v : x.data) {
    ASSERT_GE(v, wide.min);
    ASSERT_LE(v, wide.max);
    ASSERT_EQ(v, round_to(DType::kBFloat16, v));
  }
  // Tight bounds clip: every value lies in them, and both are reached.
  const ValueStats tight{0.0, 1.0, -1.0, 1.5};
  const HostTensor y =
      generate_inputs(one_input("tight", contiguous({n}, DType::kFloat16), tight), 11).at(0);
  int at_min = 0, at_max = 0;
  for (double v : y.data) {
    ASSERT_GE(v, tight.min);
    ASSERT_LE(v, tight.max);
    ASSERT_EQ(v, round_to(DType::kFloat16, v));
    at_min += v == tight.min;
    at_max += v == tight.max;
  }
  EXPECT_GT(at_min, n / 10);  // P(z < -1) = 0.16
  EXPECT_GT(at_max, n / 20);  // P(z > 1.5) = 0.067
  // std == 0: the mean, rounded to the dtype.
  const HostTensor c =
      generate_inputs(one_input("c", contiguous({7}, DType::kBFloat16), ValueStats{0.1, 0, -1, 1}),
                      3)
          .at(0);
  for (double v : c.data) EXPECT_EQ(v, round_to(DType::kBFloat16, 0.1));
}

TEST(InputGeneration, OneValuePerStorageElement) {
  // A transposed layout draws the same storage values as a flat input of the same name and
  // storage size; the logical tensor is their strided view: (i, j) <- storage[i + 2j].
  const TensorMeta transposed{{2, 3}, {1, 2}, DType::kFloat32};
  const HostTensor t = generate_inputs(one_input("x", transposed), 9).at(0);
  const HostTensor flat =
      generate_inputs(one_input("x", contiguous({6}, DType::kFloat32)), 9).at(0);
  EXPECT_EQ(t.meta.shape, transposed.shape);
  EXPECT_EQ(t.meta.stride, contiguous_strides(transposed.shape));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(t.data[i * 3 + j], flat.data[i + 2 * j]);
}

TEST(InputGeneration, StrideZeroRowsAreEqualAndPack) {
  const TensorMeta expanded{{2, 3}, {0, 1}, DType::kBFloat16};
  const HostTensor t = generate_inputs(one_input("b", expanded), 1).at(0);
  ASSERT_EQ(t.data.size(), 6u);
  for (int j = 0; j < 3; ++j) EXPECT_EQ(bits(t.data[j]), bits(t.data[3 + j]));
  EXPECT_NE(t.data[0], t.data[1]);
  const std::vector<uint8_t> bytes = pack(t, expanded);
  EXPECT_EQ(bytes.size(), 3 * dtype_size(DType::kBFloat16));
  EXPECT_EQ(unpack(bytes, expanded).data, t.data);
}

TEST(InputGeneration, RejectsNegativeStrides) {
  EXPECT_THROW(generate_inputs(one_input("x", TensorMeta{{3}, {-1}, DType::kFloat32}), 1),
               std::invalid_argument);
}

// The size: a [16, 1024, 1600] bfloat16 input must take seconds, not minutes, on one core.
TEST(InputGeneration, LargeInputIsFast) {
  Graph g = one_input("x", contiguous({16, 1024, 1600}, DType::kBFloat16), ValueStats{0, 1, -4, 4});
  const auto t0 = std::chrono::steady_clock::now();
  const auto in = generate_inputs(g, 1);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(in.at(0).data.size(), 16u * 1024 * 1600);
  std::printf("generated 26,214,400 bfloat16 values in %.2f s\n", s);
  EXPECT_LT(s, 30.0);  // loose: shared CI machines; about 1.5 s on an idle core
}

TEST(HostTensorPack, RejectsConflictingAliases) {
  const TensorMeta expanded{{2, 3}, {0, 1}, DType::kFloat32};
  HostTensor t = make_host_tensor({2, 3}, DType::kFloat32);
  t.data = {1, 2, 3, 1, 2, 3};
  EXPECT_EQ(pack(t, expanded).size(), 3 * sizeof(float));
  t.data = {1, 2, 3, 1, 5, 3};
  try {
    pack(t, expanded);
    FAIL() << "pack accepted two values for one storage element";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[1, 1]"), std::string::npos) << e.what();
  }
  // Overlapping without a zero stride: offsets i + j on [2, 2] alias (0, 1) and (1, 0).
  const TensorMeta overlap{{2, 2}, {1, 1}, DType::kFloat32};
  HostTensor u = make_host_tensor({2, 2}, DType::kFloat32);
  u.data = {1, 2, 2, 3};
  EXPECT_EQ(unpack(pack(u, overlap), overlap).data, u.data);
  u.data = {1, 2, 4, 3};
  EXPECT_THROW(pack(u, overlap), std::invalid_argument);
  // Distinct offsets that the fast test cannot prove ([3, 2] strides [2, 3]) still pack.
  const TensorMeta odd{{3, 2}, {2, 3}, DType::kFloat32};
  HostTensor w = make_host_tensor({3, 2}, DType::kFloat32);
  w.data = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(unpack(pack(w, odd), odd).data, w.data);
}
