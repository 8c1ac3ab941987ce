// The ag_matmul matcher on the bundled per-rank column-parallel traces (traces/tp/, world sizes 2
// and 4, 2-D and the 3-D reshape form) through the whole registry, and on edited copies of them:
// the gathered tensor read elsewhere, the split/cat form of a gather along the last dim, a group
// other than the world, a world of one rank. The captured traces: unit_captured.cpp. The binder says why no variant runs.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "impls/fusions/ag_matmul/params.hpp"
#include "impls/fusions/registry.hpp"
#include "tests/unit/test_util.hpp"
#include "tests/unit/tp_variants.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/plan/plan.hpp"

using namespace replay;
using namespace replay::test;
using nlohmann::json;

namespace {

json meta(std::vector<int64_t> shape, std::vector<int64_t> stride, int64_t offset = 0) {
  json m = {{"shape", shape}, {"stride", stride}, {"dtype", "bfloat16"}};
  if (offset) m["storage_offset"] = offset;
  return m;
}

}  // namespace

TEST(AgMatmulMatch, EveryColumnParallelTrace) {
  struct Case {
    const char* trace;
    std::vector<std::string> nodes;
    int64_t world_size, M, K, N;
  };
  const Case cases[] = {
      {"tp/tp_colwise_ag_mm_bf16_ws2_16x32x24", {"all_gather", "wait", "mm"}, 2, 16, 32, 12},
      {"tp/tp_colwise_ag_mm_bf16_ws4_16x32x24", {"all_gather", "wait", "mm"}, 4, 16, 32, 6},
      {"tp/tp_colwise_ag_mm_3d_bf16_ws4_4x3x32x16",
       {"all_gather", "wait", "view", "mm", "view_1"},
       4,
       12,
       32,
       4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.trace);
    const Graph g = load_trace(trace_path(c.trace));
    const Plan p = make_plan(g, fusion_registry());
    ASSERT_EQ(p.regions.size(), 1u);
    const Region* r = only_region(p, "ag_matmul");
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(region_node_ids(g, *r), c.nodes);
    const auto& params = std::any_cast<const ag_matmul::Params&>(r->params);
    EXPECT_EQ(params.world_size, c.world_size);
    EXPECT_EQ(params.M, c.M);
    EXPECT_EQ(params.K, c.K);
    ASSERT_EQ(params.gemms.size(), 1u);
    EXPECT_EQ(params.gemms[0].N, c.N);
    EXPECT_FALSE(params.gemms[0].scaled);
    EXPECT_EQ(params.lead, 1);
    // Inputs: the shard and the weight; output: the graph's result.
    ASSERT_EQ(r->inputs.size(), 2u);
    EXPECT_EQ(g.values[r->inputs[0]].name, "x");
    EXPECT_EQ(g.values[r->inputs[1]].name, "w");
    ASSERT_EQ(r->outputs.size(), 1u);
    EXPECT_TRUE(g.values[r->outputs[0]].graph_output);
    // Communication: (n - 1) / n of the gathered bytes; FLOPs 2 M N K.
    const Cost cost = r->fusion->cost(g, *r);
    EXPECT_DOUBLE_EQ(cost.comm_bytes,
                     double(c.M * c.K * 2) * double(c.world_size - 1) / double(c.world_size));
    EXPECT_DOUBLE_EQ(cost.flops, 2.0 * c.M * c.N * c.K);
    EXPECT_EQ(r->fusion->describe(g, *r)["gather_dim"], 0);
    EXPECT_EQ(r->fusion->min_world_size, 2);
  }
}

TEST(AgMatmulMatch, RowParallelTracesAreNotItsOwn) {
  for (const char* t :
       {"tp/tp_rowwise_mm_rs_bf16_ws2_16x32x24", "tp/tp_rowwise_mm_rs_3d_bf16_ws2_4x3x32x16"}) {
    const Graph g = load_trace(trace_path(t));
    EXPECT_EQ(only_region(make_plan(g, fusion_registry()), "ag_matmul"), nullptr) << t;
  }
}

