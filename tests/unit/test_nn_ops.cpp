// The nn ops' references (workloads/ops/nn.cpp) where their semantics are easy to get wrong:
// nll_loss's weighted mean with ignore_index, the backwards against finite differences of their
// forwards, a norm backward's None outputs (output_mask), group norm's shapes and dtypes.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "harness/report/numerics.hpp"
#include "impls/fusions/registry.hpp"
#include "impls/reference/reference.hpp"
#include "opcorpus.hpp"
#include "test_util.hpp"
#include "workloads/ir/error.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/ops/op.hpp"
#include "workloads/plan/plan.hpp"

using namespace replay;
using namespace replay::test;
using nlohmann::json;

namespace {

Graph one_node(const std::string& op, const json& inputs, const json& args) {
  return parse_trace(example_trace(op, {{"inputs", inputs}, {"args", args}}), "<" + op + ">");
}

// The graph's outputs (in order) on inputs in0, in1, ... holding `vals` (rounded to their dtype).
std::vector<HostTensor> run(const Graph& g, const std::vector<std::vector<double>>& vals) {
  std::map<int, HostTensor> in;
  for (size_t k = 0; k < vals.size(); ++k) {
    const int v = g.find_value("in" + std::to_string(k));
    HostTensor t = make_host_tensor(g.meta(v).shape, g.meta(v).dtype);
    EXPECT_EQ(t.data.size(), vals[k].size()) << "in" << k;
    for (size_t i = 0; i < vals[k].size(); ++i) t.data[i] = round_to(g.meta(v).dtype, vals[k][i]);
    in[v] = std::move(t);
  }
  const auto out = run_reference(g, in);
  std::vector<HostTensor> res;
  for (int v : g.outputs) res.push_back(out.at(v));
  return res;
}

std::vector<double> ramp(size_t n, double a, double b) {  // deterministic, irregular values
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = a * std::sin(1.7 * static_cast<double>(i) + b) + 0.1 * b;
  return v;
}

// d/dx_i of f at x, central differences.
std::vector<double> numeric_grad(const std::function<double(const std::vector<double>&)>& f,
                                 std::vector<double> x) {
  std::vector<double> d(x.size());
  const double h = 1e-6;
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double up = f(x);
    x[i] = x0 - h;
    const double dn = f(x);
    x[i] = x0;
    d[i] = (up - dn) / (2 * h);
  }
  return d;
}

double dot(const std::vector<double>& a, const HostTensor& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b.data[i];
  return s;
}

void expect_near_all(const HostTensor& got, const std::vector<double>& want, double tol,
                     const char* what) {
  ASSERT_EQ(got.data.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got.data[i], want[i], tol * (1 + std::abs(want[i]))) << what << " [" << i << "]";
}

json t64(std::vector<int64_t> shape) {
  return {{"shape", shape}, {"dtype", "float64"}};
}

}  // namespace

// mean = sum(-w[t] x[i, t]) / sum(w[t]) over the rows whose target is not ignore_index.
TEST(NnOps, NllLossWeightedMeanSkipsIgnoreIndex) {
  const json in = {t64({4, 3}), {{"shape", {4}}, {"dtype", "int64"}}, t64({3})};
  const std::vector<double> x = {-0.1, -2.0, -3.0, -1.5, -0.7, -0.9,
                                 -4.0, -5.0, -6.0, -0.3, -1.2, -2.2};
  const std::vector<double> t = {0, 2, 7, 1};  // row 2 is ignored (ignore_index 7)
  const std::vector<double> w = {0.5, 2.0, 1.0};
  const double num = 0.5 * 0.1 + 1.0 * 0.9 + 2.0 * 1.2, den = 0.5 + 1.0 + 2.0;
  for (int red : {0, 1, 2}) {
    SCOPED_TRACE("reduction " + std::to_string(red));
    Graph g =
        one_node("aten.nll_loss_forward.default", in, {ref("in0"), ref("in1"), ref("in2"), red, 7});
    const auto out = run(g, {x, t, w});
    if (red == 0) {
      expect_near_all(out[0], {0.5 * 0.1, 1.0 * 0.9, 0.0, 2.0 * 1.2}, 1e-15, "none");
      EXPECT_EQ(out[1].data[0], 0.0);  // total_weight is left 0 without a reduction
    } else {
      EXPECT_NEAR(out[0].data[0], red == 1 ? num / den : num, 1e-15);
      EXPECT_NEAR(out[1].data[0], den, 1e-15);
    }
  }
  // Every target ignored: the mean is 0 / 0.
  Graph g = one_node("aten.nll_loss_forward.default", in, {ref("in0"), ref("in1"), nullptr, 1, 7});
  const auto out = run(g, {x, {7, 7, 7, 7}, w});
  EXPECT_TRUE(std::isnan(out[0].data[0]));
  EXPECT_EQ(out[1].data[0], 0.0);
  // A class out of range that is not ignore_index is an error, not a silent number.
  EXPECT_THROW(run(g, {x, {0, 3, 7, 1}, w}), std::invalid_argument);
}

