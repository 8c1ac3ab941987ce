// The tensor-parallel matchers (ag_matmul, matmul_rs) on the per-rank graphs captured through the
// torch.compile backend with PyTorch's fake process group (traces/tp/captured/, written by
// traces/capture/capture_tp.py): torchtitan's sequence-parallel plans (the split/cat forms of
// gathers and scatters along dim 1), 2-D shards, Llama's FFN (one gather feeding w1 and w3),
// training forwards (the gathered activation saved for backward) and backwards (weights through
// two transposes, the gradient's reduce-scatter written with slices), float8 recipes; and what
// they decline, with the reason. Every region must run where all it reads is ready and before
// anything reads what it writes.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "harness/report/numerics.hpp"
#include "impls/cuda/dist_context.hpp"
#include "impls/fusions/ag_matmul/params.hpp"
#include "impls/fusions/binding.hpp"
#include "impls/fusions/matmul_rs/params.hpp"
#include "impls/fusions/registry.hpp"
#include "impls/fusions/tp_pipeline.hpp"
#include "tests/unit/fake_buffers.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/plan/plan.hpp"

using namespace replay;
using namespace replay::test;

namespace {

std::string captured(const std::string& name) {
  return trace_path("tp/captured/" + name);
}

const ag_matmul::Params& ag_params(const Region& r) {
  return std::any_cast<const ag_matmul::Params&>(r.params);
}
const matmul_rs::Params& rs_params(const Region& r) {
  return std::any_cast<const matmul_rs::Params&>(r.params);
}

}  // namespace

TEST(TpCaptured, SequenceParallelColumnLinearGathersAlongDim1) {
  for (int ws : {2, 4, 8}) {
    SCOPED_TRACE(ws);
    const Graph g =
        load_trace(captured("tp_colwise_seq_ws" + std::to_string(ws) + "_fwd_2x16x64x176"));
    const Plan p = make_plan(g, fusion_registry());
    const Region* r = only_region(p, "ag_matmul");
    ASSERT_NE(r, nullptr) << declined_by(p, "ag_matmul");
    const auto& pa = ag_params(*r);
    EXPECT_EQ(pa.world_size, ws);
    EXPECT_EQ(pa.gather_dim, 1);
    EXPECT_EQ(pa.lead, 2);  // B = 2 blocks per shard
    EXPECT_GE(pa.split, 0);
    EXPECT_GE(pa.cat, 0);
    EXPECT_EQ(pa.M, 32);
    EXPECT_EQ(pa.K, 64);
    ASSERT_EQ(pa.gemms.size(), 1u);
    EXPECT_EQ(pa.gemms[0].N, 176 / ws);
    // nn.Linear's weight [N, K] read through its permute, which the region claims
    EXPECT_EQ(g.values[pa.gemms[0].b_transpose_of].name, "weight");
    // the gathered activation is saved for the backward: the region writes it
    EXPECT_FALSE(ag_matmul::gathered_outputs(pa, *r).empty());
  }
}

TEST(TpCaptured, LlamaFfnGatherFeedsW1AndW3) {
  for (const char* t :
       {"tp_llama_mlp_sp_ws2_fwd_2x16x64x176", "tp_llama_mlp_sp_ws8_fwd_1x8192x4096x14336",
        "tp_llama_mlp_sp_ws8_fwd_1x8192x8192x28672"}) {
    SCOPED_TRACE(t);
    const Graph g = load_trace(captured(t));
    const Plan p = make_plan(g, fusion_registry());
    const Region* ag = only_region(p, "ag_matmul");
    ASSERT_NE(ag, nullptr) << declined_by(p, "ag_matmul");
    const auto& pa = ag_params(*ag);
    ASSERT_EQ(pa.gemms.size(), 2u);
    EXPECT_EQ(g.values[pa.gemms[0].b_transpose_of].name, "feed_forward_w1_weight");
    EXPECT_EQ(g.values[pa.gemms[1].b_transpose_of].name, "feed_forward_w3_weight");
    const Cost c = ag->fusion->cost(g, *ag);
    EXPECT_DOUBLE_EQ(c.flops, 2.0 * 2.0 * pa.M * pa.K * pa.gemms[0].N);
    // B = 1 at the Llama shapes: the split/cat is left out (the gather along dim 1 is a view)
    EXPECT_EQ(pa.lead, std::string(t).find("_1x8192") != std::string::npos ? 1 : 2);
    // w2's partial product reduce-scattered back along the sequence
    const Region* rs = only_region(p, "matmul_rs");
    ASSERT_NE(rs, nullptr) << declined_by(p, "matmul_rs");
    EXPECT_EQ(g.values[rs_params(*rs).b].name.substr(0, 7), "permute");
  }
}

