// The layernorm_fwd matcher: finds LayerNorm and RMSNorm structurally, and nothing elsewhere.
#include <gtest/gtest.h>

#include "impls/fusions/layernorm_fwd/params.hpp"
#include "impls/fusions/layernorm_fwd/tests/synthetic.hpp"
#include "impls/fusions/registry.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/plan/plan.hpp"

using namespace replay;
using namespace replay::test;
using nlohmann::json;

namespace replay::fusions {
extern const FusionSpec layernorm_fwd;
}

namespace {

// This fusion alone, so another fusion's priority cannot change what these tests see.
Plan plan_of(const Graph& g) {
  const FusionSpec* only[] = {&fusions::layernorm_fwd};
  return make_plan(g, only);
}

const layernorm_fwd::Params& params(const Region& r) {
  return std::any_cast<const layernorm_fwd::Params&>(r.params);
}

}  // namespace

TEST(LayerNormFwdMatch, FindsLayerNormInBothNanoGPTTraces) {
  for (const char* name :
       {"nanogpt_layernorm_fwd_16x128x1600", "nanogpt_layernorm_fwd_16x1024x1600"}) {
    Graph g = load_trace(trace_path(name));
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 1u) << name;
    const Region& r = p.regions[0];
    EXPECT_EQ(r.fusion->name, "layernorm_fwd");
    EXPECT_EQ(r.nodes.size(), g.nodes.size());  // the whole graph is one LayerNorm
    const auto& pr = params(r);
    EXPECT_EQ(pr.kind, NormKind::kLayerNorm);
    EXPECT_EQ(g.values[pr.x].name, "x");
    EXPECT_EQ(pr.cols, 1600);
    EXPECT_EQ(pr.rows, std::string(name).find("16x1024") != std::string::npos ? 16384 : 2048);
    EXPECT_DOUBLE_EQ(pr.eps, 1e-5);
    ASSERT_EQ(pr.epilogue.size(), 3u);
    EXPECT_EQ(pr.epilogue[0].op, EpilogueOp::kMul);
    EXPECT_EQ(g.values[pr.epilogue[0].weight].name, "weight");
    EXPECT_EQ(pr.epilogue[1].op, EpilogueOp::kAdd);
    EXPECT_EQ(g.values[pr.epilogue[1].weight].name, "bias");
    EXPECT_EQ(pr.epilogue[2].op, EpilogueOp::kRound);
    EXPECT_EQ(pr.epilogue[2].dtype, DType::kBFloat16);
    // `replay plan` shows the same params by name.
    json want = json::array({{{"op", "mul"}, {"value", "weight"}, {"dtype", "float32"}},
                             {{"op", "add"}, {"value", "bias"}, {"dtype", "float32"}},
                             {{"op", "round"}, {"dtype", "bfloat16"}}});
    json d = r.fusion->describe(g, r);
    EXPECT_EQ(d["epilogue"], want);
    EXPECT_EQ(d["kind"], "layernorm");
    EXPECT_EQ(d["x"], "x");
    ASSERT_EQ(r.inputs.size(), 3u);
    ASSERT_EQ(r.outputs.size(), 1u);
    EXPECT_EQ(g.values[r.outputs[0]].name, "convert_element_type_1");
  }
}

TEST(LayerNormFwdMatch, FindsLlamaRMSNorm) {
  Graph g = load_trace(trace_path("llama_rmsnorm_fwd_2x8x4096"));
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  const Region& r = p.regions[0];
  EXPECT_EQ(params(r).kind, NormKind::kRMSNorm);
  EXPECT_EQ(params(r).cols, 4096);
  EXPECT_DOUBLE_EQ(params(r).eps, 1e-6);
  json want = json::array({{{"op", "round"}, {"dtype", "bfloat16"}},
                           {{"op", "mul"}, {"value", "weight"}, {"dtype", "bfloat16"}}});
  EXPECT_EQ(r.fusion->describe(g, r)["epilogue"], want);
  EXPECT_EQ(r.nodes.size(), g.nodes.size());
}

