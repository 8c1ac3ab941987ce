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
  return r;
}

bool should_stop(const std::vector<double>& samples_us, double wall_s, const StopRule& rule) {
  if (samples_us.size() >= rule.max_samples) return true;
  if (samples_us.size() < rule.min_samples) return false;
  double gpu_s = std::accumulate(samples_us.begin(), samples_us.end(), 0.0) * 1e-6;
  if (wall_s >= rule.timeout_s) return true;
  if (gpu_s < rule.min_time_s) return false;
  return summarize(samples_us).rel_noise <= rule.max_noise;
}

nlohmann::json to_json(const StopRule& r) {
  return {{"min_samples", r.min_samples},
          {"max_samples", r.max_samples},
          {"min_time_s", r.min_time_s},
          {"max_noise", r.max_noise},
          {"timeout_s", r.timeout_s}};
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
          {"rel_noise", s.rel_noise}};
}

}  // namespace replay
