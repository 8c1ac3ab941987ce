// The scaled_mm matcher on the bundled float8 linear traces (tensorwise and rowwise, forward and
// backward, golden and realistic shapes) and on synthetic forms (the reshape form, bias, float32
// output, fast accumulation): what it takes, and the reasons it gives where it declines (what
// cuBLASLt's float8 kernels cannot read in place, scale shapes, scale_result).
#include <gtest/gtest.h>

#include "impls/fusions/registry.hpp"
#include "impls/fusions/scaled_mm/params.hpp"
#include "impls/fusions/scaled_mm/tests/synthetic.hpp"
#include "tests/unit/fake_buffers.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/plan/plan.hpp"

using namespace replay;
using namespace replay::test;
using nlohmann::json;

namespace replay::fusions {
extern const FusionSpec scaled_mm;
}

namespace {

Plan plan_of(const Graph& g) {
  const FusionSpec* only[] = {&fusions::scaled_mm};
  return make_plan(g, only);
}

const scaled_mm::Params& params(const Region& r) {
  return std::any_cast<const scaled_mm::Params&>(r.params);
}

std::string name(const Graph& g, int v) {
  return v >= 0 ? g.values[v].name : "<none>";
}

std::vector<std::string> node_ids(const Graph& g, const Region& r) {
  std::vector<std::string> ids;
  for (int n : r.nodes) ids.push_back(g.nodes[n].id);
  return ids;
}

std::vector<std::string> value_names(const Graph& g, const std::vector<int>& vs) {
  std::vector<std::string> out;
  for (int v : vs) out.push_back(name(g, v));
  return out;
}

// The region whose _scaled_mm output is `mm`, or nullptr.
const Region* region_of(const Graph& g, const Plan& p, const std::string& mm) {
  for (const Region& r : p.regions)
    if (name(g, params(r).mm_out) == mm) return &r;
  return nullptr;
}

Graph synthetic(const Float8Form& f) {
  return parse_trace(float8_linear_trace(f), "synthetic");
}

}  // namespace

TEST(ScaledMmMatch, RowwiseForwardGemmAndItsView) {
  for (const char* trace : {"float8_linear_rowwise_train_fwd_2x8x64x32",
                            "float8_linear_rowwise_train_fwd_2x4096x4096x4096"}) {
    Graph g = load_trace(trace_path(trace));
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 1u) << trace;
    const Region& r = p.regions[0];
    const auto& s = params(r);
    EXPECT_TRUE(s.rowwise);
    EXPECT_EQ(name(g, s.a), "convert_element_type_4");
    EXPECT_EQ(s.a_view, -1);
    EXPECT_EQ(name(g, s.b), "permute");  // w_fp8.t(): column-major, read in place
    // scale_a = reciprocal(x_scale [M, 1]), scale_b = reciprocal(permute(w_scale [N, 1])): the
    // quantization scales (each also multiplies x.float() / w.float()), whose reciprocals the
    // quantization's fusion writes: read as they are.
    EXPECT_FALSE(s.scale_a.reciprocal || s.scale_b.reciprocal);
    EXPECT_TRUE(s.scale_a.quantization && s.scale_b.quantization);
    EXPECT_EQ(name(g, s.scale_a.value), "reciprocal_2");
    EXPECT_EQ(name(g, s.scale_b.value), "reciprocal_3");
    EXPECT_EQ(name(g, s.out), "view_1");  // the GEMM writes the [B, T, N] result in place
    EXPECT_EQ(node_ids(g, r), (std::vector<std::string>{"_scaled_mm", "view_1"}));
    EXPECT_EQ(value_names(g, r.outputs), std::vector<std::string>{"view_1"});
    EXPECT_EQ(s.out_dtype, DType::kBFloat16);
    EXPECT_FALSE(s.fast_accum);
    const Cost c = r.fusion->cost(g, r);
    const double flops = 2.0 * s.M * s.N * s.K;
    EXPECT_DOUBLE_EQ(c.flops, flops);
    EXPECT_EQ(c.matmul_flops, (std::map<std::string, double>{{"float8_rowwise", flops}}));
    // float8 operands (1 byte), two float32 scale vectors, the bf16 result.
    EXPECT_DOUBLE_EQ(c.bytes,
                     static_cast<double>(s.M * s.K + s.K * s.N + 4 * (s.M + s.N) + 2 * s.M * s.N));
    json d = r.fusion->describe(g, r);
    EXPECT_EQ(d["scaling"], "rowwise");
    EXPECT_NE(d["optimized"].get<std::string>().find("OUTER_VEC_32F"), std::string::npos);
    EXPECT_NE(d["scale_b"]["computed"].get<std::string>().find("fp8_quantize"), std::string::npos);
  }
}