TEST(NnOps, NllLossBackwardIsTheGradientOfTheForward) {
  const std::vector<double> x = ramp(12, 1.0, 0.3), t = {2, 0, 1, 1}, w = {0.5, 2.0, 1.5};
  for (int red : {0, 1, 2}) {
    SCOPED_TRACE("reduction " + std::to_string(red));
    Graph fwd = one_node("aten.nll_loss_forward.default",
                         {t64({4, 3}), {{"shape", {4}}, {"dtype", "int64"}}, t64({3})},
                         {ref("in0"), ref("in1"), ref("in2"), red, 1});  // row 2, 3 ignored
    const std::vector<int64_t> gs = red == 0 ? std::vector<int64_t>{4} : std::vector<int64_t>{};
    const std::vector<double> gv = red == 0 ? ramp(4, 1.0, 0.9) : std::vector<double>{0.7};
    const auto f = [&](const std::vector<double>& xs) { return dot(gv, run(fwd, {xs, t, w})[0]); };
    const double total = run(fwd, {x, t, w})[1].data[0];
    Graph bwd =
        one_node("aten.nll_loss_backward.default",
                 {t64(gs), t64({4, 3}), {{"shape", {4}}, {"dtype", "int64"}}, t64({3}), t64({})},
                 {ref("in0"), ref("in1"), ref("in2"), ref("in3"), red, 1, ref("in4")});
    expect_near_all(run(bwd, {gv, x, t, w, {total}})[0], numeric_grad(f, x), 1e-7, "dx");
  }
}

TEST(NnOps, SoftmaxBackwardsAreTheGradientsOfTheForwards) {
  for (const bool log : {false, true}) {
    for (const int dim : {0, 1, -1}) {
      SCOPED_TRACE(std::string(log ? "log_softmax" : "softmax") + " dim " + std::to_string(dim));
      const std::string op = log ? "aten._log_softmax" : "aten._softmax";
      Graph fwd =
          one_node(op + ".default", json::array({t64({3, 4, 5})}), {ref("in0"), dim, false});
      const std::vector<double> x = ramp(60, 2.0, 0.1), gv = ramp(60, 1.0, 2.0);
      const auto f = [&](const std::vector<double>& xs) { return dot(gv, run(fwd, {xs})[0]); };
      const HostTensor y = run(fwd, {x})[0];
      Graph bwd = one_node(op + "_backward_data.default", {t64({3, 4, 5}), t64({3, 4, 5})},
                           {ref("in0"), ref("in1"), dim, json::object({{"dtype", "float64"}})});
      const std::vector<double> yv(y.data.begin(), y.data.end());
      expect_near_all(run(bwd, {gv, yv})[0], numeric_grad(f, x), 1e-7, "dx");
    }
  }
  // Rows of -inf (masked attention): softmax gives 0 there and log_softmax -inf.
  Graph fwd =
      one_node("aten._softmax.default", json::array({t64({2, 3})}), {ref("in0"), -1, false});
  const double ninf = -std::numeric_limits<double>::infinity();
  const auto y = run(fwd, {{0.0, ninf, std::log(3.0), 1.0, 1.0, ninf}})[0];
  expect_near_all(y, {0.25, 0.0, 0.75, 0.5, 0.5, 0.0}, 1e-15, "softmax");
}

