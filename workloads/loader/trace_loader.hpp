// Load and validate a trace (traces/SCHEMA.md, schema "replay-trace/1") into a Graph.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "workloads/ir/graph.hpp"

namespace replay {

/// Schema string a trace must carry.
inline constexpr const char* kTraceSchema = "replay-trace/1";

/// Deepest nesting of arrays and objects a trace file may have (a trace needs about 6).
inline constexpr int kMaxJsonDepth = 64;

/// How the loader treats a node whose op the harness does not know.
struct LoadOptions {
  /// false: the trace is bad input ("unknown op ..."). true: the node is cut out of the graph
  /// (Graph::cut): each of its outputs the graph reads becomes a graph input (Value::cut) with
  /// the output's recorded metadata, drawn from the output's recorded `stats` (absent: floats
  /// mean 0, std 1; integers and bool all 0, marked synthetic), so the rest of the graph
  /// replays. Values of a dtype PyTorch has and the harness lacks (complex64, uint8, uint64: a
  /// graph input, a recorded output) are kept out of the graph (Graph::lacked) and every node
  /// reading one is cut too (CutNode::lacked_outputs). Still bad input: an output the graph reads
  /// that the trace records no tensor metadata for (a non-tensor result), and a cut that leaves
  /// no graph output computed by a node the harness runs. traces/SCHEMA.md, "Cut nodes". `replay
  /// run`, `plan`, `repro` and `list` cut; `replay validate` cuts to check the rest of the graph
  /// but reports the cut as invalid unless --allow-cut.
  bool cut_unsupported = false;
};

/// Load `path` and validate it: JSON well-formed, schema version, known ops and dtypes, every
/// reference defined before use, recorded output shapes equal to what the op's shape rule gives,
/// graph outputs defined. Throws TraceError naming the file, the node id and what was expected.
Graph load_trace(const std::string& path, const LoadOptions& opt = {});

/// Same checks on the text of a trace (`file` names it in errors and resolves the golden sidecar).
/// The entry point of the loader's fuzz target.
Graph parse_trace_text(std::string_view text, const std::string& file, const LoadOptions& opt = {});

/// Same checks on an already parsed document; `file` is used in error messages and to resolve
/// the golden sidecar path.
Graph parse_trace(const nlohmann::json& doc, const std::string& file, const LoadOptions& opt = {});

/// The options `replay run`, `plan`, `repro` and `list` load with: unsupported ops are cut.
inline LoadOptions cut_options() {
  LoadOptions o;
  o.cut_unsupported = true;
  return o;
}

}  // namespace replay
