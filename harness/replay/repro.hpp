// Reproducer bundles: one region of a trace (or the whole graph) cut out as a trace of its own,
// with its inputs and expected outputs as golden tensors, the commands, the tolerances and a
// standalone PyTorch script: what a bug report needs, replayable without the original trace.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "workloads/ir/graph.hpp"
#include "workloads/ir/host_tensor.hpp"
#include "workloads/ir/tolerance.hpp"
#include "workloads/plan/plan.hpp"

namespace replay {

/// What a bundle is cut from and why.
struct ReproRequest {
  std::string trace_path;  ///< the original trace file
  int region = -1;         ///< plan region index; -1: the whole graph
  std::string variant;     ///< the variant that failed (empty: none named)
  uint64_t seed = 0;       ///< the seed of the original run's generated inputs
  std::string out_dir;     ///< the bundle's folder (created)
  std::string why;         ///< e.g. the numerics failure that triggered it
  /// A bundle whose golden tensors would exceed this is not written (ReproError says so), bytes.
  double max_bytes = 512.0 * 1024 * 1024;
};

/// A bundle that cannot be made (unknown region, too large, unwritable folder); the message says
/// which and why.
struct ReproError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The values and nodes of a cut: node ids, the values it reads from outside (its inputs, value
/// indices) and those it returns (the region's outputs; the graph's for the whole graph).
struct Cut {
  std::set<std::string> node_ids;
  std::vector<int> inputs, outputs;
};

/// The cut of `region` (-1: every node, the graph's inputs and outputs). Throws ReproError for a
/// region index the plan does not have.
Cut region_cut(const Graph& g, const Plan& plan, int region);

/// The sub-trace of `cut` as a replay-trace/1 document: `doc` (the original trace JSON) with only
/// the cut's nodes (and the getitem nodes that read them), the cut's inputs as graph inputs (shape,
/// stride and dtype of the value; roles and links dropped), its outputs as graph outputs, named
/// `name`, `source` extended with "cut_from" (trace, file, region, fusion, node ids), and "golden"
/// naming `golden_file` with `golden_tensors`. Node ids and value names stay the original's.
nlohmann::json cut_trace(const nlohmann::json& doc, const Graph& g, const Cut& cut,
                         const std::string& name, const std::string& cut_from_file, int region,
                         const std::string& fusion, const std::string& golden_file,
                         const std::vector<std::string>& golden_tensors);

/// Write the bundle of `req` from a replay already prepared: `doc` and `g` the original trace,
/// `plan` its plan, `ref` every value of its float64 reference on the run's inputs, `bounds` the
/// numerics bounds of every value (output_bounds). Files: <name>.json (cut_trace),
/// <name>.safetensors (inputs: `ref` rounded to each dtype; expected outputs: the reference of the
/// sub-trace on those inputs), repro.json (seed, commands, bounds, why), README.md, repro.py (a
/// standalone PyTorch script, with torch_replay.py, tracelib.py and peer_results.py beside it).
/// Returns the path of the bundle's trace. Throws ReproError.
std::string write_repro(const ReproRequest& req, const nlohmann::json& doc, const Graph& g,
                        const Plan& plan, const std::map<int, HostTensor>& ref,
                        const std::map<int, NumericsBounds>& bounds);

/// `replay repro`: load the trace, plan it, make its inputs from req.seed (saved inputs from their
/// forward, as `replay run` does), run the reference, and write_repro. Throws TraceError for a bad
/// trace, ReproError for a bad request.
std::string make_repro(const ReproRequest& req);

}  // namespace replay
