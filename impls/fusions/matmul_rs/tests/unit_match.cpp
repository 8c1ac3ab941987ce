// The matmul_rs matcher on the bundled per-rank row-parallel traces (traces/tp/, world sizes 2
// and 4, 2-D and the 3-D reshape form) through the whole registry, and on edited copies of them:
// the partial product read elsewhere, the cat form of a scatter along dim 1, a group other than
// the world, a reduce-scatter of something that is not a GEMM. The binder says why no variant
// runs.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "impls/fusions/matmul_rs/params.hpp"
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

TEST(MatmulRsMatch, EveryRowParallelTrace) {
  struct Case {
    const char* trace;
    std::vector<std::string> nodes;
    int64_t world_size, M, K, N;
  };
  const Case cases[] = {
      {"tp/tp_rowwise_mm_rs_bf16_ws2_16x32x24", {"mm", "reduce_scatter", "wait"}, 2, 16, 16, 24},
      {"tp/tp_rowwise_mm_rs_bf16_ws4_16x32x24", {"mm", "reduce_scatter", "wait"}, 4, 16, 8, 24},
      {"tp/tp_rowwise_mm_rs_3d_bf16_ws2_4x3x32x16",
       {"view", "mm", "view_1", "reduce_scatter", "wait"},
       2,
       12,
       16,
       16},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.trace);
    const Graph g = load_trace(trace_path(c.trace));
    const Plan p = make_plan(g, fusion_registry());
    ASSERT_EQ(p.regions.size(), 1u);
    const Region* r = only_region(p, "matmul_rs");
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(region_node_ids(g, *r), c.nodes);
    const auto& params = std::any_cast<const matmul_rs::Params&>(r->params);
    EXPECT_EQ(params.world_size, c.world_size);
    EXPECT_EQ(params.M, c.M);
    EXPECT_EQ(params.K, c.K);
    EXPECT_EQ(params.N, c.N);
    EXPECT_EQ(params.reduce_op, "sum");
    ASSERT_EQ(r->inputs.size(), 2u);
    EXPECT_EQ(g.values[r->inputs[0]].name, "x");
    EXPECT_EQ(g.values[r->inputs[1]].name, "w");
    ASSERT_EQ(r->outputs.size(), 1u);
    EXPECT_EQ(g.values[r->outputs[0]].name, "wait");
    const Cost cost = r->fusion->cost(g, *r);
    EXPECT_DOUBLE_EQ(cost.comm_bytes,
                     double(c.M * c.N * 2) * double(c.world_size - 1) / double(c.world_size));
    EXPECT_DOUBLE_EQ(cost.flops, 2.0 * c.M * c.N * c.K);
    EXPECT_EQ(r->fusion->describe(g, *r)["scatter_dim"], 0);
    EXPECT_EQ(r->fusion->min_world_size, 2);
  }
}

TEST(MatmulRsMatch, ColumnParallelTracesAreNotItsOwn) {
  for (const char* t :
       {"tp/tp_colwise_ag_mm_bf16_ws2_16x32x24", "tp/tp_colwise_ag_mm_3d_bf16_ws4_4x3x32x16"}) {
    const Graph g = load_trace(trace_path(t));
    EXPECT_EQ(only_region(make_plan(g, fusion_registry()), "matmul_rs"), nullptr) << t;
  }
}

TEST(MatmulRsMatch, DeclinesAPartialProductReadElsewhere) {
  json t = read_json(trace_path("tp/tp_rowwise_mm_rs_bf16_ws2_16x32x24"));
  t["outputs"].push_back("mm");
  t["output_roles"]["mm"] = "output";
  const Graph g = parse_trace(t, "edited");
  const Plan p = make_plan(g, fusion_registry());
  EXPECT_EQ(only_region(p, "matmul_rs"), nullptr);
  EXPECT_NE(declined_by(p, "matmul_rs").find("read elsewhere"), std::string::npos)
      << declined_by(p, "matmul_rs");
}

TEST(MatmulRsMatch, DeclinesTheCatFormOfAScatterAlongTheLastDim) {
  // The [16, 24] partial product scattered along dim 1 as torch writes it: split into the ranks'
  // [16, 12] column chunks, cat along dim 0 -> [32, 12], reduce_scatter (dim 0) -> [16, 12].
  json t = read_json(trace_path("tp/tp_rowwise_mm_rs_bf16_ws2_16x32x24"));
  json split = {{"id", "split"},
                {"op", "aten.split.Tensor"},
                {"args", {{{"ref", "mm"}}, 12, 1}},
                {"kwargs", json::object()},
                {"outputs", {meta({16, 12}, {24, 1}), meta({16, 12}, {24, 1}, 12)}}};
  json g0 = {{"id", "getitem"},
             {"op", "getitem"},
             {"args", {{{"ref", "split"}}, 0}},
             {"kwargs", json::object()},
             {"outputs", {meta({16, 12}, {24, 1})}}};
  json g1 = {{"id", "getitem_1"},
             {"op", "getitem"},
             {"args", {{{"ref", "split"}}, 1}},
             {"kwargs", json::object()},
             {"outputs", {meta({16, 12}, {24, 1}, 12)}}};
  json cat = {{"id", "cat"},
              {"op", "aten.cat.default"},
              {"args", {{{{"ref", "getitem"}}, {{"ref", "getitem_1"}}}, 0}},
              {"kwargs", json::object()},
              {"outputs", {meta({32, 12}, {12, 1})}}};
  json rs = trace_node(t, "reduce_scatter");
  rs["args"][0] = {{"ref", "cat"}};
  rs["outputs"] = {meta({16, 12}, {12, 1})};
  json wait = trace_node(t, "wait");
  wait["outputs"] = {meta({16, 12}, {12, 1})};
  t["nodes"] = {t["nodes"][0], split, g0, g1, cat, rs, wait};
  const Graph g = parse_trace(t, "edited");
  const Plan p = make_plan(g, fusion_registry());
  EXPECT_EQ(only_region(p, "matmul_rs"), nullptr);
  EXPECT_NE(declined_by(p, "matmul_rs").find("along its last dim (N)"), std::string::npos)
      << declined_by(p, "matmul_rs");
}

