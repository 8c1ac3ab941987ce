#include <gtest/gtest.h>

#include <cmath>

#include "harness/measure/stats.hpp"
#include "harness/report/numerics.hpp"

using namespace replay;

namespace {
HostTensor t(std::vector<int64_t> shape, std::vector<double> v, DType d = DType::kBFloat16) {
  HostTensor h = make_host_tensor(shape, d);
  h.data = std::move(v);
  return h;
}
}  // namespace

TEST(Numerics, PassesWithinTolerance) {
  auto ref = t({4}, {1.0, -2.0, 100.0, 0.0});
  auto got = t({4}, {1.0078125, -2.0, 100.5, 0.0});
  auto r = compare_tensors("y", got, ref, default_tolerance(DType::kBFloat16));
  EXPECT_TRUE(r.pass());
  EXPECT_NEAR(r.max_abs_err, 0.5, 1e-12);
  EXPECT_NEAR(r.max_rel_err, 0.0078125, 1e-12);
}

TEST(Numerics, ReportsFirstMismatchAsMultiIndex) {
  auto ref = t({2, 3}, {1, 2, 3, 4, 5, 6});
  auto got = t({2, 3}, {1, 2, 3, 4, 5.5, 7});
  auto r = compare_tensors("y", got, ref, {1e-5, 1.6e-2});
  EXPECT_FALSE(r.pass());
  EXPECT_EQ(r.mismatches, 2);
  EXPECT_EQ(r.first_mismatch, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(r.first_got, 5.5);
  EXPECT_EQ(r.first_ref, 5);
}

TEST(Numerics, NaNNeverPasses) {
  auto ref = t({2}, {1, NAN});
  auto got = t({2}, {NAN, NAN});
  auto r = compare_tensors("y", got, ref, {1e9, 1e9});
  EXPECT_EQ(r.mismatches, 2);
  EXPECT_EQ(r.nan_count, 2);
  EXPECT_FALSE(r.pass());
  EXPECT_TRUE(std::isnan(r.rel_l2));
  auto j = to_json(r);
  EXPECT_FALSE(j["pass"].get<bool>());
  EXPECT_TRUE(j["rel_l2"].is_null());
}

TEST(Numerics, InfMustMatchExactly) {
  auto r = compare_tensors("y", t({2}, {INFINITY, 1}), t({2}, {INFINITY, 1}), {0, 0});
  EXPECT_TRUE(r.pass());
  auto bad = compare_tensors("y", t({1}, {INFINITY}), t({1}, {1e30}), {1e9, 1e9});
  EXPECT_FALSE(bad.pass());
}

TEST(Numerics, ShapeMismatchThrows) {
  EXPECT_THROW(compare_tensors("y", t({2}, {1, 2}), t({1, 2}, {1, 2}), {}), std::invalid_argument);
}

TEST(Numerics, TolerancesFollowDtype) {
  EXPECT_GT(default_tolerance(DType::kBFloat16).rtol, default_tolerance(DType::kFloat16).rtol);
  EXPECT_GT(default_tolerance(DType::kFloat16).rtol, default_tolerance(DType::kFloat32).rtol);
  EXPECT_EQ(default_tolerance(DType::kInt64).rtol, 0);
}

TEST(Stats, PercentilesAndSummary) {
  std::vector<double> s{5, 1, 4, 2, 3};
  SampleStats st = summarize(s);
  EXPECT_EQ(st.n, 5u);
  EXPECT_DOUBLE_EQ(st.median, 3);
  EXPECT_DOUBLE_EQ(st.q1, 2);
  EXPECT_DOUBLE_EQ(st.q3, 4);
  EXPECT_DOUBLE_EQ(st.iqr, 2);
  EXPECT_DOUBLE_EQ(st.min, 1);
  EXPECT_DOUBLE_EQ(st.mean, 3);
  EXPECT_NEAR(st.stdev, std::sqrt(2.5), 1e-12);
  EXPECT_DOUBLE_EQ(percentile({10, 20}, 25), 12.5);
  EXPECT_EQ(summarize({}).n, 0u);
  EXPECT_THROW(percentile({}, 50), std::invalid_argument);
}

TEST(Stats, StoppingRule) {
  StopRule r;
  r.min_samples = 10;
  r.min_time_s = 1e-3;
  r.max_noise = 0.01;
  r.timeout_s = 2;
  std::vector<double> quiet(10, 100.0);  // 10 x 100 µs = 1 ms, zero noise
  EXPECT_TRUE(should_stop(quiet, 0.1, r));
  EXPECT_FALSE(should_stop(std::vector<double>(9, 100.0), 0.1, r));  // too few samples
  std::vector<double> noisy{100, 150, 100, 150, 100, 150, 100, 150, 100, 150};
  EXPECT_FALSE(should_stop(noisy, 0.1, r));  // noisy: keep going ...
  EXPECT_TRUE(should_stop(noisy, 2.5, r));   // ... until the timeout
  std::vector<double> short_time(10, 1.0);   // 10 µs of GPU time < min_time
  EXPECT_FALSE(should_stop(short_time, 0.1, r));
  r.max_samples = 10;
  EXPECT_TRUE(should_stop(short_time, 0.1, r));
}
