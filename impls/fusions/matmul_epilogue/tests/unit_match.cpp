// The matmul_epilogue matcher on the bundled MLP / linear traces and on synthetic forms: what it
// takes, and the reasons it gives where it declines.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <stdexcept>

#include "impls/fusions/matmul_epilogue/params.hpp"
#include "impls/fusions/matmul_epilogue/tests/synthetic.hpp"
#include "impls/fusions/registry.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/plan/match_util.hpp"
#include "workloads/plan/plan.hpp"

using namespace replay;
using namespace replay::test;
using nlohmann::json;
using replay::matmul_epilogue::Act;
using replay::matmul_epilogue::act_name;

namespace replay::fusions {
extern const FusionSpec matmul_epilogue;
}

namespace {

Plan plan_of(const Graph& g) {
  const FusionSpec* only[] = {&fusions::matmul_epilogue};
  return make_plan(g, only);
}

const matmul_epilogue::Params& params(const Region& r) {
  return std::any_cast<const matmul_epilogue::Params&>(r.params);
}

std::string name(const Graph& g, int v) {
  return v >= 0 ? g.values[v].name : "<none>";
}

// The region whose GEMM output is value `gemm`, or nullptr.
const Region* region_of(const Graph& g, const Plan& p, const std::string& gemm) {
  for (const Region& r : p.regions)
    if (name(g, params(r).gemm.out) == gemm) return &r;
  return nullptr;
}

}  // namespace

TEST(MatmulEpilogueMatch, NanoGPTMlpGeluErfAndBiasOnly) {
  for (const char* trace : {"nanogpt_mlp_train_fwd_2x8x64", "nanogpt_mlp_train_fwd_8x1024x1600"}) {
    Graph g = load_trace(trace_path(trace));
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 2u) << trace;
    // c_fc: addmm (bias, view(x), permute(weight)) + GELU (erf) with its upcast and cast back;
    // the pre-activation is saved for the backward, so the region exports it.
    const Region* fc = region_of(g, p, "addmm");
    ASSERT_NE(fc, nullptr);
    const auto& f = params(*fc);
    EXPECT_EQ(name(g, f.gemm.bias), "c_fc_bias");
    EXPECT_EQ(name(g, f.gemm.a), "view");
    EXPECT_EQ(name(g, f.gemm.b), "permute");
    EXPECT_TRUE(f.gemm.exported);
    EXPECT_TRUE(f.has_act_step);
    EXPECT_EQ(f.act, Act::kGeluErf);
    EXPECT_EQ(f.act_round, DType::kBFloat16);
    EXPECT_EQ(name(g, f.out), "convert_element_type_4");
    EXPECT_EQ(f.up.node, -1);
    std::vector<std::string> outs;
    for (int v : fc->outputs) outs.push_back(name(g, v));
    EXPECT_EQ(outs, (std::vector<std::string>{"addmm", "convert_element_type_4"}));
    EXPECT_EQ(fc->nodes.size(), 9u);  // addmm, view_1, the 6 GELU nodes with their casts... + 1
    // c_proj: addmm alone (bias epilogue), nothing after it.
    const Region* proj = region_of(g, p, "addmm_1");
    ASSERT_NE(proj, nullptr);
    EXPECT_FALSE(params(*proj).has_act_step);
    EXPECT_EQ(name(g, params(*proj).out), "addmm_1");
    // `replay plan` says what runs and why cuBLASLt's GELU epilogue is not used.
    json d = fc->fusion->describe(g, *fc);
    EXPECT_EQ(d["epilogue"][1]["op"], "gelu (erf)");
    EXPECT_NE(d["optimized"].get<std::string>().find("tanh approximation"), std::string::npos);
    EXPECT_EQ(d["gemm"]["node"], "addmm");
    // Cost: the GEMM's FLOPs and every input and output once.
    const Cost c = fc->fusion->cost(g, *fc);
    EXPECT_DOUBLE_EQ(c.flops, 2.0 * f.M * f.N * f.K);
    EXPECT_EQ(c.matmul_flops, (std::map<std::string, double>{{"bf16", 2.0 * f.M * f.N * f.K}}));
  }
}

TEST(MatmulEpilogueMatch, GeluTanhForm) {
  Graph g = load_trace(trace_path("nanogpt_mlp_gelu_tanh_train_fwd_2x8x64"));
  Plan p = plan_of(g);
  const Region* fc = region_of(g, p, "addmm");
  ASSERT_NE(fc, nullptr);
  EXPECT_EQ(params(*fc).act, Act::kGeluTanh);
  EXPECT_EQ(name(g, params(*fc).out), "convert_element_type_4");
}

TEST(MatmulEpilogueMatch, LlamaSwiGLUGating) {
  for (const char* trace :
       {"llama_swiglu_mlp_train_fwd_2x8x64x176", "llama_swiglu_mlp_train_fwd_2x4096x4096x14336"}) {
    Graph g = load_trace(trace_path(trace));
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 1u) << trace;  // w2's mm has no epilogue: eager's
    const auto& r = params(p.regions[0]);
    EXPECT_EQ(name(g, r.gemm.out), "mm");
    EXPECT_EQ(name(g, r.up.out), "mm_1");
    EXPECT_EQ(r.act, Act::kSilu);
    EXPECT_EQ(r.act_round, DType::kBFloat16);
    EXPECT_EQ(r.gate_round, DType::kBFloat16);
    EXPECT_TRUE(r.shared_input);
    EXPECT_TRUE(r.gemm.exported);
    EXPECT_TRUE(r.up.exported);
    EXPECT_EQ(name(g, r.out), "mul");
    EXPECT_EQ(p.regions[0].fusion->cost(g, p.regions[0]).flops, 4.0 * r.M * r.N * r.K);
    json d = p.regions[0].fusion->describe(g, p.regions[0]);
    EXPECT_NE(d["optimized"].get<std::string>().find("concatenated"), std::string::npos);
  }
}

TEST(MatmulEpilogueMatch, Float32LinearWithOutputCast) {
  Graph g = load_trace(trace_path("linear_fp32_train_fwd_2x8x64x32"));
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  const auto& r = params(p.regions[0]);
  EXPECT_EQ(r.gemm_dtype, DType::kFloat32);
  EXPECT_TRUE(r.has_act_step);
  EXPECT_EQ(r.act, Act::kNone);
  EXPECT_EQ(r.act_round, DType::kBFloat16);
  EXPECT_FALSE(r.gemm.exported);
  EXPECT_EQ(p.regions[0].fusion->cost(g, p.regions[0]).matmul_flops.count("fp32"), 1u);
  EXPECT_EQ(name(g, r.out), "convert_element_type_2");
}