// half_to_float: float16 only (PyTorch: "conversion is supported for Half type only").
TEST(NnOps, SoftmaxDtypes) {
  Graph g = one_node("aten._softmax.default", {{{"shape", {2, 3}}, {"dtype", "float16"}}},
                     {ref("in0"), 1, true});
  EXPECT_EQ(g.meta(g.outputs[0]).dtype, DType::kFloat32);
  EXPECT_THROW(one_node("aten._softmax.default", {{{"shape", {2, 3}}, {"dtype", "bfloat16"}}},
                        {ref("in0"), 1, true}),
               TraceError);
  // The backward of half_to_float: float32 grad, input_dtype float16; not bfloat16.
  const json f32 = {{"shape", {2, 3}}, {"dtype", "float32"}};
  Graph b = one_node("aten._softmax_backward_data.default", {f32, f32},
                     {ref("in0"), ref("in1"), 1, json::object({{"dtype", "float16"}})});
  EXPECT_EQ(b.meta(b.outputs[0]).dtype, DType::kFloat16);
  EXPECT_THROW(one_node("aten._softmax_backward_data.default", {f32, f32},
                        {ref("in0"), ref("in1"), 1, json::object({{"dtype", "bfloat16"}})}),
               std::invalid_argument);
}

TEST(NnOps, LayerNormBackwardIsTheGradientAndHonoursOutputMask) {
  const json in = {t64({3, 2, 4}), t64({2, 4}), t64({2, 4})};
  Graph fwd = one_node("aten.native_layer_norm.default", in,
                       {ref("in0"), {2, 4}, ref("in1"), ref("in2"), 1e-5});
  const std::vector<double> x = ramp(24, 1.5, 0.2), w = ramp(8, 0.5, 1.0), b = ramp(8, 0.3, 2.0);
  const std::vector<double> gv = ramp(24, 1.0, 0.7);
  const auto fo = run(fwd, {x, w, b});
  EXPECT_EQ(fo[1].meta.shape, (Shape{3, 1, 1}));
  const std::vector<double> mean(fo[1].data.begin(), fo[1].data.end()),
      rstd(fo[2].data.begin(), fo[2].data.end());
  auto loss = [&](int which) {
    return [&, which](const std::vector<double>& v) {
      return dot(gv, run(fwd, {which == 0 ? v : x, which == 1 ? v : w, which == 2 ? v : b})[0]);
    };
  };
  const json bin = {t64({3, 2, 4}), t64({3, 2, 4}), t64({3, 1, 1}),
                    t64({3, 1, 1}), t64({2, 4}),    t64({2, 4})};
  const json all = {ref("in0"), ref("in1"), {2, 4},     ref("in2"),
                    ref("in3"), ref("in4"), ref("in5"), {true, true, true}};
  const auto grads =
      run(one_node("aten.native_layer_norm_backward.default", bin, all), {gv, x, mean, rstd, w, b});
  expect_near_all(grads[0], numeric_grad(loss(0), x), 1e-6, "dx");
  expect_near_all(grads[1], numeric_grad(loss(1), w), 1e-6, "dw");
  expect_near_all(grads[2], numeric_grad(loss(2), b), 1e-6, "db");

  // output_mask [true, false, true]: grad_weight is None, recorded as null, and cannot be read.
  json masked = all;
  masked[7] = {true, false, true};
  json t =
      example_trace("aten.native_layer_norm_backward.default", {{"inputs", bin}, {"args", masked}});
  ASSERT_TRUE(t["nodes"][0]["outputs"][1].is_null());
  Graph g = parse_trace(t, "<masked>");
  ASSERT_EQ(g.outputs.size(), 2u);  // y_0, y_2
  EXPECT_TRUE(g.values[g.nodes[0].outputs[1]].none);
  const auto two = run(g, {gv, x, mean, rstd, w, b});
  expect_near_all(two[0], std::vector<double>(grads[0].data.begin(), grads[0].data.end()), 0, "dx");
  expect_near_all(two[1], std::vector<double>(grads[2].data.begin(), grads[2].data.end()), 0, "db");
  // Reading the None output, recording metadata for it, or null where it is computed: errors.
  json use = t;
  use["nodes"].push_back({{"id", "z"}, {"op", "getitem"}, {"args", {ref("y"), 1}}});
  EXPECT_THROW(parse_trace(use, "<use>"), TraceError);
  json meta = t;
  meta["nodes"][0]["outputs"][1] = tensor({2, 4}, "float64");
  EXPECT_THROW(parse_trace(meta, "<meta>"), TraceError);
  json null0 = t;
  null0["nodes"][0]["outputs"][0] = nullptr;
  EXPECT_THROW(parse_trace(null0, "<null0>"), TraceError);
  // grad_bias without a bias (PyTorch fails on the device): bad input.
  json nob = all;
  nob[6] = nullptr;
  EXPECT_THROW(one_node("aten.native_layer_norm_backward.default", bin, nob), std::exception);
}

