// The matmul rows (workloads/ops/matmul.cpp): the float64 references against a naive triple loop
// on generated inputs (odd sizes, transposed and batch-broadcast operands, broadcast addmm/baddbmm
// self, alpha/beta, tensorwise and rowwise _scaled_mm scales, bias), and the shape rules' and
// parsers' errors, both from the rule itself (std::invalid_argument) and when a trace is loaded
// (TraceError naming the node).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "impls/reference/reference.hpp"
#include "test_util.hpp"
#include "workloads/ir/error.hpp"
#include "workloads/ir/tolerance.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/ops/op.hpp"

using namespace replay;
using namespace replay::test;
using nlohmann::json;

namespace {

const json kPositive = {{"mean", 1}, {"std", 0.25}, {"min", 0.25}, {"max", 2}};

struct Evaluated {
  Graph g;
  std::vector<HostTensor> in;  // by operand position of the example's inputs
  HostTensor out;              // the reference's output (rounded to a narrow output dtype)
};

// The op's example trace on generated inputs, through the reference executor.
Evaluated evaluate(const std::string& op, const json& example, uint64_t seed) {
  Evaluated e{parse_trace(example_trace(op, example), "<test>"), {}, {}};
  auto inputs = generate_inputs(e.g, seed);
  for (int v : e.g.inputs) e.in.push_back(inputs.at(v));
  e.out = run_reference(e.g, inputs).at(e.g.nodes[0].outputs[0]);
  return e;
}

// Naive sum_k a[b, m, k] * b[b, k, n] in float64 (a and b row-major logical values).
std::vector<double> naive(const HostTensor& a, const HostTensor& b, int64_t batch, int64_t M,
                          int64_t K, int64_t N) {
  std::vector<double> c(static_cast<size_t>(batch * M * N), 0.0);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += a.data[(i * M + m) * K + k] * b.data[(i * K + k) * N + n];
        c[(i * M + m) * N + n] = s;
      }
  return c;
}

// Element i of `t` broadcast to a row-major [batch, M, N] index (trailing dims aligned).
double broadcast_at(const HostTensor& t, int64_t i, int64_t M, int64_t N, int64_t batch) {
  const int64_t n = i % N, m = (i / N) % M, b = i / (M * N);
  const std::vector<int64_t> idx = {b, m, n};
  const auto& s = t.meta.shape;
  int64_t off = 0, mul = 1;
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    const int64_t j = idx[3 - s.size() + d];
    off += (s[d] == 1 ? 0 : j) * mul;
    mul *= s[d];
  }
  (void)batch;
  return t.data[off];
}

// Reference vs expected values: float64 outputs to float64 roundoff of the sum of |terms|;
// narrower outputs (float32 included: the reference materializes it rounded, as PyTorch does)
// after rounding the expectation to the dtype, within one ulp (the two float64 sums may straddle
// a rounding boundary).
void expect_close(const HostTensor& got, const std::vector<double>& want,
                  const std::vector<double>& scale, const std::string& what) {
  ASSERT_EQ(got.data.size(), want.size()) << what;
  const DType dt = got.meta.dtype;
  for (size_t i = 0; i < want.size(); ++i) {
    if (dt == DType::kFloat64) {
      ASSERT_NEAR(got.data[i], want[i], 1e-13 * (scale[i] + 1e-300)) << what << " element " << i;
    } else {
      const double t = round_to(dt, want[i]);
      ASSERT_LE(std::fabs(got.data[i] - t), ulp_of(dt, t)) << what << " element " << i;
    }
  }
}

std::vector<double> abs_scale(const HostTensor& a, const HostTensor& b, int64_t batch, int64_t M,
                              int64_t K, int64_t N) {
  HostTensor aa = a, bb = b;
  for (double& v : aa.data) v = std::fabs(v);
  for (double& v : bb.data) v = std::fabs(v);
  return naive(aa, bb, batch, M, K, N);
}

