#include "harness/measure/stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace replay {

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) throw std::invalid_argument("percentile of no samples");
  double pos = p / 100.0 * static_cast<double>(sorted.size() - 1);
  auto lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

SampleStats summarize(std::vector<double> s) {
  SampleStats r;
  r.n = s.size();
  if (s.empty()) return r;
  std::sort(s.begin(), s.end());
  r.min = s.front();
  r.max = s.back();
  r.median = percentile(s, 50);
  r.q1 = percentile(s, 25);
  r.q3 = percentile(s, 75);
  r.iqr = r.q3 - r.q1;
  r.mean = std::accumulate(s.begin(), s.end(), 0.0) / static_cast<double>(s.size());
  if (s.size() > 1) {
    double ss = 0;
    for (double v : s) ss += (v - r.mean) * (v - r.mean);
    r.stdev = std::sqrt(ss / static_cast<double>(s.size() - 1));
  }
  r.rel_noise = r.mean > 0 ? r.stdev / r.mean : 0;
  const size_t n = s.size();
  if (n < 6) {
    r.median_ci_lo = r.min;
    r.median_ci_hi = r.max;
  } else {
    // 1-based ranks j < k with P(X_(j) <= median <= X_(k)) ~ 0.95.
    const double half = 1.959964 * std::sqrt(static_cast<double>(n)) / 2;
    const auto j = static_cast<size_t>(std::max(1.0, std::floor(n / 2.0 - half)));
    const auto k =
        static_cast<size_t>(std::min(static_cast<double>(n), std::ceil(n / 2.0 + half + 1)));
    r.median_ci_lo = s[j - 1];
    r.median_ci_hi = s[k - 1];
  }
  r.rel_ci = r.median > 0 ? (r.median_ci_hi - r.median_ci_lo) / 2 / r.median : 0;
  return r;
}

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::kConverged:
      return "converged";
    case StopReason::kTimeout:
      return "timeout";
    case StopReason::kMaxSamples:
      return "max_samples";
    case StopReason::kFixedCount:
      return "fixed_count";
    default:
      return "running";
  }
}

StopReason stop_reason(const std::vector<double>& samples_us, double wall_s, const StopRule& rule) {
  if (samples_us.size() >= rule.max_samples) return StopReason::kMaxSamples;
  if (wall_s >= rule.timeout_s) return StopReason::kTimeout;
  if (samples_us.size() < rule.min_samples) return StopReason::kNone;
  const double gpu_s = std::accumulate(samples_us.begin(), samples_us.end(), 0.0) * 1e-6;
  if (gpu_s < rule.min_time_s) return StopReason::kNone;
  return summarize(samples_us).rel_ci <= rule.max_noise ? StopReason::kConverged
                                                        : StopReason::kNone;
}

nlohmann::json to_json(const StopRule& r) {
  return {
      {"min_samples", r.min_samples},
      {"max_samples", r.max_samples},
      {"min_time_s", r.min_time_s},
      {"max_noise", r.max_noise},
      {"timeout_s", r.timeout_s},
      {"min_clock_ratio", r.min_clock_ratio},
      {"throttle_recovery_s", r.throttle_recovery_s},
      {"noise_measure", "rel_ci: half-width of the 95% order-statistic CI of the median / median"}};
}

nlohmann::json to_json(const SampleStats& s) {
  return {{"n", s.n},
          {"median_us", s.median},
          {"q1_us", s.q1},
          {"q3_us", s.q3},
          {"iqr_us", s.iqr},
          {"min_us", s.min},
          {"max_us", s.max},
          {"mean_us", s.mean},
          {"stdev_us", s.stdev},
          {"rel_noise", s.rel_noise},
          {"median_ci_lo_us", s.median_ci_lo},
          {"median_ci_hi_us", s.median_ci_hi},
          {"rel_ci", s.rel_ci}};
}

}  // namespace replay
