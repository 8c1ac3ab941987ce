// Synthetic float8 quantization graphs for the fp8_quantize tests: any shape, dtype and set of
// quantizations of one tensor, written as torchao's float8_utils decomposes (abs -> amax ->
// float64 -> clamp_min -> reciprocal -> * max -> float32 [-> log2 -> floor -> exp2]; x.float() *
// scale -> clamp_min -> clamp_max -> float8), with the variations the negatives need.
#pragma once

#include <string>
#include <vector>

#include "tests/unit/test_util.hpp"

namespace replay::test {

struct QuantSpec {
  /// "tensorwise" (aten.amax over every dim), "tensorwise_max" (aten.max.default), "rowwise"
  /// (amax over dim -1, keepdim), "columnwise" (amax over dim 0, keepdim)
  std::string gran = "tensorwise";
  std::string fp8 = "float8_e4m3fn";
  bool f32_abs = false;        ///< the amax reads abs(float32(abs(x))) (the rowwise recipe's form)
  bool no_abs = false;         ///< the amax reads x itself (no abs: a non-negative tensor's recipe)
  bool row_major_out = true;   ///< the float8 tensor is returned
  bool col_major_out = false;  ///< permute -> clone -> permute of it is returned
  bool reciprocal = true;      ///< 1 / scale is returned
  bool amax_out = false;       ///< the amax itself is returned (delayed scaling's history)
  double clamp = 0;            ///< clamp bound, 0: the float8 dtype's max
  double scale_mul = 0;        ///< the scale's multiplier, 0: the float8 dtype's max
  std::string cast_to;         ///< dtype of the final cast, empty: fp8
  /// The float32 scale rounded down to a power of two as torchao writes it
  /// (round_scales_to_power_of_2): log2 -> `pow2_round` -> exp2 (aten.exp2.default, or
  /// aten.pow.Scalar(2, .) when pow2_pow).
  bool pow2 = false;
  bool pow2_pow = false;
  std::string pow2_round = "floor";  ///< the rounding op's name (the negative: "ceil")
};

struct QuantForm {
  std::vector<int64_t> shape{16, 64};
  std::string dtype = "bfloat16";
  std::vector<QuantSpec> quants{QuantSpec{}};
  /// A second tensor y (same shape) quantized tensorwise, whose scale multiplies x.float() (the
  /// negative "a scale not computed from this tensor's amax").
  bool foreign_scale = false;
  /// With foreign_scale: y's scale also casts y.float() (y's own quantization, which claims the
  /// scale chain; x's cast by it then stays eager).
  bool foreign_scale_casts_y = false;
  /// With foreign_scale: y's scale is rounded down to a power of two (QuantSpec::pow2).
  bool foreign_pow2 = false;
  /// The first quantization's (tensorwise) amax feeds a second scale chain of its own, whose scale
  /// casts x.float() again (the negative "one scale chain per amax").
  bool second_chain_from_own_amax = false;
};

inline double float8_max_of(const std::string& fp8) {
  return fp8 == "float8_e5m2" ? 57344.0 : 448.0;
}

inline nlohmann::json quant_trace(const QuantForm& f, const std::string& name = "synthetic_fp8") {
  using nlohmann::json;
  const auto& xs = f.shape;
  const int64_t cols = xs.back();
  const int64_t rows = [&] {
    int64_t n = 1;
    for (size_t i = 0; i + 1 < xs.size(); ++i) n *= xs[i];
    return n;
  }();
  json nodes = json::array(), outputs = json::array();
  auto node = [&](const std::string& id, const char* op, json args, json out,
                  json kwargs = json::object()) {
    nodes.push_back(
        {{"id", id}, {"op", op}, {"args", args}, {"kwargs", kwargs}, {"outputs", {out}}});
  };
  auto strided = [](std::vector<int64_t> sh, std::vector<int64_t> st, const std::string& dt) {
    return json{{"shape", sh}, {"stride", st}, {"dtype", dt}};
  };
  const std::string dt = f.dtype;
  node("abs_1", "aten.abs.default", {test::ref("x")}, tensor(xs, dt));
  bool f32_abs = false;
  for (const auto& q : f.quants) f32_abs |= q.f32_abs;
  if (f32_abs) {
    node("abs_f32", "prims.convert_element_type.default",
         {test::ref("abs_1"), {{"dtype", "float32"}}}, tensor(xs, "float32"));
    node("abs_2", "aten.abs.default", {test::ref("abs_f32")}, tensor(xs, "float32"));
  }
  std::string x32 = "x";
  if (dt != "float32") {
    x32 = "x32";
    node(x32, "prims.convert_element_type.default", {test::ref("x"), {{"dtype", "float32"}}},
         tensor(xs, "float32"));
  }
  // amax -> ... -> float32 scale, for value `mag` of dtype `mdt`: the scale's id; its shape in
  // `ss`.
  std::vector<int64_t> ss;
  auto scale_chain = [&](const std::string& k, const QuantSpec& q, const std::string& mag,
                         const std::string& mdt) {
    ss.clear();
    json args;
    const char* op = "aten.amax.default";
    if (q.gran == "tensorwise") {
      args = {test::ref(mag)};
    } else if (q.gran == "tensorwise_max") {
      args = {test::ref(mag)};
      op = "aten.max.default";
    } else if (q.gran == "rowwise") {
      args = {test::ref(mag), {-1}, true};
      ss = xs;
      ss.back() = 1;
    } else {
      args = {test::ref(mag), {0}, true};
      ss = {1, cols};
    }
    node("amax_" + k, op, args, tensor(ss, mdt));
    if (q.amax_out) outputs.push_back("amax_" + k);
    node("amax64_" + k, "prims.convert_element_type.default",
         {test::ref("amax_" + k), {{"dtype", "float64"}}}, tensor(ss, "float64"));
    node("clamp_" + k, "aten.clamp_min.default", {test::ref("amax64_" + k), 1e-12},
         tensor(ss, "float64"));
    node("rcp64_" + k, "aten.reciprocal.default", {test::ref("clamp_" + k)}, tensor(ss, "float64"));
    node("mul64_" + k, "aten.mul.Tensor",
         {test::ref("rcp64_" + k), q.scale_mul != 0 ? q.scale_mul : float8_max_of(q.fp8)},
         tensor(ss, "float64"));
    node("scale_" + k, "prims.convert_element_type.default",
         {test::ref("mul64_" + k), {{"dtype", "float32"}}}, tensor(ss, "float32"));
    if (!q.pow2) return "scale_" + k;
    node("log2_" + k, "aten.log2.default", {test::ref("scale_" + k)}, tensor(ss, "float32"));
    const std::string round_op = "aten." + q.pow2_round + ".default";
    node("round_" + k, round_op.c_str(), {test::ref("log2_" + k)}, tensor(ss, "float32"));
    if (q.pow2_pow)
      node("pow2_" + k, "aten.pow.Scalar", {2.0, test::ref("round_" + k)}, tensor(ss, "float32"));
    else
      node("pow2_" + k, "aten.exp2.default", {test::ref("round_" + k)}, tensor(ss, "float32"));
    return "pow2_" + k;
  };
  auto cast_chain = [&](const std::string& k, const QuantSpec& q, const std::string& src,
                        const std::string& scale) {
    const double c = q.clamp != 0 ? q.clamp : float8_max_of(q.fp8);
    node("scaled_" + k, "aten.mul.Tensor", {test::ref(src), test::ref(scale)},
         tensor(xs, "float32"));
    node("lo_" + k, "aten.clamp_min.default", {test::ref("scaled_" + k), -c},
         tensor(xs, "float32"));
    node("hi_" + k, "aten.clamp_max.default", {test::ref("lo_" + k), c}, tensor(xs, "float32"));
    const std::string to = q.cast_to.empty() ? q.fp8 : q.cast_to;
    node("q_" + k, "prims.convert_element_type.default", {test::ref("hi_" + k), {{"dtype", to}}},
         tensor(xs, to));
    if (q.row_major_out) outputs.push_back("q_" + k);
    if (q.col_major_out) {
      node("qp_" + k, "aten.permute.default", {test::ref("q_" + k), {1, 0}},
           strided({cols, rows}, {1, cols}, to));
      node("qc_" + k, "aten.clone.default", {test::ref("qp_" + k)}, tensor({cols, rows}, to),
           {{"memory_format", {{"enum", "torch.contiguous_format"}}}});
      node("qt_" + k, "aten.permute.default", {test::ref("qc_" + k), {1, 0}},
           strided({rows, cols}, {1, rows}, to));
      outputs.push_back("qt_" + k);
    }
  };
  for (size_t i = 0; i < f.quants.size(); ++i) {
    const QuantSpec& q = f.quants[i];
    const std::string k = std::to_string(i);
    const std::string scale = q.no_abs    ? scale_chain(k, q, "x", dt)
                              : q.f32_abs ? scale_chain(k, q, "abs_2", "float32")
                                          : scale_chain(k, q, "abs_1", dt);
    cast_chain(k, q, x32, scale);
    if (q.reciprocal) {
      node("rcp_" + k, "aten.reciprocal.default", {test::ref(scale)}, tensor(ss, "float32"));
      outputs.push_back("rcp_" + k);
    }
  }
  if (f.second_chain_from_own_amax) {  // amax_0 -> a second float64 chain -> scale_b -> cast
    const QuantSpec& q = f.quants.at(0);
    node("amax64_b", "prims.convert_element_type.default",
         {test::ref("amax_0"), {{"dtype", "float64"}}}, tensor({}, "float64"));
    node("clamp_b", "aten.clamp_min.default", {test::ref("amax64_b"), 1e-12},
         tensor({}, "float64"));
    node("rcp64_b", "aten.reciprocal.default", {test::ref("clamp_b")}, tensor({}, "float64"));
    node("mul64_b", "aten.mul.Tensor", {test::ref("rcp64_b"), float8_max_of(q.fp8)},
         tensor({}, "float64"));
    node("scale_b", "prims.convert_element_type.default",
         {test::ref("mul64_b"), {{"dtype", "float32"}}}, tensor({}, "float32"));
    cast_chain("b", q, x32, "scale_b");
  }
  json inputs = json::array();
  json xin = tensor(xs, dt);
  xin["id"] = "x";
  xin["stats"] = {{"mean", 0.0}, {"std", 2.0}, {"min", -12.0}, {"max", 12.0}};
  inputs.push_back(xin);
  if (f.foreign_scale) {
    json yin = tensor(xs, dt);
    yin["id"] = "y";
    inputs.push_back(yin);
    node("abs_y", "aten.abs.default", {test::ref("y")}, tensor(xs, dt));
    QuantSpec t;
    t.pow2 = f.foreign_pow2;
    const std::string sy = scale_chain("y", t, "abs_y", dt);
    cast_chain("xy", t, x32, sy);
    if (f.foreign_scale_casts_y) {
      std::string y32 = "y";
      if (dt != "float32") {
        node("y32", "prims.convert_element_type.default",
             {test::ref("y"), json{{"dtype", "float32"}}}, tensor(xs, "float32"));
        y32 = "y32";
      }
      cast_chain("yy", t, y32, sy);
    }
  }
  return {{"schema", "replay-trace/1"},
          {"name", name},
          {"source", {{"model", "synthetic"}, {"phase", "fwd"}}},
          {"world_size", 1},
          {"inputs", inputs},
          {"nodes", nodes},
          {"outputs", outputs}};
}

}  // namespace replay::test