TEST(MatmulEpilogueMatch, BackwardGraphsClaimOnlyEpilogues) {
  // dX / dW GEMMs are plain mm's read by other math: they are not claimed, and nothing crashes.
  for (const char* trace : {"nanogpt_mlp_train_bwd_2x8x64", "llama_swiglu_mlp_train_bwd_2x8x64x176",
                            "linear_fp32_train_bwd_2x8x64x32"}) {
    Graph g = load_trace(trace_path(trace));
    Plan p = plan_of(g);
    for (const Region& r : p.regions) {
      // Any region found must be a real epilogue (a bias or pointwise step).
      const auto& pr = params(r);
      EXPECT_TRUE(pr.gemm.bias >= 0 || pr.add_bias >= 0 || pr.residual >= 0 || pr.has_act_step ||
                  pr.bwd.on || pr.wgrad.on)
          << trace;
    }
  }
}

struct FormCase {
  const char* name;
  LinearForm form;
  Act act;
  bool bias_addmm, bias_add;
};

class MatmulEpilogueForms : public ::testing::TestWithParam<FormCase> {};

TEST_P(MatmulEpilogueForms, Matches) {
  const FormCase& c = GetParam();
  Graph g = parse_trace(linear_trace(c.form), c.name);
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u) << json(p.declined.size());
  const Region& r = p.regions[0];
  const auto& pr = params(r);
  EXPECT_EQ(pr.act, c.act);
  EXPECT_EQ(pr.gemm.bias >= 0, c.bias_addmm);
  EXPECT_EQ(pr.add_bias >= 0, c.bias_add);
  EXPECT_EQ(pr.M, c.form.B * c.form.T);
  EXPECT_EQ(pr.N, c.form.N);
  EXPECT_EQ(pr.K, c.form.C);
  EXPECT_EQ(name(g, pr.gemm.b), c.form.weight == "linear" ? "permute" : "weight");
  if (c.form.act != "none") EXPECT_EQ(pr.gemm.exported, c.form.save_pre);
  EXPECT_EQ(name(g, pr.out),
            c.form.act == "none" ? (c.form.bias == "add" ? "add_bias" : "gemm") : "y");
}

LinearForm form(std::string weight, std::string bias, std::string act, bool save_pre = false) {
  LinearForm f;
  f.weight = weight;
  f.bias = bias;
  f.act = act;
  f.save_pre = save_pre;
  return f;
}

INSTANTIATE_TEST_SUITE_P(
    All, MatmulEpilogueForms,
    ::testing::Values(
        FormCase{"linear_addmm_erf", form("linear", "addmm", "gelu_erf"), Act::kGeluErf, true,
                 false},
        FormCase{"conv1d_addmm_tanh", form("conv1d", "addmm", "gelu_tanh", true), Act::kGeluTanh,
                 true, false},
        FormCase{"linear_mm_add_erf", form("linear", "add", "gelu_erf"), Act::kGeluErf, false,
                 true},
        FormCase{"conv1d_mm_add_none", form("conv1d", "add", "none"), Act::kNone, false, true},
        FormCase{"linear_mm_silu", form("linear", "none", "silu", true), Act::kSilu, false, false},
        FormCase{"linear_addmm_none", form("linear", "addmm", "none"), Act::kNone, true, false},
        // Chains no fixed activation is: tabulated over the 16-bit source's bit patterns.
        FormCase{"linear_addmm_quick_gelu", form("linear", "addmm", "quick_gelu"), Act::kTable,
                 true, false},
        FormCase{"conv1d_addmm_gelu_new_bf16", form("conv1d", "addmm", "gelu_new_bf16"),
                 Act::kTable, true, false},
        FormCase{"linear_mm_add_relu2", form("linear", "add", "relu2", true), Act::kTable, false,
                 true}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(MatmulEpilogueMatch, AliasOfTheGemmOutputIsCanonicalized) {
  LinearForm f = form("linear", "addmm", "gelu_erf", true);
  f.alias_gemm = true;
  Graph g = parse_trace(linear_trace(f), "<alias>");
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  EXPECT_EQ(params(p.regions[0]).act, Act::kGeluErf);
  // The alias is claimed with the region (absorbed), so nothing runs it eagerly.
  const int alias = [&] {
    for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i)
      if (g.nodes[i].id == "gemm_alias") return i;
    return -1;
  }();
  ASSERT_GE(alias, 0);
  EXPECT_EQ(p.node_region[alias], 0);
}

TEST(MatmulEpilogueMatch, DeclinesAChainIntermediateReadOutside) {
  LinearForm f = form("linear", "addmm", "gelu_erf");
  f.leak_inner = true;
  Graph g = parse_trace(linear_trace(f), "<leak>");
  Plan p = plan_of(g);
  // The GEMM with its bias is still fused; the GELU is not, and the plan says why.
  ASSERT_EQ(p.regions.size(), 1u);
  EXPECT_FALSE(params(p.regions[0]).has_act_step);
  const std::string why = declined_at(g, p, "gemm");
  EXPECT_NE(why.find("intermediate 'erf' is a graph output"), std::string::npos) << why;
}

// The default partitioner returns views of the gate and up projections and the activation for
// the backward: the region writes mm, mm_1 and act(gate) and leaves the views as aliases of them
// (Region::views), which are not region outputs themselves.
TEST(MatmulEpilogueMatch, DefaultPartitionSavedViewsAreAliasesOfWrittenValues) {
  Graph g = load_trace(trace_path("byog/linear/llama_mlp_default_train_fwd_2x8x128"));
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  const Region& r = p.regions[0];
  const auto& pr = params(r);
  EXPECT_TRUE(pr.gemm.exported);
  EXPECT_TRUE(pr.up.exported);
  EXPECT_EQ(name(g, pr.act_out), "convert_element_type_3");
  std::vector<std::string> views, outs;
  for (int n : r.views) views.push_back(g.nodes[n].id);
  for (int v : r.outputs) outs.push_back(name(g, v));
  EXPECT_EQ(views, (std::vector<std::string>{"view_1", "view_3"}));
  std::sort(outs.begin(), outs.end());
  EXPECT_EQ(outs, (std::vector<std::string>{"convert_element_type_3", "mm", "mm_1", "mul"}));
  for (int n : r.views) EXPECT_EQ(p.node_region[n], 0);  // claimed, not run eagerly
  EXPECT_NE(r.fusion->describe(g, r).dump().find("\"written\":\"convert_element_type_3\""),
            std::string::npos);
  // Phi-3's split halves: views (view_1, split) of the one GEMM output.
  Graph g3 = load_trace(trace_path("byog/linear/phi3_mlp_default_train_fwd_2x8x128"));
  Plan p3 = plan_of(g3);
  ASSERT_EQ(p3.regions.size(), 1u);
  std::vector<std::string> v3;
  for (int n : p3.regions[0].views) v3.push_back(g3.nodes[n].id);
  EXPECT_EQ(v3, (std::vector<std::string>{"view_1", "split"}));
  EXPECT_EQ(name(g3, params(p3.regions[0]).act_out), "convert_element_type_3");
}

// The saved view returned through an alias (or a clone) of it: the alias is a tail of the region
// passing the view's buffer on, not a reason to drop the region.
TEST(MatmulEpilogueMatch, AnAliasOfASavedViewIsATail) {
  for (const char* op : {"aten.alias.default", "aten.clone.default"}) {
    json t = read_json(trace_path("byog/linear/bert_intermediate_default_train_fwd_2x8x128"));
    json view1;
    for (const auto& n : t["nodes"])
      if (n["id"] == "view_1") view1 = n;
    t["nodes"].push_back({{"id", "alias_1"},
                          {"op", op},
                          {"args", {test::ref("view_1")}},
                          {"kwargs", json::object()},
                          {"outputs", view1["outputs"]}});
    for (auto& o : t["outputs"])
      if (o == "view_1") o = "alias_1";
    t.erase("golden");
    Graph g = parse_trace(t, "bert_alias_view");
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 1u) << op << ": " << json(p.dropped.size());
    const Region& r = p.regions[0];
    ASSERT_EQ(r.views.size(), 1u) << op;
    EXPECT_EQ(g.nodes[r.views[0]].id, "view_1");
    ASSERT_EQ(r.tail.size(), 1u) << op;
    EXPECT_EQ(g.nodes[r.tail[0].node].id, "alias_1");
    EXPECT_EQ(name(g, r.tail[0].source), "view_1");
  }
}

