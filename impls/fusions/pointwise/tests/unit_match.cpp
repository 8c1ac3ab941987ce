// pointwise matcher: the chains the other fusions leave, grouped over one iteration space, on the
// bundled captures (GPT-2's gelu_new under the default partitioner, which matmul_epilogue
// declines) and on synthetic graphs: joining through reshape views, one dense layout, splitting
// before an outside reader that comes before the anchor, the declines of the neighbours that
// cannot join; and on every bundled trace: nothing claimed twice, two ops or more per region.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "impls/fusions/pointwise/params.hpp"
#include "impls/fusions/registry.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/ops/op.hpp"
#include "workloads/plan/plan.hpp"

namespace replay::fusions {
extern const FusionSpec pointwise;
}

using namespace replay;
using namespace replay::test;
using nlohmann::json;
using pointwise::Params;

namespace {

std::vector<const Region*> pw_regions(const Plan& p) {
  std::vector<const Region*> out;
  for (const Region& r : p.regions)
    if (r.fusion == &fusions::pointwise) out.push_back(&r);
  return out;
}

std::vector<std::string> ids(const Graph& g, const Region& r) {
  std::vector<std::string> out;
  for (int n : r.nodes) out.push_back(g.nodes[n].id);
  return out;
}

std::vector<std::string> names(const Graph& g, const std::vector<int>& vs) {
  std::vector<std::string> out;
  for (int v : vs) out.push_back(g.values[v].name);
  std::sort(out.begin(), out.end());
  return out;
}

std::string pw_declines(const Graph& g, const Plan& p) {
  std::string s;
  for (const auto& d : p.declined)
    if (d.fusion == "pointwise") s += g.nodes[d.node].id + ": " + d.reason + "\n";
  return s;
}

const Params& params(const Region* r) {
  return std::any_cast<const Params&>(r->params);
}

using V = std::vector<std::string>;

json node(const std::string& id, const char* op, json args, json out,
          json kwargs = json::object()) {
  return {{"id", id}, {"op", op}, {"args", args}, {"kwargs", kwargs}, {"outputs", {out}}};
}

json input(const std::string& id, std::vector<int64_t> shape, const std::string& dt = "float32") {
  json j = tensor(shape, dt);
  j["id"] = id;
  return j;
}

json strided(std::vector<int64_t> shape, std::vector<int64_t> stride, const std::string& dt) {
  return {{"shape", shape}, {"stride", stride}, {"dtype", dt}};
}

Graph synthetic(json inputs, json nodes, json outputs) {
  return parse_trace({{"schema", "replay-trace/1"},
                      {"name", "synthetic_pointwise"},
                      {"source", {{"model", "synthetic"}, {"phase", "fwd"}}},
                      {"world_size", 1},
                      {"inputs", inputs},
                      {"nodes", nodes},
                      {"outputs", outputs}},
                     "synthetic_pointwise");
}

}  // namespace

