// Synthetic float8 linears for the scaled_mm tests, written as torchao's Float8Linear forward is
// captured (traces/capture/models.py): x [B, T, K] float8 viewed to [M, K], the [N, K] weight
// behind a permute (column-major mat2), _scaled_mm with reciprocal scales (s_b [N, 1] behind a
// permute to [1, N] when rowwise), the result viewed back to [B, T, N]. The quantization itself
// is left out: the float8 tensors and the scales are inputs.
#pragma once

#include <string>

#include "tests/unit/test_util.hpp"

namespace replay::test {

/// How the synthetic float8 linear is written.
struct Float8Form {
  int64_t B = 2, T = 8, K = 64, N = 32;
  bool rowwise = true;
  std::string a_dtype = "float8_e4m3fn", b_dtype = "float8_e4m3fn";
  std::string out_dtype = "bfloat16";
  std::string bias;  ///< "" (none), or the bias dtype
  bool fast_accum = false;
  std::string weight = "permute";  ///< "permute": [N, K] behind a permute; "rowmajor": [K, N]
  std::string self = "view";       ///< "view": view(x [B, T, K]); "permute": a column-major self
  bool out_view = true;            ///< view the result back to [B, T, N]
  bool save_recip = false;         ///< return the scales' reciprocals too (a forward saves them)
  /// rowwise with a one-element weight scale broadcast after its reciprocal, as torchao's
  /// rowwise_with_gw_hp grad_input: reciprocal(s_w).reshape(1, 1).expand(1, N).contiguous().
  bool broadcast_w = false;
};

inline nlohmann::json float8_linear_trace(const Float8Form& f) {
  using nlohmann::json;
  const int64_t M = f.B * f.T;
  auto in = [&](const char* id, std::vector<int64_t> sh, const std::string& dt, double mean,
                double std, double lo, double hi) {
    json t = tensor(sh, dt);
    t["id"] = id;
    t["stats"] = {{"mean", mean}, {"std", std}, {"min", lo}, {"max", hi}};
    return t;
  };
  auto node = [](const std::string& id, const char* op, json args, json outs) {
    return json{
        {"id", id}, {"op", op}, {"args", args}, {"kwargs", json::object()}, {"outputs", outs}};
  };
  auto strided = [](std::vector<int64_t> shape, std::vector<int64_t> stride,
                    const std::string& dt) {
    json t = tensor(shape, dt);
    t["stride"] = stride;
    return t;
  };
  json inputs = json::array(), nodes = json::array();
  std::string a = "x";
  if (f.self == "view") {
    inputs.push_back(in("x", {f.B, f.T, f.K}, f.a_dtype, 0, 1, -6, 6));
    nodes.push_back(node("view", "aten.view.default", {test::ref("x"), {M, f.K}},
                         {tensor({M, f.K}, f.a_dtype)}));
    a = "view";
  } else {  // x stored [K, M], read through a permute: a column-major self
    inputs.push_back(in("x", {f.K, M}, f.a_dtype, 0, 1, -6, 6));
    nodes.push_back(node("view", "aten.permute.default", {test::ref("x"), {1, 0}},
                         {strided({M, f.K}, {1, M}, f.a_dtype)}));
    a = "view";
  }
  std::string b = "weight";
  if (f.weight == "permute") {
    inputs.push_back(in("weight", {f.N, f.K}, f.b_dtype, 0, 1, -6, 6));
    nodes.push_back(node("permute", "aten.permute.default", {test::ref("weight"), {1, 0}},
                         {strided({f.K, f.N}, {1, f.K}, f.b_dtype)}));
    b = "permute";
  } else {
    inputs.push_back(in("weight", {f.K, f.N}, f.b_dtype, 0, 1, -6, 6));
  }
  const std::vector<int64_t> sa_shape =
      f.rowwise ? std::vector<int64_t>{M, 1} : std::vector<int64_t>{};
  const std::vector<int64_t> sb_shape =
      f.rowwise && !f.broadcast_w ? std::vector<int64_t>{f.N, 1} : std::vector<int64_t>{};
  // Scales in [1.1, 2.5]: never 1, so a mutant reading s for 1 / s is off by 21 % or more.
  inputs.push_back(in("scale_x", sa_shape, "float32", 1.5, 0.25, 1.1, 2.5));
  inputs.push_back(in("scale_w", sb_shape, "float32", 1.5, 0.25, 1.1, 2.5));
  nodes.push_back(node("reciprocal", "aten.reciprocal.default", json::array({test::ref("scale_x")}),
                       {tensor(sa_shape, "float32")}));
  std::string sb = "scale_w";
  if (f.rowwise && !f.broadcast_w) {
    nodes.push_back(node("permute_1", "aten.permute.default", {test::ref("scale_w"), {1, 0}},
                         {strided({1, f.N}, {1, 1}, "float32")}));
    sb = "permute_1";
  }
  nodes.push_back(node(
      "reciprocal_1", "aten.reciprocal.default", json::array({test::ref(sb)}),
      {tensor(f.rowwise && !f.broadcast_w ? std::vector<int64_t>{1, f.N} : sb_shape, "float32")}));
  std::string rb = "reciprocal_1";
  if (f.broadcast_w) {
    nodes.push_back(node("view_s", "aten.view.default", {test::ref("reciprocal_1"), {1, 1}},
                         {tensor({1, 1}, "float32")}));
    nodes.push_back(node("expand", "aten.expand.default", {test::ref("view_s"), {1, f.N}},
                         {strided({1, f.N}, {1, 0}, "float32")}));
    json clone = node("clone", "aten.clone.default", json::array({test::ref("expand")}),
                      {tensor({1, f.N}, "float32")});
    clone["kwargs"] = {{"memory_format", {{"enum", "torch.contiguous_format"}}}};
    nodes.push_back(clone);
    rb = "clone";
  }
  json args = {test::ref(a), test::ref(b), test::ref("reciprocal"), test::ref(rb),
               nullptr,      nullptr,      {{"dtype", f.out_dtype}}};
  if (!f.bias.empty()) {
    inputs.push_back(in("bias", {f.N}, f.bias, 0, 0.5, -3, 3));
    args[4] = test::ref("bias");
  }
  if (f.fast_accum) args.push_back(true);
  nodes.push_back(
      node("_scaled_mm", "aten._scaled_mm.default", args, {tensor({M, f.N}, f.out_dtype)}));
  json outputs = json::array();
  if (f.out_view) {
    nodes.push_back(node("view_1", "aten.view.default", {test::ref("_scaled_mm"), {f.B, f.T, f.N}},
                         {tensor({f.B, f.T, f.N}, f.out_dtype)}));
    outputs.push_back("view_1");
  } else {
    outputs.push_back("_scaled_mm");
  }
  if (f.save_recip) {
    outputs.push_back("reciprocal");
    outputs.push_back("reciprocal_1");
  }
  return {
      {"schema", "replay-trace/1"},
      {"name", std::string("synthetic_float8_linear_") + (f.rowwise ? "rowwise" : "tensorwise")},
      {"source", {{"model", "synthetic"}, {"phase", "fwd"}}},
      {"world_size", 1},
      {"inputs", inputs},
      {"nodes", nodes},
      {"outputs", outputs}};
}

}  // namespace replay::test
