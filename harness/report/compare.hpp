// Compare two runs (results.json A = old, B = new): per trace, row and variant a verdict from the
// raw timing samples, and any numerics verdict that got worse. The CI gate of `replay compare`.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace replay {

/// Two-sided Mann-Whitney U test of samples `a` against `b` (normal approximation with the tie
/// correction and a continuity correction; Mann & Whitney 1947). Returns the p-value in [0, 1];
/// 1 when either side is empty. Adequate from about 8 samples per side; the harness takes >= 10.
double mann_whitney_p(const std::vector<double>& a, const std::vector<double>& b);

enum class Change : uint8_t { kSame, kFaster, kSlower, kUnsure, kNotTimed, kOnlyOld, kOnlyNew };
std::string_view change_name(Change c);  ///< "SAME", "FASTER", "SLOWER", "UNSURE", ...

struct CompareOptions {
  double threshold = 0.05;  ///< relative change of the median below which a row is SAME
  double alpha = 0.01;      ///< significance level of the rank test
  /// A row whose host enqueue time is at least this share of its GPU median in both runs is
  /// launch-bound: the GPU interval then also times the host's launch rate, which differs
  /// between processes (H200: the same binary's eager 2x8x1600 replay measured 28.5 and 30.8 µs
  /// in two back-to-back runs). Such a row is judged on its CUDA-graph samples where both runs
  /// have them, else it needs 3x the threshold to be SLOWER or FASTER.
  double launch_bound_share = 0.8;
  /// A launch-bound row whose host enqueue median grew by more than this share (and by more than
  /// min_change_us) is not judged on its CUDA graph: the launch path itself got slower, which the
  /// graph hides. Between unchanged H100 processes host enqueue moved by up to 60 %
  /// (reports/current/h100/compare_vs_baseline.md), so only a doubling counts; a host
  /// regression below that on a launch-bound row passes. Rows without a host time in either run
  /// (0: not measured) are neither launch-bound nor host-regressed.
  double host_change_limit = 1.0;
  /// A change of the median by at most this many µs is SAME when it is also at most
  /// min_change_max_share of the old median: between two processes on one H100, kernels of
  /// 10-16 µs moved by up to 1.0 µs (8.9 %) with nothing changed
  /// (reports/baselines/h100/README.md), beyond what the samples of one run can show. The share
  /// cap keeps a 3 µs row going to 4.5 µs (+50 %) from hiding under the floor.
  double min_change_us = 1.5;
  double min_change_max_share = 0.25;
  /// Rows of the old run missing from the new one, or timed before and untimed now, fail the
  /// gate unless this is set (a gate must not pass because a trace stopped running).
  bool allow_missing = false;
  /// Runs measured on different GPUs (environment.device) are an error unless this is set.
  bool allow_device_mismatch = false;
};

/// One (trace, row, variant) in either run.
struct CompareRow {
  std::string trace, row, variant;
  double old_median_us = 0, new_median_us = 0;
  double change = 0;  ///< (new - old) / old median
  double p = 1;       ///< Mann-Whitney p-value of the raw samples
  Change verdict = Change::kSame;
  std::string old_numerics, new_numerics;  ///< "PASS", "FAIL", "not compared", or ""
  bool numerics_regressed = false;         ///< FAIL now, where it was not FAIL before
  bool launch_bound = false;               ///< see CompareOptions::launch_bound_share
  /// A launch-bound row judged on its CUDA-graph samples (both runs have them): medians, change,
  /// p and verdict are the graph's.
  bool judged_on_graph = false;
  /// Host enqueue median grew beyond CompareOptions::host_change_limit: judged on cold samples.
  bool host_regressed = false;
  double old_host_us = 0, new_host_us = 0;  ///< host enqueue medians, µs (0: not measured)
  /// Timed in the old run, not timed in the new one (verdict kNotTimed).
  bool timing_lost = false;
  /// The cold samples moved beyond the threshold but the CUDA-graph samples of the same replay
  /// (both runs have them) did not move with them: UNSURE, a change of the launch path between
  /// processes, not of the kernels.
  bool graph_disagrees = false;
};

/// Rows of both runs, keyed by (trace name, row label, variant). A row without samples in either
/// run is "not timed". A launch-bound row (both runs) with CUDA-graph samples in both runs is
/// judged on those unless its host enqueue regressed; any other row with them is SLOWER or FASTER
/// only if its graph samples moved the same way (else UNSURE). Verdict per timed row: SAME when
/// |change| <= threshold (3x the threshold for a launch-bound row judged on its cold samples) or
/// the medians differ by at most min_change_us and min_change_max_share; otherwise SLOWER or
/// FASTER when the rank test rejects equal distributions at `alpha`, else UNSURE (a change that
/// the noise does not support). Throws std::invalid_argument for a document that is not a
/// results.json of this schema, a run that names one trace twice (different files of one name),
/// or runs of different GPUs (unless allow_device_mismatch).
std::vector<CompareRow> compare_runs(const nlohmann::json& old_run, const nlohmann::json& new_run,
                                     const CompareOptions& opt);

/// Markdown: a summary line and one table row per (trace, row, variant).
std::string render_compare(const std::vector<CompareRow>& rows, const CompareOptions& opt);

/// The gate: any SLOWER, any numerics regression, and (unless opt.allow_missing) any row of the
/// old run missing from the new one or no longer timed.
bool compare_fails(const std::vector<CompareRow>& rows, const CompareOptions& opt = {});

}  // namespace replay