// A pointwise reader of the GEMM output beside its GELU (a returned abs(x)) is outside the
// activation's chain: the GELU is still classified and fused.
TEST(MatmulEpilogueMatch, AnUnrelatedPointwiseReaderLeavesTheActivation) {
  json t = read_json(trace_path("byog/linear/bert_intermediate_mincut_train_fwd_2x8x128"));
  json view1;
  for (const auto& n : t["nodes"])
    if (n["id"] == "view_1") view1 = n;
  t["nodes"].push_back({{"id", "abs_1"},
                        {"op", "aten.abs.default"},
                        {"args", {test::ref("view_1")}},
                        {"kwargs", json::object()},
                        {"outputs", view1["outputs"]}});
  t["outputs"].push_back("abs_1");
  t.erase("golden");
  Graph g = parse_trace(t, "bert_abs");
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  EXPECT_EQ(params(p.regions[0]).act, Act::kGeluErf);
}

TEST(MatmulEpilogueMatch, DeclinesABiasOfTheWrongShape) {
  LinearForm f = form("linear", "addmm", "gelu_erf");
  f.bias_rows = 16;  // a [M, N] self: not nn.Linear's bias
  Graph g = parse_trace(linear_trace(f), "<bias>");
  Plan p = plan_of(g);
  EXPECT_TRUE(p.regions.empty());
  const std::string why = declined_at(g, p, "gemm");
  EXPECT_NE(why.find("bias 'bias' is bfloat16[16, 96], needs a [96] vector"), std::string::npos)
      << why;
  // mm + add of a [M, N] tensor: that add is not a bias; the GELU after it is not reached.
  f.bias = "add";
  f.bias_rows = 8;  // [T, N]: broadcasts over the batch, but is no [N] bias
  Graph g2 = parse_trace(linear_trace(f), "<add>");
  Plan p2 = plan_of(g2);
  EXPECT_TRUE(p2.regions.empty());
  EXPECT_NE(declined_at(g2, p2, "gemm").find("neither a [96] bias nor a residual"),
            std::string::npos)
      << declined_at(g2, p2, "gemm");
}

// SiLU(x W) times a tensor that is no GEMM output: the activation is fused, the gating is not,
// and the plan says why.
TEST(MatmulEpilogueMatch, DeclinesGatingByANonGemmFactor) {
  nlohmann::json t = linear_trace(form("linear", "none", "silu"));
  nlohmann::json other = tensor({2, 8, 96}, "bfloat16");
  other["id"] = "other";
  t["inputs"].push_back(other);
  t["nodes"].push_back({{"id", "gated"},
                        {"op", "aten.mul.Tensor"},
                        {"args", {ref("y"), ref("other")}},
                        {"kwargs", nlohmann::json::object()},
                        {"outputs", {tensor({2, 8, 96}, "bfloat16")}}});
  t["outputs"] = {"gated"};
  Graph g = parse_trace(t, "<gating>");
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  EXPECT_TRUE(params(p.regions[0]).has_act_step);
  EXPECT_LT(params(p.regions[0]).up.node, 0);
  const std::string why = declined_at(g, p, "gemm");
  EXPECT_NE(why.find("gating not fused: the other factor 'other'"), std::string::npos) << why;
}

TEST(MatmulEpilogueMatch, DeclinesFloat64) {
  LinearForm f = form("linear", "addmm", "none");
  f.dtype = "float64";
  Graph g = parse_trace(linear_trace(f), "<f64>");
  Plan p = plan_of(g);
  EXPECT_TRUE(p.regions.empty());
  EXPECT_NE(declined_at(g, p, "gemm").find("float64 GEMM"), std::string::npos);
}