// A trace with one node whose recorded output is `out` (to test the loader's checks).
json trace_with(const std::string& op, const std::vector<json>& inputs, json args, json kwargs,
                json out) {
  json t = {{"schema", "replay-trace/1"},
            {"name", "t"},
            {"inputs", json::array()},
            {"nodes", json::array()},
            {"outputs", {"y"}}};
  for (size_t i = 0; i < inputs.size(); ++i) {
    json j = inputs[i];
    j["id"] = "in" + std::to_string(i);
    t["inputs"].push_back(j);
  }
  t["nodes"].push_back(
      {{"id", "y"}, {"op", op}, {"args", args}, {"kwargs", kwargs}, {"outputs", {out}}});
  return t;
}

// Loading `t` fails with a TraceError at node 'y' whose message contains `needle`.
void expect_trace_error(const json& t, const std::string& needle) {
  try {
    parse_trace(t, "<bad>");
    ADD_FAILURE() << "accepted: " << t["nodes"][0].dump();
  } catch (const TraceError& e) {
    EXPECT_EQ(e.node(), "y");
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// The shape rule itself (example_trace runs parse + infer) throws std::invalid_argument.
void expect_rule_error(const std::string& op, const json& example, const std::string& needle) {
  try {
    example_trace(op, example);
    ADD_FAILURE() << op << " accepted " << example.dump();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(MatmulReference, MmMatchesNaiveLoop) {
  struct C {
    int64_t M, K, N;
    std::string dt;
    bool a_t, b_t;  // column-major operands (the reference sees logical values either way)
  };
  for (const C& c : {C{7, 13, 5, "float32", false, false}, C{1, 1, 1, "float32", false, false},
                     C{9, 16, 11, "float32", true, true}, C{7, 13, 5, "bfloat16", false, true},
                     C{4, 33, 6, "float16", true, false}, C{3, 5, 2, "float64", false, false}}) {
    for (uint64_t seed : {1u, 2u}) {
      json ex = {{"inputs",
                  {example_input({c.M, c.K}, c.dt,
                                 c.a_t ? std::vector<int64_t>{1, c.M} : std::vector<int64_t>{}),
                   example_input({c.K, c.N}, c.dt,
                                 c.b_t ? std::vector<int64_t>{1, c.K} : std::vector<int64_t>{})}},
                 {"args", input_refs(2)}};
      Evaluated e = evaluate("aten.mm.default", ex, seed);
      ASSERT_EQ(e.out.meta.shape, (std::vector<int64_t>{c.M, c.N}));
      EXPECT_EQ(e.out.meta.dtype, *parse_dtype(c.dt));
      expect_close(e.out, naive(e.in[0], e.in[1], 1, c.M, c.K, c.N),
                   abs_scale(e.in[0], e.in[1], 1, c.M, c.K, c.N), c.dt + " mm");
    }
  }
}

TEST(MatmulReference, EmptyInnerDimGivesZerosOrBetaSelf) {
  Evaluated e =
      evaluate("aten.mm.default",
               {{"inputs", {example_input({3, 0}, "float32"), example_input({0, 4}, "float32")}},
                {"args", input_refs(2)}},
               1);
  ASSERT_EQ(e.out.data.size(), 12u);
  for (double v : e.out.data) EXPECT_EQ(v, 0.0);
  Evaluated f = evaluate("aten.addmm.default",
                         {{"inputs",
                           {example_input({4}, "float32"), example_input({3, 0}, "float32"),
                            example_input({0, 4}, "float32")}},
                          {"args", input_refs(3)},
                          {"kwargs", {{"beta", 2}}}},
                         1);
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(f.out.data[i], 2 * f.in[0].data[i % 4]);
}

TEST(MatmulReference, AddmmBroadcastSelfAlphaBeta) {
  const int64_t M = 6, K = 9, N = 5;
  struct C {
    std::vector<int64_t> self;
    double beta, alpha;
    std::string dt;
  };
  for (const C& c :
       {C{{N}, 1, 1, "float32"}, C{{M, 1}, 0.5, 2, "float32"}, C{{1, N}, -1, 0.25, "float32"},
        C{{}, 3, 1, "float32"}, C{{M, N}, 0.5, 2, "bfloat16"}, C{{N}, 1, -0.5, "float16"}}) {
    json ex = {{"inputs",
                {example_input(c.self, c.dt), example_input({M, K}, c.dt),
                 example_input({K, N}, c.dt, {1, K})}},
               {"args", input_refs(3)},
               {"kwargs", {{"beta", c.beta}, {"alpha", c.alpha}}}};
    Evaluated e = evaluate("aten.addmm.default", ex, 3);
    auto prod = naive(e.in[1], e.in[2], 1, M, K, N);
    auto scale = abs_scale(e.in[1], e.in[2], 1, M, K, N);
    for (int64_t i = 0; i < M * N; ++i) {
      const double s = broadcast_at(e.in[0], i, M, N, 1);
      prod[i] = c.beta * s + c.alpha * prod[i];
      scale[i] = std::fabs(c.beta * s) + std::fabs(c.alpha) * scale[i];
    }
    expect_close(e.out, prod, scale, "addmm self " + shape_str(c.self));
  }
}

TEST(MatmulReference, AddmmBetaZeroIgnoresSelfNaN) {
  const OpDef& d = op_def(Op::kAddmm);
  HostTensor self = make_host_tensor({2}, DType::kFloat32);
  self.data = {std::numeric_limits<double>::quiet_NaN(), INFINITY};
  HostTensor a = make_host_tensor({2, 3}, DType::kFloat32);
  a.data = {1, 2, 3, 4, 5, 6};
  HostTensor b = make_host_tensor({3, 2}, DType::kFloat32);
  b.data = {1, 0, 0, 1, 1, 1};
  Node n;
  n.op = Op::kAddmm;
  n.beta = 0;
  n.alpha = 2;
  std::vector<TensorMeta> out = {{{2, 2}, {2, 1}, DType::kFloat32}};
  auto r = d.reference(RefArgs{n, {&self, &a, &b}, out});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].data, (HostData{8, 10, 20, 22}));
  n.beta = 1;  // with beta != 0 the NaN/Inf of self propagate
  r = d.reference(RefArgs{n, {&self, &a, &b}, out});
  EXPECT_TRUE(std::isnan(r[0].data[0]));
  EXPECT_TRUE(std::isinf(r[0].data[1]));
}

TEST(MatmulReference, BmmAndBaddbmmMatchNaiveLoop) {
  const int64_t B = 3, M = 5, K = 7, N = 4;
  // bmm with a batch-broadcast first operand (batch stride 0) and a transposed second one.
  json ex = {{"inputs",
              {example_input({B, M, K}, "float32", {0, K, 1}),
               example_input({B, K, N}, "float32", {K * N, 1, K})}},
             {"args", input_refs(2)}};
  Evaluated e = evaluate("aten.bmm.default", ex, 4);
  ASSERT_EQ(e.out.meta.shape, (std::vector<int64_t>{B, M, N}));
  for (int64_t i = 1; i < B; ++i)  // the broadcast operand's matrices are one matrix
    for (int64_t j = 0; j < M * K; ++j) ASSERT_EQ(e.in[0].data[i * M * K + j], e.in[0].data[j]);
  expect_close(e.out, naive(e.in[0], e.in[1], B, M, K, N), abs_scale(e.in[0], e.in[1], B, M, K, N),
               "bmm");

  for (const std::vector<int64_t>& self :
       std::vector<std::vector<int64_t>>{{M, N}, {B, 1, N}, {B, M, N}, {1}}) {
    json bx = {{"inputs",
                {example_input(self, "float32"), example_input({B, M, K}, "float32"),
                 example_input({B, K, N}, "float32")}},
               {"args", input_refs(3)},
               {"kwargs", {{"beta", 0.5}, {"alpha", -2}}}};
    Evaluated f = evaluate("aten.baddbmm.default", bx, 5);
    auto want = naive(f.in[1], f.in[2], B, M, K, N);
    auto scale = abs_scale(f.in[1], f.in[2], B, M, K, N);
    for (int64_t i = 0; i < B * M * N; ++i) {
      const double s = broadcast_at(f.in[0], i, M, N, B);
      want[i] = 0.5 * s - 2 * want[i];
      scale[i] = 0.5 * std::fabs(s) + 2 * scale[i];
    }
    expect_close(f.out, want, scale, "baddbmm self " + shape_str(self));
  }
}

TEST(MatmulReference, ScaledMmTensorwiseAndRowwise) {
  const int64_t M = 5, K = 32, N = 16;
  struct C {
    bool rowwise;
    std::string bias, out, b_dt;
  };
  for (const C& c :
       {C{false, "", "bfloat16", "float8_e4m3fn"}, C{false, "bfloat16", "float32", "float8_e5m2"},
        C{true, "", "float32", "float8_e4m3fn"}, C{true, "bfloat16", "bfloat16", "float8_e4m3fn"},
        C{true, "float32", "float16", "float8_e4m3fn"}}) {
    std::vector<json> inputs = {
        example_input({M, K}, "float8_e4m3fn"), example_input({K, N}, c.b_dt, {1, K}),
        example_input(c.rowwise ? std::vector<int64_t>{M, 1} : std::vector<int64_t>{}, "float32",
                      {}, kPositive),
        example_input(c.rowwise ? std::vector<int64_t>{1, N} : std::vector<int64_t>{1}, "float32",
                      {}, kPositive)};
    json kwargs = {{"out_dtype", {{"dtype", c.out}}}};
    if (!c.bias.empty()) {
      inputs.push_back(example_input({N}, c.bias));
      kwargs["bias"] = test::ref("in4");
    }
    Evaluated e = evaluate("aten._scaled_mm.default",
                           {{"inputs", inputs}, {"args", input_refs(4)}, {"kwargs", kwargs}}, 6);
    EXPECT_EQ(e.out.meta.dtype, *parse_dtype(c.out));
    auto want = naive(e.in[0], e.in[1], 1, M, K, N);
    auto scale = abs_scale(e.in[0], e.in[1], 1, M, K, N);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        const double s = e.in[2].data[c.rowwise ? m : 0] * e.in[3].data[c.rowwise ? n : 0];
        const int64_t i = m * N + n;
        want[i] *= s;
        scale[i] *= s;
        if (!c.bias.empty()) {
          want[i] += e.in[4].data[n];
          scale[i] += std::fabs(e.in[4].data[n]);
        }
      }
    expect_close(
        e.out, want, scale,
        "_scaled_mm rowwise=" + std::to_string(c.rowwise) + " bias=" + c.bias + " out=" + c.out);
  }
}

TEST(MatmulParse, PositionalAndKeywordForms) {
  // addmm's beta and alpha by keyword or by position.
  json kw = trace_with("aten.addmm.default",
                       {example_input({4}, "float32"), example_input({3, 2}, "float32"),
                        example_input({2, 4}, "float32")},
                       input_refs(3), {{"beta", 0.5}, {"alpha", 3}}, tensor({3, 4}, "float32"));
  Graph g = parse_trace(kw, "<kw>");
  EXPECT_EQ(g.nodes[0].beta, 0.5);
  EXPECT_EQ(g.nodes[0].alpha, 3);
  json pos = kw;
  pos["nodes"][0]["kwargs"] = json::object();
  pos["nodes"][0]["args"] = {test::ref("in0"), test::ref("in1"), test::ref("in2"), 0.5, 3};
  Graph h = parse_trace(pos, "<pos>");
  EXPECT_EQ(h.nodes[0].beta, 0.5);
  EXPECT_EQ(h.nodes[0].alpha, 3);

  // _scaled_mm fully positional: bias None, scale_result None, out_dtype, use_fast_accum.
  std::vector<json> f8 = {example_input({4, 16}, "float8_e4m3fn"),
                          example_input({16, 32}, "float8_e4m3fn", {1, 16}),
                          example_input({}, "float32"), example_input({}, "float32")};
  json s = trace_with("aten._scaled_mm.default", f8,
                      {test::ref("in0"),
                       test::ref("in1"),
                       test::ref("in2"),
                       test::ref("in3"),
                       nullptr,
                       nullptr,
                       {{"dtype", "bfloat16"}},
                       true},
                      json::object(), tensor({4, 32}, "bfloat16"));
  Graph sg = parse_trace(s, "<scaled>");
  const Node& n = sg.nodes[0];
  ASSERT_EQ(n.operands.size(), 6u);
  EXPECT_TRUE(n.operands[4].none);
  EXPECT_TRUE(n.operands[5].none);
  EXPECT_EQ(n.dtype, DType::kBFloat16);
  EXPECT_TRUE(n.flag);
  // Keyword form, out_dtype absent: the output has self's dtype.
  json k = trace_with("aten._scaled_mm.default", f8, input_refs(4), {{"use_fast_accum", false}},
                      tensor({4, 32}, "float8_e4m3fn"));
  Graph kg = parse_trace(k, "<scaled kw>");
  EXPECT_EQ(kg.nodes[0].dtype, DType::kFloat8E4M3);
  EXPECT_FALSE(kg.nodes[0].flag);
  // The recorded output dtype is checked against out_dtype.
  json wrong = s;
  wrong["nodes"][0]["outputs"][0] = tensor({4, 32}, "float32");
  expect_trace_error(wrong, "recorded output dtype float32");
}

TEST(MatmulShapeRule, Errors) {
  // Inner dims.
  expect_rule_error(
      "aten.mm.default",
      {{"inputs", {example_input({3, 4}, "float32"), example_input({5, 6}, "float32")}},
       {"args", input_refs(2)}},
      "cannot be multiplied (inner dims 4 != 5)");
  expect_rule_error(
      "aten.bmm.default",
      {{"inputs", {example_input({2, 3, 4}, "float32"), example_input({2, 5, 6}, "float32")}},
       {"args", input_refs(2)}},
      "inner dims 4 != 5");
  // Ranks.
  expect_rule_error(
      "aten.mm.default",
      {{"inputs", {example_input({2, 3, 4}, "float32"), example_input({4, 5}, "float32")}},
       {"args", input_refs(2)}},
      "expected self to be 2-D");
  expect_rule_error(
      "aten.bmm.default",
      {{"inputs", {example_input({3, 4}, "float32"), example_input({4, 5}, "float32")}},
       {"args", input_refs(2)}},
      "expected self to be 3-D");
  expect_rule_error(
      "aten.bmm.default",
      {{"inputs", {example_input({2, 3, 4}, "float32"), example_input({3, 4, 5}, "float32")}},
       {"args", input_refs(2)}},
      "same number of matrices");
  // Dtypes.
  expect_rule_error(
      "aten.mm.default",
      {{"inputs", {example_input({3, 4}, "bfloat16"), example_input({4, 5}, "float32")}},
       {"args", input_refs(2)}},
      "same dtype");
  expect_rule_error("aten.addmm.default",
                    {{"inputs",
                      {example_input({5}, "float32"), example_input({3, 4}, "bfloat16"),
                       example_input({4, 5}, "bfloat16")}},
                     {"args", input_refs(3)}},
                    "same dtype");
  expect_rule_error("aten.mm.default",
                    {{"inputs", {example_input({3, 4}, "int64"), example_input({4, 5}, "int64")}},
                     {"args", input_refs(2)}},
                    "matmuls of int64 tensors are not supported");
  // addmm self not broadcastable to [M, N].
  expect_rule_error("aten.addmm.default",
                    {{"inputs",
                      {example_input({3}, "float32"), example_input({3, 4}, "float32"),
                       example_input({4, 5}, "float32")}},
                     {"args", input_refs(3)}},
                    "expected self to broadcast to the product's shape [3, 5]");
  expect_rule_error("aten.addmm.default",
                    {{"inputs",
                      {example_input({2, 3, 5}, "float32"), example_input({3, 4}, "float32"),
                       example_input({4, 5}, "float32")}},
                     {"args", input_refs(3)}},
                    "expected self to broadcast");
  // _scaled_mm: K and N multiples of 16, float8 operands, scale shapes, bias.
  auto scaled = [](std::vector<int64_t> a, std::vector<int64_t> b, std::vector<int64_t> sa,
                   std::vector<int64_t> sb, std::string adt = "float8_e4m3fn") {
    return json{{"inputs",
                 {example_input(a, adt), example_input(b, "float8_e4m3fn"),
                  example_input(sa, "float32"), example_input(sb, "float32")}},
                {"args", input_refs(4)},
                {"kwargs", {{"out_dtype", {{"dtype", "bfloat16"}}}}}};
  };
  expect_rule_error("aten._scaled_mm.default", scaled({8, 24}, {24, 16}, {}, {}),
                    "K and N must be multiples of 16");
  expect_rule_error("aten._scaled_mm.default", scaled({8, 32}, {32, 20}, {}, {}),
                    "K and N must be multiples of 16");
  expect_rule_error("aten._scaled_mm.default", scaled({8, 32}, {32, 16}, {}, {}, "bfloat16"),
                    "expected float8 matrices");
  expect_rule_error("aten._scaled_mm.default", scaled({8, 32}, {32, 16}, {8}, {16}),
                    "expected tensorwise scales");
  expect_rule_error("aten._scaled_mm.default", scaled({8, 32}, {32, 16}, {8, 1}, {}),
                    "expected tensorwise scales");
  json bad_bias = scaled({8, 32}, {32, 16}, {}, {});
  bad_bias["inputs"].push_back(example_input({8}, "bfloat16"));
  bad_bias["kwargs"]["bias"] = test::ref("in4");
  expect_rule_error("aten._scaled_mm.default", bad_bias, "expected bias to be");
}

TEST(MatmulShapeRule, ErrorsFromATraceAreTraceErrors) {
  expect_trace_error(
      trace_with("aten.mm.default",
                 {example_input({3, 4}, "float32"), example_input({5, 6}, "float32")},
                 input_refs(2), json::object(), tensor({3, 6}, "float32")),
      "inner dims 4 != 5");
  expect_trace_error(
      trace_with("aten.mm.default",
                 {example_input({3, 4}, "bfloat16"), example_input({4, 6}, "float16")},
                 input_refs(2), json::object(), tensor({3, 6}, "bfloat16")),
      "same dtype");
  expect_trace_error(
      trace_with("aten.bmm.default",
                 {example_input({3, 4}, "float32"), example_input({4, 6}, "float32")},
                 input_refs(2), json::object(), tensor({3, 6}, "float32")),
      "3-D");
  expect_trace_error(
      trace_with("aten.mm.default",
                 {example_input({3, 4}, "float32"), example_input({4, 6}, "float32")},
                 input_refs(2), json::object(), tensor({3, 7}, "float32")),
      "recorded output shape [3, 7]");
  const std::vector<json> f8 = {example_input({8, 24}, "float8_e4m3fn"),
                                example_input({24, 16}, "float8_e4m3fn", {1, 24}),
                                example_input({}, "float32"), example_input({}, "float32")};
  expect_trace_error(
      trace_with("aten._scaled_mm.default", f8, input_refs(4),
                 {{"out_dtype", {{"dtype", "bfloat16"}}}}, tensor({8, 16}, "bfloat16")),
      "multiples of 16");
  // e5m2 x e5m2 and a scale_result are refused by the parser.
  const std::vector<json> e5 = {example_input({8, 32}, "float8_e5m2"),
                                example_input({32, 16}, "float8_e5m2", {1, 32}),
                                example_input({}, "float32"), example_input({}, "float32")};
  expect_trace_error(
      trace_with("aten._scaled_mm.default", e5, input_refs(4),
                 {{"out_dtype", {{"dtype", "bfloat16"}}}}, tensor({8, 16}, "bfloat16")),
      "two float8_e5m2 matrices");
  std::vector<json> sr = e5;
  sr[0]["dtype"] = "float8_e4m3fn";
  sr.push_back(example_input({}, "float32"));
  expect_trace_error(
      trace_with("aten._scaled_mm.default", sr, input_refs(4),
                 {{"scale_result", test::ref("in4")}, {"out_dtype", {{"dtype", "bfloat16"}}}},
                 tensor({8, 16}, "bfloat16")),
      "scale_result");
  // A non-tensor where an optional tensor goes.
  expect_trace_error(trace_with("aten._scaled_mm.default", sr, input_refs(4), {{"bias", 3}},
                                tensor({8, 16}, "float8_e4m3fn")),
                     "expected a tensor reference");
}
