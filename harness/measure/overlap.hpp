// Communication/computation overlap on per-rank GPU timelines: pure arithmetic over intervals
// (µs), so it is tested on synthetic timelines; timeline_overlap.hpp feeds it the CUPTI tracer's
// records (kernels and copies).
//
// What counts as what: compute = kernels that are not communication (GEMMs, epilogues, ...);
// communication = NCCL kernels AND copy-engine peer copies (CUDA IPC / P2P memcpys). HTA files
// memcpys under "memory"; a chunked all-gather on the copy engines is communication, so here it is.
//
// Definitions and their sources:
// - overlap (HTA, TraceAnalysis.get_comm_comp_overlap): the fraction of communication time during
//   which computation also runs, |comm ∩ compute| / |comm|, on interval unions (two comm kernels
//   on two streams covering the same microsecond count it once).
// - exposed communication: |comm \ compute|, the communication time no computation hides.
// - overlap efficiency (issue 31): E = (T_gemm + T_comm - T_total) / min(T_gemm, T_comm), with
//   T_gemm and T_comm measured alone and T_total the overlapped op; 1 = the shorter one fully
//   hidden, 0 = serial, < 0 = slower than serial (contention, extra launches).
// - Flux (Chang et al., arXiv 2406.06858): effective communication time
//   T_eff = T_total - T_gemm (what the overlapped op costs beyond the GEMM alone), and the overlap
//   efficiency it implies, 1 - T_eff / T_comm.
// - algbw / busbw (NVIDIA nccl-tests, doc/PERFORMANCE.md): algbw = bytes / time; busbw = algbw
//   times (n-1)/n for all_gather and reduce_scatter, 2(n-1)/n for all_reduce, where bytes is the
//   larger side of the collective (the gathered output, the scattered input, the reduced tensor).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace replay {

/// One interval of GPU activity, µs (start inclusive, end exclusive); end >= start.
struct Interval {
  double start_us = 0, end_us = 0;
};

/// What a timeline record is for the overlap arithmetic.
enum class ActivityKind { kCompute, kComm, kOther };

/// One record of a per-rank timeline: a kernel or a memcpy on a stream.
struct Activity {
  Interval span;
  ActivityKind kind = ActivityKind::kOther;
  int stream = 0;
};

/// The sorted, disjoint union of `intervals` (touching intervals merge). Throws
/// std::invalid_argument when an interval ends before it starts or is not finite.
std::vector<Interval> interval_union(std::vector<Interval> intervals);

/// Total length of a union from interval_union, µs.
double union_length_us(const std::vector<Interval>& disjoint);

/// |a ∩ b| for two unions from interval_union, µs.
double intersection_length_us(const std::vector<Interval>& a, const std::vector<Interval>& b);

/// The overlap figures of one rank's timeline (all times µs).
struct OverlapStats {
  double comm_us = 0;          ///< |union of comm|
  double compute_us = 0;       ///< |union of compute|
  double overlap_us = 0;       ///< |comm ∩ compute|
  double exposed_comm_us = 0;  ///< |comm \ compute| = comm_us - overlap_us
  /// overlap_us / comm_us in [0, 1] (HTA's comm/comp overlap); 0 when there is no communication
  /// (nothing to hide), with has_comm false so a report can print "n/a".
  double overlap_fraction = 0;
  bool has_comm = false;
};

/// Overlap of one rank's timeline, streams pooled (kOther records are ignored). Throws
/// std::invalid_argument on a malformed interval.
OverlapStats overlap_stats(const std::vector<Activity>& timeline);

/// E = (t_gemm_us + t_comm_us - t_total_us) / min(t_gemm_us, t_comm_us), dimensionless.
/// Throws std::invalid_argument unless all three times are finite and > 0.
double overlap_efficiency(double t_gemm_us, double t_comm_us, double t_total_us);

/// Flux's effective communication time T_total - T_gemm, µs (negative when the overlapped op beat
/// the GEMM alone). Throws std::invalid_argument unless both times are finite and > 0.
double flux_effective_comm_us(double t_gemm_us, double t_total_us);

/// Flux's overlap efficiency 1 - (T_total - T_gemm) / T_comm, dimensionless. Throws
/// std::invalid_argument unless all three times are finite and > 0.
double flux_overlap_efficiency(double t_gemm_us, double t_comm_us, double t_total_us);

/// The collectives nccl-tests gives a bus-bandwidth factor for (those `replay` runs).
enum class Collective { kAllGather, kReduceScatter, kAllReduce };

/// busbw / algbw for `c` over `n_ranks` ranks: (n-1)/n, (n-1)/n, 2(n-1)/n. Throws
/// std::invalid_argument when n_ranks < 1.
double busbw_factor(Collective c, int n_ranks);

/// algbw = bytes / time in GB/s (1e9 bytes per second): `bytes` in bytes, `time_us` in µs.
/// Throws std::invalid_argument unless time_us is finite and > 0.
double algbw_gbps(double bytes, double time_us);

/// busbw = algbw * busbw_factor(c, n_ranks), GB/s.
double busbw_gbps(Collective c, int n_ranks, double bytes, double time_us);

}  // namespace replay