TEST(ScaledMmMatch, TensorwiseForward) {
  Graph g = load_trace(trace_path("float8_linear_tensorwise_train_fwd_2x8x64x32"));
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  const Region& r = p.regions[0];
  EXPECT_FALSE(params(r).rowwise);
  EXPECT_EQ(node_ids(g, r), (std::vector<std::string>{"_scaled_mm", "view_1"}));
  EXPECT_EQ(r.fusion->cost(g, r).matmul_flops.count("float8_tensorwise"), 1u);
}

// Scales that come from elsewhere (graph inputs here; saved scales) have their reciprocals folded
// into the region; a forward that saves them for the backward gets them written by it.
TEST(ScaledMmMatch, ReciprocalsOfOtherScalesAreClaimedAndWrittenWhenSaved) {
  Float8Form f;
  f.rowwise = false;
  f.save_recip = true;
  Graph g = synthetic(f);
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  const Region& r = p.regions[0];
  const auto& s = params(r);
  EXPECT_TRUE(s.scale_a.reciprocal && s.scale_a.exported);
  EXPECT_TRUE(s.scale_b.reciprocal && s.scale_b.exported);
  EXPECT_EQ(name(g, s.scale_a.source), "scale_x");
  EXPECT_EQ(value_names(g, r.outputs),
            (std::vector<std::string>{"reciprocal", "reciprocal_1", "view_1"}));
  // Read by a second GEMM before this one: the reciprocal stays with the first reader.
  json doc = float8_linear_trace(f);
  json first = doc["nodes"][2];  // the reciprocal of scale_x
  ASSERT_EQ(first["id"], "reciprocal");
  json early = {{"id", "early"},
                {"op", "aten.mul.Tensor"},
                {"args", {test::ref("reciprocal"), 2.0}},
                {"kwargs", json::object()},
                {"outputs", {tensor({}, "float32")}}};
  doc["nodes"].insert(doc["nodes"].begin() + 3, early);
  doc["outputs"].push_back("early");
  g = parse_trace(doc, "early");
  p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  EXPECT_FALSE(params(p.regions[0]).scale_a.reciprocal);
  EXPECT_TRUE(params(p.regions[0]).scale_b.reciprocal);
}

TEST(ScaledMmMatch, TensorwiseBackwardBothGemms) {
  Graph g = load_trace(trace_path("float8_linear_tensorwise_train_bwd_2x8x64x32"));
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 2u) << plan_to_json(g, p).dump(1);
  // grad_input = grad_out (e5m2) @ w (e4m3, the saved column-major copy), viewed to [B, T, K].
  const Region* gi = region_of(g, p, "_scaled_mm_1");
  ASSERT_NE(gi, nullptr);
  const auto& s1 = params(*gi);
  EXPECT_EQ(s1.a_dtype, DType::kFloat8E5M2);
  EXPECT_EQ(s1.b_dtype, DType::kFloat8E4M3);
  EXPECT_EQ(name(g, s1.b), "permute_2");  // a saved input, column-major
  EXPECT_EQ(name(g, s1.scale_a.value), "reciprocal_6");
  EXPECT_EQ(name(g, s1.scale_b.value), "reciprocal_3");  // saved by the forward
  EXPECT_EQ(name(g, s1.out), "view_3");
  EXPECT_EQ(node_ids(g, *gi), (std::vector<std::string>{"_scaled_mm_1", "view_3"}));
  EXPECT_FALSE(s1.copy_self);
  // grad_weight = grad_out.t().contiguous() @ x: the canonical form folds the clone away, so the
  // GEMM's self is the column-major permute_3; the region absorbs the clone and makes that copy.
  const Region* gw = region_of(g, p, "_scaled_mm_2");
  ASSERT_NE(gw, nullptr);
  EXPECT_EQ(name(g, params(*gw).scale_a.value), "reciprocal_6");
  EXPECT_EQ(name(g, params(*gw).a), "permute_3");
  EXPECT_TRUE(params(*gw).copy_self);
  EXPECT_EQ(node_ids(g, *gw), (std::vector<std::string>{"clone_1", "_scaled_mm_2"}));
}

