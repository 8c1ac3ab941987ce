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
  /// A row whose host enqueue time is at least this share of its GPU median (in either run) is
  /// launch-bound: the GPU interval then also times the host's launch rate, which differs
  /// between processes (H200: the same binary's eager 2x8x1600 replay measured 28.5 and 30.8 µs
  /// in two back-to-back runs). Such a row needs 3x the threshold to be SLOWER or FASTER.
  double launch_bound_share = 0.8;
  /// A change of the median by at most this many µs is SAME whatever its share: between two
  /// processes on one H100, kernels of 10-16 µs moved by up to 1.0 µs (8.9 %) with nothing
  /// changed (reports/baselines/h100/README.md), beyond what the samples of one run can show.
  double min_change_us = 1.5;
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
  /// A launch-bound row judged on its CUDA-graph samples (both runs have them): change, p and
  /// verdict are the graph's; the medians shown stay the cold ones.
  bool judged_on_graph = false;
  /// The cold samples moved beyond the threshold but the CUDA-graph samples of the same replay
  /// (both runs have them) did not move with them: UNSURE, a change of the launch path between
  /// processes, not of the kernels.
  bool graph_disagrees = false;
};

/// Rows of both runs. A row without samples in either run is "not timed". A launch-bound row
/// with CUDA-graph samples in both runs is judged on those; any other row with them is SLOWER or
/// FASTER only if its graph samples moved the same way (else UNSURE). Verdict per timed row: SAME
/// when
/// |change| <= threshold (3x the threshold for a launch-bound row judged on its cold samples) or
/// the medians differ by at most min_change_us; otherwise SLOWER or
/// FASTER when the rank test rejects equal distributions at `alpha`, else UNSURE (a change that
/// the noise does not support). Throws std::invalid_argument for a document that is not a
/// results.json of this schema.
std::vector<CompareRow> compare_runs(const nlohmann::json& old_run, const nlohmann::json& new_run,
                                     const CompareOptions& opt);

/// Markdown: a summary line and one table row per (trace, row, variant).
std::string render_compare(const std::vector<CompareRow>& rows, const CompareOptions& opt);

/// The gate: any SLOWER or any numerics regression.
bool compare_fails(const std::vector<CompareRow>& rows);

}  // namespace replay