TEST(LayerNormFwdMatch, RMSNormWrittenAsMulOfSelf) {
  json t = read_json(trace_path("llama_rmsnorm_fwd_2x8x4096"));
  for (auto& n : t["nodes"])
    if (n["id"] == "pow_1") {
      n["op"] = "aten.mul.Tensor";
      n["args"] = {ref("convert_element_type"), ref("convert_element_type")};
    }
  t.erase("golden");
  Plan p = plan_of(parse_trace(t, "<mul-self>"));
  ASSERT_EQ(p.regions.size(), 1u);
  EXPECT_EQ(params(p.regions[0]).kind, NormKind::kRMSNorm);
}

TEST(LayerNormFwdMatch, NothingInAGraphWithoutThePattern) {
  json t = {{"schema", "replay-trace/1"}, {"name", "pointwise"}, {"outputs", {"y"}}};
  json x = tensor({4, 16}, "float32");
  x["id"] = "x";
  t["inputs"] = {x};
  t["nodes"] = {{{"id", "m"},
                 {"op", "aten.mean.dim"},
                 {"args", {ref("x"), {-1}, true}},
                 {"outputs", {tensor({4, 1}, "float32")}}},
                {{"id", "s"},
                 {"op", "aten.sub.Tensor"},
                 {"args", {ref("x"), ref("m")}},
                 {"outputs", {tensor({4, 16}, "float32")}}},
                {{"id", "y"},
                 {"op", "aten.mul.Tensor"},
                 {"args", {ref("s"), 2.0}},
                 {"outputs", {tensor({4, 16}, "float32")}}}};
  Plan p = plan_of(parse_trace(t, "<no-pattern>"));
  EXPECT_TRUE(p.regions.empty());
  EXPECT_EQ(std::count(p.node_region.begin(), p.node_region.end(), -1), 3);
}

TEST(LayerNormFwdMatch, RejectsWhenAnIntermediateEscapes) {
  // Training forward: mean and rstd are graph outputs too. The fused kernel does not write them,
  // so the matcher must not claim the region.
  json t = read_json(trace_path("nanogpt_layernorm_fwd_2x8x1600"));
  t.erase("golden");
  t["outputs"].push_back("rsqrt");
  Plan p = plan_of(parse_trace(t, "<escape>"));
  EXPECT_TRUE(p.regions.empty());
}

TEST(LayerNormFwdMatch, TakesAVarianceCorrectionRejectsOtherDims) {
  json t = read_json(trace_path("nanogpt_layernorm_fwd_2x8x1600"));
  t.erase("golden");
  json t2 = t;
  for (auto& n : t["nodes"])
    if (n["id"] == "var_mean") n["kwargs"]["correction"] = 1;
  Plan unbiased = plan_of(parse_trace(t, "<unbiased>"));
  ASSERT_EQ(unbiased.regions.size(), 1u);
  EXPECT_EQ(params(unbiased.regions[0]).correction, 1);
  for (auto& n : t2["nodes"])
    if (n["id"] == "var_mean") n["args"][1] = {1};
  for (auto& n : t2["nodes"])  // shapes follow the reduction over dim 1
    if (n["id"] == "var_mean" || n["id"] == "getitem" || n["id"] == "getitem_1" ||
        n["id"] == "add" || n["id"] == "rsqrt")
      for (auto& o : n["outputs"]) o["shape"] = {2, 1, 1600}, o["stride"] = {1600, 1600, 1};
  EXPECT_TRUE(plan_of(parse_trace(t2, "<dim1>")).regions.empty());
}

TEST(LayerNormFwdMatch, PlanJson) {
  Graph g = load_trace(trace_path("nanogpt_layernorm_fwd_2x8x1600"));
  json j = plan_to_json(g, plan_of(g));
  ASSERT_EQ(j["regions"].size(), 1u);
  EXPECT_EQ(j["regions"][0]["variants"],
            json::array({"reference", "eager", "baseline", "optimized"}));
  EXPECT_TRUE(j["eager_nodes"].empty());
  EXPECT_TRUE(j["dropped_matches"].empty());
  // Cost: x read, y written (2*8*1600 bf16 each), weight and bias read (1600 bf16 each).
  EXPECT_EQ(j["regions"][0]["cost"]["bytes"], 2 * (2 * 8 * 1600 * 2) + 2 * 1600 * 2);
}

TEST(LayerNormFwdMatch, SyntheticLayerNormOfAnyShape) {
  Plan p = plan_of(parse_trace(layernorm_trace(5, 24, "float16"), "<synthetic>"));
  ASSERT_EQ(p.regions.size(), 1u);
  EXPECT_EQ(params(p.regions[0]).rows, 5);
}