// GPT-2's gelu_new under the default partitioner returns three of its intermediates, which
// matmul_epilogue's one table cannot write (it takes the addmm alone and declines the chain): the
// pointwise fusion takes the whole chain, writing the saved intermediates beside the result, the
// returned alias of tanh a tail of it.
TEST(PointwiseMatch, Gpt2DefaultGeluNewChainWithItsSavedIntermediates) {
  for (const char* t : {"byog/linear/gpt2_mlp_default_train_fwd_2x8x128",
                        "byog/linear/gpt2_mlp_default_train_fwd_8x1024x1024"}) {
    Graph g = load_trace(trace_path(t));
    Plan p = make_plan(g, fusion_registry());
    const auto regs = pw_regions(p);
    ASSERT_EQ(regs.size(), 1u) << t << "\n" << pw_declines(g, p);
    const Region& r = *regs[0];
    EXPECT_EQ(params(&r).ops,
              (V{"aten.mul.Tensor", "aten.pow.Tensor_Scalar", "aten.mul.Tensor", "aten.add.Tensor",
                 "aten.mul.Tensor", "aten.tanh.default", "aten.add.Tensor", "aten.mul.Tensor"}))
        << t;
    EXPECT_EQ(names(g, r.inputs), V{"view_1"}) << t;
    EXPECT_EQ(names(g, r.outputs), (V{"add_1", "mul", "mul_3", "tanh"})) << t;
    EXPECT_EQ(ids(g, r),
              (V{"mul", "pow_1", "mul_1", "add", "mul_2", "tanh", "alias", "add_1", "mul_3"}))
        << t;
    // the GEMMs stay matmul_epilogue's
    int epilogues = 0;
    for (const Region& e : p.regions) epilogues += e.fusion->name == "matmul_epilogue";
    EXPECT_EQ(epilogues, 2) << t;
    for (const auto& d : p.dropped) EXPECT_NE(d.fusion, "pointwise") << d.reason;
  }
}

// An outside node reading an intermediate before the chain's last op (a row sum the chain then
// multiplies by): the group is cut before that reader, the rest grouped again.
TEST(PointwiseMatch, CutBeforeAnOutsideReaderThatComesBeforeTheAnchor) {
  Graph g = synthetic(
      {input("x", {4, 8})},
      {node("m1", "aten.mul.Tensor", {ref("x"), 2.0}, tensor({4, 8}, "float32")),
       node("s", "aten.sum.dim_IntList", {ref("m1"), {1}, true}, tensor({4, 1}, "float32")),
       node("m2", "aten.add.Tensor", {ref("m1"), 1.0}, tensor({4, 8}, "float32")),
       node("m3", "aten.mul.Tensor", {ref("m2"), ref("s")}, tensor({4, 8}, "float32")),
       node("m4", "aten.neg.default", {ref("m3")}, tensor({4, 8}, "float32"))},
      {"m4"});
  Plan p = make_plan(g, fusion_registry());
  const auto regs = pw_regions(p);
  ASSERT_EQ(regs.size(), 1u) << pw_declines(g, p);
  EXPECT_EQ(ids(g, *regs[0]), (V{"m2", "m3", "m4"}));
  EXPECT_EQ(names(g, regs[0]->inputs), (V{"m1", "s"}));
  EXPECT_EQ(names(g, regs[0]->outputs), V{"m4"});
}

// Members joined through a reshape view of a row-major value (the view an alias inside the
// chain); the bfloat16 input's upcast and the final downcast are members too.
TEST(PointwiseMatch, JoinsThroughAReshapeViewAndTakesTheCasts) {
  Graph g =
      synthetic({input("x", {2, 3, 8}, "bfloat16")},
                {node("c1", "prims.convert_element_type.default",
                      {ref("x"), {{"dtype", "float32"}}}, tensor({2, 3, 8}, "float32")),
                 node("v", "aten.view.default", {ref("c1"), {6, 8}}, tensor({6, 8}, "float32")),
                 node("m", "aten.mul.Tensor", {ref("v"), 2.0}, tensor({6, 8}, "float32")),
                 node("c2", "prims.convert_element_type.default",
                      {ref("m"), {{"dtype", "bfloat16"}}}, tensor({6, 8}, "bfloat16"))},
                {"c2"});
  Plan p = make_plan(g, fusion_registry());
  const auto regs = pw_regions(p);
  ASSERT_EQ(regs.size(), 1u) << pw_declines(g, p);
  EXPECT_EQ(ids(g, *regs[0]), (V{"c1", "v", "m", "c2"}));
  EXPECT_EQ(names(g, regs[0]->inputs), V{"x"});
  EXPECT_EQ(names(g, regs[0]->outputs), V{"c2"});
  EXPECT_TRUE(params(regs[0]).linear);
  EXPECT_EQ(params(regs[0]).numel, 48);
}