TEST(ScaledMmMatch, RowwiseBackwardBothGemms) {
  for (const char* trace : {"float8_linear_rowwise_train_bwd_2x8x64x32",
                            "float8_linear_rowwise_train_bwd_2x4096x4096x4096"}) {
    Graph g = load_trace(trace_path(trace));
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 2u) << trace;
    const Region* gi = region_of(g, p, "_scaled_mm_1");
    ASSERT_NE(gi, nullptr);
    EXPECT_TRUE(params(*gi).rowwise);
    EXPECT_EQ(node_ids(g, *gi), (std::vector<std::string>{"_scaled_mm_1", "view_3"}));
    EXPECT_EQ(name(g, params(*gi).scale_b.value), "reciprocal_7");  // saved
    // grad_weight: scale_a = reciprocal(permute(go_scale_c [1, N] -> [N, 1])), the quantization's.
    const Region* gw = region_of(g, p, "_scaled_mm_2");
    ASSERT_NE(gw, nullptr);
    EXPECT_EQ(node_ids(g, *gw), (std::vector<std::string>{"clone_1", "_scaled_mm_2"}));
    EXPECT_EQ(name(g, params(*gw).scale_a.value), "reciprocal_10");
    EXPECT_TRUE(params(*gw).scale_a.quantization);
    EXPECT_TRUE(params(*gw).copy_self);
    EXPECT_EQ(name(g, params(*gw).b), "permute_6");
  }
}

TEST(ScaledMmMatch, ReshapeFormIsOneRegionOfViews) {
  for (bool rowwise : {true, false}) {
    Float8Form f;
    f.rowwise = rowwise;
    f.bias = "bfloat16";
    f.out_dtype = "float32";
    f.fast_accum = true;
    Graph g = synthetic(f);
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 1u);
    const Region& r = p.regions[0];
    const auto& s = params(r);
    EXPECT_EQ(name(g, s.a), "x");  // the [B, T, K] input, read as [M, K]
    EXPECT_EQ(name(g, s.a_view), "view");
    EXPECT_EQ(name(g, s.out), "view_1");
    EXPECT_EQ(name(g, s.bias), "bias");
    EXPECT_EQ(s.out_dtype, DType::kFloat32);
    EXPECT_TRUE(s.fast_accum);
    EXPECT_EQ(s.rowwise, rowwise);
    std::vector<std::string> nodes = {"view", "reciprocal"};
    if (rowwise) nodes.push_back("permute_1");
    nodes.insert(nodes.end(), {"reciprocal_1", "_scaled_mm", "view_1"});
    EXPECT_EQ(node_ids(g, r), nodes);
    EXPECT_EQ(value_names(g, r.inputs),
              (std::vector<std::string>{"x", "scale_x", "scale_w", "bias", "permute"}));
    EXPECT_EQ(value_names(g, r.outputs), std::vector<std::string>{"view_1"});
    EXPECT_TRUE(p.declined.empty()) << p.declined[0].reason;
  }
}

