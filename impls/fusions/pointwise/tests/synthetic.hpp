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

// The bfloat16 ops the generated kernel computes in pairs (fma.rn.bf16x2: codegen.cpp, pair_expr)
// on bfloat16 values that reach the edge cases: products of ~1e-20 and ~1e-20 (subnormals,
// flushes to zero), x * 0 (a zero's sign), x - y and 1 - x (cancellation), x ** 2, a sum with a
// scalar, a cast that keeps the dtype; beside them the ops that stay in float32 (x * 1e-20,
// tanh) and a float32 tail rounded back.
inline Graph bf16_pairs() {
  const auto t = tensor({512, 1024}, "bfloat16");
  const auto f = tensor({512, 1024}, "float32");
  nlohmann::json x = pw_input("x", {512, 1024}, "bfloat16");
  x["stats"] = {{"mean", 0.0}, {"std", 3.0}, {"min", -60.0}, {"max", 60.0}};
  nlohmann::json y = pw_input("y", {512, 1024}, "bfloat16");
  y["stats"] = {{"mean", 0.5}, {"std", 1.0}, {"min", -4.0}, {"max", 4.0}};
  return pw_synthetic(
      "pointwise_bf16_pairs", {x, y},
      {pw_node("a", "aten.mul.Tensor", {ref("x"), 1e-20}, t),
       pw_node("b", "aten.mul.Tensor", {ref("y"), 1e-20}, t),
       pw_node("p", "aten.mul.Tensor", {ref("a"), ref("b")}, t),
       pw_node("z", "aten.mul.Tensor", {ref("x"), 0.0}, t),
       pw_node("s", "aten.add.Tensor", {ref("x"), ref("y")}, t),
       pw_node("d", "aten.sub.Tensor", {ref("s"), ref("y")}, t),
       pw_node("r", "aten.rsub.Scalar", {ref("x"), 1.0}, t),
       pw_node("q", "aten.pow.Tensor_Scalar", {ref("d"), 2.0}, t),
       pw_node("h", "aten.add.Tensor", {ref("q"), 0.5}, t),
       pw_node("th", "aten.tanh.default", {ref("r")}, t),
       pw_node("m", "aten.mul.Tensor", {ref("th"), ref("h")}, t),
       pw_node("c", "prims.convert_element_type.default", {ref("m"), {{"dtype", "bfloat16"}}}, t),
       pw_node("w", "prims.convert_element_type.default", {ref("c"), {{"dtype", "float32"}}}, f),
       pw_node("u", "aten.mul.Tensor", {ref("w"), ref("w")}, f),
       pw_node("o", "prims.convert_element_type.default", {ref("u"), {{"dtype", "bfloat16"}}}, t)},
      {"p", "z", "d", "c", "o"});
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