TEST(MatmulEpilogueMatch, ActReferenceIsTheTorchFormulas) {
  using matmul_epilogue::act_reference;
  EXPECT_NEAR(act_reference(Act::kGeluErf, 1.0), 0.8413447460685429, 1e-15);
  EXPECT_NEAR(act_reference(Act::kGeluTanh, 1.0), 0.8411919906082768, 1e-15);
  EXPECT_NEAR(act_reference(Act::kSilu, 1.0), 0.7310585786300049, 1e-15);
  // erf and tanh GELU differ (by ~1.5e-4 at 1): the matcher tells them apart.
  EXPECT_GT(std::abs(act_reference(Act::kGeluErf, 1.0) - act_reference(Act::kGeluTanh, 1.0)), 1e-4);
}

TEST(MatmulEpilogueMatch, ResidualAdd) {
  LinearForm f = form("linear", "none", "none");
  f.residual = true;
  Graph g = parse_trace(linear_trace(f), "<res>");
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  const auto& r = params(p.regions[0]);
  EXPECT_EQ(name(g, r.residual), "residual");
  EXPECT_EQ(name(g, r.out), "add_res");
  EXPECT_FALSE(r.has_act_step);
  json d = p.regions[0].fusion->describe(g, p.regions[0]);
  EXPECT_NE(d["optimized"].get<std::string>().find("Not cuBLASLt's C with beta = 1"),
            std::string::npos);
}

TEST(MatmulEpilogueMatch, LlamaAndQwen3DecoderLayers) {
  // Mincut forwards: o_proj + residual, the SwiGLU gate/up pair, down_proj + residual. The
  // default partitioner also saves views of the gate and up projections and the activation: the
  // region writes those and leaves the views as aliases (Region::views).
  for (const char* model : {"llama", "qwen3"}) {
    for (const char* part : {"mincut", "default"}) {
      const std::string trace =
          std::string("byog/decoder/") + model + "_decoder_layer_" + part + "_train_fwd_2x64x256";
      LoadOptions opt;
      opt.cut_unsupported = true;  // attention is cut (workloads/plan/MATCHING.md, "cuts")
      Graph g = load_trace(trace_path(trace), opt);
      Plan p = plan_of(g);
      int gated = 0, residual = 0;
      for (const Region& r : p.regions) {
        gated += params(r).up.node >= 0;
        residual += params(r).residual >= 0;
      }
      EXPECT_EQ(residual, 2) << trace;
      EXPECT_EQ(gated, 1) << trace << ": " << declined_at(g, p, "mm_4");
    }
  }
  // Backward: dx of the gated pair is the sum of two GEMM outputs, the second GEMM + add a
  // residual form.
  Graph g = load_trace(trace_path("llama_swiglu_mlp_train_bwd_2x8x64x176"));
  Plan p = plan_of(g);
  int residual = 0;
  for (const Region& r : p.regions) residual += params(r).residual >= 0;
  EXPECT_GE(residual, 1);
}

// Hugging Face modules captured through the torch.compile backend (traces/byog/linear/, both
// partitioners): every form either matches or is declined with its reason.
struct HfCase {
  const char* trace;
  std::vector<std::string> regions;  ///< per region: its GEMM node and epilogue ops, "addmm:bias"
  std::string declined;              ///< a substring of a decline ("" for none expected)
};

std::string region_sig(const Graph& g, const Region& r) {
  json d = r.fusion->describe(g, r);
  std::string s = d["gemm"]["node"].get<std::string>() + ":";
  for (const auto& e : d["epilogue"]) s += e["op"].get<std::string>() + ",";
  return s;
}