// torchao's rowwise_with_gw_hp grad_input: the weight's one-element scale inverted, then viewed
// and expanded to [1, N] and made contiguous; the canonical form folds the clone away, the region
// claims the chain and absorbs the clone: its kernel writes 1 / s to all N entries.
TEST(ScaledMmMatch, BroadcastWeightScaleAfterTheReciprocal) {
  Float8Form f;
  f.broadcast_w = true;
  Graph g = synthetic(f);
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  const Region& r = p.regions[0];
  const auto& s = params(r);
  EXPECT_TRUE(s.rowwise);
  EXPECT_TRUE(s.scale_b.reciprocal);
  EXPECT_EQ(name(g, s.scale_b.source), "scale_w");  // one element
  EXPECT_EQ(node_ids(g, r),
            (std::vector<std::string>{"view", "reciprocal", "reciprocal_1", "view_s", "expand",
                                      "clone", "_scaled_mm", "view_1"}));
  ASSERT_EQ(r.absorbed.size(), 1u);
  EXPECT_EQ(g.nodes[r.absorbed[0]].id, "clone");
}

// The captured rowwise_with_gw_hp grad_input: scale_b = the weight's tensorwise reciprocal (the
// quantization's) viewed, expanded to [1, N] and made contiguous. The canonical form folds the
// clone away; the region absorbs it and its small kernel makes the expand unit-stride for
// OUTER_VEC_32F (the graph's copy).
TEST(ScaledMmMatch, CapturedGwHpBackwardBroadcastScale) {
  Graph g = load_trace(trace_path("byog/float8/float8_rowwise_gw_hp_mincut_train_bwd_2x8x64x32"));
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  const Region& r = p.regions[0];
  EXPECT_EQ(node_ids(g, r), (std::vector<std::string>{"clone_1", "_scaled_mm_1", "view_4"}));
  EXPECT_TRUE(params(r).rowwise);
  EXPECT_EQ(name(g, params(r).scale_b.value), "expand");
  EXPECT_FALSE(params(r).scale_b.reciprocal);
  EXPECT_NE(r.fusion->describe(g, r)["optimized"].get<std::string>().find("unit-stride"),
            std::string::npos);
}

TEST(ScaledMmMatch, NonTnLayoutsAreDeclined) {
  Float8Form row_major_w;
  row_major_w.weight = "rowmajor";  // mat2 a row-major [K, N]: would need a copy
  Graph g = synthetic(row_major_w);
  Plan p = plan_of(g);
  EXPECT_TRUE(p.regions.empty());
  EXPECT_NE(declined_at(g, p, "_scaled_mm").find("mat2 'weight'"), std::string::npos);
  EXPECT_NE(declined_at(g, p, "_scaled_mm").find("not column-major"), std::string::npos);

  // A column-major self is taken only where the captured graph clones it contiguous (the
  // canonical form folds the clone away; the backward's grad_weight operand): without the clone,
  // the binder refuses (a copy of the fusion's own), on the CPU with fake buffers.
  Float8Form col_major_x;
  col_major_x.self = "permute";
  g = synthetic(col_major_x);
  p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  EXPECT_TRUE(params(p.regions[0]).copy_self);
  for (const char* variant : {"baseline", "optimized"}) {
    FakeBuffers ctx(g);
    const Binding b =
        fusions::scaled_mm.bind(g, p.regions[0], *fusions::scaled_mm.find_variant(variant), ctx);
    EXPECT_FALSE(b.launch) << variant;
    EXPECT_NE(b.unsupported.find("graph makes no contiguous copy"), std::string::npos)
        << b.unsupported;
  }
}

TEST(ScaledMmMatch, BiasAndOutputOutsideCublasLtsFloat8TableAreDeclined) {
  Float8Form f;
  f.bias = "float32";  // cuBLASLt's float8 bias: bfloat16 (bf16/f32 out) or float16 (f16 out)
  Graph g = synthetic(f);
  Plan p = plan_of(g);
  EXPECT_TRUE(p.regions.empty());
  EXPECT_NE(declined_at(g, p, "_scaled_mm").find("a float32 bias with a bfloat16 output"),
            std::string::npos);
  f.bias = "";
  f.out_dtype = "float8_e4m3fn";
  g = synthetic(f);
  p = plan_of(g);
  EXPECT_TRUE(p.regions.empty());
  EXPECT_NE(declined_at(g, p, "_scaled_mm").find("out_dtype float8_e4m3fn"), std::string::npos);
}