TEST(NnOps, GroupNormShapesDtypesAndGradients) {
  // [N, C, H, W] = [2, 6, 2, 2], 3 groups: mean and rstd [2, 3] of the input's dtype.
  const json bf = {{"shape", {2, 6, 2, 2}}, {"dtype", "bfloat16"}};
  const json bw = {{"shape", {6}}, {"dtype", "bfloat16"}};
  Graph g = one_node("aten.native_group_norm.default", {bf, bw, bw},
                     {ref("in0"), ref("in1"), ref("in2"), 2, 6, 4, 3, 1e-5});
  ASSERT_EQ(g.outputs.size(), 3u);
  EXPECT_EQ(g.meta(g.outputs[1]).shape, (Shape{2, 3}));
  EXPECT_EQ(g.meta(g.outputs[1]).dtype, DType::kBFloat16);
  // Mixed dtypes (PyTorch: "expected scalar type BFloat16 but found Float"), C not divisible by
  // group, and N * C * HxW not the input's numel are bad input.
  const json fw = {{"shape", {6}}, {"dtype", "float32"}};
  EXPECT_THROW(one_node("aten.native_group_norm.default", {bf, fw, fw},
                        {ref("in0"), ref("in1"), ref("in2"), 2, 6, 4, 3, 1e-5}),
               std::exception);
  EXPECT_THROW(one_node("aten.native_group_norm.default", {bf, bw, bw},
                        {ref("in0"), ref("in1"), ref("in2"), 2, 6, 4, 4, 1e-5}),
               std::exception);
  EXPECT_THROW(one_node("aten.native_group_norm.default", {bf, bw, bw},
                        {ref("in0"), ref("in1"), ref("in2"), 2, 6, 5, 3, 1e-5}),
               std::exception);

  // Each (n, group) block of C/group x HxW is normalized on its own.
  Graph fwd = one_node("aten.native_group_norm.default", {t64({2, 6, 2, 2}), t64({6}), t64({6})},
                       {ref("in0"), ref("in1"), ref("in2"), 2, 6, 4, 3, 1e-5});
  const std::vector<double> x = ramp(48, 1.3, 0.4), w = ramp(6, 0.6, 1.1), b = ramp(6, 0.2, 3.0);
  const auto fo = run(fwd, {x, w, b});
  for (int r = 0; r < 6; ++r) {  // block r = (n, group): 8 elements from r * 8
    double s = 0;
    for (int j = 0; j < 8; ++j) s += x[r * 8 + j];
    EXPECT_NEAR(fo[1].data[r], s / 8, 1e-14) << r;
    const int c = (r % 3) * 2;  // first channel of the block
    EXPECT_NEAR(fo[0].data[r * 8], (x[r * 8] - s / 8) * fo[2].data[r] * w[c] + b[c], 1e-12);
  }
  const std::vector<double> gv = ramp(48, 1.0, 0.5);
  const std::vector<double> mean(fo[1].data.begin(), fo[1].data.end()),
      rstd(fo[2].data.begin(), fo[2].data.end());
  auto loss = [&](int which) {
    return [&, which](const std::vector<double>& v) {
      return dot(gv, run(fwd, {which == 0 ? v : x, which == 1 ? v : w, which == 2 ? v : b})[0]);
    };
  };
  Graph bwd = one_node(
      "aten.native_group_norm_backward.default",
      {t64({2, 6, 2, 2}), t64({2, 6, 2, 2}), t64({2, 3}), t64({2, 3}), t64({6})},
      {ref("in0"), ref("in1"), ref("in2"), ref("in3"), ref("in4"), 2, 6, 4, 3, {true, true, true}});
  const auto grads = run(bwd, {gv, x, mean, rstd, w});
  expect_near_all(grads[0], numeric_grad(loss(0), x), 1e-6, "dx");
  expect_near_all(grads[1], numeric_grad(loss(1), w), 1e-6, "dw");
  expect_near_all(grads[2], numeric_grad(loss(2), b), 1e-6, "db");
}

