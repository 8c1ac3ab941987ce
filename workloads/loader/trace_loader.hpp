// Load and validate a trace (traces/SCHEMA.md, schema "replay-trace/1") into a Graph.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "workloads/ir/graph.hpp"

namespace replay {

/// Schema string a trace must carry.
inline constexpr const char* kTraceSchema = "replay-trace/1";

/// Load `path` and validate it: JSON well-formed, schema version, known ops and dtypes, every
/// reference defined before use, recorded output shapes equal to what the op's shape rule gives,
/// graph outputs defined. Throws TraceError naming the file, the node id and what was expected.
Graph load_trace(const std::string& path);

/// Same checks on an already parsed document; `file` is used in error messages and to resolve
/// the golden sidecar path.
Graph parse_trace(const nlohmann::json& doc, const std::string& file);

}  // namespace replay
