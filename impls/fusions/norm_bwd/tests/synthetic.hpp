// Synthetic norm backward graphs for the norm_bwd tests: every form the matcher must take (and a
// few it must not), at any shape and dtype, written as decomposed ATen graphs the way aot_autograd
// with Inductor's decompositions writes them (convert_element_type, mul, sum.dim_IntList, ...).
#pragma once

#include <string>
#include <vector>

#include "tests/unit/test_util.hpp"

namespace replay::test {

struct NormBwdForm {
  std::vector<int64_t> lead = {4, 8};  ///< leading dims: rows = their product
  int64_t cols = 384;
  std::string dtype = "bfloat16";
  bool layernorm = true;
  bool bias = true;  ///< LayerNorm: db is an output
  /// false: no affine parameters (F.layer_norm(x, shape, None, None), RMSNorm without weight):
  /// g = dy, dx is the only output (weight, bias, unit_offset, weight_after_downcast unused)
  bool affine = true;
  /// "saved" (mean/rstd inputs), "recompute" (mean/rstd computed from x, eps a number),
  /// "recompute_eps_tensor" (eps a 0-dim float32 input), "normalized" (xhat and rstd inputs)
  std::string stats = "saved";
  bool weight_after_downcast = false;  ///< RMSNorm: y = w * xhat.to(dtype) (Meta/HF Llama)
  bool unit_offset = false;            ///< y = xhat * (1 + w), 1 + w in the activation dtype
  /// How dx is written: "inductor" (rstd/C * (C*g - sum(g) - xhat*sum(g*xhat)), RMSNorm the
  /// -0.5*rstd^3 form), "mean" (rstd * (g - mean(g) - xhat*mean(g*xhat)), commuted operands)
  std::string dx_form = "inductor";
  bool dy_is_sum = false;  ///< dy = dy_a + dy_b (two matmul gradients), in the activation dtype
  /// dx epilogue add (the backward of an add-norm: the residual stream's gradient dh from its other
  /// readers plus the norm's dx, `dx_total = dh + dx`, returned instead of dx): "" none, "same"
  /// (dh of dx's shape and dtype), "mixed" (dh float32: a float32 sum, declined), "broadcast" (dh
  /// [C], declined).
  std::string dx_add;
  // Negatives.
  bool drop_dx = false;           ///< only the column reductions
  bool drop_dw = false;           ///< only the row reduction (and db)
  bool dw_unrelated = false;      ///< dw sums dy * an unrelated input instead of dy * xhat
  bool db_unrelated = false;      ///< db sums an unrelated input
  bool xhat_escapes = false;      ///< xhat is also a graph output
  bool dx_wrong_divisor = false;  ///< dx divides by cols + 1
};

/// The trace of `f` (no golden tensors; inputs follow the recorded statistics).
inline nlohmann::json norm_bwd_trace(const NormBwdForm& f) {
  using nlohmann::json;
  const std::string dt = f.dtype, f32 = "float32";
  std::vector<int64_t> full = f.lead, row = f.lead, lead_dims;
  full.push_back(f.cols);
  row.push_back(1);
  for (size_t i = 0; i < f.lead.size(); ++i) lead_dims.push_back(static_cast<int64_t>(i));
  const std::vector<int64_t> col = {f.cols};
  const int64_t last = static_cast<int64_t>(f.lead.size());
  const double C = static_cast<double>(f.cols);
  json inputs = json::array(), nodes = json::array(), outputs = json::array();
  auto in = [&](const std::string& id, std::vector<int64_t> sh, const std::string& d, double mean,
                double std, double lo, double hi) {
    json t = tensor(sh, d);
    t["id"] = id;
    t["stats"] = {{"mean", mean}, {"std", std}, {"min", lo}, {"max", hi}};
    inputs.push_back(t);
  };
  auto node = [&](const std::string& id, const std::string& op, json args, std::vector<int64_t> sh,
                  const std::string& d, json kwargs = json::object()) {
    nodes.push_back({{"id", id},
                     {"op", op},
                     {"args", args},
                     {"kwargs", kwargs},
                     {"outputs", json::array({tensor(sh, d)})}});
  };
  auto conv = [&](const std::string& id, const std::string& src, std::vector<int64_t> sh,
                  const std::string& d) {
    node(id, "prims.convert_element_type.default", {test::ref(src), {{"dtype", d}}}, sh, d);
  };
  const char* mul = "aten.mul.Tensor";
  const char* add = "aten.add.Tensor";
  const char* sub = "aten.sub.Tensor";
  const char* sum = "aten.sum.dim_IntList";
  const bool commute = f.dx_form == "mean";
  auto bin = [&](const std::string& id, const char* op, json a, json b, std::vector<int64_t> sh,
                 const std::string& d) {
    if (commute && std::string(op) != sub) std::swap(a, b);
    node(id, op, {a, b}, sh, d);
  };

  // Inputs.
  in("x", full, f.stats == "normalized" ? f32 : dt, 0.1, 1.0, -5, 5);
  if (f.affine) in("weight", col, dt, f.unit_offset ? 0.0 : 1.0, 0.1, -0.5, 1.5);
  if (f.stats == "saved" && f.layernorm) in("mean", row, f32, 0.1, 0.03, -0.1, 0.3);
  if (f.stats == "saved" || f.stats == "normalized") in("rstd", row, f32, 1.0, 0.02, 0.9, 1.1);
  if (f.stats == "recompute_eps_tensor") in("eps", {}, f32, 1e-5, 0, 1e-5, 1e-5);
  if (f.dy_is_sum) {
    in("dy_a", full, dt, 0, 0.7, -4, 4);
    in("dy_b", full, dt, 0, 0.7, -4, 4);
  } else {
    in("tangents_1", full, dt, 0, 1.0, -4.5, 4.5);
  }
  if (f.dw_unrelated || f.db_unrelated) in("other", full, dt, 0, 1, -4, 4);

  std::string dy = "tangents_1";
  if (f.dy_is_sum) {
    node("dy_sum", add, {test::ref("dy_a"), test::ref("dy_b")}, full, dt);
    dy = "dy_sum";
  }
  if (!f.weight_after_downcast || (f.layernorm && f.bias) || f.dw_unrelated || !f.affine)
    conv("dy32", dy, full, f32);
  conv("x32", "x", full, f32);
  // Statistics.
  std::string mean = "mean", rstd = "rstd";
  if (f.stats.rfind("recompute", 0) == 0) {
    json eps = f.stats == "recompute_eps_tensor" ? test::ref("eps") : json(1e-5);
    if (f.layernorm) {
      nodes.push_back({{"id", "var_mean"},
                       {"op", "aten.var_mean.correction"},
                       {"args", {test::ref("x32"), {last}}},
                       {"kwargs", {{"correction", 0}, {"keepdim", true}}},
                       {"outputs", json::array({tensor(row, f32), tensor(row, f32)})}});
      node("var", "getitem", {test::ref("var_mean"), 0}, row, f32);
      node("mean_r", "getitem", {test::ref("var_mean"), 1}, row, f32);
      mean = "mean_r";
      node("var_eps", add, {test::ref("var"), eps}, row, f32);
    } else {
      node("sq", "aten.pow.Tensor_Scalar", {test::ref("x32"), 2}, full, f32);
      node("ms", "aten.mean.dim", {test::ref("sq"), {last}, true}, row, f32);
      node("var_eps", add, {test::ref("ms"), eps}, row, f32);
    }
    node("rstd_r", "aten.rsqrt.default", {test::ref("var_eps")}, row, f32);
    rstd = "rstd_r";
  }
  // xhat.
  std::string xhat;
  if (f.stats == "normalized") {
    xhat = "x32";
  } else if (f.layernorm) {
    node("centered", sub, {test::ref("x32"), test::ref(mean)}, full, f32);
    bin("xhat", mul, test::ref("centered"), test::ref(rstd), full, f32);
    xhat = "xhat";
  } else if (f.affine || f.dx_form != "inductor" || f.xhat_escapes) {
    bin("xhat", mul, test::ref("x32"), test::ref(rstd), full, f32);
    xhat = "xhat";
  } else {  // RMSNorm without weight, Inductor form: dx reads x, not xhat (no dead node)
    xhat = "x32";
  }
  // Weight and g.
  std::string w = "weight";
  if (f.unit_offset && f.affine) {
    node("w1", "aten.add.Tensor", {test::ref("weight"), 1}, col, dt);
    w = "w1";
  }
  std::string g;
  if (!f.affine) {
    g = "dy32";
  } else if (f.weight_after_downcast) {
    bin("g_low", mul, test::ref(dy), test::ref(w), full, dt);
    conv("g", "g_low", full, f32);
  } else {
    conv("w32", w, col, f32);
    bin("g", mul, test::ref("dy32"), test::ref("w32"), full, f32);
  }
  if (f.affine) g = "g";
  // dx.
  const double cdiv = f.dx_wrong_divisor ? C + 1 : C;
  if (!f.drop_dx) {
    if (f.layernorm && f.dx_form == "inductor") {
      node("gC", mul, {test::ref(g), C}, full, f32);
      node("s1", sum, {test::ref(g), {last}, true}, row, f32);
      bin("gx", mul, test::ref(g), test::ref(xhat), full, f32);
      node("s2", sum, {test::ref("gx"), {last}, true}, row, f32);
      bin("t2", mul, test::ref(xhat), test::ref("s2"), full, f32);
      node("a", sub, {test::ref("gC"), test::ref("s1")}, full, f32);
      node("b", sub, {test::ref("a"), test::ref("t2")}, full, f32);
      node("r", "aten.div.Tensor", {test::ref(rstd), cdiv}, row, f32);
      bin("dx32", mul, test::ref("r"), test::ref("b"), full, f32);
    } else if (f.layernorm) {  // mean form, commuted
      node("mg", "aten.mean.dim", {test::ref(g), {last}, true}, row, f32);
      bin("gx", mul, test::ref(g), test::ref(xhat), full, f32);
      node("mgx", "aten.mean.dim", {test::ref("gx"), {last}, true}, row, f32);
      node("a", sub, {test::ref(g), test::ref("mg")}, full, f32);
      bin("t2", mul, test::ref(xhat), test::ref("mgx"), full, f32);
      node("b", sub, {test::ref("a"), test::ref("t2")}, full, f32);
      bin("dx32", mul, test::ref("b"), test::ref(rstd), full, f32);
      if (f.dx_wrong_divisor) {
        nodes.back()["id"] = "dx_ok";
        node("dx32", "aten.mul.Tensor", {test::ref("dx_ok"), C / (C + 1)}, full, f32);
      }
    } else if (f.dx_form == "inductor") {  // RMSNorm: g*rstd - 0.5*rstd^3*sum(g*x)/C * 2x
      const std::string xs = f.stats == "normalized" ? xhat : "x32";
      bin("grs", mul, test::ref(g), test::ref(rstd), full, f32);
      bin("gx", mul, test::ref(g), test::ref(xs), full, f32);
      node("s2", sum, {test::ref("gx"), {last}, true}, row, f32);
      node("r3", "aten.pow.Tensor_Scalar", {test::ref(rstd), f.stats == "normalized" ? 1 : 3}, row,
           f32);
      node("h", "aten.mul.Scalar", {test::ref("s2"), -0.5}, row, f32);
      bin("h3", mul, test::ref("h"), test::ref("r3"), row, f32);
      node("hx", "aten.expand.default", {test::ref("h3"), full}, full, f32);
      node("hd", "aten.div.Scalar", {test::ref("hx"), cdiv}, full, f32);
      node("x2", "aten.mul.Scalar", {test::ref(xs), 2.0}, full, f32);
      bin("t2", mul, test::ref("hd"), test::ref("x2"), full, f32);
      bin("dx32", add, test::ref("grs"), test::ref("t2"), full, f32);
    } else {  // RMSNorm mean form: rstd * (g - xhat * mean(g * xhat))
      bin("gx", mul, test::ref(g), test::ref(xhat), full, f32);
      node("mgx", "aten.mean.dim", {test::ref("gx"), {last}, true}, row, f32);
      bin("t2", mul, test::ref(xhat), test::ref("mgx"), full, f32);
      node("b", sub, {test::ref(g), test::ref("t2")}, full, f32);
      bin("dx32", mul, test::ref("b"), test::ref(rstd), full, f32);
      if (f.dx_wrong_divisor) {
        nodes.back()["id"] = "dx_ok";
        node("dx32", "aten.mul.Tensor", {test::ref("dx_ok"), C / (C + 1)}, full, f32);
      }
    }
    conv("dx", "dx32", full, dt);
    if (f.dx_add.empty()) outputs.push_back("dx");
  }
  // dw, db.
  if (!f.drop_dw && f.affine) {
    if (f.dw_unrelated) {
      conv("o32", "other", full, f32);
      bin("dwt", mul, test::ref("dy32"), test::ref("o32"), full, f32);
      node("dw32", sum, {test::ref("dwt"), lead_dims}, col, f32);
      conv("dw", "dw32", col, dt);
    } else if (f.weight_after_downcast) {
      conv("xlow", xhat, full, dt);
      bin("dwt", mul, test::ref(dy), test::ref("xlow"), full, dt);
      std::vector<int64_t> keep(f.lead.size(), 1);
      keep.push_back(f.cols);
      node("dwk", sum, {test::ref("dwt"), lead_dims, true}, keep, dt);
      node("dw", "aten.view.default", {test::ref("dwk"), col}, col, dt);
    } else {
      bin("dwt", mul, test::ref("dy32"), test::ref(xhat), full, f32);
      node("dw32", sum, {test::ref("dwt"), lead_dims}, col, f32);
      conv("dw", "dw32", col, dt);
    }
    outputs.push_back("dw");
  }
  if (f.layernorm && f.bias && f.affine) {
    if (f.db_unrelated) {
      conv("ob32", "other", full, f32);
      node("db32", sum, {test::ref("ob32"), lead_dims}, col, f32);
    } else {
      node("db32", sum, {test::ref("dy32"), lead_dims}, col, f32);
    }
    conv("db", "db32", col, dt);
    outputs.push_back("db");
  }
  if (f.xhat_escapes) outputs.push_back(xhat);
  if (!f.dx_add.empty() && !f.drop_dx) {
    const bool mixed = f.dx_add == "mixed";
    in("dh", f.dx_add == "broadcast" ? col : full, mixed ? f32 : dt, 0, 1, -6, 6);
    node("dx_total", "aten.add.Tensor", {test::ref("dh"), test::ref("dx")}, full, mixed ? f32 : dt);
    outputs.push_back("dx_total");
  }
  std::string name = std::string("synthetic_") + (f.layernorm ? "layernorm" : "rmsnorm") + "_bwd_" +
                     f.stats + "_" + f.dx_form + "_" + std::to_string(f.cols) + "_" + dt +
                     (f.dx_add.empty() ? "" : "_dx_add_" + f.dx_add) +
                     (f.affine ? "" : "_noaffine");
  return {{"schema", "replay-trace/1"},
          {"name", name},
          {"source", {{"model", "synthetic"}, {"phase", "bwd"}}},
          {"world_size", 1},
          {"inputs", inputs},
          {"nodes", nodes},
          {"outputs", outputs}};
}

}  // namespace replay::test