TEST(NnOps, DropoutBackwardScalesKeptElements) {
  Graph g =
      one_node("aten.native_dropout_backward.default",
               {t64({5}), {{"shape", {5}}, {"dtype", "bool"}}}, {ref("in0"), ref("in1"), 1.25});
  expect_near_all(run(g, {{1, -2, 3, 4, 5}, {1, 0, 1, 0, 1}})[0], {1.25, 0, 3.75, 0, 6.25}, 0,
                  "dx");
  // The mask must be bool (PyTorch: "Mask should be Bool Scalar Type").
  EXPECT_THROW(one_node("aten.native_dropout_backward.default", {t64({5}), t64({5})},
                        {ref("in0"), ref("in1"), 1.25}),
               std::exception);
}

// pytorch_bounds (opcorpus.hpp) widens the bounds of a 16-bit softmax backward for PyTorch's
// rounding of g * y; they must still catch a wrong result: the reference passes against PyTorch,
// a 2 % scale error or a forgotten "- sum(g y)" fails.
TEST(NnOps, WidenedSoftmaxBackwardBoundsCatchAWrongResult) {
  int checked = 0;
  for (const auto& c :
       load_opcorpus(opcorpus_dir() + "/aten__softmax_backward_data_default.json")) {
    const int v = c.g.outputs[0];
    const DType t = c.g.meta(v).dtype;
    if (t != DType::kBFloat16 && t != DType::kFloat16) continue;
    SCOPED_TRACE(c.label());
    const ReplayInputs in = make_inputs(c.g, 1);
    const auto vals = run_reference(c.g, in.values);
    const NumericsBounds b = pytorch_bounds(
        c, v, output_bounds(c.g, make_plan(c.g, fusion_registry()), default_value_bounds(c.g), v));
    const HostTensor& golden = in.golden.at(c.g.values[v].name);
    EXPECT_TRUE(check_numerics("dx", vals.at(v), golden, b).pass());
    HostTensor scaled = vals.at(v), no_sum = vals.at(v);
    const HostTensor &g = in.values.at(c.g.find_value("in0")),
                     &y = in.values.at(c.g.find_value("in1"));
    for (size_t i = 0; i < scaled.data.size(); ++i) {
      scaled.data[i] = round_to(t, scaled.data[i] * 1.02);
      no_sum.data[i] = round_to(t, g.data[i] * y.data[i]);
    }
    EXPECT_FALSE(check_numerics("dx", scaled, golden, b).pass());
    EXPECT_FALSE(check_numerics("dx", no_sum, golden, b).pass());
    ++checked;
  }
  EXPECT_GE(checked, 2);  // the bfloat16 and float16 cases
}