TEST(MatmulEpilogueMatch, HuggingFaceLinearCaptures) {
  const std::string gelu_tanh_gate = "mm:gelu (tanh),gate: mul by the up projection,";
  const std::string silu_gate = "mm:silu,gate: mul by the up projection,";
  const std::string silu_bwd =
      "backward: d_up = g * silu(gate),backward: d_gate = g * up * silu'(gate),";
  const std::string llama_bwd = "mm_4:" + silu_bwd;
  const std::string gemma_bwd =
      "mm_4:backward: d_up = g * gelu (tanh)(gate),backward: d_gate = g * up * gelu (tanh)'(gate),";
  // dW GEMMs whose tangent's bias gradient rides on them: nn.Linear's (the tangent is a), GPT-2
  // Conv1D's (it is b).
  const std::string wgrad_a =
      "mm_1:bias gradient: sum over K of the GEMM's a (the tangent's rows),";
  const std::string wgrad_b =
      "mm_1:bias gradient: sum over K of the GEMM's b (the tangent's rows),";
  const HfCase cases[] = {
      {"bert_intermediate_mincut_train_fwd_2x8x128", {"addmm:bias (addmm),gelu (erf),"}, ""},
      {"bert_intermediate_default_train_fwd_2x8x128", {"addmm:bias (addmm),gelu (erf),"}, ""},
      {"gemma_mlp_mincut_train_fwd_2x8x128", {gelu_tanh_gate}, ""},
      {"gemma_mlp_default_train_fwd_2x8x128", {gelu_tanh_gate}, ""},
      {"llama_mlp_mincut_train_fwd_2x8x128", {silu_gate}, ""},
      {"llama_mlp_default_train_fwd_2x8x128", {silu_gate}, ""},
      {"phi3_mlp_mincut_train_fwd_2x8x128",
       {"mm:silu,gate: mul by the other half of the GEMM output (gate half 0),"},
       ""},
      {"phi3_mlp_default_train_fwd_2x8x128",
       {"mm:silu,gate: mul by the other half of the GEMM output (gate half 0),"},
       ""},
      {"gpt2_c_attn_mincut_train_fwd_2x8x128", {"addmm:bias (addmm),"}, ""},
      {"gpt2_c_attn_default_train_fwd_2x8x128", {"addmm:bias (addmm),"}, ""},
      {"qwen2_q_proj_mincut_train_fwd_2x8x128", {"addmm:bias (addmm),"}, ""},
      {"qwen2_q_proj_default_train_fwd_2x8x128", {"addmm:bias (addmm),"}, ""},
      // GPT-2's gelu_new runs op by op in bfloat16 (no upcast): each op rounds, which one float32
      // evaluation does not reproduce, so the chain, a function of the bf16 pre-activation
      // alone, is tabulated. The default partitioner returns three of its intermediates: declined
      // (a table gives the last value only), the biases still fused.
      {"gpt2_mlp_mincut_train_fwd_2x8x128",
       {"addmm:bias (addmm),pointwise chain (tabulated),", "addmm_1:bias (addmm),"},
       ""},
      {"gpt2_mlp_default_train_fwd_2x8x128",
       {"addmm:bias (addmm),", "addmm_1:bias (addmm),"},
       "intermediate 'mul' is a graph output"},
      // Backward: d_gate and d_up from dY @ W_down (both partitioners; the default one saves
      // act(gate), read in place of recomputing it), then dx of the gated pair = the sum of two
      // GEMM outputs (a residual-form add).
      {"llama_mlp_mincut_train_bwd_2x8x128", {llama_bwd, "mm_6:residual add,"}, ""},
      {"llama_mlp_default_train_bwd_2x8x128", {llama_bwd, "mm_6:residual add,"}, ""},
      {"gemma_mlp_mincut_train_bwd_2x8x128", {gemma_bwd, "mm_6:residual add,"}, ""},
      {"gemma_mlp_default_train_bwd_2x8x128", {gemma_bwd, "mm_6:residual add,"}, ""},
      // Phi-3: the pair's results feed a cat (eager) into the fused gate_up weight's dW / dX.
      {"phi3_mlp_mincut_train_bwd_2x8x128", {"mm_3:" + silu_bwd}, ""},
      {"phi3_mlp_default_train_bwd_2x8x128", {"mm_3:" + silu_bwd}, ""},
      // GPT-2's gelu_new backward runs in bfloat16 op by op, like its forward; c_proj's bias
      // gradient rides on its dW GEMM, c_fc's stays with the chain computing its tangent.
      {"gpt2_mlp_mincut_train_bwd_2x8x128",
       {wgrad_b},
       "backward chain after the GEMM rounds 'mul' "},
      {"gpt2_mlp_default_train_bwd_2x8x128", {wgrad_b}, "reads 4 saved tensors"},
      {"gpt2_mlp_mincut_train_bwd_2x8x128",
       {wgrad_b},
       "bias gradient 'sum_2' not fused with the dW GEMM: 'add_3' is computed by the pointwise "
       "node"},
      // BERT's intermediate: the GELU's gradient comes from the tangent, no GEMM before it, and
      // the bias gradient of what it computes stays with that chain.
      {"bert_intermediate_mincut_train_bwd_2x8x128",
       {},
       "bias gradient 'sum_1' not fused with the dW GEMM: 'convert_element_type_7' is computed by "
       "the pointwise node"},
      {"bert_intermediate_default_train_bwd_2x8x128", {}, ""},
      // The projections' backward: a dX GEMM, and the dW GEMM with the bias gradient.
      {"gpt2_c_attn_mincut_train_bwd_2x8x128", {wgrad_b}, ""},
      {"gpt2_c_attn_default_train_bwd_2x8x128", {wgrad_b}, ""},
      {"qwen2_q_proj_mincut_train_bwd_2x8x128", {wgrad_a}, ""},
      {"qwen2_q_proj_default_train_bwd_2x8x128", {wgrad_a}, ""},
  };
  for (const HfCase& c : cases) {
    Graph g = load_trace(trace_path(std::string("byog/linear/") + c.trace));
    Plan p = plan_of(g);
    std::vector<std::string> got;
    for (const Region& r : p.regions) got.push_back(region_sig(g, r));
    EXPECT_EQ(got, c.regions) << c.trace;
    if (!c.declined.empty()) {
      std::string all;
      for (const auto& d : p.declined) all += d.reason + "; ";
      EXPECT_NE(all.find(c.declined), std::string::npos) << c.trace << ": " << all;
    }
  }
}

// --- backward epilogues -------------------------------------------------------------------------

namespace {

int node_index(const Graph& g, const std::string& id) {
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i)
    if (g.nodes[i].id == id) return i;
  return -1;
}

std::vector<std::string> node_ids(const Graph& g, const Region& r) {
  std::vector<std::string> ids;
  for (int n : r.nodes) ids.push_back(g.nodes[n].id);
  return ids;
}

}  // namespace

TEST(MatmulEpilogueBackward, NanoGPTGeluBackwardWithBiasGradient) {
  // dh = dY @ W_proj, then GELU's derivative at the saved pre-activation (Inductor's
  // decomposition, float32, one cast back), and c_fc's bias gradient sum(d_pre, [0]).
  const std::vector<std::string> erf_nodes = {"mm",
                                              "view_6",
                                              "convert_element_type_12",
                                              "view_1",
                                              "convert_element_type_3",
                                              "mul_1",
                                              "erf",
                                              "add",
                                              "mul_4",
                                              "mul_5",
                                              "mul_6",
                                              "exp",
                                              "mul_7",
                                              "mul_8",
                                              "add_2",
                                              "mul_9",
                                              "convert_element_type_14",
                                              "view_7",
                                              "sum_2"};
  for (auto [trace, act] :
       {std::pair{"nanogpt_mlp_train_bwd_2x8x64", Act::kGeluErf},
        std::pair{"nanogpt_mlp_train_bwd_8x1024x1600", Act::kGeluErf},
        std::pair{"nanogpt_mlp_gelu_tanh_train_bwd_2x8x64", Act::kGeluTanh},
        std::pair{"nanogpt_mlp_gelu_tanh_train_bwd_8x1024x1600", Act::kGeluTanh}}) {
    Graph g = load_trace(trace_path(trace));
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 2u) << trace;
    const Region& r = p.regions[0];
    EXPECT_TRUE(params(p.regions[1]).wgrad.on) << trace;
    const auto& b = params(r).bwd;
    ASSERT_TRUE(b.on) << trace;
    EXPECT_FALSE(b.gated);
    EXPECT_EQ(b.act, act) << trace;
    EXPECT_EQ(name(g, b.x), "addmm");  // the saved pre-activation
    EXPECT_EQ(name(g, b.dx), "view_7");
    EXPECT_EQ(b.dx_round, DType::kBFloat16);
    EXPECT_EQ(name(g, b.dbias), "sum_2");
    EXPECT_EQ(b.dbias_dtype, DType::kBFloat16);
    EXPECT_EQ(name(g, params(r).out), "view_7");
    EXPECT_FALSE(params(r).gemm.exported);
    std::vector<std::string> outs;
    for (int v : r.outputs) outs.push_back(name(g, v));
    EXPECT_EQ(outs, (std::vector<std::string>{"view_7", "sum_2"})) << trace;
    if (act == Act::kGeluErf) EXPECT_EQ(node_ids(g, r), erf_nodes) << trace;
    json d = r.fusion->describe(g, r);
    EXPECT_NE(d["optimized"].get<std::string>().find("not CUBLASLT_EPILOGUE_BGRADB"),
              std::string::npos);
    // The dX GEMMs and c_fc's dW stay eager; c_proj's dW takes the tangent's own column sum
    // (MatmulEpilogueWeightGrad below).
    for (const char* n : {"mm_2", "mm_3"})
      EXPECT_EQ(p.node_region[node_index(g, n)], -1) << trace << " " << n;
  }
}

