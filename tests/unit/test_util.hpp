// Helpers shared by the unit and GPU tests: bundled trace paths and small synthetic traces.
#pragma once

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "workloads/ir/graph.hpp"
#include "workloads/plan/plan.hpp"

namespace replay::test {

inline std::string trace_path(const std::string& name) {
  return std::string(REPLAY_TRACES_DIR) + "/" + name + ".json";
}

/// The bundled traces the shared GPU tests replay, as names for trace_path(): every trace in
/// traces/, and of the captures in traces/byog/ (graphs captured through the torch.compile
/// backend from transformers code) the small ones: the norms with PyTorch's golden tensors, the
/// linear layers, MLPs and rotary embeddings at their small shape (traces/byog/{linear,rope}/
/// *_2x8x*, both partitioners; the min-cut ones carry golden tensors), the float8 linears and
/// amax graphs at their small shapes (traces/byog/float8/, every name without an 8192 dim), and
/// the decoder layers (traces/byog/decoder/, cut around attention).
inline std::vector<std::string> bundled_trace_names() {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  const fs::path root(REPLAY_TRACES_DIR);
  for (const char* sub : {"", "byog", "byog/decoder", "byog/float8", "byog/linear", "byog/rope"}) {
    if (!fs::is_directory(root / sub)) continue;
    for (const auto& e : fs::directory_iterator(root / sub)) {
      if (e.path().extension() != ".json") continue;
      fs::path st = e.path();
      st.replace_extension(".safetensors");
      if (std::string(sub) == "byog" && !fs::exists(st)) continue;
      const bool small_shape_only =
          std::string(sub) == "byog/linear" || std::string(sub) == "byog/rope";
      if (small_shape_only && e.path().stem().string().find("_2x8x") == std::string::npos) continue;
      if (std::string(sub) == "byog/float8" &&
          e.path().stem().string().find("8192") != std::string::npos)
        continue;
      out.push_back((fs::path(sub) / e.path().stem()).generic_string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// The reasons the plan declined candidates at node `id`, joined by "; " (empty: none).
inline std::string declined_at(const Graph& g, const Plan& p, const std::string& id) {
  std::string s;
  for (const auto& d : p.declined)
    if (g.nodes[d.node].id == id) s += d.reason + "; ";
  return s;
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

/// The ids of region `r`'s nodes, in its order.
inline std::vector<std::string> region_node_ids(const Graph& g, const Region& r) {
  std::vector<std::string> ids;
  for (int n : r.nodes) ids.push_back(g.nodes[n].id);
  return ids;
}

/// The one region of `fusion` in `p`; nullptr when there is none or more than one.
inline const Region* only_region(const Plan& p, std::string_view fusion) {
  const Region* found = nullptr;
  for (const Region& r : p.regions)
    if (r.fusion->name == fusion) {
      if (found) return nullptr;
      found = &r;
    }
  return found;
}

/// The first reason `fusion` gave for declining a candidate in `p`, or "".
inline std::string declined_by(const Plan& p, std::string_view fusion) {
  for (const DeclinedMatch& d : p.declined)
    if (d.fusion == fusion) return d.reason;
  return "";
}

/// Node `id` of a trace document (to edit it in a test); throws std::runtime_error when absent.
inline nlohmann::json& trace_node(nlohmann::json& doc, const std::string& id) {
  for (nlohmann::json& n : doc["nodes"])
    if (n["id"] == id) return n;
  throw std::runtime_error("no node " + id);
}

/// Writes `text` to a fresh file under the test temp dir; returns its path.
inline std::string write_temp(const std::string& name, const std::string& text) {
  auto dir = std::filesystem::temp_directory_path() / "replay_tests";
  std::filesystem::create_directories(dir);
  auto p = dir / name;
  std::ofstream(p) << text;
  return p.string();
}

inline nlohmann::json tensor(std::vector<int64_t> shape, const std::string& dtype) {
  return {{"shape", shape}, {"stride", contiguous_strides(shape)}, {"dtype", dtype}};
}

/// `s` with every character that may not appear in a gtest parameter name replaced by '_'.
inline std::string test_name(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

inline nlohmann::json ref(const std::string& v) {
  return {{"ref", v}};
}

/// One example input of example_trace: shape, dtype, optional strides and value statistics.
inline nlohmann::json example_input(std::vector<int64_t> shape, const std::string& dtype,
                                    std::vector<int64_t> stride = {},
                                    nlohmann::json stats = nullptr) {
  nlohmann::json j = {{"shape", shape}, {"dtype", dtype}};
  if (!stride.empty()) j["stride"] = stride;
  if (!stats.is_null()) j["stats"] = stats;
  return j;
}

/// [{"ref": "in0"}, ..., {"ref": "in<n-1>"}]: the example inputs as operands.
inline nlohmann::json input_refs(int n) {
  nlohmann::json a = nlohmann::json::array();
  for (int i = 0; i < n; ++i) a.push_back(test::ref("in" + std::to_string(i)));
  return a;
}

/// A trace of one op node "y" from an op row's example (workloads/ops/op.hpp: inputs in0, in1,
/// ... with shape, dtype, optional stride and stats; FX args and kwargs). The node's recorded
/// outputs are what the op's shape rule gives, contiguous, with the rule's dtype or else the first
/// tensor operand's.
nlohmann::json example_trace(const std::string& op_name, const nlohmann::json& example);

}  // namespace replay::test
