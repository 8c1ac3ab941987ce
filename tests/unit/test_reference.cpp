// Reference ops: hand-computed cases, and the whole executor against PyTorch's golden tensors.
#include <gtest/gtest.h>

#include "harness/report/numerics.hpp"
#include "impls/reference/reference.hpp"
#include "test_util.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/safetensors.hpp"
#include "workloads/loader/trace_loader.hpp"

using namespace replay;
using namespace replay::test;
using nlohmann::json;

namespace {

// Graph with one input "x" (float32, shape) and one node; returns the node's outputs.
std::vector<HostTensor> eval_one(const std::vector<int64_t>& shape, const std::vector<double>& x,
                                 json node_json, const std::string& extra_input = "",
                                 const std::vector<int64_t>& extra_shape = {},
                                 const std::vector<double>& extra = {}) {
  json t = {{"schema", "replay-trace/1"},
            {"name", "op"},
            {"nodes", {node_json}},
            {"outputs", {"x"}}};  // the node is evaluated directly (a tuple is not an output)
  json x_in = tensor(shape, "float32");
  x_in["id"] = "x";
  t["inputs"] = {x_in};
  if (!extra_input.empty()) {
    json e = tensor(extra_shape, "float32");
    e["id"] = extra_input;
    t["inputs"].push_back(e);
  }
  Graph g = parse_trace(t, "<test>");
  std::map<int, HostTensor> in;
  in[0] = make_host_tensor(shape, DType::kFloat32);
  in[0].data.assign(x.begin(), x.end());
  if (!extra_input.empty()) {
    in[1] = make_host_tensor(extra_shape, DType::kFloat32);
    in[1].data.assign(extra.begin(), extra.end());
  }
  return reference_node(g, g.nodes[0], in);
}

}  // namespace

TEST(Reference, VarMeanPopulation) {
  auto out = eval_one({2, 4}, {1, 2, 3, 4, 10, 10, 10, 10},
                      {{"id", "vm"},
                       {"op", "aten.var_mean.correction"},
                       {"args", {ref("x"), {1}}},
                       {"kwargs", {{"correction", 0}, {"keepdim", true}}},
                       {"outputs", {tensor({2, 1}, "float32"), tensor({2, 1}, "float32")}}});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_DOUBLE_EQ(out[0].data[0], 1.25);
  EXPECT_DOUBLE_EQ(out[0].data[1], 0.0);
  EXPECT_DOUBLE_EQ(out[1].data[0], 2.5);
  EXPECT_DOUBLE_EQ(out[1].data[1], 10.0);
}

TEST(Reference, VarUnbiasedAndReduceOverDim0) {
  auto out = eval_one({2, 2}, {1, 5, 3, 9},
                      {{"id", "vm"},
                       {"op", "aten.var_mean.correction"},
                       {"args", {ref("x"), {0}}},
                       {"kwargs", {{"correction", 1}}},
                       {"outputs", {tensor({2}, "float32"), tensor({2}, "float32")}}});
  EXPECT_DOUBLE_EQ(out[0].data[0], 2.0);  // var(1, 3), N-1
  EXPECT_DOUBLE_EQ(out[0].data[1], 8.0);  // var(5, 9)
  EXPECT_DOUBLE_EQ(out[1].data[1], 7.0);
}

TEST(Reference, BroadcastBinaryAndScalar) {
  auto out = eval_one({2, 3}, {1, 2, 3, 4, 5, 6},
                      {{"id", "m"},
                       {"op", "aten.mul.Tensor"},
                       {"args", {ref("x"), ref("w")}},
                       {"outputs", {tensor({2, 3}, "float32")}}},
                      "w", {3}, {10, 100, 1000});
  EXPECT_EQ(out[0].data, (HostData{10, 200, 3000, 40, 500, 6000}));
  auto sub = eval_one({3}, {1, 2, 3},
                      {{"id", "s"},
                       {"op", "aten.sub.Tensor"},
                       {"args", {ref("x"), 0.5}},
                       {"kwargs", {{"alpha", 2}}},
                       {"outputs", {tensor({3}, "float32")}}});
  EXPECT_EQ(sub[0].data, (HostData{0, 1, 2}));
}

TEST(Reference, UnaryAndConvertRounding) {
  auto rs = eval_one({2}, {4, 0.25},
                     {{"id", "r"},
                      {"op", "aten.rsqrt.default"},
                      {"args", {ref("x")}},
                      {"outputs", {tensor({2}, "float32")}}});
  EXPECT_DOUBLE_EQ(rs[0].data[0], 0.5);
  EXPECT_DOUBLE_EQ(rs[0].data[1], 2.0);
  auto cv = eval_one({2}, {1.00390625, 1.01171875},
                     {{"id", "c"},
                      {"op", "prims.convert_element_type.default"},
                      {"args", {ref("x"), {{"dtype", "bfloat16"}}}},
                      {"outputs", {tensor({2}, "bfloat16")}}});
  EXPECT_DOUBLE_EQ(cv[0].data[0], 1.0);       // 1 + 2^-8: tie -> even
  EXPECT_DOUBLE_EQ(cv[0].data[1], 1.015625);  // 1 + 3*2^-8 -> 1 + 2^-6
  auto p = eval_one({2}, {-3, 2},
                    {{"id", "p"},
                     {"op", "aten.pow.Tensor_Scalar"},
                     {"args", {ref("x"), 2}},
                     {"outputs", {tensor({2}, "float32")}}});
  EXPECT_EQ(p[0].data, (HostData{9, 4}));
}