TEST(TpCaptured, BackwardGathersTheGradientWithTheWeightTransposedTwice) {
  for (const char* t :
       {"tp_rowwise_seq_ws2_bwd_2x16x64x176", "tp_rowwise_2d_ws4_bwd_2x16x64x176"}) {
    SCOPED_TRACE(t);
    const Graph g = load_trace(captured(t));
    const Plan p = make_plan(g, fusion_registry());
    const Region* r = only_region(p, "ag_matmul");
    ASSERT_NE(r, nullptr) << declined_by(p, "ag_matmul");
    const auto& pa = ag_params(*r);
    ASSERT_EQ(pa.gemms.size(), 1u);  // the data gradient; the weight gradient reads it as mat2
    EXPECT_EQ(g.values[pa.gemms[0].b].name, "weight");  // w.t().t(): the weight itself
    EXPECT_EQ(pa.gemms[0].b_transpose_of, -1);
    EXPECT_FALSE(ag_matmul::gathered_outputs(pa, *r).empty());
  }
}

TEST(TpCaptured, ScatterAlongDim1AsSplitOrSlices) {
  struct Case {
    const char* trace;
    int64_t lead;
    bool slices;
  };
  for (const Case& c : {Case{"tp_rowwise_seq_ws4_fwd_2x16x64x176", 2, false},
                        Case{"tp_colwise_seq_ws8_bwd_2x16x64x176", 2, false},
                        Case{"tp_f8_rowwise_colwise_ws8_bwd_1x8192x4096x14336", 1, true}}) {
    SCOPED_TRACE(c.trace);
    const Graph g = load_trace(captured(c.trace));
    const Plan p = make_plan(g, fusion_registry());
    const Region* r = only_region(p, "matmul_rs");
    ASSERT_NE(r, nullptr) << declined_by(p, "matmul_rs");
    const auto& pr = rs_params(*r);
    EXPECT_EQ(pr.scatter_dim, 1);
    EXPECT_EQ(pr.lead, c.lead);
    EXPECT_EQ(pr.split < 0, c.slices);
    EXPECT_GE(pr.cat, 0);
  }
}

TEST(TpCaptured, DeclinesWithTheReason) {
  struct Case {
    const char* trace;
    const char* fusion;
    const char* reason;
  };
  const Case cases[] = {
      // bf16 gathered, then quantized: the GEMM reads the float8 copy, not the gathered tensor
      {"tp_f8_rowwise_colwise_ws8_fwd_1x8192x4096x14336", "ag_matmul",
       "is the self of no aten.mm / aten._scaled_mm (read by 'abs_1' as an operand"},
      // the FFN's input gradient: the w1 and w3 data gradients added before the reduce-scatter
      {"tp_llama_mlp_sp_ws2_bwd_2x16x64x176", "matmul_rs",
       "the reduce_scatter's input 'add_6' is not the output of aten.mm"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.trace);
    const Graph g = load_trace(captured(c.trace));
    const Plan p = make_plan(g, fusion_registry());
    EXPECT_EQ(only_region(p, c.fusion), nullptr);
    EXPECT_NE(declined_by(p, c.fusion).find(c.reason), std::string::npos)
        << declined_by(p, c.fusion);
  }
}

TEST(TpCaptured, DeclinesAWaitReadOutsideTheSplitCatForm) {
  nlohmann::json t = read_json(captured("tp_colwise_seq_ws2_fwd_2x16x64x176"));
  t["outputs"].push_back("wait_tensor");  // the rank-major gathered tensor read as well
  t["output_roles"]["wait_tensor"] = "output";
  const Graph g = parse_trace(t, "edited");
  const Plan p = make_plan(g, fusion_registry());
  EXPECT_EQ(only_region(p, "ag_matmul"), nullptr);
  EXPECT_NE(declined_by(p, "ag_matmul").find("split and read elsewhere too"), std::string::npos)
      << declined_by(p, "ag_matmul");
}

