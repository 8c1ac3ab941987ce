// Synthetic linear / MLP graphs for the matmul_epilogue tests, written as Inductor's decomposition
// and aot_autograd write them (nn.Linear: view + permute(weight) + addmm/mm; GPT-2 Conv1D: addmm
// with a [in, out] weight; GELU upcast to float32 and cast back).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tests/unit/test_util.hpp"

namespace replay::test {

/// How the synthetic linear is written.
struct LinearForm {
  int64_t B = 2, T = 8, C = 64, N = 96;
  std::string dtype = "bfloat16";
  std::string weight = "linear";  ///< "linear": [N, C] behind a permute; "conv1d": [C, N] as is
  std::string bias = "addmm";     ///< "addmm", "add" (mm then aten.add of [N]), "none"
  /// "gelu_erf", "gelu_tanh", "silu", "none" (no pointwise); chains no fixed activation is:
  /// "quick_gelu" (x * sigmoid(1.702 x) in float32, CLIP's), "gelu_new_bf16" (GPT-2's gelu_new op
  /// by op in the model's dtype, every op rounding), "relu2" (squared ReLU in float32, Primer's)
  std::string act = "gelu_erf";
  bool save_pre = false;    ///< return the GEMM output (training forward)
  bool leak_inner = false;  ///< return an intermediate of the activation chain too
  int64_t bias_rows = 0;    ///< > 0: the bias is [bias_rows, N] (a wrong shape)
  bool alias_gemm = false;  ///< an aten.alias of the GEMM output between it and its view
  bool residual = false;    ///< add a [B, T, N] residual after the GEMM (act must be "none")
};

inline nlohmann::json linear_trace(const LinearForm& f) {
  using nlohmann::json;
  const std::string dt = f.dtype;
  const int64_t M = f.B * f.T;
  auto in = [&](const char* id, std::vector<int64_t> sh, double mean, double std) {
    json t = tensor(sh, dt);
    t["id"] = id;
    t["stats"] = {{"mean", mean}, {"std", std}, {"min", mean - 6 * std}, {"max", mean + 6 * std}};
    return t;
  };
  auto node = [](const std::string& id, const char* op, json args, json outs) {
    return json{
        {"id", id}, {"op", op}, {"args", args}, {"kwargs", json::object()}, {"outputs", outs}};
  };
  const std::vector<int64_t> x3{f.B, f.T, f.C}, x2{M, f.C}, y2{M, f.N}, y3{f.B, f.T, f.N};
  json inputs = {in("x", x3, 0.0, 1.0)};
  json nodes = json::array();
  nodes.push_back(node("view", "aten.view.default", {test::ref("x"), x2}, {tensor(x2, dt)}));
  std::string w = "weight";
  if (f.weight == "linear") {
    inputs.push_back(in("weight", {f.N, f.C}, 0.0, 0.125));
    json wt = tensor({f.C, f.N}, dt);
    wt["stride"] = {1, f.C};
    nodes.push_back(node("permute", "aten.permute.default", {test::ref("weight"), {1, 0}}, {wt}));
    w = "permute";
  } else {
    inputs.push_back(in("weight", {f.C, f.N}, 0.0, 0.125));
  }
  const bool has_bias = f.bias != "none";
  if (has_bias)
    inputs.push_back(
        in("bias",
           f.bias_rows > 0 ? std::vector<int64_t>{f.bias_rows, f.N} : std::vector<int64_t>{f.N},
           0.0, 0.5));
  if (f.bias == "addmm")
    nodes.push_back(node("gemm", "aten.addmm.default",
                         {test::ref("bias"), test::ref("view"), test::ref(w)}, {tensor(y2, dt)}));
  else
    nodes.push_back(
        node("gemm", "aten.mm.default", {test::ref("view"), test::ref(w)}, {tensor(y2, dt)}));
  std::string z = "gemm";
  if (f.alias_gemm) {
    nodes.push_back(
        node("gemm_alias", "aten.alias.default", {test::ref("gemm")}, {tensor(y2, dt)}));
    z = "gemm_alias";
  }
  nodes.push_back(node("view_1", "aten.view.default", {test::ref(z), y3}, {tensor(y3, dt)}));
  std::string cur = "view_1";
  if (f.bias == "add") {
    nodes.push_back(
        node("add_bias", "aten.add.Tensor", {test::ref(cur), test::ref("bias")}, {tensor(y3, dt)}));
    cur = "add_bias";
  }
  if (f.residual) {
    inputs.push_back(in("residual", y3, 0.0, 1.0));
    nodes.push_back(node("add_res", "aten.add.Tensor", {test::ref(cur), test::ref("residual")},
                         {tensor(y3, dt)}));
    cur = "add_res";
  }
  json outputs = json::array();
  auto f32 = [&](const std::string& id, const char* op, json args) {
    nodes.push_back(node(id, op, args, {tensor(y3, "float32")}));
  };
  auto narrow = [&](const std::string& id, const char* op, json args) {
    nodes.push_back(node(id, op, args, {tensor(y3, dt)}));
  };
  if (f.act == "gelu_new_bf16") {  // every op in the model's dtype, as GPT-2's code runs it
    narrow("half", "aten.mul.Tensor", {test::ref(cur), 0.5});
    narrow("cube", "aten.pow.Tensor_Scalar", {test::ref(cur), 3.0});
    narrow("c3", "aten.mul.Tensor", {test::ref("cube"), 0.044715});
    narrow("inner", "aten.add.Tensor", {test::ref(cur), test::ref("c3")});
    narrow("scaled", "aten.mul.Tensor", {test::ref("inner"), 0.7978845608028654});
    narrow("erf", "aten.tanh.default", {test::ref("scaled")});
    narrow("one_plus", "aten.add.Tensor", {test::ref("erf"), 1.0});
    narrow("y", "aten.mul.Tensor", {test::ref("half"), test::ref("one_plus")});
    outputs.push_back("y");
    if (f.leak_inner) outputs.push_back("erf");
  } else if (f.act != "none") {
    f32("up", "prims.convert_element_type.default", {test::ref(cur), {{"dtype", "float32"}}});
    if (f.act == "gelu_erf") {
      f32("half", "aten.mul.Tensor", {test::ref("up"), 0.5});
      f32("scaled", "aten.mul.Tensor", {test::ref("up"), 0.7071067811865476});
      f32("erf", "aten.erf.default", {test::ref("scaled")});
      f32("one_plus", "aten.add.Tensor", {test::ref("erf"), 1});
      f32("act", "aten.mul.Tensor", {test::ref("half"), test::ref("one_plus")});
    } else if (f.act == "gelu_tanh") {
      f32("cube", "aten.pow.Tensor_Scalar", {test::ref("up"), 3.0});
      f32("c3", "aten.mul.Tensor", {test::ref("cube"), 0.044715});
      f32("inner", "aten.add.Tensor", {test::ref("up"), test::ref("c3")});
      f32("scaled", "aten.mul.Tensor", {test::ref("inner"), 0.7978845608028654});
      f32("erf", "aten.tanh.default",
          {test::ref("scaled")});  // "erf": the inner node leak_inner returns
      f32("one_plus", "aten.add.Tensor", {test::ref("erf"), 1});
      f32("half", "aten.mul.Tensor", {test::ref("up"), 0.5});
      f32("act", "aten.mul.Tensor", {test::ref("half"), test::ref("one_plus")});
    } else if (f.act == "quick_gelu") {
      f32("scaled", "aten.mul.Tensor", {test::ref("up"), 1.702});
      f32("erf", "aten.sigmoid.default", {test::ref("scaled")});
      f32("act", "aten.mul.Tensor", {test::ref("up"), test::ref("erf")});
    } else if (f.act == "relu2") {
      f32("erf", "aten.relu.default", {test::ref("up")});
      f32("act", "aten.mul.Tensor", {test::ref("erf"), test::ref("erf")});
    } else {  // silu as x * sigmoid(x)
      f32("erf", "aten.sigmoid.default", {test::ref("up")});
      f32("act", "aten.mul.Tensor", {test::ref("up"), test::ref("erf")});
    }
    nodes.push_back(node("y", "prims.convert_element_type.default",
                         {test::ref("act"), {{"dtype", dt}}}, {tensor(y3, dt)}));
    outputs.push_back("y");
    if (f.leak_inner) outputs.push_back("erf");
  } else {
    outputs.push_back(cur);
  }
  if (f.save_pre) outputs.push_back("gemm");
  return {{"schema", "replay-trace/1"},
          {"name", "synthetic_linear_" + f.weight + "_" + f.bias + "_" + f.act},
          {"source", {{"model", "synthetic"}, {"phase", "fwd"}}},
          {"world_size", 1},
          {"inputs", inputs},
          {"nodes", nodes},
          {"outputs", outputs}};
}

/// A bundled trace with its dims renamed: every shape (inputs, node outputs) and every int-list
/// argument of a view/reshape takes `dims[d]` for each dim d listed (once, not chained), inputs
/// become contiguous and node outputs lose their recorded strides (the loader infers them); the
/// golden sidecar is dropped. For the backward graphs at shapes the CPU reference can afford beside
/// the bundled ones (their chains are Inductor's own decompositions). Each input of the trace must
/// be contiguous.
inline nlohmann::json rescaled_trace(const std::string& trace,
                                     const std::map<int64_t, int64_t>& dims) {
  using nlohmann::json;
  json t = read_json(trace_path(trace));
  auto map = [&](json& shape) {
    for (auto& d : shape) {
      auto it = dims.find(d.get<int64_t>());
      if (it != dims.end()) d = it->second;
    }
  };
  for (auto& in : t["inputs"]) {
    map(in["shape"]);
    in.erase("stride");
  }
  for (auto& n : t["nodes"]) {
    const std::string op = n["op"];
    if (op == "aten.view.default" || op == "aten.reshape.default" ||
        op == "aten._unsafe_view.default")
      map(n["args"][1]);
    for (auto& o : n["outputs"]) {
      map(o["shape"]);
      o.erase("stride");
    }
  }
  t.erase("golden");
  t["name"] = trace + "_rescaled";
  return t;
}

}  // namespace replay::test
