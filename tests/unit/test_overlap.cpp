// Overlap arithmetic (issue 31, harness/measure/overlap.hpp) on hand-built timelines: HTA's
// |comm ∩ compute| / |comm| on interval unions, exposed communication, the overlap efficiency E
// and Flux's effective communication time, algbw/busbw with nccl-tests' factors.
#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>
#include <vector>

#include "harness/measure/overlap.hpp"

using namespace replay;

namespace {

Activity comp(double s, double e, int stream = 0) {
  return {{s, e}, ActivityKind::kCompute, stream};
}
Activity comm(double s, double e, int stream = 1) {
  return {{s, e}, ActivityKind::kComm, stream};
}

}  // namespace

TEST(Overlap, UnionMergesOverlappingAndTouchingIntervals) {
  const auto u = interval_union({{5, 7}, {0, 2}, {1, 3}, {3, 4}, {6, 6}});
  ASSERT_EQ(u.size(), 2u);
  EXPECT_DOUBLE_EQ(u[0].start_us, 0);
  EXPECT_DOUBLE_EQ(u[0].end_us, 4);
  EXPECT_DOUBLE_EQ(u[1].start_us, 5);
  EXPECT_DOUBLE_EQ(u[1].end_us, 7);
  EXPECT_DOUBLE_EQ(union_length_us(u), 6);
  EXPECT_THROW(interval_union({{3, 2}}), std::invalid_argument);
  EXPECT_THROW(interval_union({{0, std::numeric_limits<double>::quiet_NaN()}}),
               std::invalid_argument);
}

TEST(Overlap, FullOverlap) {
  // Comm [10, 20) entirely under a GEMM [0, 30).
  const OverlapStats s = overlap_stats({comp(0, 30), comm(10, 20)});
  EXPECT_TRUE(s.has_comm);
  EXPECT_DOUBLE_EQ(s.comm_us, 10);
  EXPECT_DOUBLE_EQ(s.compute_us, 30);
  EXPECT_DOUBLE_EQ(s.overlap_us, 10);
  EXPECT_DOUBLE_EQ(s.exposed_comm_us, 0);
  EXPECT_DOUBLE_EQ(s.overlap_fraction, 1.0);
}

TEST(Overlap, NoOverlap) {
  // Serial: all-gather then GEMM, touching at t = 10 (no shared time).
  const OverlapStats s = overlap_stats({comm(0, 10), comp(10, 40)});
  EXPECT_DOUBLE_EQ(s.overlap_us, 0);
  EXPECT_DOUBLE_EQ(s.exposed_comm_us, 10);
  EXPECT_DOUBLE_EQ(s.overlap_fraction, 0.0);
}

TEST(Overlap, PartialOverlapAcrossSeveralComputeKernels) {
  // Comm [0, 40); compute [10, 20) and [30, 50) on two streams: 10 + 10 of 40 hidden.
  const OverlapStats s = overlap_stats({comm(0, 40), comp(10, 20, 0), comp(30, 50, 2)});
  EXPECT_DOUBLE_EQ(s.comm_us, 40);
  EXPECT_DOUBLE_EQ(s.compute_us, 30);
  EXPECT_DOUBLE_EQ(s.overlap_us, 20);
  EXPECT_DOUBLE_EQ(s.exposed_comm_us, 20);
  EXPECT_DOUBLE_EQ(s.overlap_fraction, 0.5);
}

TEST(Overlap, OverlappingCommIntervalsCountOnce) {
  // Two peer copies on two copy engines, [0, 20) and [10, 30), plus an NCCL kernel [25, 35):
  // comm union [0, 35) = 35 µs, not 20 + 20 + 10. Compute [5, 15) and overlapping [12, 25).
  const OverlapStats s = overlap_stats(
      {comm(0, 20, 3), comm(10, 30, 4), comm(25, 35, 1), comp(5, 15, 0), comp(12, 25, 2)});
  EXPECT_DOUBLE_EQ(s.comm_us, 35);
  EXPECT_DOUBLE_EQ(s.compute_us, 20);
  EXPECT_DOUBLE_EQ(s.overlap_us, 20);
  EXPECT_DOUBLE_EQ(s.exposed_comm_us, 15);
  EXPECT_NEAR(s.overlap_fraction, 20.0 / 35.0, 1e-15);
  // Summing the raw comm durations would have claimed 50 µs of communication.
  EXPECT_LT(s.comm_us, 50);
}