// A permute between two ops changes the element order: the op before it stays alone (eager), the
// two after it share one dense (transposed) layout and are one group reading the permuted view.
TEST(PointwiseMatch, APermuteSplitsAndADenseTransposedChainIsOneGroup) {
  Graph g = synthetic(
      {input("x", {4, 8})},
      {node("a", "aten.mul.Tensor", {ref("x"), 2.0}, tensor({4, 8}, "float32")),
       node("t", "aten.permute.default", {ref("a"), {1, 0}}, strided({8, 4}, {1, 8}, "float32")),
       node("b", "aten.add.Tensor", {ref("t"), 1.0}, strided({8, 4}, {1, 8}, "float32")),
       node("c", "aten.mul.Tensor", {ref("b"), 3.0}, strided({8, 4}, {1, 8}, "float32"))},
      {"c"});
  Plan p = make_plan(g, fusion_registry());
  const auto regs = pw_regions(p);
  ASSERT_EQ(regs.size(), 1u) << pw_declines(g, p);
  EXPECT_EQ(ids(g, *regs[0]), (V{"b", "c"}));
  EXPECT_EQ(names(g, regs[0]->inputs), V{"t"});
  EXPECT_FALSE(params(regs[0]).linear);
}

// Siblings reading one tensor over one iteration space (the cos and sin of an angle table) are
// one kernel, reading it once; not where the joined set would run after an outside reader of its
// values (a sum of the cosine that the sine's chain reads).
TEST(PointwiseMatch, SiblingsReadingOneTensorAreOneKernel) {
  {
    Graph g = synthetic({input("x", {4, 8})},
                        {node("a", "aten.cos.default", {ref("x")}, tensor({4, 8}, "float32")),
                         node("a2", "aten.mul.Tensor", {ref("a"), 2.0}, tensor({4, 8}, "float32")),
                         node("b", "aten.sin.default", {ref("x")}, tensor({4, 8}, "float32")),
                         node("b2", "aten.mul.Tensor", {ref("b"), 3.0}, tensor({4, 8}, "float32"))},
                        {"a2", "b2"});
    Plan p = make_plan(g, fusion_registry());
    const auto regs = pw_regions(p);
    ASSERT_EQ(regs.size(), 1u) << pw_declines(g, p);
    EXPECT_EQ(ids(g, *regs[0]), (V{"a", "a2", "b", "b2"}));
    EXPECT_EQ(names(g, regs[0]->inputs), V{"x"});
    EXPECT_EQ(names(g, regs[0]->outputs), (V{"a2", "b2"}));
  }
  {
    Graph g =
        synthetic({input("x", {4, 8})},
                  {node("a", "aten.cos.default", {ref("x")}, tensor({4, 8}, "float32")),
                   node("s", "aten.sum.default", {ref("a")}, tensor({}, "float32")),
                   node("b", "aten.sin.default", {ref("x")}, tensor({4, 8}, "float32")),
                   node("b2", "aten.mul.Tensor", {ref("b"), ref("s")}, tensor({4, 8}, "float32"))},
                  {"b2"});
    Plan p = make_plan(g, fusion_registry());
    const auto regs = pw_regions(p);
    ASSERT_EQ(regs.size(), 1u) << pw_declines(g, p);
    EXPECT_EQ(ids(g, *regs[0]), (V{"b", "b2"}));
  }
}

