// Overlap arithmetic (issue 31, harness/measure/overlap.hpp) on hand-built timelines: HTA's
// |comm ∩ compute| / |comm| on interval unions, exposed communication, the overlap efficiency E
// and Flux's effective communication time, algbw/busbw with nccl-tests' factors.
#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>
#include <vector>

#include "harness/measure/overlap.hpp"
#include "harness/measure/timeline_overlap.hpp"

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

// ---- timeline_overlap.hpp: CUPTI records classified and fed to the arithmetic above ----

namespace {

KernelEvent kernel(const std::string& name, double s, double dur, uint32_t stream = 7) {
  KernelEvent e;
  e.name = name;
  e.start_us = s;
  e.dur_us = dur;
  e.stream = stream;
  return e;
}
KernelEvent copy(const std::string& kind, double s, double dur, uint32_t stream = 9) {
  KernelEvent e = kernel("memcpy " + kind, s, dur, stream);
  e.kind = KernelEvent::Kind::kMemcpy;
  e.copy_kind = kind;
  e.bytes = 1 << 20;
  return e;
}

}  // namespace

TEST(TimelineOverlap, ClassifiesNcclKernelsAndPeerCopiesAsCommunication) {
  EXPECT_EQ(classify_event(
                kernel("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage)", 0, 1), false),
            ActivityKind::kComm);
  EXPECT_EQ(classify_event(kernel("nvjet_tst_128x256_64x4_2x1_v_bz_TNT", 0, 1), true),
            ActivityKind::kCompute);
  // A kernel that merely mentions nccl inside its name is not NCCL's.
  EXPECT_EQ(classify_event(kernel("void my_ncclish_gemm<float>()", 0, 1), true),
            ActivityKind::kCompute);
  EXPECT_EQ(classify_event(copy("PtoP", 0, 1), false), ActivityKind::kComm);
  // Same-device copies: the shards of a pipeline between ranks sharing a GPU only where the
  // region communicates; elsewhere (a clone, a cat) they are memory traffic, not communication.
  EXPECT_EQ(classify_event(copy("DtoD", 0, 1), true), ActivityKind::kComm);
  EXPECT_EQ(classify_event(copy("DtoD", 0, 1), false), ActivityKind::kOther);
  EXPECT_EQ(classify_event(copy("HtoD", 0, 1), true), ActivityKind::kOther);
}

TEST(TimelineOverlap, PipelineTimelineHidesCopiesUnderGemms) {
  // A chunked all-gather: chunk copies [0,10) [10,20) [20,30) on a copy stream, per-chunk GEMMs
  // [10,25) [25,40) [40,55) on the compute stream: copies 2 and 3 run under GEMMs 1 and 2.
  const std::vector<KernelEvent> tl = {copy("DtoD", 0, 10),       copy("DtoD", 10, 10),
                                       copy("DtoD", 20, 10),      kernel("gemm", 10, 15, 3),
                                       kernel("gemm", 25, 15, 3), kernel("gemm", 40, 15, 3)};
  const OverlapStats s = timeline_overlap(tl, true);
  EXPECT_DOUBLE_EQ(s.comm_us, 30);
  EXPECT_DOUBLE_EQ(s.compute_us, 45);
  EXPECT_DOUBLE_EQ(s.overlap_us, 20);
  EXPECT_DOUBLE_EQ(s.exposed_comm_us, 10);
  EXPECT_NEAR(s.overlap_fraction, 2.0 / 3.0, 1e-12);
  // The same timeline outside a communicating region: no communication, nothing to hide.
  const OverlapStats none = timeline_overlap(tl, false);
  EXPECT_FALSE(none.has_comm);
  EXPECT_DOUBLE_EQ(none.compute_us, 45);
  EXPECT_THROW(timeline_overlap({kernel("k", 5, -1)}, true), std::invalid_argument);
}

TEST(TimelineOverlap, RegionFiguresAgainstTheSerialBaseline) {
  // Baseline: NCCL all-gather [0, 40) then the GEMM [40, 140): T_comm 40, T_gemm 100.
  const std::vector<KernelEvent> base = {
      kernel("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage)", 0, 40),
      kernel("nvjet_gemm", 40, 100)};
  // An overlapped variant spanning 110 µs: chunk copies on stream 9 under per-chunk GEMMs that
  // take 105 µs in all (contention: 5 % slower than alone). E = (100 + 40 - 110) / 40 = 0.75;
  // Flux T_eff = 10 µs, Flux efficiency 1 - 10 / 40 = 0.75; busbw = 3 MB / 40 µs = 75 GB/s.
  const std::vector<KernelEvent> opt = {copy("DtoD", 0, 20), kernel("nvjet_gemm", 5, 50, 3),
                                        copy("DtoD", 20, 20), kernel("nvjet_gemm", 55, 55, 3)};
  const auto o = region_overlap(base, opt, 3e6);
  ASSERT_TRUE(o.has_value());
  EXPECT_DOUBLE_EQ(o->t_comm_us, 40);
  EXPECT_DOUBLE_EQ(o->t_gemm_us, 100);
  EXPECT_DOUBLE_EQ(o->t_total_us, 110);
  EXPECT_DOUBLE_EQ(o->efficiency, 0.75);
  EXPECT_DOUBLE_EQ(o->flux_eff_comm_us, 10);
  EXPECT_DOUBLE_EQ(o->flux_efficiency, 0.75);
  EXPECT_DOUBLE_EQ(o->gemm_slowdown, 1.05);
  EXPECT_DOUBLE_EQ(o->busbw_gbps, 75);
  // Slower than serial: E < 0, said as it is.
  EXPECT_LT(region_overlap(base, {kernel("nvjet_gemm", 0, 150)}, 3e6)->efficiency, 0);
  // No communication in the baseline's timeline (or no GEMM), or no variant timeline: no
  // figures, never a made-up E.
  EXPECT_FALSE(region_overlap({kernel("nvjet_gemm", 0, 100)}, opt, 3e6).has_value());
  EXPECT_FALSE(region_overlap({base[0]}, opt, 3e6).has_value());
  EXPECT_FALSE(region_overlap(base, {}, 3e6).has_value());
  EXPECT_DOUBLE_EQ(timeline_span_us(opt), 110);
}

TEST(TimelineOverlap, KernelBusyTimeCountsOverlappingKernelsOnce) {
  // fp8_quantize's two-pass group: the amax pass [0, 23) and the cast launched as its
  // programmatic dependent at 1 µs, running until 64: a sum of 86 µs, a busy time of 64; a
  // copy [70, 75) is not kernel time, and a later kernel [80, 90) adds its 10 µs.
  const std::vector<KernelEvent> tl = {kernel("amax_packed_kernel", 0, 23),
                                       kernel("cast_fast_kernel", 1, 63), copy("DtoD", 70, 5),
                                       kernel("nvjet_gemm", 80, 10)};
  EXPECT_DOUBLE_EQ(timeline_kernel_busy_us(tl), 74);
  EXPECT_DOUBLE_EQ(timeline_kernel_busy_us({kernel("a", 0, 5), kernel("b", 5, 5)}), 10);
  EXPECT_DOUBLE_EQ(timeline_kernel_busy_us({copy("DtoD", 0, 5)}), 0);
  EXPECT_DOUBLE_EQ(timeline_kernel_busy_us({}), 0);
  EXPECT_THROW(timeline_kernel_busy_us({kernel("k", 5, -1)}), std::invalid_argument);
}
