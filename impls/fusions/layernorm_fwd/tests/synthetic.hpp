// Synthetic LayerNorm forward graphs for the layernorm_fwd tests (any shape, dtype, epilogue).
#pragma once

#include "tests/unit/test_util.hpp"

namespace replay::test {

/// A nanoGPT-style LayerNorm forward trace of [rows, cols] in `dtype` (weights in `dtype`,
/// math in float32, output cast back), as Inductor's decomposition writes it.
/// `epilogue`: "affine" (* weight + bias in fp32, then cast: nanoGPT), "scale" (* weight only),
/// "none" (cast only), or "mixed" (cast, * weight in `dtype`, + bias in `dtype`: no compiled
/// shape, so the kernels' generic epilogue path runs).
inline nlohmann::json layernorm_trace(int64_t rows, int64_t cols, const std::string& dtype,
                                      const std::string& epilogue = "affine") {
  using nlohmann::json;
  std::vector<int64_t> x{rows, cols}, s{rows, 1}, w{cols};
  auto in = [&](const char* id, std::vector<int64_t> sh, double mean, double std) {
    json t = tensor(sh, dtype);
    t["id"] = id;
    t["stats"] = {{"mean", mean}, {"std", std}, {"min", mean - 6 * std}, {"max", mean + 6 * std}};
    return t;
  };
  auto node = [](const char* id, const char* op, json args, json outs,
                 json kwargs = json::object()) {
    return json{{"id", id}, {"op", op}, {"args", args}, {"kwargs", kwargs}, {"outputs", outs}};
  };
  json nodes = json::array({
      node("x32", "prims.convert_element_type.default", {ref("x"), {{"dtype", "float32"}}},
           {tensor(x, "float32")}),
      node("var_mean", "aten.var_mean.correction", {ref("x32"), {1}},
           {tensor(s, "float32"), tensor(s, "float32")}, {{"correction", 0}, {"keepdim", true}}),
      node("var", "getitem", {ref("var_mean"), 0}, {tensor(s, "float32")}),
      node("mean", "getitem", {ref("var_mean"), 1}, {tensor(s, "float32")}),
      node("add", "aten.add.Tensor", {ref("var"), 1e-5}, {tensor(s, "float32")}),
      node("rstd", "aten.rsqrt.default", {ref("add")}, {tensor(s, "float32")}),
      node("sub", "aten.sub.Tensor", {ref("x32"), ref("mean")}, {tensor(x, "float32")}),
      node("norm", "aten.mul.Tensor", {ref("sub"), ref("rstd")}, {tensor(x, "float32")}),
  });
  json outputs = {"y"};
  if (epilogue == "affine" || epilogue == "scale") {
    nodes.push_back(
        node("scaled", "aten.mul.Tensor", {ref("norm"), ref("weight")}, {tensor(x, "float32")}));
    if (epilogue == "affine")
      nodes.push_back(
          node("shifted", "aten.add.Tensor", {ref("scaled"), ref("bias")}, {tensor(x, "float32")}));
    nodes.push_back(node("y", "prims.convert_element_type.default",
                         {ref(epilogue == "affine" ? "shifted" : "scaled"), {{"dtype", dtype}}},
                         {tensor(x, dtype)}));
  } else if (epilogue == "none") {
    nodes.push_back(node("y", "prims.convert_element_type.default",
                         {ref("norm"), {{"dtype", dtype}}}, {tensor(x, dtype)}));
  } else {  // mixed
    nodes.push_back(node("low", "prims.convert_element_type.default",
                         {ref("norm"), {{"dtype", dtype}}}, {tensor(x, dtype)}));
    nodes.push_back(
        node("scaled", "aten.mul.Tensor", {ref("low"), ref("weight")}, {tensor(x, dtype)}));
    nodes.push_back(node("y", "aten.add.Tensor", {ref("scaled"), ref("bias")}, {tensor(x, dtype)}));
  }
  json inputs = {in("x", x, 0.3, 2.0)};
  if (epilogue != "none") inputs.push_back(in("weight", w, 1.0, 0.1));
  if (epilogue == "affine" || epilogue == "mixed") inputs.push_back(in("bias", w, 0.0, 0.1));
  return {{"schema", "replay-trace/1"},
          {"name", "synthetic_layernorm_" + std::to_string(rows) + "x" + std::to_string(cols) +
                       "_" + dtype + "_" + epilogue},
          {"source", {{"model", "synthetic"}, {"phase", "fwd"}}},
          {"world_size", 1},
          {"inputs", inputs},
          {"nodes", nodes},
          {"outputs", outputs}};
}

}  // namespace replay::test
