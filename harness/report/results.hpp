// Results of a run as plain data: the measuring layers fill these, the printers (results JSON
// here, Markdown in markdown.hpp) only read them.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/measure/cupti_tracer.hpp"
#include "harness/measure/stats.hpp"
#include "harness/measure/timeline_overlap.hpp"
#include "harness/replay/variants.hpp"
#include "harness/report/numerics.hpp"
#include "impls/eager/gemm_choice.hpp"
#include "impls/fusions/launch_record.hpp"

namespace replay {

/// Schema string of results.json.
inline constexpr const char* kResultsSchema = "replay-results/2";

/// Hardware ceilings the run measured on its device; 0 (or absent) where not measured.
struct Ceilings {
  double copy_gbps = 0;  ///< device-to-device copy bandwidth, read + write, GB/s
  /// Dense matmul peak by matmul class (matmul_class(), workloads/ops/matmul.hpp), TFLOP/s: the
  /// median of a large square GEMM through the eager cuBLASLt path (harness/replay/ceilings.hpp).
  std::map<std::string, double> matmul_tflops;
  std::string matmul_problem;  ///< how the matmul peaks were measured (shapes, timing), or empty
  double bus_gbps = 0;         ///< interconnect bus bandwidth, GB/s
};

/// A region's speed-of-light time split into its terms, µs (0 where the ceiling is unmeasured).
struct SolTerms {
  double memory_us = 0;  ///< Cost::bytes / copy bandwidth
  double matmul_us = 0;  ///< sum over classes of Cost::matmul_flops / that class's peak
  double comm_us = 0;    ///< Cost::comm_bytes / bus bandwidth
  /// Matmul classes the region has FLOPs of but the run measured no peak for (their time is not
  /// in matmul_us).
  std::vector<std::string> unmeasured;
  double sol_us() const;
  /// The term that bounds the region: "memory", "matmul" or "comm"; "" when all are 0.
  std::string bound() const;
  /// One line for the reports, e.g. "SOL 1234.5 µs, bound by matmul (memory 80.1 µs, matmul
  /// 1234.5 µs)"; the unmeasured classes named; "" when no term was measured.
  std::string describe() const;
};

/// One variant (reference, eager, or a fusion variant) of one region or of the whole trace.
struct VariantResult {
  VariantInfo variant;
  std::string skipped;  ///< non-empty: why it did not run (e.g. no CUDA device)
  /// What the timing means where it is not one process's own measurement: a multi-process run's
  /// "max over 2 ranks of the median (slowest: rank 1)", or "ranks share one GPU: timings mean
  /// nothing (correctness only)"; empty otherwise.
  std::string timing_note;
  std::vector<double> samples_us;  ///< GPU time per sample (CUDA events), µs
  SampleStats stats;
  SampleStats host_stats;  ///< host time to enqueue one replay (launch overhead), µs
  /// Of those enqueues, how many waited for the GPU (time_host_enqueue, harness/measure/timing.hpp)
  size_t host_enqueue_waited = 0;
  /// Host enqueue of each launch step of the replay alone, in program order: what each op (or
  /// fused region) costs the CPU, to find the expensive one. Empty when not measured.
  struct HostStep {
    std::string step;      ///< GpuProgram::step_label: node id, or "region <r>: <fusion>"
    double median_us = 0;  ///< median of the enqueues that did not wait, µs (0 if all waited)
    size_t waited = 0;     ///< enqueues that waited for the GPU (left out)
  };
  std::vector<HostStep> host_steps;
  /// Hot: replays back to back with no L2 flush between them (the data stays in L2 where it
  /// fits), one event pair per replay, GPU µs; empty when not measured (--modes).
  std::vector<double> hot_samples_us;
  SampleStats hot_stats;
  /// CUDA graph: the replay captured once into a CUDA graph and launched per sample (cold, L2
  /// flushed), so no host launch gap sits between its kernels; GPU µs; empty when not measured.
  std::vector<double> graph_samples_us;
  SampleStats graph_stats;
  std::string graph_skipped;  ///< non-empty: why the CUDA-graph mode did not run (capture failed)
  /// How the timing loop ended (StopRule): why it stopped, its wall time (s), the SM clock probed
  /// after each kept sample (MHz), and the samples discarded for a clock below the floor.
  StopReason stop = StopReason::kNone;
  double timing_wall_s = 0;
  SampleStats sm_clock_mhz;
  size_t discarded_slow_clock = 0;
  double clock_floor_mhz = 0;
  std::vector<NumericsResult> numerics;  ///< one per checked output
  /// After a numerics failure: the reproducer bundle's folder (replay run --repro-dir), or why
  /// none was written; empty otherwise.
  std::string repro;
  std::optional<CuptiSummary> cupti;
  /// A multi-process run (harness/dist): every rank's CUPTI summary, index = rank (`cupti` is
  /// rank 0's); empty in a single-process run. A rank that traced nothing has an empty summary
  /// with its error set.
  std::vector<CuptiSummary> rank_cupti;
  /// Bytes per access of each operand of each launch, as the launchers chose them in one
  /// untimed replay (impls/fusions/launch_record.hpp); empty where no launcher records (eager
  /// ops, baselines) or the variant did not run.
  std::vector<LaunchWidth> vector_widths;
  /// The cuBLASLt algorithm each tuned GEMM of the row's fused steps runs, and the timings of the
  /// candidates behind the choice (impls/eager/gemm_choice.hpp); empty where none (eager GEMMs take
  /// the heuristic's first, as PyTorch eager does, and are not listed).
  std::vector<GemmChoice> gemms;
  bool timed() const { return !samples_us.empty(); }
  /// Not compared when no output was checked (a skipped variant, the reference itself).
  Verdict verdict() const;
};

/// The whole trace (label "trace") or one fusion region (label "region <i>: <fusion>").
struct RegionResult {
  std::string label;
  std::string fusion;  ///< empty for the whole trace
  int region = -1;     ///< index in the plan; -1 for the whole trace
  std::vector<std::string> nodes;
  Cost cost;  ///< speed-of-light work (the fusion's own cost model; graph I/O for the trace)
  /// Median µs of a device-to-device copy of cost.bytes/2 (read + write = cost.bytes), timed like
  /// the variants (L2 flushed, events): the practical floor at this size, launch and ramp
  /// included. 0 when not measured.
  double copy_us = 0;
  std::vector<VariantResult> variants;
  /// Speed-of-light time, µs: max over the terms whose ceiling was measured (Cost).
  double sol_us(const Ceilings& c) const;
  /// The terms of sol_us and which one bounds it.
  SolTerms sol_terms(const Ceilings& c) const;
  /// % of speed-of-light of a median time: sol_us / time.
  double sol_pct(double median_us, const Ceilings& c) const;
  /// The variant with this role (the first), or nullptr.
  const VariantResult* find(Role role) const;
  /// The region moves bytes between ranks (Cost::comm_bytes > 0): its copies count as
  /// communication in the overlap figures (timeline_overlap.hpp).
  bool communicates() const { return cost.comm_bytes > 0; }
  /// For a communicating region: each timed fusion variant other than the baseline, with its
  /// overlap figures against the baseline's CUPTI timeline (region_overlap); empty when the
  /// baseline has no traced timeline with both communication and computation.
  std::vector<std::pair<const VariantResult*, RegionOverlap>> overlaps() const;
};

struct TraceResult {
  /// Why a trace could not be replayed to the end: bad input (exit code 2) or a runtime failure
  /// (CUDA, CUPTI, out of memory: exit code 4).
  enum class Error : uint8_t { kNone, kBadInput, kRuntime };
  std::string name, file;
  Error error_kind = Error::kNone;
  std::string error;         ///< what went wrong, naming the file and node where it can
  std::string input_source;  ///< "generated (seed N)" or "golden (<file>)"
  /// Non-empty: the trace validated and was planned, but was not replayed on this machine (its
  /// reference is over the time budget or the host memory), and why. Not an error: every row
  /// says the same.
  std::string not_replayed;
  double reference_s = 0;  ///< wall time of input generation + the float64 reference, seconds
  /// What --reference-budget judged: the reference's estimated seconds on this machine (0: not
  /// estimated), from ReferenceFootprint (harness/replay/runner.hpp).
  double reference_estimate_s = 0;
  std::vector<NumericsResult> golden_check;  ///< reference vs PyTorch's golden outputs
  /// Golden outputs that were not compared, and why: "<value>: depends on cut node(s) 'X', whose
  /// outputs were drawn from their stats".
  std::vector<std::string> golden_not_compared;
  /// Nodes the loader cut out of the graph (ops the harness cannot run; workloads/ir/graph.hpp,
  /// traces/SCHEMA.md "Cut nodes"): the rest of the graph replayed, their outputs drawn from
  /// recorded stats. Every report names them; the verdict covers the rest of the graph only.
  std::vector<CutNode> cut_nodes;
  /// Graph inputs and outputs of a dtype the harness lacks (Graph::lacked), not replayed:
  /// "input 'freqs_cis': complex64 [8, 8]", "output 'view_1': complex64 [1, 8, 1, 8]".
  std::vector<std::string> lacked;
  /// Matches the plan did not take: "<fusion> on [node ids]: <reason>".
  std::vector<std::string> dropped_matches;
  /// Candidates a fusion's matcher rejected, and why: "<fusion> at node '<id>': <reason>".
  std::vector<std::string> declined;
  std::vector<RegionResult> regions;  ///< [0] is the whole trace
  Verdict verdict() const;            ///< golden check and every variant of every row
  /// Comparisons made (golden check, each checked variant row) and variant rows not compared.
  std::pair<int, int> compared_and_not() const;
};

struct RunResult {
  nlohmann::json environment;  ///< device, driver, CUDA version, git revision, host, ...
  /// What a later reader needs to judge the numbers: timestamps (UTC, start and end), host,
  /// command line, stopping rule, L2 flush bytes, GPU clocks/power/temperature at start and end.
  nlohmann::json run_info = nlohmann::json::object();
  uint64_t seed = 0;
  Ceilings ceilings;
  std::string gpu_note;  ///< e.g. "GPU replay needs a CUDA device: none found"
  std::vector<TraceResult> traces;
  Verdict verdict() const;
};

nlohmann::json to_json(const RunResult& r);

/// A cut node as results.json and `replay plan` write it: {"node", "op", "reason", "outputs":
/// [{"value", "index", "stats": {mean, std, min, max}, "stats_source": "recorded" | "synthetic" |
/// "golden" (the value was PyTorch's, from the golden file)}]}.
nlohmann::json to_json(const CutNode& c);

}  // namespace replay