// log2, exp2 and the rounding functions (aten.log2 / exp2 / floor / ceil / trunc / round: torchao's
// power-of-two scales), by hand: round is half to even, as torch.round; the results are float32
// (the reference's float64 value rounded where the graph materializes it).
TEST(Reference, Log2Exp2AndRounding) {
  auto one = [](const char* op, std::vector<double> x) {
    const int64_t n = static_cast<int64_t>(x.size());
    return eval_one({n}, x,
                    {{"id", "y"},
                     {"op", op},
                     {"args", {ref("x")}},
                     {"outputs", {tensor({n}, "float32")}}})[0]
        .data;
  };
  const std::vector<double> r{-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.75, -3.25};
  EXPECT_EQ(one("aten.floor.default", r), (HostData{-3, -2, -1, 0, 1, 2, 2, -4}));
  EXPECT_EQ(one("aten.ceil.default", r), (HostData{-2, -1, -0.0, 1, 2, 3, 3, -3}));
  EXPECT_EQ(one("aten.trunc.default", r), (HostData{-2, -1, -0.0, 0, 1, 2, 2, -3}));
  EXPECT_EQ(one("aten.round.default", r), (HostData{-2, -2, -0.0, 0, 2, 2, 3, -3}));
  EXPECT_TRUE(std::signbit(one("aten.ceil.default", {-0.5})[0]));  // -0, as ATen's ceil
  EXPECT_EQ(one("aten.log2.default", {8, 0.25, 1, 1024}), (HostData{3, -2, 0, 10}));
  EXPECT_EQ(one("aten.exp2.default", {3, -2, 0, 10}), (HostData{8, 0.25, 1, 1024}));
  const auto l = one("aten.log2.default", {0, -1, 3});
  EXPECT_EQ(l[0], -INFINITY);
  EXPECT_TRUE(std::isnan(l[1]));
  EXPECT_EQ(l[2], static_cast<double>(static_cast<float>(std::log2(3.0))));  // rounded to float32
  // torchao's scale rounding: exp2(floor(log2(s)))
  auto vec = [](const HostData& d) { return std::vector<double>(d.begin(), d.end()); };
  const auto lg = vec(one("aten.log2.default", {128, 89.6, 127.99, 0.3}));
  EXPECT_EQ(one("aten.exp2.default", vec(one("aten.floor.default", lg))),
            (HostData{128, 64, 64, 0.25}));
}

TEST(Reference, ReductionsAndViews) {
  std::vector<double> x{1, -7, 3, 4, 5, 6};
  auto amax = eval_one({2, 3}, x,
                       {{"id", "a"},
                        {"op", "aten.amax.default"},
                        {"args", {ref("x"), {1}}},
                        {"outputs", {tensor({2}, "float32")}}});
  EXPECT_EQ(amax[0].data, (HostData{3, 6}));
  auto sum = eval_one({2, 3}, x,
                      {{"id", "s"},
                       {"op", "aten.sum.dim_IntList"},
                       {"args", {ref("x"), {0}, true}},
                       {"outputs", {tensor({1, 3}, "float32")}}});
  EXPECT_EQ(sum[0].data, (HostData{5, -2, 9}));
  auto perm =
      eval_one({2, 3}, x,
               {{"id", "p"},
                {"op", "aten.permute.default"},
                {"args", {ref("x"), {1, 0}}},
                {"outputs", {{{"shape", {3, 2}}, {"stride", {1, 3}}, {"dtype", "float32"}}}}});
  EXPECT_EQ(perm[0].data, (HostData{1, 4, -7, 5, 3, 6}));
  auto ex =
      eval_one({1, 3}, {1, 2, 3},
               {{"id", "e"},
                {"op", "aten.expand.default"},
                {"args", {ref("x"), {2, 3}}},
                {"outputs", {{{"shape", {2, 3}}, {"stride", {0, 1}}, {"dtype", "float32"}}}}});
  EXPECT_EQ(ex[0].data, (HostData{1, 2, 3, 1, 2, 3}));
  auto v = eval_one({2, 3}, x,
                    {{"id", "v"},
                     {"op", "aten.view.default"},
                     {"args", {ref("x"), {3, -1}}},
                     {"outputs", {tensor({3, 2}, "float32")}}});
  EXPECT_EQ(v[0].data, HostData(x.begin(), x.end()));
}