// A widened input (T5's default partition saves x and x.float()) is computed in the canonical form
// by a convert of x that no captured node stands for: never a member, so no chain writes the
// graph input; the chain reads it.
TEST(PointwiseMatch, AWidenedInputsConvertIsNoMember) {
  json xf = input("xf", {8, 64});
  xf["widened_from"] = "x";
  Graph g = synthetic({input("x", {8, 64}, "bfloat16"), xf},
                      {node("m", "aten.mul.Tensor", {ref("xf"), 2.0}, tensor({8, 64}, "float32")),
                       node("th", "aten.tanh.default", {ref("m")}, tensor({8, 64}, "float32")),
                       node("s", "aten.sum.dim_IntList", {ref("xf"), {1}}, tensor({8}, "float32"))},
                      {"th", "s"});
  Plan p = make_plan(g, fusion_registry());
  const auto regs = pw_regions(p);
  ASSERT_EQ(regs.size(), 1u) << pw_declines(g, p);
  EXPECT_EQ(ids(g, *regs[0]), (V{"m", "th"}));
  EXPECT_EQ(names(g, regs[0]->inputs), V{"xf"});
  EXPECT_EQ(names(g, regs[0]->outputs), V{"th"});
}

// A clone of the chain's result that a GEMM region absorbed as the clone of its input stays the
// GEMM's; the chain writes the value it passes on (not dropped for the overlap).
TEST(PointwiseMatch, ACloneAnEarlierRegionAbsorbedStaysThere) {
  Graph g =
      synthetic({input("x", {64, 32}, "bfloat16"), input("w", {32, 48}, "bfloat16"),
                 input("b", {48}, "bfloat16")},
                {node("e", "aten.exp.default", {ref("x")}, tensor({64, 32}, "bfloat16")),
                 node("m", "aten.mul.Tensor", {ref("e"), 2.0}, tensor({64, 32}, "bfloat16")),
                 node("c", "aten.clone.default", {ref("m")}, tensor({64, 32}, "bfloat16")),
                 node("mm", "aten.mm.default", {ref("c"), ref("w")}, tensor({64, 48}, "bfloat16")),
                 node("a", "aten.add.Tensor", {ref("mm"), ref("b")}, tensor({64, 48}, "bfloat16"))},
                {"a"});
  Plan p = make_plan(g, fusion_registry());
  const auto regs = pw_regions(p);
  ASSERT_EQ(regs.size(), 1u) << pw_declines(g, p);
  EXPECT_EQ(ids(g, *regs[0]), (V{"e", "m"}));
  EXPECT_EQ(names(g, regs[0]->outputs), V{"m"});
  for (const auto& d : p.dropped) EXPECT_NE(d.fusion, "pointwise") << d.reason;
}

// A neighbour that cannot join says why: add with alpha 0.5 (the eager kernel may contract
// alpha * y into an FMA) and a float64 step.
TEST(PointwiseMatch, NeighboursThatCannotJoinAreDeclinedWithTheReason) {
  Graph g = synthetic({input("x", {4, 8})},
                      {node("m1", "aten.mul.Tensor", {ref("x"), 2.0}, tensor({4, 8}, "float32")),
                       node("m3", "aten.neg.default", {ref("m1")}, tensor({4, 8}, "float32")),
                       node("m4", "aten.exp.default", {ref("m3")}, tensor({4, 8}, "float32")),
                       node("m2", "aten.add.Tensor", {ref("m4"), ref("x")},
                            tensor({4, 8}, "float32"), {{"alpha", 0.5}}),
                       node("d", "prims.convert_element_type.default",
                            {ref("m4"), {{"dtype", "float64"}}}, tensor({4, 8}, "float64")),
                       node("e", "aten.mul.Tensor", {ref("d"), 2.0}, tensor({4, 8}, "float64"))},
                      {"m2", "e"});
  Plan p = make_plan(g, fusion_registry());
  const auto regs = pw_regions(p);
  ASSERT_EQ(regs.size(), 1u) << pw_declines(g, p);
  EXPECT_EQ(ids(g, *regs[0]), (V{"m1", "m3", "m4"}));
  EXPECT_NE(declined_at(g, p, "m2").find("alpha 0.5"), std::string::npos) << pw_declines(g, p);
  EXPECT_NE(declined_at(g, p, "d").find("its output is float64"), std::string::npos)
      << pw_declines(g, p);
  EXPECT_EQ(declined_at(g, p, "e"), "") << "not a neighbour of the chain";
}