// Every region of every captured trace runs at its anchor: after every value it reads is made,
// before any node outside reads a value it writes.
TEST(TpCaptured, EveryRegionRunsWhereItsInputsAreReadyAndBeforeItsReaders) {
  int regions = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(REPLAY_TRACES_DIR) + "/tp/captured")) {
    if (e.path().extension() != ".json") continue;
    SCOPED_TRACE(e.path().string());
    const Graph g = load_trace(e.path().string());
    const Plan p = make_plan(g, fusion_registry());
    for (const Region& r : p.regions) {
      if (r.fusion->name != "ag_matmul" && r.fusion->name != "matmul_rs") continue;
      ++regions;
      const int anchor = r.anchor >= 0 ? r.anchor : r.nodes.back();
      const std::set<int> in(r.nodes.begin(), r.nodes.end());
      for (int v : r.inputs) EXPECT_LT(g.values[v].producer, anchor) << g.values[v].name;
      for (int v : r.outputs)
        for (int u : g.values[v].users)
          if (!in.count(u))
            EXPECT_GT(u, anchor) << g.values[v].name << " read by " << g.nodes[u].id;
    }
  }
  EXPECT_GE(regions, 40);
}

// The reduce-scattered result of a float8 row-parallel linear gets the bounds of a sum of n
// rounded GEMM outputs (matmul_rs/tolerance.cpp): looser than one GEMM output's, wider with n and
// float8, and only for that value.
TEST(TpCaptured, ReduceScatterOfGemmPartialsHasSummedBounds) {
  std::vector<double> share;
  for (const char* t :
       {"tp_rowwise_seq_ws2_fwd_2x16x64x176", "tp_f8_rowwise_rowwise_ws2_fwd_2x32x64x256",
        "tp_f8_rowwise_rowwise_ws4_fwd_2x32x64x256"}) {
    SCOPED_TRACE(t);
    const Graph g = load_trace(captured(t));
    const Plan p = make_plan(g, fusion_registry());
    const Region* r = only_region(p, "matmul_rs");
    ASSERT_NE(r, nullptr) << declined_by(p, "matmul_rs");
    const auto& pr = rs_params(*r);
    ASSERT_NE(r->fusion->tolerance, nullptr);
    const std::optional<NumericsBounds> b = r->fusion->tolerance(g, *r, pr.out);
    ASSERT_TRUE(b.has_value());
    EXPECT_GT(b->share_floor, 0);  // flips of the partials summed: an absolute error
    EXPECT_NE(b->why.find("a sum of " + std::to_string(pr.world_size) + " GEMM outputs"),
              std::string::npos)
        << b->why;
    EXPECT_FALSE(r->fusion->tolerance(g, *r, pr.b).has_value());
    // a same-shape view of the result returned by the graph (absorbed: Region::tail) gets the
    // same bounds where the harness asks for them
    const std::vector<NumericsBounds> defaults = default_value_bounds(g);
    for (int v : g.outputs)
      if (v != pr.out && g.values[v].producer >= 0 &&
          g.nodes[g.values[v].producer].operands[0].value == pr.out)
        EXPECT_EQ(output_bounds(g, p, defaults, v).why, b->why) << g.values[v].name;
    share.push_back(b->share_floor);
  }
  EXPECT_GT(share[1], share[0]);  // float8 partials: the GEMM's noise too
}

// torchao's Float8ColwiseParallel form: the tensorwise amax all-reduced with max over the ranks,
// x quantized on its rank, the float8 rows gathered into _scaled_mm; and the rowwise form whose
// scales are gathered beside the rows (sharded scales): the GEMM's gather fuses, the scales' is
// declined as what it is (scale_a of the _scaled_mm) and runs before it.
TEST(TpCaptured, Float8GatheredAsFloat8) {
  {
    const Graph g = load_trace(captured("tp_f8_tensorwise_gather_fp8_ws4_fwd_2x32x64x256"));
    bool max_reduce = false;
    for (const Node& n : g.nodes) max_reduce |= n.op == Op::kAllReduce && n.mode == "max";
    EXPECT_TRUE(max_reduce);
    const Plan p = make_plan(g, fusion_registry());
    const Region* r = only_region(p, "ag_matmul");
    ASSERT_NE(r, nullptr) << declined_by(p, "ag_matmul");
    const auto& pa = ag_params(*r);
    ASSERT_EQ(pa.gemms.size(), 1u);
    EXPECT_TRUE(pa.gemms[0].scaled);
    EXPECT_EQ(g.meta(pa.x).dtype, DType::kFloat8E4M3);
  }
  {
    const Graph g = load_trace(captured("tp_f8_rowwise_gather_fp8_ws2_fwd_2x32x64x256"));
    const Plan p = make_plan(g, fusion_registry());
    const Region* r = only_region(p, "ag_matmul");
    ASSERT_NE(r, nullptr) << declined_by(p, "ag_matmul");
    const auto& pa = ag_params(*r);
    ASSERT_EQ(pa.gemms.size(), 1u);
    const int sa = pa.gemms[0].scale_a;  // the gathered scales: made outside, read by the region
    ASSERT_GE(g.values[sa].producer, 0);
    EXPECT_EQ(g.nodes[g.values[sa].producer].op, Op::kWaitTensor);
    EXPECT_NE(declined_by(p, "ag_matmul").find("as scale_a"), std::string::npos)
        << declined_by(p, "ag_matmul");
  }
}

