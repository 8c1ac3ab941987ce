#include "harness/measure/timeline_overlap.hpp"

#include <algorithm>
#include <stdexcept>

namespace replay {

ActivityKind classify_event(const KernelEvent& e, bool copies_are_comm) {
  if (e.kind == KernelEvent::Kind::kMemcpy) {
    if (e.copy_kind == "PtoP") return ActivityKind::kComm;
    if (e.copy_kind == "DtoD" && copies_are_comm) return ActivityKind::kComm;
    return ActivityKind::kOther;
  }
  return e.name.rfind("nccl", 0) == 0 ? ActivityKind::kComm : ActivityKind::kCompute;
}

std::vector<Activity> timeline_activities(const std::vector<KernelEvent>& timeline,
                                          bool copies_are_comm) {
  std::vector<Activity> out;
  for (const KernelEvent& e : timeline) {
    if (!(e.dur_us >= 0))
      throw std::invalid_argument("timeline record '" + e.name + "' has a negative duration");
    const ActivityKind k = classify_event(e, copies_are_comm);
    if (k == ActivityKind::kOther) continue;
    out.push_back({{e.start_us, e.start_us + e.dur_us}, k, static_cast<int>(e.stream)});
  }
  return out;
}

OverlapStats timeline_overlap(const std::vector<KernelEvent>& timeline, bool copies_are_comm) {
  return overlap_stats(timeline_activities(timeline, copies_are_comm));
}

double timeline_span_us(const std::vector<KernelEvent>& timeline) {
  if (timeline.empty()) return 0;
  double first = timeline.front().start_us, last = first;
  for (const KernelEvent& e : timeline) {
    first = std::min(first, e.start_us);
    last = std::max(last, e.start_us + e.dur_us);
  }
  return last - first;
}

double timeline_kernel_busy_us(const std::vector<KernelEvent>& timeline) {
  std::vector<Interval> kernels;
  for (const KernelEvent& e : timeline) {
    if (e.kind != KernelEvent::Kind::kKernel) continue;
    if (!(e.dur_us >= 0))
      throw std::invalid_argument("timeline record '" + e.name + "' has a negative duration");
    kernels.push_back({e.start_us, e.start_us + e.dur_us});
  }
  return union_length_us(interval_union(std::move(kernels)));
}

std::optional<RegionOverlap> region_overlap(const std::vector<KernelEvent>& baseline_timeline,
                                            const std::vector<KernelEvent>& variant_timeline,
                                            double comm_bytes) {
  const OverlapStats base = timeline_overlap(baseline_timeline, true);
  const double t_total_us = timeline_span_us(variant_timeline);
  if (!base.has_comm || base.compute_us <= 0 || !(t_total_us > 0)) return std::nullopt;
  RegionOverlap o;
  o.t_gemm_us = base.compute_us;
  o.t_comm_us = base.comm_us;
  o.t_total_us = t_total_us;
  o.efficiency = overlap_efficiency(o.t_gemm_us, o.t_comm_us, t_total_us);
  o.flux_eff_comm_us = flux_effective_comm_us(o.t_gemm_us, t_total_us);
  o.flux_efficiency = flux_overlap_efficiency(o.t_gemm_us, o.t_comm_us, t_total_us);
  o.gemm_slowdown = timeline_overlap(variant_timeline, true).compute_us / o.t_gemm_us;
  o.busbw_gbps = comm_bytes > 0 ? comm_bytes / (o.t_comm_us * 1e3) : 0;
  return o;
}

}  // namespace replay