TEST(MatmulEpilogueBackward, LlamaSwiGLUBackwardPair) {
  const std::vector<std::string> nodes = {"mm_4",
                                          "view_7",
                                          "view_1",
                                          "convert_element_type_2",
                                          "neg",
                                          "exp",
                                          "add",
                                          "div",
                                          "convert_element_type_3",
                                          "mul_1",
                                          "view_3",
                                          "mul_2",
                                          "view_8",
                                          "convert_element_type_16",
                                          "reciprocal",
                                          "mul_3",
                                          "mul_4",
                                          "sub",
                                          "mul_5",
                                          "add_2",
                                          "mul_6",
                                          "convert_element_type_18",
                                          "view_10"};
  for (const char* trace :
       {"llama_swiglu_mlp_train_bwd_2x8x64x176", "llama_swiglu_mlp_train_bwd_2x4096x4096x14336"}) {
    Graph g = load_trace(trace_path(trace));
    Plan p = plan_of(g);
    const Region* r = region_of(g, p, "mm_4");
    ASSERT_NE(r, nullptr) << trace;
    const auto& b = params(*r).bwd;
    ASSERT_TRUE(b.on);
    EXPECT_TRUE(b.gated);
    EXPECT_EQ(b.act, Act::kSilu);
    EXPECT_EQ(name(g, b.x), "mm");     // gate projection, saved
    EXPECT_EQ(name(g, b.up), "mm_1");  // up projection, saved
    EXPECT_EQ(b.act_saved, -1);        // recomputed (min-cut partitioner)
    EXPECT_EQ(name(g, b.dup), "view_8");
    EXPECT_EQ(name(g, b.dx), "view_10");
    // The graph rounds silu(gate) and g * up to bfloat16 (bf16 ops), the rest in float32.
    EXPECT_EQ(b.act_round, DType::kBFloat16);
    EXPECT_EQ(b.h_round, DType::kBFloat16);
    EXPECT_EQ(b.dbias, -1);
    EXPECT_EQ(node_ids(g, *r), nodes) << trace;
    // d_up is read by its dW / dX GEMMs (mm_5, mm_6) before the graph computes d_gate: the fused
    // step runs at its first node, where every input is ready.
    EXPECT_EQ(g.nodes[r->anchor].id, "mm_4");
  }
}

TEST(MatmulEpilogueBackward, DefaultPartitionerSavesTheActivation) {
  Graph g = load_trace(trace_path("byog/linear/llama_mlp_default_train_bwd_2x8x128"));
  Plan p = plan_of(g);
  const Region* r = region_of(g, p, "mm_4");
  ASSERT_NE(r, nullptr);
  const auto& b = params(*r).bwd;
  EXPECT_TRUE(b.gated);
  EXPECT_EQ(name(g, b.act_saved), "convert_element_type_3");  // silu(gate) in bf16, saved
  EXPECT_EQ(name(g, b.x), "view_1");
  EXPECT_EQ(name(g, b.up), "view_3");
}

TEST(MatmulEpilogueBackward, DeclinesAnIntermediateReadOutside) {
  // g * gelu'(x) in float32 ('mul_9') also returned: the fused step writes only the cast result.
  json t = read_json(trace_path("nanogpt_mlp_train_bwd_2x8x64"));
  t.erase("golden");
  t["outputs"].push_back("mul_9");
  Graph g = parse_trace(t, "<leak>");
  Plan p = plan_of(g);
  // (The forward matcher still takes g's upcast alone, a cast epilogue.)
  const Region* r = region_of(g, p, "mm");
  EXPECT_TRUE(r == nullptr || !params(*r).bwd.on);
  const std::string why = declined_at(g, p, "mm");
  EXPECT_NE(why.find("its values 'mul_9', 'view_7' are read outside"), std::string::npos) << why;
  EXPECT_NE(why.find("an intermediate read outside is not written"), std::string::npos) << why;
}

TEST(MatmulEpilogueBackward, DeclinesABiasGradientOverTheWrongDim) {
  // sum(d_pre, [1]): a row sum, no bias gradient. The chain is still fused, the sum is not.
  json t = read_json(trace_path("nanogpt_mlp_train_bwd_2x8x64"));
  t.erase("golden");
  for (auto& n : t["nodes"]) {
    if (n["id"] == "sum_2") {
      n["args"][1] = {1};
      n["outputs"][0] = tensor({16, 1}, "bfloat16");
    } else if (n["id"] == "view_8") {
      n["args"][1] = {16};
      n["outputs"][0] = tensor({16}, "bfloat16");
    }
  }
  Graph g = parse_trace(t, "<row sum>");
  Plan p = plan_of(g);
  const Region* r = region_of(g, p, "mm");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(params(*r).bwd.dbias, -1);
  EXPECT_EQ(p.node_region[node_index(g, "sum_2")], -1);
  const std::string why = declined_at(g, p, "mm");
  EXPECT_NE(why.find("bias gradient not fused: 'sum_2' sums 'view_7' bfloat16[16, 256] over dims "
                     "other than its rows"),
            std::string::npos)
      << why;
}

TEST(MatmulEpilogueBackward, DeclinesTheWrongDerivative) {
  // The derivative's product rule dropped (x * pdf missing): no GELU'(x), nothing fused.
  json t = read_json(trace_path("nanogpt_mlp_train_bwd_2x8x64"));
  t.erase("golden");
  for (auto& n : t["nodes"])
    if (n["id"] == "add_2") n["args"] = {ref("mul_4"), 0.0};
  Graph g = parse_trace(t, "<cdf only>");
  Plan p = plan_of(g);
  const Region* r = region_of(g, p, "mm");
  EXPECT_TRUE(r == nullptr || !params(*r).bwd.on);
  EXPECT_NE(declined_at(g, p, "mm").find("is not g * act'(x) for GELU (erf, tanh) or SiLU"),
            std::string::npos)
      << declined_at(g, p, "mm");
}