// What the others claim stays theirs: on every bundled trace no pointwise match is dropped for
// an overlap, every pointwise region has two ops or more, each of its nodes elementwise, a view
// or an identity, and it writes at most kMaxOutputs values from at most kMaxInputs.
TEST(PointwiseMatch, EveryBundledTraceTakesOnlyWhatTheOthersLeave) {
  int regions = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(REPLAY_TRACES_DIR)) {
    if (e.path().extension() != ".json" || e.path().string().find("/capture/") != std::string::npos)
      continue;
    Graph g = load_trace(e.path().string(), cut_options());
    Plan p = make_plan(g, fusion_registry());
    for (const auto& d : p.dropped)
      EXPECT_NE(d.fusion, "pointwise") << e.path() << ": " << d.reason;
    for (const Region* r : pw_regions(p)) {
      ++regions;
      EXPECT_GE(params(r).ops.size(), 2u) << e.path();
      EXPECT_LE(r->inputs.size(), size_t(pointwise::kMaxInputs)) << e.path();
      EXPECT_LE(r->outputs.size(), size_t(pointwise::kMaxOutputs)) << e.path();
      const auto& sums = params(r).sums;
      for (int n : r->nodes) {
        const auto k = op_def(g.nodes[n].op).eager.kernel;
        const bool sum = g.nodes[n].outputs.size() == 1 &&
                         std::find(sums.begin(), sums.end(), g.nodes[n].outputs[0]) != sums.end();
        EXPECT_TRUE(k == EagerLowering::kPointwise || k == EagerLowering::kAlias ||
                    (sum && g.nodes[n].op == Op::kSumDim))
            << e.path() << ": " << g.nodes[n].id;
      }
    }
  }
  EXPECT_GT(regions, 10) << "the bundled traces hold chains no other fusion claims";
}

// The bias gradient of a backward chain matmul_epilogue does not take (BERT: the GELU's gradient
// straight from the tangent; GPT-2: gelu_new's backward in bfloat16 op by op) joins the chain:
// sum(view(chain), [0]) over every dim but the last, through the [tokens, N] reshape the GEMMs
// also read. The region runs at the chain's last op, before the dW / dX GEMMs that come between
// the chain and the sum in the graph.
TEST(PointwiseMatch, TheBiasGradientColumnSumJoinsTheChain) {
  struct Case {
    const char* trace;
    const char* sum;
    int64_t cols;
  };
  for (const Case& c :
       {Case{"byog/linear/bert_intermediate_default_train_bwd_2x8x128", "sum_1", 256},
        Case{"byog/linear/bert_intermediate_default_train_bwd_32x512x1024", "sum_1", 4096},
        Case{"byog/linear/gpt2_mlp_default_train_bwd_2x8x128", "sum_2", 256},
        Case{"byog/linear/gpt2_mlp_default_train_bwd_8x1024x1024", "sum_2", 4096}}) {
    Graph g = load_trace(trace_path(c.trace));
    Plan p = make_plan(g, fusion_registry());
    const auto regs = pw_regions(p);
    ASSERT_EQ(regs.size(), 1u) << c.trace << "\n" << pw_declines(g, p);
    const Region& r = *regs[0];
    ASSERT_EQ(params(&r).sums.size(), 1u) << c.trace << "\n" << pw_declines(g, p);
    EXPECT_EQ(g.values[params(&r).sums[0]].name, c.sum) << c.trace;
    EXPECT_EQ(params(&r).sum_cols, c.cols) << c.trace;
    const auto& out = r.outputs;
    EXPECT_TRUE(std::any_of(out.begin(), out.end(), [&](int v) {
      return g.values[v].name == c.sum;
    })) << c.trace;
    // runs before every GEMM reading the chain's result
    int first_mm = static_cast<int>(g.nodes.size());
    for (int n = 0; n < static_cast<int>(g.nodes.size()); ++n)
      if (g.nodes[n].op == Op::kMm && n > r.nodes.front()) first_mm = std::min(first_mm, n);
    EXPECT_LT(r.anchor, first_mm) << c.trace;
    EXPECT_LT(r.anchor, g.values[params(&r).sums[0]].producer) << c.trace;
    for (const auto& d : p.dropped) EXPECT_NE(d.fusion, "pointwise") << d.reason;
  }
}

