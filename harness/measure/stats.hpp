// Sample statistics and the stopping rule of the timing loop (nvbench-like: minimum samples and
// GPU time, a relative-noise target, a timeout). The noise measure is robust: the half-width of a
// distribution-free 95 % confidence interval of the median, relative to the median. A few slow
// outliers (a preempted sample, a clock dip) move the mean and the stdev a lot but the median's
// interval hardly at all, so the rule converges on the runs that decide the reported median.
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
  double rel_noise = 0;  ///< stdev / mean (reported; not the stopping criterion)
  /// 95 % confidence interval of the median from order statistics (ranks n/2 -+ 1.96 sqrt(n)/2,
  /// the normal approximation of the binomial; Conover, Practical Nonparametric Statistics,
  /// 3rd ed., sec. 3.2), µs. With fewer than 6 samples the interval is [min, max].
  double median_ci_lo = 0, median_ci_hi = 0;
  double rel_ci = 0;  ///< (median_ci_hi - median_ci_lo) / 2 / median: the stopping criterion
};

/// Percentile p in [0, 100] by linear interpolation between order statistics (numpy's default).
/// `sorted` must be ascending and non-empty.
double percentile(const std::vector<double>& sorted, double p);

/// Summarize samples; all-zero stats for an empty vector.
SampleStats summarize(std::vector<double> samples);

/// When the timing loop of one measurement (one region x variant) stops. Every limit is here and
/// in results.json ("stop_rule"); each measurement records which one ended it ("stop_reason").
struct StopRule {
  size_t min_samples = 10;       ///< never stop before this many kept samples
  double min_time_s = 0.05;      ///< ... nor before the kept samples sum to this much GPU time
  double max_noise = 0.005;      ///< converged once rel_ci <= this (0.5 % of the median)
  double timeout_s = 15.0;       ///< wall time per measurement, then stop with what there is
  size_t max_samples = 1000000;  ///< memory cap on the raw samples (8 MB), far above what a
                                 ///< 15 s timeout allows for a cold sample (>= ~10 µs each)
  /// Samples taken while the SM clock (probed right after each sample) ran below this fraction of
  /// the device's maximum SM clock are discarded and counted (0 disables the check). 0.9: an H200
  /// under back-to-back bf16 GEMMs of a Llama MLP falls from 1980 to ~1525 MHz (0.77) after ~20
  /// ms, and those samples run 15 % slower (harness/measure/TIMING.md, "Power throttling").
  double min_clock_ratio = 0.9;
  /// After a batch with a discarded sample the GPU idles this long before the next one, which
  /// holds only as many samples as that batch kept (at least 1; ranks of a multi-process run keep
  /// the batch length, as their replays may hold collectives): nvbench's throttle recovery delay,
  /// so a power-limited replay is sampled in the short bursts it runs unthrottled.
  double throttle_recovery_s = 0.05;
};

/// Why a timing loop stopped: kNone while it must go on. kFixedCount: a fixed number of samples
/// was asked for (peers timed with torch_replay.py --reps N), no rule applied.
enum class StopReason { kNone, kConverged, kTimeout, kMaxSamples, kFixedCount };

/// "converged" | "timeout" | "max_samples" | "fixed_count" | "running".
const char* stop_reason_name(StopReason r);

/// The rule applied to the kept samples so far after `wall_s` seconds: kConverged once there are
/// min_samples samples summing to min_time_s of GPU time with rel_ci <= max_noise; kTimeout once
/// wall_s >= timeout_s (whatever the samples); kMaxSamples at the cap; else kNone.
StopReason stop_reason(const std::vector<double>& samples_us, double wall_s, const StopRule& rule);

/// stop_reason(...) != kNone.
inline bool should_stop(const std::vector<double>& samples_us, double wall_s,
                        const StopRule& rule) {
  return stop_reason(samples_us, wall_s, rule) != StopReason::kNone;
}

nlohmann::json to_json(const SampleStats& s);
nlohmann::json to_json(const StopRule& r);

}  // namespace replay