TEST(MatmulEpilogueBackward, ActGradReferenceIsTheDerivative) {
  using matmul_epilogue::act_grad_reference;
  using matmul_epilogue::act_reference;
  for (Act a : {Act::kGeluErf, Act::kGeluTanh, Act::kSilu})
    for (double x : {-3.0, -0.5, 0.0, 0.7, 2.5}) {
      const double h = 1e-5;
      const double fd = (act_reference(a, x + h) - act_reference(a, x - h)) / (2 * h);
      EXPECT_NEAR(act_grad_reference(a, x), fd, 1e-8) << act_name(a) << " at " << x;
    }
}

// --- the bias gradient on the dW GEMM -----------------------------------------------------------

namespace {

std::vector<std::string> output_names(const Graph& g, const Region& r) {
  std::vector<std::string> v;
  for (int o : r.outputs) v.push_back(name(g, o));
  return v;
}

}  // namespace

TEST(MatmulEpilogueWeightGrad, BiasGradientRidesOnTheDwGemm) {
  struct Case {
    const char* trace;
    bool of_a;
    const char* a;
    const char* b;
    const char* summed;
  };
  const Case cases[] = {
      // nn.Linear: dW = mm(permute(view(tangent)), x), db = sum(view(tangent), [0], keepdim).
      {"byog/linear/qwen2_q_proj_mincut_train_bwd_2x8x128", true, "permute_2", "view", "view_2"},
      {"byog/linear/qwen2_q_proj_default_train_bwd_1x8192x3584", true, "permute_2", "view",
       "view_2"},
      {"nanogpt_mlp_train_bwd_8x1024x1600", true, "permute_3", "view_2", "view_4"},
      // GPT-2 Conv1D: dW = mm(permute(x), view(tangent)).
      {"byog/linear/gpt2_c_attn_default_train_bwd_8x1024x1024", false, "permute_1", "view_2",
       "view_2"},
      {"byog/linear/gpt2_mlp_mincut_train_bwd_8x1024x1024", false, "permute_1", "view_4", "view_4"},
  };
  for (const Case& c : cases) {
    Graph g = load_trace(trace_path(c.trace));
    Plan p = plan_of(g);
    const Region* r = region_of(g, p, "mm_1");
    ASSERT_NE(r, nullptr) << c.trace;
    const auto& w = params(*r).wgrad;
    ASSERT_TRUE(w.on) << c.trace;
    EXPECT_EQ(w.of_a, c.of_a) << c.trace;
    EXPECT_EQ(name(g, params(*r).gemm.a), c.a) << c.trace;
    EXPECT_EQ(name(g, params(*r).gemm.b), c.b) << c.trace;
    EXPECT_EQ(name(g, w.summed), c.summed) << c.trace;
    EXPECT_EQ(name(g, w.dbias), "sum_1") << c.trace;
    EXPECT_EQ(node_ids(g, *r), (std::vector<std::string>{"mm_1", "sum_1"})) << c.trace;
    EXPECT_EQ(output_names(g, *r), (std::vector<std::string>{"mm_1", "sum_1"})) << c.trace;
    // It runs where its inputs are ready: at the GEMM, before the sum's place in the graph.
    EXPECT_EQ(g.nodes[r->anchor].id, "mm_1") << c.trace;
    const json d = r->fusion->describe(g, *r);
    EXPECT_NE(d["optimized"].get<std::string>().find(c.of_a ? "BGRADB" : "BGRADA"),
              std::string::npos)
        << c.trace;
    // The sum reads the GEMM operand's elements: counted once (nn.Linear's sum reads the
    // tangent beside the GEMM's transpose view of it; Conv1D's the GEMM's b itself).
    const Cost cost = r->fusion->cost(g, *r);
    const double io = value_bytes(g, r->inputs) + value_bytes(g, r->outputs);
    EXPECT_DOUBLE_EQ(cost.bytes, io - (c.of_a ? value_bytes(g, {w.summed}) : 0)) << c.trace;
    EXPECT_GT(cost.flops, 0) << c.trace;
  }
}

TEST(MatmulEpilogueWeightGrad, TheFullGraphLeavesTheTangentsSumToTheDwGemm) {
  // With every fusion: Qwen2's q_proj backward is the dX GEMM (eager) and one region.
  Graph g = load_trace(trace_path("byog/linear/qwen2_q_proj_mincut_train_bwd_2x8x128"));
  Plan p = make_plan(g, fusion_registry());
  ASSERT_EQ(p.regions.size(), 1u);
  EXPECT_EQ(p.regions[0].fusion->name, std::string("matmul_epilogue"));
  EXPECT_TRUE(params(p.regions[0]).wgrad.on);
  EXPECT_EQ(p.node_region[node_index(g, "mm")], -1);
}

namespace {

// The small Qwen2 q_proj backward ([16, 128] tangent) with `edit` applied to sum_1 and view_3
// (the view of sum_1 the graph returns).
Graph edited_qwen2(const std::function<void(json& sum, json& view)>& edit) {
  std::ifstream f(trace_path("byog/linear/qwen2_q_proj_mincut_train_bwd_2x8x128"));
  json t = json::parse(f);
  json *sum = nullptr, *view = nullptr;
  for (json& n : t["nodes"]) {
    if (n["id"] == "sum_1") sum = &n;
    if (n["id"] == "view_3") view = &n;
  }
  EXPECT_TRUE(sum && view);
  if (!sum || !view) throw std::runtime_error("qwen2_q_proj capture: no sum_1 or view_3 to edit");
  edit(*sum, *view);
  return parse_trace(t, "qwen2_edited");
}

// The same trace with `node` inserted before sum_1 and sum_1 reading `node`'s output.
Graph edited_qwen2_with(json node, const std::function<void(json& sum, json& view)>& edit) {
  std::ifstream f(trace_path("byog/linear/qwen2_q_proj_mincut_train_bwd_2x8x128"));
  json t = json::parse(f);
  json nodes = json::array();
  for (json& n : t["nodes"]) {
    if (n["id"] == "sum_1") {
      nodes.push_back(node);
      n["args"][0] = json{{"ref", node["id"]}};
    }
    nodes.push_back(n);
  }
  t["nodes"] = nodes;
  json *sum = nullptr, *view = nullptr;
  for (json& n : t["nodes"]) {
    if (n["id"] == "sum_1") sum = &n;
    if (n["id"] == "view_3") view = &n;
  }
  if (!sum || !view) throw std::runtime_error("qwen2_q_proj capture: no sum_1 or view_3 to edit");
  edit(*sum, *view);
  return parse_trace(t, "qwen2_edited");
}

json out_meta(std::vector<int64_t> shape, std::vector<int64_t> stride) {
  return json::array({json{{"shape", shape}, {"stride", stride}, {"dtype", "bfloat16"}}});
}

}  // namespace

