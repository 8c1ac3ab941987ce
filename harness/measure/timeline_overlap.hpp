// Feeds the overlap arithmetic (overlap.hpp) from a CUPTI timeline (cupti_tracer.hpp): which
// record is communication, which is computation, and the figures of one region's variants.
//
// Classification (issue 31): communication = NCCL kernels (a kernel name starting with "nccl":
// ncclDevKernel_*, ncclKernel_*) and peer copies (CUPTI copy kind PtoP), plus same-device copies
// (DtoD) in a region that communicates — CUDA IPC copies between processes that share one GPU and
// peer copies CUPTI files under DtoD are how a chunked pipeline moves its shards, which HTA would
// call "memory"; computation = every other kernel; other copies and kinds are neither.
#pragma once

#include <optional>
#include <vector>

#include "harness/measure/cupti_tracer.hpp"
#include "harness/measure/overlap.hpp"

namespace replay {

/// What `e` is for the overlap figures. `copies_are_comm`: the region communicates (its cost has
/// comm bytes), so its same-device copies move shards between ranks.
ActivityKind classify_event(const KernelEvent& e, bool copies_are_comm);

/// The timeline as overlap activities (classify_event; kOther records dropped).
std::vector<Activity> timeline_activities(const std::vector<KernelEvent>& timeline,
                                          bool copies_are_comm);

/// One variant's overlap on its CUPTI timeline (overlap_stats over timeline_activities).
/// Throws std::invalid_argument on a negative duration.
OverlapStats timeline_overlap(const std::vector<KernelEvent>& timeline, bool copies_are_comm);

/// A communicating region's figures against its serial baseline (issue 31, "Measurement"): the
/// baseline runs the collective and the GEMM one after the other, so its CUPTI timeline gives
/// T_comm (the union of its communication) and T_gemm (the union of its computation); the
/// overlapped variant's CUPTI timeline of the same kind of replay (one replay, L2 not flushed)
/// gives T_total (its span: first start to last end) and its computation under contention.
struct RegionOverlap {
  double t_gemm_us = 0;         ///< baseline's computation alone, µs
  double t_comm_us = 0;         ///< baseline's communication alone, µs
  double t_total_us = 0;        ///< the overlapped variant's span, µs
  double efficiency = 0;        ///< E = (T_gemm + T_comm - T_total) / min(T_gemm, T_comm)
  double flux_eff_comm_us = 0;  ///< Flux: T_total - T_gemm, µs
  double flux_efficiency = 0;   ///< Flux: 1 - (T_total - T_gemm) / T_comm
  /// The GEMM's slowdown under contention: the overlapped variant's computation (the union of
  /// its compute records) / T_gemm; 1 = the copies cost the GEMMs nothing.
  double gemm_slowdown = 0;
  /// nccl-tests' busbw of the baseline's communication: comm_bytes / T_comm, GB/s, where
  /// comm_bytes is the region's Cost::comm_bytes (already the bus-factor share of the collective's
  /// bytes: (n-1)/n of the gathered or scattered tensor).
  double busbw_gbps = 0;
};

/// First start to last end of a timeline (kernels and copies), µs; 0 when empty.
double timeline_span_us(const std::vector<KernelEvent>& timeline);

/// The length of the union of the timeline's kernel intervals (copies left out), µs: the time
/// at least one kernel ran. Kernels that overlap — a programmatic dependent launch running its
/// prologue under the kernel it depends on, kernels on concurrent streams — count once, where a
/// sum of their durations counts the overlap twice. 0 when there is no kernel. Throws
/// std::invalid_argument on a negative or non-finite duration.
double timeline_kernel_busy_us(const std::vector<KernelEvent>& timeline);

/// The figures above from the baseline's timeline and the overlapped variant's; nullopt when the
/// baseline's timeline has no communication or no computation, or the variant's is empty.
std::optional<RegionOverlap> region_overlap(const std::vector<KernelEvent>& baseline_timeline,
                                            const std::vector<KernelEvent>& variant_timeline,
                                            double comm_bytes);

}  // namespace replay