TEST(Overlap, EmptyCommHasNothingToHide) {
  const OverlapStats s = overlap_stats({comp(0, 10), {{2, 8}, ActivityKind::kOther, 5}});
  EXPECT_FALSE(s.has_comm);
  EXPECT_DOUBLE_EQ(s.comm_us, 0);
  EXPECT_DOUBLE_EQ(s.overlap_fraction, 0);
  EXPECT_DOUBLE_EQ(s.exposed_comm_us, 0);
  EXPECT_DOUBLE_EQ(s.compute_us, 10);
  const OverlapStats none = overlap_stats({});
  EXPECT_FALSE(none.has_comm);
}

TEST(Overlap, OtherActivitiesAreNeitherCommNorCompute) {
  // A host-to-device memcpy (kOther) under the comm must not count as hiding it.
  const OverlapStats s = overlap_stats({comm(0, 10), {{0, 10}, ActivityKind::kOther, 0}});
  EXPECT_DOUBLE_EQ(s.overlap_us, 0);
  EXPECT_DOUBLE_EQ(s.exposed_comm_us, 10);
}

TEST(Overlap, EfficiencyOnIssueNumbers) {
  // PyTorch's fused ops on 2x H200 (issue 31): ag+mm 1686 µs against 1291 + 340 µs;
  // mm+rs 2093 µs against 1342 + 1091 µs.
  EXPECT_NEAR(overlap_efficiency(1291, 340, 1686), (1291.0 + 340 - 1686) / 340, 1e-12);
  EXPECT_NEAR(overlap_efficiency(1291, 340, 1686), -0.1618, 1e-4);
  EXPECT_NEAR(overlap_efficiency(1342, 1091, 2093), 0.3116, 1e-4);
  // Limits: serial = 0, the shorter fully hidden = 1.
  EXPECT_DOUBLE_EQ(overlap_efficiency(100, 40, 140), 0.0);
  EXPECT_DOUBLE_EQ(overlap_efficiency(100, 40, 100), 1.0);
  EXPECT_DOUBLE_EQ(overlap_efficiency(40, 100, 100), 1.0);  // min() is the GEMM here
  EXPECT_THROW(overlap_efficiency(0, 1, 1), std::invalid_argument);
  EXPECT_THROW(overlap_efficiency(1, -1, 1), std::invalid_argument);
}

TEST(Overlap, FluxEffectiveCommunicationTime) {
  EXPECT_DOUBLE_EQ(flux_effective_comm_us(1291, 1686), 395);
  EXPECT_NEAR(flux_overlap_efficiency(1291, 340, 1686), 1 - 395.0 / 340, 1e-12);
  // Flux form and E agree when comm is the shorter side, differ when the GEMM is.
  EXPECT_DOUBLE_EQ(flux_overlap_efficiency(100, 40, 120), overlap_efficiency(100, 40, 120));
  EXPECT_DOUBLE_EQ(flux_overlap_efficiency(40, 100, 120), 0.2);
  EXPECT_DOUBLE_EQ(overlap_efficiency(40, 100, 120), 0.5);
  EXPECT_THROW(flux_overlap_efficiency(1, 0, 1), std::invalid_argument);
}

TEST(Overlap, BusBandwidthFactors) {
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllGather, 2), 0.5);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllGather, 8), 0.875);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kReduceScatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kReduceScatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kReduceScatter, 8), 0.875);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllReduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::kAllReduce, 1), 0.0);
  EXPECT_THROW(busbw_factor(Collective::kAllGather, 0), std::invalid_argument);
}

TEST(Overlap, AlgbwAndBusbw) {
  // 1 GB in 1000 µs = 1000 GB/s algbw; all-gather over 8 ranks moves 7/8 of it on the bus.
  EXPECT_DOUBLE_EQ(algbw_gbps(1e9, 1000), 1000);
  EXPECT_DOUBLE_EQ(busbw_gbps(Collective::kAllGather, 8, 1e9, 1000), 875);
  EXPECT_DOUBLE_EQ(busbw_gbps(Collective::kAllReduce, 4, 1e9, 1000), 1500);
  // The issue's all-gather: 16384 x 4096 bf16 gathered (128 MiB) in 340 µs over 2 ranks.
  const double bytes = 16384.0 * 4096 * 2;
  EXPECT_NEAR(busbw_gbps(Collective::kAllGather, 2, bytes, 340), bytes / 340e-6 / 1e9 / 2, 1e-9);
  EXPECT_THROW(algbw_gbps(1, 0), std::invalid_argument);
  EXPECT_THROW(algbw_gbps(-1, 1), std::invalid_argument);
}