// Column sums the kernel cannot compute stay eager, saying why: a sum over the last dim (a row
// sum), over columns of 12 (not chunks of 8).
TEST(PointwiseMatch, ColumnSumsItCannotTakeAreDeclinedWithTheReason) {
  auto chain = [](int64_t cols, json dims) {
    return synthetic(
        {input("x", {16, cols}), input("y", {16, cols})},
        {node("m", "aten.mul.Tensor", {ref("x"), ref("y")}, tensor({16, cols}, "float32")),
         node("a", "aten.add.Tensor", {ref("m"), 1.0}, tensor({16, cols}, "float32")),
         node(
             "s", "aten.sum.dim_IntList", {ref("a"), dims, true},
             tensor(dims == json({0}) ? std::vector<int64_t>{1, cols} : std::vector<int64_t>{16, 1},
                    "float32"))},
        {"a", "s"});
  };
  {
    Graph g = chain(64, {0});
    Plan p = make_plan(g, fusion_registry());
    const auto regs = pw_regions(p);
    ASSERT_EQ(regs.size(), 1u) << pw_declines(g, p);
    EXPECT_EQ(ids(g, *regs[0]), (V{"m", "a", "s"}));
    EXPECT_EQ(params(regs[0]).sum_cols, 64);
    EXPECT_EQ(names(g, regs[0]->outputs), (V{"a", "s"}));
  }
  {
    Graph g = chain(64, {1});
    Plan p = make_plan(g, fusion_registry());
    const auto regs = pw_regions(p);
    ASSERT_EQ(regs.size(), 1u);
    EXPECT_TRUE(params(regs[0]).sums.empty());
    EXPECT_NE(pw_declines(g, p).find("s: column sum not fused into the pointwise chain: it sums "
                                     "float32[16, 64] over dims [1]"),
              std::string::npos)
        << pw_declines(g, p);
    EXPECT_NE(pw_declines(g, p).find("not over every dim but the last"), std::string::npos);
  }
  {  // a narrower dtype= than the summed value: PyTorch casts each value before it sums
    Graph g =
        synthetic({input("x", {16, 64}), input("y", {16, 64})},
                  {node("m", "aten.mul.Tensor", {ref("x"), ref("y")}, tensor({16, 64}, "float32")),
                   node("a", "aten.add.Tensor", {ref("m"), 1.0}, tensor({16, 64}, "float32")),
                   node("s", "aten.sum.dim_IntList", {ref("a"), {0}, true},
                        tensor({1, 64}, "bfloat16"), {{"dtype", "bfloat16"}})},
                  {"a", "s"});
    Plan p = make_plan(g, fusion_registry());
    const auto regs = pw_regions(p);
    ASSERT_EQ(regs.size(), 1u);
    EXPECT_TRUE(params(regs[0]).sums.empty());
    EXPECT_NE(pw_declines(g, p).find("it sums float32 values into bfloat16"), std::string::npos)
        << pw_declines(g, p);
  }
  {
    Graph g = chain(12, {0});
    Plan p = make_plan(g, fusion_registry());
    const auto regs = pw_regions(p);
    ASSERT_EQ(regs.size(), 1u);
    EXPECT_TRUE(params(regs[0]).sums.empty());
    EXPECT_NE(pw_declines(g, p).find("its last dim 12 is not a multiple of 8"), std::string::npos)
        << pw_declines(g, p);
  }
}
