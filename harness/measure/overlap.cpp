#include "harness/measure/overlap.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace replay {

namespace {

void require_positive(double v, const char* what) {
  if (!std::isfinite(v) || v <= 0)
    throw std::invalid_argument(std::string(what) + " must be finite and > 0, got " +
                                std::to_string(v));
}

}  // namespace

std::vector<Interval> interval_union(std::vector<Interval> intervals) {
  for (const Interval& iv : intervals)
    if (!std::isfinite(iv.start_us) || !std::isfinite(iv.end_us) || iv.end_us < iv.start_us)
      throw std::invalid_argument("interval [" + std::to_string(iv.start_us) + ", " +
                                  std::to_string(iv.end_us) +
                                  ") µs: expected finite bounds with end >= start");
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.start_us < b.start_us; });
  std::vector<Interval> out;
  for (const Interval& iv : intervals) {
    if (iv.end_us == iv.start_us) continue;  // empty: adds no time
    if (!out.empty() && iv.start_us <= out.back().end_us)
      out.back().end_us = std::max(out.back().end_us, iv.end_us);
    else
      out.push_back(iv);
  }
  return out;
}

double union_length_us(const std::vector<Interval>& disjoint) {
  double total = 0;
  for (const Interval& iv : disjoint) total += iv.end_us - iv.start_us;
  return total;
}

double intersection_length_us(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  // Two sorted disjoint lists: a merge walk, advancing whichever interval ends first.
  double total = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].start_us, b[j].start_us);
    const double hi = std::min(a[i].end_us, b[j].end_us);
    if (hi > lo) total += hi - lo;
    if (a[i].end_us < b[j].end_us)
      ++i;
    else
      ++j;
  }
  return total;
}

OverlapStats overlap_stats(const std::vector<Activity>& timeline) {
  std::vector<Interval> comm, compute;
  for (const Activity& a : timeline) {
    if (a.kind == ActivityKind::kComm) comm.push_back(a.span);
    if (a.kind == ActivityKind::kCompute) compute.push_back(a.span);
  }
  const std::vector<Interval> comm_u = interval_union(std::move(comm));
  const std::vector<Interval> compute_u = interval_union(std::move(compute));
  OverlapStats s;
  s.comm_us = union_length_us(comm_u);
  s.compute_us = union_length_us(compute_u);
  s.overlap_us = intersection_length_us(comm_u, compute_u);
  s.exposed_comm_us = std::max(0.0, s.comm_us - s.overlap_us);
  s.has_comm = s.comm_us > 0;
  s.overlap_fraction = s.has_comm ? s.overlap_us / s.comm_us : 0.0;
  return s;
}

double overlap_efficiency(double t_gemm_us, double t_comm_us, double t_total_us) {
  require_positive(t_gemm_us, "T_gemm (µs)");
  require_positive(t_comm_us, "T_comm (µs)");
  require_positive(t_total_us, "T_total (µs)");
  return (t_gemm_us + t_comm_us - t_total_us) / std::min(t_gemm_us, t_comm_us);
}

double flux_effective_comm_us(double t_gemm_us, double t_total_us) {
  require_positive(t_gemm_us, "T_gemm (µs)");
  require_positive(t_total_us, "T_total (µs)");
  return t_total_us - t_gemm_us;
}

double flux_overlap_efficiency(double t_gemm_us, double t_comm_us, double t_total_us) {
  require_positive(t_comm_us, "T_comm (µs)");
  return 1.0 - flux_effective_comm_us(t_gemm_us, t_total_us) / t_comm_us;
}

double busbw_factor(Collective c, int n_ranks) {
  if (n_ranks < 1)
    throw std::invalid_argument("busbw_factor: n_ranks must be >= 1, got " +
                                std::to_string(n_ranks));
  const double n = n_ranks;
  switch (c) {
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      return (n - 1) / n;
    case Collective::kAllReduce:
      return 2 * (n - 1) / n;
  }
  throw std::invalid_argument("busbw_factor: unknown collective");
}

double algbw_gbps(double bytes, double time_us) {
  require_positive(time_us, "collective time (µs)");
  if (!std::isfinite(bytes) || bytes < 0)
    throw std::invalid_argument("algbw: bytes must be finite and >= 0, got " +
                                std::to_string(bytes));
  return bytes / (time_us * 1e-6) / 1e9;
}

double busbw_gbps(Collective c, int n_ranks, double bytes, double time_us) {
  return algbw_gbps(bytes, time_us) * busbw_factor(c, n_ranks);
}

}  // namespace replay
