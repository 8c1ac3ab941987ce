// Synthetic LayerNorm forward graphs for the layernorm_fwd tests (any shape, dtype, epilogue).
#pragma once

#include "tests/unit/test_util.hpp"

namespace replay::test {

/// A nanoGPT-style LayerNorm forward trace of [rows, cols] in `dtype` (weights in `dtype`,
/// math in float32, output cast back), as Inductor's decomposition writes it.
/// `epilogue`: "affine" (* weight + bias in fp32, then cast: nanoGPT), "scale" (* weight only),
/// "none" (cast only), or "mixed" (cast, * weight in `dtype`, + bias in `dtype`: no compiled
/// shape, so the kernels' generic epilogue path runs).
/// `saved`: what a training forward also returns for the backward: "" (nothing: inference),
/// "stats" (mean and rstd, as nanoGPT's training forward), "stats_x32" (and the upcast x),
/// "stats_views" (an alias of mean and a [rows] view of rstd instead of the values themselves).
inline nlohmann::json layernorm_trace(int64_t rows, int64_t cols, const std::string& dtype,
                                      const std::string& epilogue = "affine",
                                      const std::string& saved = "") {
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
  if (saved == "stats" || saved == "stats_x32") outputs.insert(outputs.end(), {"mean", "rstd"});
  if (saved == "stats_x32") outputs.push_back("x32");
  if (saved == "stats_views") {
    nodes.push_back(node("mean_out", "aten.alias.default", {ref("mean")}, {tensor(s, "float32")}));
    nodes.push_back(
        node("rstd_flat", "aten.view.default", {ref("rstd"), {rows}}, {tensor({rows}, "float32")}));
    outputs.insert(outputs.end(), {"mean_out", "rstd_flat"});
  }
  json inputs = {in("x", x, 0.3, 2.0)};
  if (epilogue != "none") inputs.push_back(in("weight", w, 1.0, 0.1));
  if (epilogue == "affine" || epilogue == "mixed") inputs.push_back(in("bias", w, 0.0, 0.1));
  return {{"schema", "replay-trace/1"},
          {"name", "synthetic_layernorm_" + std::to_string(rows) + "x" + std::to_string(cols) +
                       "_" + dtype + "_" + epilogue + (saved.empty() ? "" : "_" + saved)},
          {"source", {{"model", "synthetic"}, {"phase", "fwd"}}},
          {"world_size", 1},
          {"inputs", inputs},
          {"nodes", nodes},
          {"outputs", outputs}};
}

/// RMSNorm training forwards of [rows, cols] in `dtype`, as model code writes them (each returns
/// rstd for the backward, as the captured training forwards do), `form`:
/// - "meta": Meta Llama, `(x32 * rstd).to(dtype) * weight` (weight second, after the down-cast);
/// - "hf": Hugging Face LlamaRMSNorm, `weight * (x32 * rstd).to(dtype)` (weight first);
/// - "litgpt": `(x32 * rstd * weight.float()).to(dtype)`, the mean of squares as x32 * x32;
/// - "unit_offset": litgpt add_unit_offset, `weight + 1` in `dtype`, then upcast;
/// - "unit_offset_f32": Gemma, `weight.float() + 1` in float32;
/// - "eps_tensor": the litgpt form with eps a 0-dim float32 graph input `eps`;
/// - "x32": the meta form that also returns the upcast x (a partition that saves it).
inline nlohmann::json rmsnorm_trace(int64_t rows, int64_t cols, const std::string& dtype,
                                    const std::string& form) {
  using nlohmann::json;
  std::vector<int64_t> x{rows, cols}, s{rows, 1}, w{cols};
  auto in = [&](const char* id, std::vector<int64_t> sh, const std::string& dt, double mean,
                double std) {
    json t = tensor(sh, dt);
    t["id"] = id;
    t["stats"] = {{"mean", mean}, {"std", std}, {"min", mean - 6 * std}, {"max", mean + 6 * std}};
    return t;
  };
  auto node = [](const char* id, const char* op, json args, json outs) {
    return json{
        {"id", id}, {"op", op}, {"args", args}, {"kwargs", json::object()}, {"outputs", outs}};
  };
  const json f32 = {{"dtype", "float32"}}, low = {{"dtype", dtype}};
  const bool eps_tensor = form == "eps_tensor";
  json nodes = json::array({
      node("x32", "prims.convert_element_type.default", {ref("x"), f32}, {tensor(x, "float32")}),
      form == "litgpt" || eps_tensor
          ? node("sq", "aten.mul.Tensor", {ref("x32"), ref("x32")}, {tensor(x, "float32")})
          : node("sq", "aten.pow.Tensor_Scalar", {ref("x32"), 2}, {tensor(x, "float32")}),
      node("ms", "aten.mean.dim", {ref("sq"), {-1}, true}, {tensor(s, "float32")}),
      node("add", "aten.add.Tensor", {ref("ms"), eps_tensor ? ref("eps") : json(1e-5)},
           {tensor(s, "float32")}),
      node("rstd", "aten.rsqrt.default", {ref("add")}, {tensor(s, "float32")}),
      node("norm", "aten.mul.Tensor", {ref("x32"), ref("rstd")}, {tensor(x, "float32")}),
  });
  if (form == "meta" || form == "x32" || form == "hf") {
    nodes.push_back(
        node("low", "prims.convert_element_type.default", {ref("norm"), low}, {tensor(x, dtype)}));
    nodes.push_back(
        node("y", "aten.mul.Tensor",
             form == "hf" ? json{ref("weight"), ref("low")} : json{ref("low"), ref("weight")},
             {tensor(x, dtype)}));
  } else {  // litgpt forms: the weight in float32, then the down-cast
    if (form == "unit_offset") {
      nodes.push_back(node("w1", "aten.add.Tensor", {ref("weight"), 1}, {tensor(w, dtype)}));
      nodes.push_back(node("w32", "prims.convert_element_type.default", {ref("w1"), f32},
                           {tensor(w, "float32")}));
    } else if (form == "unit_offset_f32") {
      nodes.push_back(node("w0", "prims.convert_element_type.default", {ref("weight"), f32},
                           {tensor(w, "float32")}));
      nodes.push_back(node("w32", "aten.add.Tensor", {ref("w0"), 1}, {tensor(w, "float32")}));
    } else {
      nodes.push_back(node("w32", "prims.convert_element_type.default", {ref("weight"), f32},
                           {tensor(w, "float32")}));
    }
    nodes.push_back(
        node("scaled", "aten.mul.Tensor", {ref("norm"), ref("w32")}, {tensor(x, "float32")}));
    nodes.push_back(
        node("y", "prims.convert_element_type.default", {ref("scaled"), low}, {tensor(x, dtype)}));
  }
  json outputs = {"y", "rstd"};
  if (form == "x32") outputs.push_back("x32");
  const bool offset = form == "unit_offset" || form == "unit_offset_f32";
  json inputs = {in("x", x, dtype, 0.3, 2.0), in("weight", w, dtype, offset ? 0.0 : 1.0, 0.1)};
  if (eps_tensor) inputs.push_back(in("eps", {}, "float32", 1e-5, 0));
  return {{"schema", "replay-trace/1"},
          {"name", "synthetic_rmsnorm_" + std::to_string(rows) + "x" + std::to_string(cols) + "_" +
                       dtype + "_" + form},
          {"source", {{"model", "synthetic"}, {"phase", "fwd"}}},
          {"world_size", 1},
          {"inputs", inputs},
          {"nodes", nodes},
          {"outputs", outputs}};
}

/// `t` (a trace of layernorm_trace or rmsnorm_trace) with a residual add prologue, as the
/// pre-norm blocks of Llama and GPT-2 write it: the norm reads `h = x + residual` (the node "h",
/// aten.add.Tensor in x's dtype) instead of x, and the graph returns h (the residual stream) after
/// its outputs unless `return_h` is false. `residual_dtype` / `residual_shape` (default: x's) make
/// the adds the matcher must decline (mixed dtypes, a broadcast [C] operand).
inline nlohmann::json with_residual(nlohmann::json t, bool return_h = true,
                                    const std::string& residual_dtype = "",
                                    std::vector<int64_t> residual_shape = {}) {
  using nlohmann::json;
  json x;
  for (const auto& in : t["inputs"])
    if (in["id"] == "x") x = in;
  const std::vector<int64_t> shape = x["shape"];
  const std::string dtype = x["dtype"];
  json r = tensor(residual_shape.empty() ? shape : residual_shape,
                  residual_dtype.empty() ? dtype : residual_dtype);
  r["id"] = "residual";
  r["stats"] = {{"mean", 0.0}, {"std", 1.0}, {"min", -6.0}, {"max", 6.0}};
  t["inputs"].push_back(r);
  // Every reader of x now reads h.
  for (auto& n : t["nodes"])
    for (auto& a : n["args"])
      if (a.is_object() && a.contains("ref") && a["ref"] == "x") a = ref("h");
  const std::string sum_dtype =
      residual_dtype.empty() || residual_dtype == dtype ? dtype : std::string("float32");
  t["nodes"].insert(t["nodes"].begin(), json{{"id", "h"},
                                             {"op", "aten.add.Tensor"},
                                             {"args", {ref("x"), ref("residual")}},
                                             {"kwargs", json::object()},
                                             {"outputs", {tensor(shape, sum_dtype)}}});
  if (return_h) t["outputs"].push_back("h");
  t["name"] = std::string(t["name"]) + "_residual";
  return t;
}

}  // namespace replay::test