TEST(MatmulEpilogueWeightGrad, DeclinesOrLeavesWhatIsNoBiasGradientOfTheGemm) {
  // A sum over the wrong dim (per-token sums, [16, 1]) is no bias gradient: nothing taken.
  {
    Graph g = edited_qwen2([](json& sum, json& view) {
      sum["args"][1] = json::array({1});
      sum["outputs"][0]["shape"] = json::array({16, 1});
      sum["outputs"][0]["stride"] = json::array({1, 1});
      view["args"][1] = json::array({16});
      view["outputs"][0]["shape"] = json::array({16});
    });
    Plan p = plan_of(g);
    EXPECT_EQ(region_of(g, p, "mm_1"), nullptr);
  }
  // The bias gradient summed in float32 (sum(..., dtype=torch.float32)): declined, with why.
  {
    Graph g = edited_qwen2([](json& sum, json& view) {
      sum["kwargs"]["dtype"] = json{{"dtype", "float32"}};
      sum["outputs"][0]["dtype"] = "float32";
      view["outputs"][0]["dtype"] = "float32";
    });
    Plan p = plan_of(g);
    EXPECT_EQ(region_of(g, p, "mm_1"), nullptr);
    std::string all;
    for (const auto& d : p.declined) all += d.reason + "; ";
    EXPECT_NE(all.find("bias gradient 'sum_1' not fused with the dW GEMM: it is float32"),
              std::string::npos)
        << all;
  }
  // The 3-D tangent summed over the batch only ([1, 8, 128]: a per-position sum, not over every
  // token the GEMM reduces): nothing taken (its 1024 sums are not the GEMM's F = 128 columns).
  {
    Graph g = edited_qwen2([](json& sum, json& view) {
      sum["args"][0] = json{{"ref", "tangents_1"}};
      sum["args"][1] = json::array({0});
      sum["outputs"] = out_meta({1, 8, 128}, {1024, 128, 1});
      view["args"][1] = json::array({1024});
      view["outputs"] = out_meta({1024}, {1});
    });
    Plan p = plan_of(g);
    EXPECT_EQ(region_of(g, p, "mm_1"), nullptr);
  }
  // A flat reshape of the tangent whose last dim is not the GEMM's F ([32, 64]) summed over its
  // rows: 64 sums of other elements, nothing taken (64 is not the GEMM's F = 128).
  {
    json v{{"id", "view_9"},
           {"op", "aten.view.default"},
           {"args", json::array({json{{"ref", "tangents_1"}}, json::array({32, 64})})},
           {"kwargs", json::object()},
           {"outputs", out_meta({32, 64}, {64, 1})}};
    Graph g = edited_qwen2_with(v, [](json& sum, json& view) {
      sum["outputs"] = out_meta({1, 64}, {64, 1});
      view["args"][1] = json::array({64});
      view["outputs"] = out_meta({64}, {1});
    });
    Plan p = plan_of(g);
    EXPECT_EQ(region_of(g, p, "mm_1"), nullptr);
  }
  // The sum over the first 8 of the GEMM's 16 rows (a slice, not a reshape): nothing taken.
  {
    json v{{"id", "slice_9"},
           {"op", "aten.slice.Tensor"},
           {"args", json::array({json{{"ref", "view_2"}}, 0, 0, 8})},
           {"kwargs", json::object()},
           {"outputs", out_meta({8, 128}, {128, 1})}};
    Graph g = edited_qwen2_with(v, [](json&, json&) {});
    Plan p = plan_of(g);
    EXPECT_EQ(region_of(g, p, "mm_1"), nullptr);
  }
  // The sum over the rows of the GEMM's other operand x (the saved activation [K, N], its b):
  // that is the column sum over K of b, what BGRADA computes, so it is taken as such.
  {
    Graph g = edited_qwen2([](json& sum, json&) { sum["args"][0] = json{{"ref", "view"}}; });
    Plan p = plan_of(g);
    const Region* r = region_of(g, p, "mm_1");
    ASSERT_NE(r, nullptr);
    EXPECT_FALSE(params(*r).wgrad.of_a);
    EXPECT_EQ(name(g, params(*r).wgrad.summed), "view");
  }
  // The GEMM's a a contiguous clone of the tangent's transpose: the canonical form drops the
  // copy (the GEMM reads the permute view), so nn.Linear's form is still found.
  {
    json c{{"id", "clone_9"},
           {"op", "aten.clone.default"},
           {"args", json::array({json{{"ref", "permute_2"}}})},
           {"kwargs", json{{"memory_format", json{{"enum", "torch.contiguous_format"}}}}},
           {"outputs", out_meta({128, 16}, {16, 1})}};
    std::ifstream f(trace_path("byog/linear/qwen2_q_proj_mincut_train_bwd_2x8x128"));
    json t = json::parse(f);
    json nodes = json::array();
    for (json& n : t["nodes"]) {
      if (n["id"] == "mm_1") {
        nodes.push_back(c);
        n["args"][0] = json{{"ref", "clone_9"}};
      }
      nodes.push_back(n);
    }
    t["nodes"] = nodes;
    Graph g = parse_trace(t, "qwen2_edited");
    Plan p = plan_of(g);
    const Region* r = region_of(g, p, "mm_1");
    ASSERT_NE(r, nullptr);
    EXPECT_TRUE(params(*r).wgrad.of_a);
    EXPECT_EQ(name(g, params(*r).gemm.a), "permute_2");
  }
}
