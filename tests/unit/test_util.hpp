// Helpers shared by the unit and GPU tests: bundled trace paths and small synthetic traces.
#pragma once

#include <cctype>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "workloads/ir/graph.hpp"

namespace replay::test {

inline std::string trace_path(const std::string& name) {
  return std::string(REPLAY_TRACES_DIR) + "/" + name + ".json";
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
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

/// A trace of one op node "y" from an op row's example (workloads/ops/op.hpp: inputs in0, in1,
/// ... with shape, dtype, optional stride and stats; FX args and kwargs). The node's recorded
/// outputs are what the op's shape rule gives, contiguous, with the rule's dtype or else the first
/// tensor operand's.
nlohmann::json example_trace(const std::string& op_name, const nlohmann::json& example);

}  // namespace replay::test