TEST(MatmulRsMatch, DeclinesAGroupOtherThanTheWorld) {
  Graph g = load_trace(trace_path("tp/tp_rowwise_mm_rs_bf16_ws4_16x32x24"));
  for (Node& n : g.nodes)
    if (n.op == Op::kReduceScatterTensor) n.group_size = 2;
  const Plan p = make_plan(g, fusion_registry());
  EXPECT_EQ(only_region(p, "matmul_rs"), nullptr);
  EXPECT_NE(declined_by(p, "matmul_rs").find("group_size 2 is not the trace's world_size 4"),
            std::string::npos)
      << declined_by(p, "matmul_rs");
}

TEST(MatmulRsMatch, DeclinesAReduceScatterOfAGraphInput) {
  // The reduce-scatter reads the input directly: no GEMM to overlap with.
  json t = read_json(trace_path("tp/tp_rowwise_mm_rs_bf16_ws2_16x32x24"));
  json rs = trace_node(t, "reduce_scatter");
  rs["args"][0] = {{"ref", "w"}};  // w [16, 24], the mm's shape
  t["nodes"] = {t["nodes"][0], rs, t["nodes"][2]};
  t["outputs"] = {"wait", "mm"};
  t["output_roles"]["mm"] = "output";
  const Graph g = parse_trace(t, "edited");
  const Plan p = make_plan(g, fusion_registry());
  EXPECT_EQ(only_region(p, "matmul_rs"), nullptr);
  EXPECT_NE(declined_by(p, "matmul_rs").find("not the output of aten.mm"), std::string::npos)
      << declined_by(p, "matmul_rs");
}

TEST(MatmulRsMatch, EveryVariantSaysWhyItCannotRun) {
  expect_every_tp_variant_says_why("tp/tp_rowwise_mm_rs_bf16_ws2_16x32x24", "matmul_rs");
}

TEST(MatmulRsMatch, Float8ScaledMmWithTensorwiseScales) {
  // The ws2 trace made float8, w widened to N = 32 (cuBLASLt's float8 kernels need multiples of
  // 16): x [16, 16] and w [16, 32] float8_e4m3fn, tensorwise scales, a bfloat16 partial product.
  json t = read_json(trace_path("tp/tp_rowwise_mm_rs_bf16_ws2_16x32x24"));
  t["inputs"][1]["shape"] = {16, 32};
  t["inputs"][1]["stride"] = {1, 16};
  trace_node(t, "reduce_scatter")["outputs"] = {meta({8, 32}, {32, 1})};
  trace_node(t, "wait")["outputs"] = {meta({8, 32}, {32, 1})};
  for (json& in : t["inputs"]) in["dtype"] = "float8_e4m3fn";
  for (const char* s : {"scale_a", "scale_b"})
    t["inputs"].push_back({{"id", s},
                           {"shape", json::array()},
                           {"stride", json::array()},
                           {"dtype", "float32"},
                           {"stats", {{"mean", 1}, {"std", 0}, {"min", 1}, {"max", 1}}},
                           {"role", "param"}});
  json& mm = trace_node(t, "mm");
  mm["op"] = "aten._scaled_mm.default";
  mm["outputs"] = {meta({16, 32}, {32, 1})};
  mm["args"] = {{{"ref", "x"}}, {{"ref", "w"}}, {{"ref", "scale_a"}},   {{"ref", "scale_b"}},
                nullptr,        nullptr,        {{"dtype", "bfloat16"}}};
  const Graph g = parse_trace(t, "edited");
  const Plan p = make_plan(g, fusion_registry());
  ASSERT_EQ(p.regions.size(), 1u);
  const Region* r = only_region(p, "matmul_rs");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(region_node_ids(g, *r), (std::vector<std::string>{"mm", "reduce_scatter", "wait"}));
  const auto& params = std::any_cast<const matmul_rs::Params&>(r->params);
  EXPECT_TRUE(params.scaled);
  EXPECT_EQ(r->inputs.size(), 4u);
  EXPECT_EQ(r->fusion->cost(g, *r).matmul_flops.count("float8_tensorwise"), 1u);
}
