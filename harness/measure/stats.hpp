// Sample statistics and the stopping rule of the timing loop (nvbench-like: minimum samples and
// time, a relative-noise target, a timeout).
#pragma once

#include <cstddef>
#include <vector>

#include <nlohmann/json.hpp>

namespace replay {

/// Summary of timing samples (all in µs).
struct SampleStats {
  size_t n = 0;
  double median = 0, q1 = 0, q3 = 0, iqr = 0, min = 0, max = 0, mean = 0;
  double stdev = 0;      ///< sample standard deviation (n-1)
  double rel_noise = 0;  ///< stdev / mean
};

/// Percentile p in [0, 100] by linear interpolation between order statistics (numpy's default).
/// `sorted` must be ascending and non-empty.
double percentile(const std::vector<double>& sorted, double p);

/// Summarize samples; all-zero stats for an empty vector.
SampleStats summarize(std::vector<double> samples);

struct StopRule {
  size_t min_samples = 10;
  size_t max_samples = 2000;
  double min_time_s = 0.05;  ///< summed GPU time of the samples
  double max_noise = 0.01;   ///< stop once rel_noise <= this ...
  double timeout_s = 2.0;    ///< ... or once this much wall time has passed
};

/// Whether the timing loop may stop: enough samples and GPU time, and either quiet enough or out
/// of time; or the sample cap is reached.
bool should_stop(const std::vector<double>& samples_us, double wall_s, const StopRule& rule);

nlohmann::json to_json(const SampleStats& s);
nlohmann::json to_json(const StopRule& r);

}  // namespace replay