// The loader refuses e5m2 x e5m2, K or N not a multiple of 16, other scale shapes and a
// scale_result (workloads/ops/matmul.cpp); a graph built some other way that holds one still gets
// the matcher's reason. Each case edits a loaded graph's metadata.
TEST(ScaledMmMatch, WhatCublasLtRefusesIsDeclinedWithTheReason) {
  Float8Form f;
  auto edited = [&](const std::function<void(Graph&)>& edit) {
    Graph g = synthetic(f);
    edit(g);
    return g;
  };
  auto reason = [&](const Graph& g) {
    Plan p = plan_of(g);
    EXPECT_TRUE(p.regions.empty());
    return declined_at(g, p, "_scaled_mm");
  };
  // e5m2 x e5m2.
  Graph g = edited([](Graph& g) {
    for (const char* v : {"x", "view", "weight", "permute"})
      g.values[g.find_value(v)].meta.dtype = DType::kFloat8E5M2;
  });
  EXPECT_NE(reason(g).find("float8_e5m2 x float8_e5m2"), std::string::npos) << reason(g);
  // K = 24.
  g = edited([](Graph& g) {
    g.values[g.find_value("view")].meta = {{16, 24}, {24, 1}, DType::kFloat8E4M3};
    g.values[g.find_value("permute")].meta = {{24, 32}, {1, 24}, DType::kFloat8E4M3};
  });
  EXPECT_NE(reason(g).find("K = 24, N = 32"), std::string::npos) << reason(g);
  // N = 40 (tensorwise: the scales fit any N).
  f.rowwise = false;
  g = edited([](Graph& g) {
    g.values[g.find_value("permute")].meta = {{64, 40}, {1, 64}, DType::kFloat8E4M3};
  });
  f.rowwise = true;
  EXPECT_NE(reason(g).find("N = 40"), std::string::npos) << reason(g);
  // scale_a [1, M] beside scale_b [1, N]: neither tensorwise nor rowwise.
  g = edited([](Graph& g) {
    g.values[g.find_value("reciprocal")].meta = {{1, 16}, {16, 1}, DType::kFloat32};
  });
  EXPECT_NE(reason(g).find("neither tensorwise"), std::string::npos) << reason(g);
  // scale_result given.
  g = edited([](Graph& g) {
    Node& n = g.nodes[g.values[g.find_value("_scaled_mm")].producer];
    n.operands[5].value = g.find_value("scale_x");
    n.operands[5].none = false;
  });
  EXPECT_NE(reason(g).find("scale_result 'scale_x'"), std::string::npos) << reason(g);
  // And the loader itself names the node and the expectation.
  json doc = float8_linear_trace(f);
  for (auto& n : doc["nodes"])
    if (n["id"] == "permute")
      n["outputs"][0] = {{"shape", {64, 40}}, {"stride", {1, 64}}, {"dtype", "float8_e4m3fn"}};
  for (auto& i : doc["inputs"])
    if (i["id"] == "weight") i["shape"] = {40, 64}, i["stride"] = {64, 1};
  try {
    parse_trace(doc, "k_not_16.json");
    ADD_FAILURE() << "the loader took N = 40";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("multiples of 16"), std::string::npos) << e.what();
  }
}

// Every bundled float8 trace plans with the whole registry: each _scaled_mm is in a scaled_mm
// region (nothing else claims them), and nothing is dropped.
TEST(ScaledMmMatch, EveryBundledFloat8GemmIsARegion) {
  for (const std::string& t : bundled_trace_names()) {
    if (t.find("float8") == std::string::npos) continue;
    Graph g = load_trace(trace_path(t));
    Plan p = make_plan(g, fusion_registry());
    int gemms = 0, regions = 0;
    for (const Node& n : g.nodes) gemms += n.op == Op::kScaledMm;
    for (const Region& r : p.regions) regions += r.fusion == &fusions::scaled_mm;
    EXPECT_EQ(regions, gemms) << t << ": " << plan_to_json(g, p).dump(1);
    for (const auto& d : p.dropped) EXPECT_NE(d.fusion, "scaled_mm") << t << ": " << d.reason;
  }
}
