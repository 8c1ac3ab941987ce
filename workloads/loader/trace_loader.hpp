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

/// Load `path` and validate it: JSON well-formed, schema version, known ops and dtypes, every
/// reference defined before use, recorded output shapes equal to what the op's shape rule gives,
/// graph outputs defined. Throws TraceError naming the file, the node id and what was expected.
Graph load_trace(const std::string& path);

/// Same checks on the text of a trace (`file` names it in errors and resolves the golden sidecar).
/// The entry point of the loader's fuzz target.
Graph parse_trace_text(std::string_view text, const std::string& file);

/// Same checks on an already parsed document; `file` is used in error messages and to resolve
/// the golden sidecar path.
Graph parse_trace(const nlohmann::json& doc, const std::string& file);

}  // namespace replay
