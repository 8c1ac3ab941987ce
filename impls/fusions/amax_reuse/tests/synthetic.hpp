// Synthetic graphs for the amax_reuse tests, written as aot_autograd writes torchao's float8
// scales: |x| (bf16), upcast to float32, |.| again, then amax over dims with keepdim (axiswise),
// torch.amax(|x|) over every dim or torch.max(|x|) (tensorwise); each result read at once by the
// scale's arithmetic (here a reciprocal), before the next reduction, as in
// traces/float8_linear_rowwise_train_fwd_2x8x64x32.json.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "tests/unit/test_util.hpp"

namespace replay::test {

/// One reduction of the synthetic graph.
struct AmaxRed {
  std::string op = "aten.amax.default";  ///< or aten.amin.default, aten.max.default, ...
  std::vector<int64_t> dims;             ///< dims argument (amax/amin; empty: every dim)
  bool keepdim = true;
  bool dims_arg = true;     ///< write the dims argument (false: aten.amax(x) with no dims)
  std::string input = "x";  ///< which graph input's chain it reduces: "x" or "w"
  std::string op_on = "";   ///< "sum": an aten.sum.dim_IntList instead (dims as given)
};

/// How the synthetic graph is written.
struct AmaxForm {
  std::vector<int64_t> shape{16, 64};
  std::string dtype = "bfloat16";
  /// "abs_f32_abs" (torchao's axiswise: abs -> float32 -> abs), "abs", "f32" (an upcast only),
  /// "none" (x itself)
  std::string prologue = "abs_f32_abs";
  std::vector<AmaxRed> reds{{"aten.amax.default", {-1}, true}, {"aten.amax.default", {}, false}};
  bool consumers = true;        ///< a reciprocal of each result right after it (a graph output)
  bool leak_first_abs = false;  ///< the first abs is also a graph output
  std::string name = "synthetic_amax";
};

inline std::vector<int64_t> amax_reduced_shape(const std::vector<int64_t>& shape,
                                               std::vector<int64_t> dims, bool keepdim) {
  const auto r = static_cast<int64_t>(shape.size());
  if (dims.empty())
    for (int64_t d = 0; d < r; ++d) dims.push_back(d);
  for (auto& d : dims) d = d < 0 ? d + r : d;
  std::vector<int64_t> out;
  for (int64_t d = 0; d < r; ++d) {
    const bool red = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!red)
      out.push_back(shape[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

inline nlohmann::json amax_trace(const AmaxForm& f) {
  using nlohmann::json;
  auto node = [](const std::string& id, const std::string& op, json args, json outs) {
    return json{
        {"id", id}, {"op", op}, {"args", args}, {"kwargs", json::object()}, {"outputs", outs}};
  };
  json inputs = json::array(), nodes = json::array(), outputs = json::array();
  std::map<std::string, std::string> src, src_dtype;  // input -> the value its reductions read
  auto chain = [&](const std::string& in) {
    json t = tensor(f.shape, f.dtype);
    t["id"] = in;
    t["stats"] = {{"mean", 0.0}, {"std", 1.0}, {"min", -6.0}, {"max", 6.0}};
    inputs.push_back(t);
    std::string cur = in, dt = f.dtype;
    if (f.prologue == "abs" || f.prologue == "abs_f32_abs") {
      nodes.push_back(node("abs_" + in, "aten.abs.default", json::array({test::ref(cur)}),
                           {tensor(f.shape, dt)}));
      cur = "abs_" + in;
      if (f.leak_first_abs) outputs.push_back(cur);
    }
    if (f.prologue == "abs_f32_abs" || f.prologue == "f32") {
      dt = "float32";
      nodes.push_back(node("up_" + in, "prims.convert_element_type.default",
                           json::array({test::ref(cur), {{"dtype", dt}}}), {tensor(f.shape, dt)}));
      cur = "up_" + in;
    }
    if (f.prologue == "abs_f32_abs") {
      nodes.push_back(node("abs2_" + in, "aten.abs.default", json::array({test::ref(cur)}),
                           {tensor(f.shape, dt)}));
      cur = "abs2_" + in;
    }
    src[in] = cur;
    src_dtype[in] = dt;
  };
  for (const AmaxRed& r : f.reds)
    if (!src.count(r.input)) chain(r.input);
  for (size_t i = 0; i < f.reds.size(); ++i) {
    const AmaxRed& r = f.reds[i];
    const std::string id = "red_" + std::to_string(i);
    const std::string dt = src_dtype[r.input];
    const bool all_op = r.op == "aten.max.default" || r.op == "aten.min.default";
    json args = json::array({test::ref(src[r.input])});
    std::vector<int64_t> shape;
    if (r.op_on == "sum") {
      args.push_back(r.dims);
      args.push_back(r.keepdim);
      shape = amax_reduced_shape(f.shape, r.dims, r.keepdim);
      nodes.push_back(node(id, "aten.sum.dim_IntList", args, {tensor(shape, dt)}));
    } else {
      if (!all_op && r.dims_arg) {
        args.push_back(r.dims);
        args.push_back(r.keepdim);
      }
      shape = all_op || !r.dims_arg ? std::vector<int64_t>{}
                                    : amax_reduced_shape(f.shape, r.dims, r.keepdim);
      nodes.push_back(node(id, r.op, args, {tensor(shape, dt)}));
    }
    if (f.consumers) {
      nodes.push_back(node("scale_" + std::to_string(i), "aten.reciprocal.default",
                           json::array({test::ref(id)}), {tensor(shape, dt)}));
      outputs.push_back("scale_" + std::to_string(i));
    } else {
      outputs.push_back(id);
    }
  }
  return {{"schema", "replay-trace/1"},
          {"name", f.name},
          {"source", {{"model", "synthetic"}, {"phase", "fwd"}}},
          {"world_size", 1},
          {"inputs", inputs},
          {"nodes", nodes},
          {"outputs", outputs}};
}

}  // namespace replay::test