TEST(AgMatmulMatch, AGatheredTensorReadElsewhereIsWrittenToo) {
  json t = read_json(trace_path("tp/tp_colwise_ag_mm_bf16_ws2_16x32x24"));
  t["outputs"].push_back("wait");  // the gathered activation returned too (saved for backward)
  t["output_roles"]["wait"] = "output";
  const Graph g = parse_trace(t, "edited");
  const Plan p = make_plan(g, fusion_registry());
  const Region* r = only_region(p, "ag_matmul");
  ASSERT_NE(r, nullptr) << declined_by(p, "ag_matmul");
  const auto& params = std::any_cast<const ag_matmul::Params&>(r->params);
  ASSERT_EQ(ag_matmul::gathered_outputs(params, *r).size(), 1u);
  EXPECT_EQ(g.values[ag_matmul::gathered_outputs(params, *r)[0]].name, "wait");
  EXPECT_EQ(r->fusion->describe(g, *r)["gathered_written"], true);
  // ... and without that output, nothing but the GEMM's result leaves the region
  const Graph plain = load_trace(trace_path("tp/tp_colwise_ag_mm_bf16_ws2_16x32x24"));
  const Plan pp = make_plan(plain, fusion_registry());
  const Region* rp = only_region(pp, "ag_matmul");
  ASSERT_NE(rp, nullptr);
  EXPECT_TRUE(
      ag_matmul::gathered_outputs(std::any_cast<const ag_matmul::Params&>(rp->params), *rp).empty());
}

TEST(AgMatmulMatch, DeclinesTheSplitCatFormOfAGatherAlongTheLastDim) {
  // x [8, 16] gathered along dim 1 as torch writes it: all_gather (dim 0) -> wait -> split into
  // the ranks' [8, 16] chunks -> cat along dim 1 -> [8, 32] -> mm: the gather joins K, the GEMM's
  // reduction dim, not rows.
  json t = read_json(trace_path("tp/tp_colwise_ag_mm_bf16_ws2_16x32x24"));
  t["inputs"][0]["shape"] = {8, 16};
  t["inputs"][0]["stride"] = {16, 1};
  trace_node(t, "all_gather")["outputs"] = {meta({16, 16}, {16, 1})};
  trace_node(t, "wait")["outputs"] = {meta({16, 16}, {16, 1})};
  json split = {{"id", "split"},
                {"op", "aten.split.Tensor"},
                {"args", {{{"ref", "wait"}}, 8}},
                {"kwargs", json::object()},
                {"outputs", {meta({8, 16}, {16, 1}), meta({8, 16}, {16, 1}, 128)}}};
  json g0 = {{"id", "getitem"},
             {"op", "getitem"},
             {"args", {{{"ref", "split"}}, 0}},
             {"kwargs", json::object()},
             {"outputs", {meta({8, 16}, {16, 1})}}};
  json g1 = {{"id", "getitem_1"},
             {"op", "getitem"},
             {"args", {{{"ref", "split"}}, 1}},
             {"kwargs", json::object()},
             {"outputs", {meta({8, 16}, {16, 1}, 128)}}};
  json cat = {{"id", "cat"},
              {"op", "aten.cat.default"},
              {"args", {{{{"ref", "getitem"}}, {{"ref", "getitem_1"}}}, 1}},
              {"kwargs", json::object()},
              {"outputs", {meta({8, 32}, {32, 1})}}};
  json mm = trace_node(t, "mm");
  mm["args"][0] = {{"ref", "cat"}};
  mm["outputs"] = {meta({8, 12}, {12, 1})};
  t["nodes"] = {t["nodes"][0], t["nodes"][1], split, g0, g1, cat, mm};
  const Graph g = parse_trace(t, "edited");
  const Plan p = make_plan(g, fusion_registry());
  EXPECT_EQ(only_region(p, "ag_matmul"), nullptr);
  EXPECT_NE(declined_by(p, "ag_matmul").find("gather is along the last dim"), std::string::npos)
      << declined_by(p, "ag_matmul");
}