namespace {

// Buffers as GpuProgram gives a fused step: the region's inputs and outputs and what outside
// nodes make, nothing made inside the region (FakeBuffers alone serves any value), at
// FakeBuffers' addresses. A communicator pointer, so the NCCL baselines bind (nothing is launched).
struct StrictBuffers : FakeBuffers {
  const Graph& g;
  std::set<int> ok;
  DistContext d;
  StrictBuffers(const Graph& graph, const Region& r, int world_size)
      : FakeBuffers(graph), g(graph) {
    ok.insert(r.inputs.begin(), r.inputs.end());
    ok.insert(r.outputs.begin(), r.outputs.end());
    ok.insert(g.inputs.begin(), g.inputs.end());
    const std::set<int> in(r.nodes.begin(), r.nodes.end());
    for (size_t ni = 0; ni < g.nodes.size(); ++ni)
      if (!in.count(static_cast<int>(ni)))
        ok.insert(g.nodes[ni].outputs.begin(), g.nodes[ni].outputs.end());
    d.world_size = world_size;
    d.comm = reinterpret_cast<ncclComm_t>(uintptr_t{0x1234});
  }
  BoundTensor tensor(int v) override {
    if (!ok.count(v))
      throw std::logic_error("value '" + g.values.at(v).name + "' is made inside the region");
    return FakeBuffers::tensor(v);
  }
  const DistContext* dist() const override { return &d; }
};

}  // namespace

// The NCCL baselines bind with only the buffers a fused step has: the weight read through the
// transposes the region claims (w.t() forward, w.t().t() backward), the split/cat forms.
TEST(TpCaptured, BaselinesBindWithOnlyTheRegionsBuffers) {
  for (const char* t : {"tp_colwise_seq_ws2_fwd_2x16x64x176", "tp_rowwise_seq_ws2_bwd_2x16x64x176",
                        "tp_rowwise_2d_ws4_bwd_2x16x64x176", "tp_llama_mlp_sp_ws2_fwd_2x16x64x176",
                        "tp_llama_mlp_sp_ws2_bwd_2x16x64x176"}) {
    SCOPED_TRACE(t);
    const Graph g = load_trace(captured(t));
    const Plan p = make_plan(g, fusion_registry());
    int bound = 0;
    for (const Region& r : p.regions) {
      if (r.fusion->name != "ag_matmul" && r.fusion->name != "matmul_rs") continue;
      StrictBuffers ctx(g, r, static_cast<int>(g.world_size));
      Binding b;
      ASSERT_NO_THROW(b = r.fusion->bind(g, r, *r.fusion->find_variant("baseline"), ctx))
          << r.fusion->name;
      EXPECT_TRUE(b.launch) << r.fusion->name << ": " << b.unsupported;
      if (r.fusion->name == "ag_matmul")  // the weight as the pipelines' GEMMs read it too
        for (const ag_matmul::Gemm& ge : ag_params(r).gemms) {
          const BoundTensor w = tp::bound_weight(ctx, ge.b, ge.b_transpose_of);
          EXPECT_EQ(w.layout.shape, (std::vector<int64_t>{ag_params(r).K, ge.N}));
          EXPECT_EQ(w.layout.stride, ge.b_transpose_of >= 0
                                         ? (std::vector<int64_t>{1, ag_params(r).K})
                                         : g.meta(ge.b).stride);
        }
      ++bound;
    }
    EXPECT_GE(bound, 1);
  }
}

