// Synthetic pointwise chains for the pointwise tests (GPU cases, and the unit test that each of
// them plans as one chain, binds and compiles): bfloat16 GELU op by op with a broadcast bias,
// float32 SiLU / exp / div, a transposed dense layout, a sliced input at an offset.
#pragma once

#include <string>
#include <vector>

#include "tests/unit/test_util.hpp"
#include "workloads/loader/trace_loader.hpp"

namespace replay::test {

inline nlohmann::json pw_node(const std::string& id, const char* op, nlohmann::json args,
                              nlohmann::json out) {
  return {{"id", id},
          {"op", op},
          {"args", args},
          {"kwargs", nlohmann::json::object()},
          {"outputs", {out}}};
}

// A bfloat16 activation chain with a broadcast bias, the tanh GELU op by op in bfloat16 (GPT-2's
// gelu_new), over rows of `cols` (cols % 8 != 0 takes the single-element kernel).
inline Graph gelu_chain(int64_t rows, int64_t cols) {
  using nlohmann::json;
  json x = tensor({rows, cols}, "bfloat16");
  x["id"] = "x";
  x["stats"] = {{"mean", 0.0}, {"std", 2.0}, {"min", -8.0}, {"max", 8.0}};
  json b = tensor({cols}, "bfloat16");
  b["id"] = "bias";
  const json t = tensor({rows, cols}, "bfloat16");
  json nodes = {
      pw_node("h", "aten.add.Tensor", {ref("x"), ref("bias")}, t),
      pw_node("half", "aten.mul.Tensor", {ref("h"), 0.5}, t),
      pw_node("cube", "aten.pow.Tensor_Scalar", {ref("h"), 3.0}, t),
      pw_node("c1", "aten.mul.Tensor", {ref("cube"), 0.044715}, t),
      pw_node("s1", "aten.add.Tensor", {ref("h"), ref("c1")}, t),
      pw_node("s2", "aten.mul.Tensor", {ref("s1"), 0.7978845608028654}, t),
      pw_node("th", "aten.tanh.default", {ref("s2")}, t),
      pw_node("one", "aten.add.Tensor", {ref("th"), 1.0}, t),
      pw_node("y", "aten.mul.Tensor", {ref("half"), ref("one")}, t),
  };
  return parse_trace({{"schema", "replay-trace/1"},
                      {"name", "pointwise_gelu"},
                      {"source", {{"model", "synthetic"}, {"phase", "fwd"}}},
                      {"world_size", 1},
                      {"inputs", {x, b}},
                      {"nodes", nodes},
                      {"outputs", {"y", "th", "half"}}},
                     "pointwise_gelu");
}

inline Graph pw_synthetic(const char* name, nlohmann::json inputs, nlohmann::json nodes,
                          nlohmann::json outputs) {
  return parse_trace({{"schema", "replay-trace/1"},
                      {"name", name},
                      {"source", {{"model", "synthetic"}, {"phase", "fwd"}}},
                      {"world_size", 1},
                      {"inputs", inputs},
                      {"nodes", nodes},
                      {"outputs", outputs}},
                     name);
}

inline nlohmann::json pw_input(const char* id, std::vector<int64_t> shape, const char* dt) {
  nlohmann::json j = tensor(shape, dt);
  j["id"] = id;
  return j;
}

// float32 SiLU and a sigmoid-weighted exp over 1M elements: float32 transcendentals, where a
// 1-ulp difference is not hidden by a 16-bit rounding.
inline Graph silu_f32() {
  const auto t = tensor({1024, 1024}, "float32");
  return pw_synthetic("pointwise_silu_f32", {pw_input("x", {1024, 1024}, "float32")},
                      {pw_node("s", "aten.sigmoid.default", {ref("x")}, t),
                       pw_node("y", "aten.mul.Tensor", {ref("x"), ref("s")}, t),
                       pw_node("e", "aten.exp.default", {ref("y")}, t),
                       pw_node("z", "aten.div.Tensor", {ref("e"), ref("s")}, t)},
                      {"y", "z"});
}

// A chain in one transposed dense layout: the permuted input read in place, a bias broadcast
// along the permuted rows, the outputs written in that layout.
inline Graph transposed_chain() {
  auto tr = [](const char* dt) {
    return nlohmann::json{{"shape", {96, 64}}, {"stride", {1, 96}}, {"dtype", dt}};
  };
  return pw_synthetic("pointwise_transposed",
                      {pw_input("x", {64, 96}, "float32"), pw_input("b", {64}, "float32")},
                      {pw_node("t", "aten.permute.default", {ref("x"), {1, 0}}, tr("float32")),
                       pw_node("h", "aten.add.Tensor", {ref("t"), ref("b")}, tr("float32")),
                       pw_node("y", "aten.mul.Tensor", {ref("h"), 3.0}, tr("float32")),
                       pw_node("c", "prims.convert_element_type.default",
                               {ref("y"), {{"dtype", "bfloat16"}}}, tr("bfloat16"))},
                      {"c", "y"});
}

// A sliced input (a view at an offset, rows 128 apart, 100 wide: the single-element kernel).
inline Graph sliced_input() {
  const auto t = tensor({64, 100}, "bfloat16");
  return pw_synthetic("pointwise_sliced", {pw_input("x", {64, 128}, "bfloat16")},
                      {pw_node("s", "aten.slice.Tensor", {ref("x"), 1, 3, 103},
                               nlohmann::json{{"shape", {64, 100}},
                                              {"stride", {128, 1}},
                                              {"dtype", "bfloat16"},
                                              {"storage_offset", 3}}),
                       pw_node("m", "aten.mul.Tensor", {ref("s"), 2.0}, t),
                       pw_node("n", "aten.add.Tensor", {ref("m"), 1.0}, t)},
                      {"n"});
}

}  // namespace replay::test