TEST(AgMatmulMatch, DeclinesAGroupOtherThanTheWorld) {
  // The loader refuses such a trace (test_collective.cpp); the matcher checks it on its own too.
  Graph g = load_trace(trace_path("tp/tp_colwise_ag_mm_bf16_ws4_16x32x24"));
  for (Node& n : g.nodes)
    if (n.op == Op::kAllGatherIntoTensor) n.group_size = 2;
  const Plan p = make_plan(g, fusion_registry());
  EXPECT_EQ(only_region(p, "ag_matmul"), nullptr);
  EXPECT_NE(declined_by(p, "ag_matmul").find("group_size 2 is not the trace's world_size 4"),
            std::string::npos)
      << declined_by(p, "ag_matmul");
}

TEST(AgMatmulMatch, AWorldOfOneRankDropsTheMatch) {
  json t = read_json(trace_path("tp/tp_colwise_ag_mm_bf16_ws2_16x32x24"));
  t["world_size"] = 1;
  trace_node(t, "all_gather")["args"][1] = 1;
  t["inputs"][0]["shape"] = {16, 32};
  const Graph g = parse_trace(t, "edited");
  const Plan p = make_plan(g, fusion_registry());
  EXPECT_EQ(only_region(p, "ag_matmul"), nullptr);
  ASSERT_FALSE(p.dropped.empty());
  EXPECT_EQ(p.dropped[0].fusion, "ag_matmul");
}

TEST(AgMatmulMatch, EveryVariantSaysWhyItCannotRun) {
  expect_every_tp_variant_says_why("tp/tp_colwise_ag_mm_bf16_ws2_16x32x24", "ag_matmul");
}

TEST(AgMatmulMatch, Float8ScaledMmWithTensorwiseScales) {
  // The ws2 trace made float8: x and w float8_e4m3fn, w widened to N = 16 (cuBLASLt's float8
  // kernels need multiples of 16), the GEMM aten._scaled_mm with one-element float32 scales and a
  // bfloat16 result.
  json t = read_json(trace_path("tp/tp_colwise_ag_mm_bf16_ws2_16x32x24"));
  t["inputs"][1]["shape"] = {32, 16};
  t["inputs"][1]["stride"] = {1, 32};
  for (json& in : t["inputs"]) in["dtype"] = "float8_e4m3fn";
  for (const char* s : {"scale_a", "scale_b"})
    t["inputs"].push_back({{"id", s},
                           {"shape", json::array()},
                           {"stride", json::array()},
                           {"dtype", "float32"},
                           {"stats", {{"mean", 1}, {"std", 0}, {"min", 1}, {"max", 1}}},
                           {"role", "param"}});
  trace_node(t, "all_gather")["outputs"][0]["dtype"] = "float8_e4m3fn";
  trace_node(t, "wait")["outputs"][0]["dtype"] = "float8_e4m3fn";
  json& mm = trace_node(t, "mm");
  mm["op"] = "aten._scaled_mm.default";
  mm["outputs"] = {meta({16, 16}, {16, 1})};
  mm["args"] = {{{"ref", "wait"}}, {{"ref", "w"}}, {{"ref", "scale_a"}},   {{"ref", "scale_b"}},
                nullptr,           nullptr,        {{"dtype", "bfloat16"}}};
  const Graph g = parse_trace(t, "edited");
  const Plan p = make_plan(g, fusion_registry());
  ASSERT_EQ(p.regions.size(), 1u);  // ahead of scaled_mm in the registry: the GEMM is in it
  const Region* r = only_region(p, "ag_matmul");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(region_node_ids(g, *r), (std::vector<std::string>{"all_gather", "wait", "mm"}));
  const auto& params = std::any_cast<const ag_matmul::Params&>(r->params);
  ASSERT_EQ(params.gemms.size(), 1u);
  EXPECT_TRUE(params.gemms[0].scaled);
  EXPECT_EQ(g.values[params.gemms[0].scale_a].name, "scale_a");
  EXPECT_EQ(g.values[params.gemms[0].scale_b].name, "scale_b");
  EXPECT_EQ(r->inputs.size(), 4u);
  EXPECT_EQ(r->fusion->cost(g, *r).matmul_flops.count("float8_tensorwise"), 1u);
}
