// Results of a run as plain data: the measuring layers fill these, the printers (results JSON,
// Markdown report) only read them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/numerics.hpp"
#include "harness/stats.hpp"

namespace replay {

/// Schema string of results.json.
inline constexpr const char* kResultsSchema = "replay-results/1";

/// Kernels CUPTI saw in one untimed replay of a region (no L2 flush in between).
struct KernelRecord {
  std::string name;  ///< demangled kernel name
  int count = 0;
  double total_us = 0;
};
struct CuptiSummary {
  std::vector<KernelRecord> kernels;
  double kernel_sum_us = 0;  ///< sum of kernel durations
  double span_us = 0;        ///< first kernel start to last kernel end (launches queued ahead)
  std::string error;         ///< set when CUPTI could not record
};

/// One variant (reference, eager, baseline, optimized) of one region or of the whole trace.
struct VariantResult {
  std::string variant;
  std::string skipped;             ///< non-empty: why it did not run (e.g. no CUDA device)
  std::vector<double> samples_us;  ///< GPU time per sample (CUDA events), µs
  SampleStats stats;
  SampleStats host_stats;                ///< host time to enqueue one replay (launch overhead), µs
  std::vector<NumericsResult> numerics;  ///< one per checked output
  std::optional<CuptiSummary> cupti;
  bool numerics_pass() const;
};

/// The whole trace (label "trace") or one fusion region (label "region <i>: <fusion>").
struct RegionResult {
  std::string label;
  std::string fusion;  ///< empty for the whole trace
  std::vector<std::string> nodes;
  double sol_bytes = 0;  ///< bytes that must move: each input read once, each output written once
  /// Median µs of a device-to-device copy of sol_bytes/2 (read + write = sol_bytes), timed like the
  /// variants (L2 flushed, events): the practical floor at this size, launch and ramp included.
  /// 0 when not measured.
  double copy_us = 0;
  std::vector<VariantResult> variants;
  /// % of speed-of-light of a median time: (sol_bytes / bandwidth) / time.
  double sol_pct(double median_us, double bandwidth_gbps) const;
  const VariantResult* find(const std::string& variant) const;
};

struct TraceResult {
  std::string name, file;
  std::string error;         ///< non-empty: the trace could not be replayed (load error, ...)
  std::string input_source;  ///< "generated (seed N)" or "golden (<file>)"
  std::vector<NumericsResult> golden_check;  ///< reference vs PyTorch's golden outputs
  std::vector<RegionResult> regions;         ///< [0] is the whole trace
  bool numerics_pass() const;
};

struct RunResult {
  nlohmann::json environment;  ///< device, driver, CUDA version, git revision, host, ...
  uint64_t seed = 0;
  double bandwidth_gbps = 0;  ///< measured device-to-device copy bandwidth (read + write)
  std::string gpu_note;       ///< e.g. "GPU replay needs a CUDA device: none found"
  std::vector<TraceResult> traces;
  bool numerics_pass() const;
};

nlohmann::json to_json(const RunResult& r);
/// Markdown report: per trace and region, time per variant, speedup vs baseline, % SOL, numerics.
std::string render_markdown(const RunResult& r);

}  // namespace replay