// The reference executor against PyTorch's own outputs (golden safetensors from the capture).
class ReferenceGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceGolden, MatchesPyTorch) {
  Graph g = load_trace(trace_path(GetParam()));
  ASSERT_TRUE(g.golden.has_value());
  auto golden = read_safetensors(g.golden->path);
  std::map<int, HostTensor> in;
  for (int v : g.inputs) in[v] = golden.at(g.values[v].name);
  auto vals = run_reference(g, in);
  const auto bounds = default_value_bounds(g);
  for (int v : g.outputs) {
    const HostTensor& want = golden.at(g.values[v].name);
    NumericsResult r = check_numerics(g.values[v].name, vals.at(v), want, bounds[v]);
    EXPECT_TRUE(r.pass()) << r.failure();
    EXPECT_EQ(r.max_ulp_err, 0);  // bit-exact with PyTorch's output
    // The check can fail: a perturbed weight element must be caught.
    std::map<int, HostTensor> bad = in;
    bad[g.inputs[1]].data[7] += 0.5;
    auto bad_vals = run_reference(g, bad);
    EXPECT_FALSE(check_numerics("perturbed", bad_vals.at(v), want, bounds[v]).pass());
  }
}

INSTANTIATE_TEST_SUITE_P(Traces, ReferenceGolden,
                         ::testing::Values("nanogpt_layernorm_fwd_2x8x1600",
                                           "llama_rmsnorm_fwd_2x8x4096"));

TEST(InputGeneration, SeededAndFollowsStats) {
  Graph g = load_trace(trace_path("nanogpt_layernorm_fwd_16x128x1600"));
  auto a = generate_inputs(g, 7), b = generate_inputs(g, 7), c = generate_inputs(g, 8);
  const HostTensor& x = a.at(g.inputs[0]);
  EXPECT_EQ(x.data, b.at(g.inputs[0]).data);
  EXPECT_NE(x.data, c.at(g.inputs[0]).data);
  double mean = 0, sq = 0;
  for (double v : x.data) mean += v;
  mean /= static_cast<double>(x.data.size());
  for (double v : x.data) sq += (v - mean) * (v - mean);
  const ValueStats& st = *g.values[g.inputs[0]].stats;
  EXPECT_NEAR(mean, st.mean, 0.01);
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(x.data.size())), st.std, 0.02);
  for (double v : x.data) {
    ASSERT_GE(v, st.min);
    ASSERT_LE(v, st.max);
    ASSERT_EQ(v, round_to(DType::kBFloat16, v));  // already representable in the dtype
  }
}

TEST(HostTensor, PackUnpackStrided) {
  HostTensor t = make_host_tensor({2, 3}, DType::kFloat32);
  t.data = {1, 2, 3, 4, 5, 6};
  TensorMeta transposed{{2, 3}, {1, 2}, DType::kBFloat16};
  auto bytes = pack(t, transposed);
  EXPECT_EQ(bytes.size(), 12u);
  EXPECT_EQ(unpack(bytes, transposed).data, t.data);
}

// The magnitudes NumericsBounds::addend_ulps measures against: max(|a|, |alpha b|) of the sub,
// broadcast, then carried through the transpose and the clone after it.
TEST(AddendMagnitude, FollowsTheAdditionThroughViewsAndCopies) {
  const Graph g = parse_trace_text(R"({
    "schema": "replay-trace/1", "name": "sub_t", "source": {"model": "test", "phase": "fwd"},
    "world_size": 1,
    "inputs": [{"id": "a", "shape": [2, 3], "dtype": "bfloat16"},
               {"id": "b", "shape": [3], "dtype": "bfloat16"}],
    "nodes": [
      {"id": "d", "op": "aten.sub.Tensor", "args": [{"ref": "a"}, {"ref": "b"}],
       "kwargs": {"alpha": -2}, "outputs": [{"shape": [2, 3], "dtype": "bfloat16"}]},
      {"id": "p", "op": "aten.permute.default", "args": [{"ref": "d"}, [1, 0]],
       "outputs": [{"shape": [3, 2], "stride": [1, 3], "dtype": "bfloat16"}]},
      {"id": "c", "op": "aten.clone.default", "args": [{"ref": "p"}],
       "outputs": [{"shape": [3, 2], "stride": [1, 3], "dtype": "bfloat16"}]},
      {"id": "e", "op": "aten.exp.default", "args": [{"ref": "c"}],
       "outputs": [{"shape": [3, 2], "stride": [1, 3], "dtype": "bfloat16"}]}],
    "outputs": ["c", "e"]})",
                                   "<sub_t>");
  auto in = generate_inputs(g, 5);
  const auto vals = run_reference(g, in);
  const HostTensor& a = vals.at(g.inputs[0]);
  const HostTensor& b = vals.at(g.inputs[1]);
  auto m = addend_magnitude(g, vals, g.outputs[0]);
  ASSERT_TRUE(m.has_value());
  ASSERT_EQ(m->meta.shape, (std::vector<int64_t>{3, 2}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      EXPECT_EQ(m->data[j * 2 + i],
                std::max(std::fabs(a.data[i * 3 + j]), 2 * std::fabs(b.data[j])))
          << i << "," << j;
  // exp computes: its values do not come from an addition.
  EXPECT_FALSE(addend_magnitude(g, vals, g.outputs[1]).has_value());
  EXPECT_FALSE(addend_magnitude(g, vals, g.inputs[0]).has_value());
}
