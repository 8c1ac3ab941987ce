// The layernorm_fwd matcher: finds LayerNorm and RMSNorm structurally, and nothing elsewhere.
#include <gtest/gtest.h>

#include "test_util.hpp"
#include "workloads/plan.hpp"
#include "workloads/trace_loader.hpp"

using namespace replay;
using namespace replay::test;
using nlohmann::json;

TEST(Matcher, FindsLayerNormInBothNanoGPTTraces) {
  for (const char* name :
       {"nanogpt_layernorm_fwd_16x128x1600", "nanogpt_layernorm_fwd_16x1024x1600"}) {
    Graph g = load_trace(trace_path(name));
    Plan p = make_plan(g);
    ASSERT_EQ(p.regions.size(), 1u) << name;
    const Region& r = p.regions[0];
    EXPECT_EQ(r.fusion, "layernorm_fwd");
    EXPECT_EQ(r.nodes.size(), g.nodes.size());  // the whole graph is one LayerNorm
    EXPECT_EQ(r.params["kind"], "layernorm");
    EXPECT_EQ(r.params["x"], "x");
    EXPECT_EQ(r.params["cols"], 1600);
    EXPECT_EQ(r.params["rows"],
              std::string(name).find("16x1024") != std::string::npos ? 16384 : 2048);
    EXPECT_DOUBLE_EQ(r.params["eps"].get<double>(), 1e-5);
    json want = json::array({{{"op", "mul"}, {"value", "weight"}, {"dtype", "float32"}},
                             {{"op", "add"}, {"value", "bias"}, {"dtype", "float32"}},
                             {{"op", "round"}, {"dtype", "bfloat16"}}});
    EXPECT_EQ(r.params["epilogue"], want);
    ASSERT_EQ(r.inputs.size(), 3u);
    ASSERT_EQ(r.outputs.size(), 1u);
    EXPECT_EQ(g.values[r.outputs[0]].name, "convert_element_type_1");
  }
}

TEST(Matcher, FindsLlamaRMSNorm) {
  Graph g = load_trace(trace_path("llama_rmsnorm_fwd_2x8x4096"));
  Plan p = make_plan(g);
  ASSERT_EQ(p.regions.size(), 1u);
  const Region& r = p.regions[0];
  EXPECT_EQ(r.params["kind"], "rmsnorm");
  EXPECT_EQ(r.params["cols"], 4096);
  EXPECT_DOUBLE_EQ(r.params["eps"].get<double>(), 1e-6);
  json want = json::array({{{"op", "round"}, {"dtype", "bfloat16"}},
                           {{"op", "mul"}, {"value", "weight"}, {"dtype", "bfloat16"}}});
  EXPECT_EQ(r.params["epilogue"], want);
  EXPECT_EQ(r.nodes.size(), g.nodes.size());
}

TEST(Matcher, RMSNormWrittenAsMulOfSelf) {
  json t = read_json(trace_path("llama_rmsnorm_fwd_2x8x4096"));
  for (auto& n : t["nodes"])
    if (n["id"] == "pow_1") {
      n["op"] = "aten.mul.Tensor";
      n["args"] = {ref("convert_element_type"), ref("convert_element_type")};
    }
  t.erase("golden");
  Plan p = make_plan(parse_trace(t, "<mul-self>"));
  ASSERT_EQ(p.regions.size(), 1u);
  EXPECT_EQ(p.regions[0].params["kind"], "rmsnorm");
}

TEST(Matcher, NothingInAGraphWithoutThePattern) {
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
  Plan p = make_plan(parse_trace(t, "<no-pattern>"));
  EXPECT_TRUE(p.regions.empty());
  EXPECT_EQ(std::count(p.node_region.begin(), p.node_region.end(), -1), 3);
}

TEST(Matcher, RejectsWhenAnIntermediateEscapes) {
  // Training forward: mean and rstd are graph outputs too. The fused kernel does not write them,
  // so the matcher must not claim the region.
  json t = read_json(trace_path("nanogpt_layernorm_fwd_2x8x1600"));
  t.erase("golden");
  t["outputs"].push_back("rsqrt");
  Plan p = make_plan(parse_trace(t, "<escape>"));
  EXPECT_TRUE(p.regions.empty());
}

TEST(Matcher, RejectsUnbiasedVarianceAndOtherDims) {
  json t = read_json(trace_path("nanogpt_layernorm_fwd_2x8x1600"));
  t.erase("golden");
  json t2 = t;
  for (auto& n : t["nodes"])
    if (n["id"] == "var_mean") n["kwargs"]["correction"] = 1;
  EXPECT_TRUE(make_plan(parse_trace(t, "<unbiased>")).regions.empty());
  for (auto& n : t2["nodes"])
    if (n["id"] == "var_mean") n["args"][1] = {1};
  for (auto& n : t2["nodes"])  // shapes follow the reduction over dim 1
    if (n["id"] == "var_mean" || n["id"] == "getitem" || n["id"] == "getitem_1" ||
        n["id"] == "add" || n["id"] == "rsqrt")
      for (auto& o : n["outputs"]) o["shape"] = {2, 1, 1600}, o["stride"] = {1600, 1600, 1};
  EXPECT_TRUE(make_plan(parse_trace(t2, "<dim1>")).regions.empty());
}

TEST(Matcher, PlanJson) {
  Graph g = load_trace(trace_path("nanogpt_layernorm_fwd_2x8x1600"));
  json j = plan_to_json(g, make_plan(g));
  ASSERT_EQ(j["regions"].size(), 1u);
  EXPECT_EQ(j["regions"][0]["variants"],
            json::array({"reference", "eager", "baseline", "optimized"}));
  EXPECT_TRUE(j["eager_nodes"].empty());
}

TEST(Matcher, SyntheticLayerNormOfAnyShape) {
  Plan p = make_plan(parse_trace(layernorm_trace(5, 24, "float16"), "<synthetic>"));
  ASSERT_EQ(p.regions.size(), 1u);
  EXPECT_EQ(p.regions[0].params["rows"], 5);
}