// Edited captures the matchers must decline, each with its reason: chunks joined out of order,
// unequal chunks, a reduce-scatter that is not a sum, a reader of the gathered activation that
// runs before the last input of the region is made.
TEST(TpCaptured, DeclinesEditedForms) {
  using nlohmann::json;
  auto edited = [](const char* name, const std::function<void(json&)>& edit) {
    json t = read_json(captured(name));
    edit(t);
    return parse_trace(t, std::string("edited ") + name);
  };
  struct Case {
    const char* what;
    Graph g;
    const char* fusion;
    const char* reason;
  };
  std::vector<Case> cases;
  cases.push_back({"gathered chunks joined in reverse",
                   edited("tp_colwise_seq_ws2_fwd_2x16x64x176",
                          [](json& t) {
                            json& a = trace_node(t, "cat")["args"][0];
                            std::swap(a[0], a[1]);
                          }),
                   "ag_matmul", "does not take split 'split''s chunks in order"});
  cases.push_back({"unequal chunks",
                   edited("tp_colwise_seq_ws2_fwd_2x16x64x176",
                          [](json& t) {
                            json& s = trace_node(t, "split");
                            s["op"] = "aten.split_with_sizes.default";
                            s["args"] = {{{"ref", "wait_tensor"}}, {1, 3}};
                            s["outputs"][0]["shape"] = {1, 8, 64};
                            s["outputs"][1]["shape"] = {3, 8, 64};
                            trace_node(t, "getitem")["outputs"][0]["shape"] = {1, 8, 64};
                            trace_node(t, "getitem_1")["outputs"][0]["shape"] = {3, 8, 64};
                            json& c = trace_node(t, "cat");
                            c["args"][1] = 0;
                            c["outputs"][0]["shape"] = {4, 8, 64};
                            c["outputs"][0]["stride"] = {512, 64, 1};
                          }),
                   "ag_matmul", "split 'split' makes chunks of different sizes"});
  cases.push_back(
      {"a max reduce-scatter",
       edited("tp_rowwise_seq_ws2_fwd_2x16x64x176",
              [](json& t) { trace_node(t, "reduce_scatter_tensor")["args"][1] = "max"; }),
       "matmul_rs", "reduce_op 'max': a row-parallel linear's partial products are summed"});
  cases.push_back({"scattered chunks joined in reverse",
                   edited("tp_rowwise_seq_ws2_fwd_2x16x64x176",
                          [](json& t) {
                            json& a = trace_node(t, "cat")["args"][0];
                            std::swap(a[0], a[1]);
                          }),
                   "matmul_rs", "does not take split 'split''s chunks in order"});
  cases.push_back(
      {"a reader of the gathered activation before the weight is made",
       edited("tp_colwise_seq_ws2_fwd_2x16x64x176",
              [](json& t) {
                json& nodes = t["nodes"];
                json perm = trace_node(t, "permute");
                perm["args"][0] = {{"ref", "wmul"}};
                json w;
                for (const json& i : t["inputs"])
                  if (i["id"] == "weight") w = i;
                json neg = {{"id", "neg_reader"},
                            {"op", "aten.neg.default"},
                            {"args", {{{"ref", "view_1"}}}},
                            {"kwargs", json::object()},
                            {"outputs", trace_node(t, "view_1")["outputs"]}};
                json mulw = {
                    {"id", "wmul"},
                    {"op", "aten.mul.Tensor"},
                    {"args", {{{"ref", "weight"}}, 1.0}},
                    {"kwargs", json::object()},
                    {"outputs",
                     {{{"shape", w["shape"]}, {"stride", w["stride"]}, {"dtype", w["dtype"]}}}}};
                json out = json::array();
                for (const json& n : nodes) {
                  if (n["id"] == "permute") continue;
                  out.push_back(n);
                  if (n["id"] == "view_1") {
                    out.push_back(neg);
                    out.push_back(mulw);
                    out.push_back(perm);
                  }
                }
                nodes = out;
                t["outputs"].push_back("neg_reader");
                t["output_roles"]["neg_reader"] = "output";
              }),
       "ag_matmul", "is read by node 'neg_reader' before every input of the region is ready"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const Plan p = make_plan(c.g, fusion_registry());
    EXPECT_EQ(only_region(p, c.fusion), nullptr);
    EXPECT_NE(declined_by(p, c.fusion).find(c.reason), std::string::npos)
        << declined_by(p, c.fusion);
  }
}
