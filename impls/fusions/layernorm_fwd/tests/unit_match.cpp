// The layernorm_fwd matcher: finds LayerNorm and RMSNorm structurally, and nothing elsewhere.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "harness/report/numerics.hpp"
#include "impls/fusions/binding.hpp"
#include "impls/fusions/layernorm_fwd/params.hpp"
#include "impls/fusions/layernorm_fwd/tests/synthetic.hpp"
#include "impls/fusions/registry.hpp"
#include "impls/reference/reference.hpp"
#include "tests/unit/fake_buffers.hpp"
#include "workloads/loader/inputs.hpp"
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
  // The kernels write y, what a training forward saves (mean, rstd, x32) and the row chain's
  // intermediates (ExportsAndDeclinesOfIntermediates), nothing else: a region whose variance or
  // var + eps is read outside is not claimed.
  for (const char* escapes : {"getitem", "add"}) {
    json t = read_json(trace_path("nanogpt_layernorm_fwd_2x8x1600"));
    t.erase("golden");
    t["outputs"].push_back(escapes);
    Plan p = plan_of(parse_trace(t, "<escape>"));
    EXPECT_TRUE(p.regions.empty()) << escapes;
  }
}

TEST(LayerNormFwdMatch, RejectsAnExportReadBeforeTheRegionEnds) {
  // The fused step runs at the region's last node: a node that reads rstd earlier in the graph
  // would find it not yet written.
  json t = read_json(trace_path("nanogpt_layernorm_train_fwd_2x8x1600"));
  t.erase("golden");
  json early = {{"id", "early"},
                {"op", "aten.mul.Tensor"},
                {"args", {ref("rsqrt"), 2.0}},
                {"outputs", {tensor({2, 8, 1}, "float32")}}};
  auto& nodes = t["nodes"];
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i]["id"] == "rsqrt") {
      nodes.insert(nodes.begin() + static_cast<long>(i) + 1, early);
      break;
    }
  t["outputs"].push_back("early");
  EXPECT_TRUE(plan_of(parse_trace(t, "<early-reader>")).regions.empty());
  // The same reader after the region's last node is fine.
  nodes.erase(
      std::find_if(nodes.begin(), nodes.end(), [](const json& n) { return n["id"] == "early"; }));
  nodes.push_back(early);
  Plan p = plan_of(parse_trace(t, "<late-reader>"));
  ASSERT_EQ(p.regions.size(), 1u);
  EXPECT_EQ(params(p.regions[0]).rstd, parse_trace(t, "<late-reader>").find_value("rsqrt"));
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
  EXPECT_EQ(j["regions"][0]["variants"], json::array({"reference", "eager", "baseline", "optimized",
                                                      "segmented", "host_alias"}));
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

// --- training forwards: the region also exports what the backward saves
// ----------------------------

namespace {

std::vector<std::string> names(const Graph& g, const std::vector<int>& values) {
  std::vector<std::string> out;
  for (int v : values) out.push_back(g.values[v].name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST(LayerNormFwdMatch, ClaimsEveryBundledTrainingForward) {
  struct Case {
    const char* workload;
    NormKind kind;
    std::vector<std::string> region_outputs;  // y and the saved statistics
    double offset;                            // of the weight (litgpt add_unit_offset)
  };
  const Case cases[] = {
      {"nanogpt_layernorm",
       NormKind::kLayerNorm,
       {"convert_element_type_1", "getitem_1", "rsqrt"},
       0},
      {"nanogpt_layernorm_nobias",
       NormKind::kLayerNorm,
       {"convert_element_type_1", "getitem_1", "rsqrt"},
       0},
      {"meta_llama_rmsnorm", NormKind::kRMSNorm, {"mul_1", "rsqrt"}, 0},
      {"litgpt_rmsnorm", NormKind::kRMSNorm, {"convert_element_type_2", "rsqrt"}, 0},
      {"litgpt_rmsnorm_unit_offset", NormKind::kRMSNorm, {"convert_element_type_2", "rsqrt"}, 1},
  };
  for (const Case& c : cases) {
    const std::string w = c.workload;
    const bool ln = c.kind == NormKind::kLayerNorm;
    for (const std::string shape :
         {ln ? "2x8x1600" : "2x8x4096", ln ? "16x1024x1600" : "2x4096x4096"}) {
      const std::string name = w + "_train_fwd_" + shape;
      Graph g = load_trace(trace_path(name));
      Plan p = plan_of(g);
      ASSERT_EQ(p.regions.size(), 1u) << name;
      const Region& r = p.regions[0];
      EXPECT_EQ(r.nodes.size(), g.nodes.size()) << name;  // the whole forward is one region
      EXPECT_EQ(names(g, r.outputs), c.region_outputs) << name;
      const auto& pr = params(r);
      EXPECT_EQ(pr.kind, c.kind) << name;
      EXPECT_EQ(g.values[pr.x].name, "x") << name;
      EXPECT_EQ(g.values[pr.rstd].name, "rsqrt") << name;
      EXPECT_EQ(pr.mean >= 0 ? g.values[pr.mean].name : "", ln ? "getitem_1" : "") << name;
      EXPECT_EQ(pr.x32, -1) << name;  // Inductor's partition saves x, not its upcast
      double offset = 0;
      for (const auto& st : pr.epilogue) {
        if (st.op == EpilogueOp::kMul) {
          EXPECT_EQ(g.values[st.weight].name, "weight") << name;
        }
        offset += st.offset;
      }
      EXPECT_EQ(offset, c.offset) << name;
      json d = r.fusion->describe(g, r);
      EXPECT_EQ(d["saved"]["rstd"], "rsqrt") << name;
      // Cost: x read, y written, the weights read, and the saved statistics written (fp32 per row).
      double bytes = 0;
      for (int v : r.inputs) bytes += static_cast<double>(g.meta(v).nbytes());
      for (int v : r.outputs) bytes += static_cast<double>(g.meta(v).nbytes());
      const int64_t rows = pr.rows;
      EXPECT_EQ(r.fusion->cost(g, r).bytes, bytes) << name;
      EXPECT_EQ(bytes, static_cast<double>(rows * pr.cols * 2 * 2 +
                                           (ln && w == "nanogpt_layernorm" ? 2 : 1) * pr.cols * 2 +
                                           (ln ? 2 : 1) * rows * 4))
          << name;
    }
  }
}

TEST(LayerNormFwdMatch, UnitOffsetWeightIsRoundedInItsDtype) {
  Graph g = load_trace(trace_path("litgpt_rmsnorm_unit_offset_train_fwd_2x8x4096"));
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  json want = json::array({{{"op", "mul"},
                            {"value", "weight"},
                            {"dtype", "float32"},
                            {"offset", 1.0},
                            {"offset_dtype", "bfloat16"}},
                           {{"op", "round"}, {"dtype", "bfloat16"}}});
  EXPECT_EQ(p.regions[0].fusion->describe(g, p.regions[0])["epilogue"], want);
}

// Forms model code writes that the bundled captures do not all have (tests/synthetic.hpp).
TEST(LayerNormFwdMatch, RMSNormForms) {
  struct Case {
    const char* form;
    std::vector<std::string> epilogue;  // op names
    double offset;
    const char* offset_dtype;
  };
  const Case cases[] = {
      {"meta", {"round", "mul"}, 0, ""},
      {"hf", {"round", "mul"}, 0, ""},  // weight as the first operand
      {"litgpt", {"mul", "round"}, 0, ""},
      {"unit_offset", {"mul", "round"}, 1, "bfloat16"},
      {"unit_offset_f32", {"mul", "round"}, 1, "float32"},  // weight.float() + 1
      {"eps_tensor", {"mul", "round"}, 0, ""},
      {"x32", {"round", "mul"}, 0, ""},
  };
  for (const Case& c : cases) {
    Graph g = parse_trace(rmsnorm_trace(6, 64, "bfloat16", c.form), c.form);
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 1u) << c.form;
    const Region& r = p.regions[0];
    EXPECT_EQ(r.nodes.size(), g.nodes.size()) << c.form;
    const auto& pr = params(r);
    EXPECT_EQ(pr.kind, NormKind::kRMSNorm) << c.form;
    EXPECT_EQ(g.values[pr.x].name, "x") << c.form;
    EXPECT_EQ(g.values[pr.rstd].name, "rstd") << c.form;
    EXPECT_EQ(pr.mean, -1) << c.form;
    EXPECT_EQ(pr.x32 >= 0 ? g.values[pr.x32].name : "", std::string(c.form) == "x32" ? "x32" : "")
        << c.form;
    std::vector<std::string> ops;
    for (const auto& st : pr.epilogue) {
      ops.push_back(st.op == EpilogueOp::kRound ? "round"
                    : st.op == EpilogueOp::kMul ? "mul"
                                                : "add");
      if (st.op == EpilogueOp::kMul) {
        EXPECT_EQ(g.values[st.weight].name, "weight") << c.form;
        EXPECT_EQ(st.offset, c.offset) << c.form;
        if (c.offset != 0) {
          EXPECT_EQ(dtype_name(st.offset_dtype), c.offset_dtype) << c.form;
        }
      }
    }
    EXPECT_EQ(ops, c.epilogue) << c.form;
    if (std::string(c.form) == "eps_tensor") {
      EXPECT_EQ(g.values[pr.eps_value].name, "eps");
      EXPECT_EQ(r.fusion->describe(g, r)["eps"], "eps");
      EXPECT_NE(std::find(r.inputs.begin(), r.inputs.end(), pr.eps_value), r.inputs.end());
    } else {
      EXPECT_EQ(pr.eps_value, -1) << c.form;
      EXPECT_DOUBLE_EQ(pr.eps, 1e-5) << c.form;
    }
    // Cost counts the exports: rstd, and x32 where it is one.
    double bytes = 0;
    for (int v : r.inputs) bytes += static_cast<double>(g.meta(v).nbytes());
    for (int v : r.outputs) bytes += static_cast<double>(g.meta(v).nbytes());
    EXPECT_EQ(r.fusion->cost(g, r).bytes, bytes) << c.form;
    EXPECT_EQ(bytes, 6 * 64 * 2 * 2 + 64 * 2 + 6 * 4 +
                         (std::string(c.form) == "x32" ? 6 * 64 * 4 : 0) +
                         (std::string(c.form) == "eps_tensor" ? 4 : 0))
        << c.form;
  }
}

TEST(LayerNormFwdMatch, LayerNormExportsStatisticsAndTheirViews) {
  for (const char* saved : {"stats", "stats_x32", "stats_views"}) {
    Graph g = parse_trace(layernorm_trace(5, 32, "bfloat16", "affine", saved), saved);
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 1u) << saved;
    const Region& r = p.regions[0];
    const auto& pr = params(r);
    EXPECT_EQ(g.values[pr.mean].name, "mean") << saved;
    EXPECT_EQ(g.values[pr.rstd].name, "rstd") << saved;
    EXPECT_EQ(pr.x32 >= 0 ? g.values[pr.x32].name : "",
              std::string(saved) == "stats_x32" ? "x32" : "")
        << saved;
    // The kernel writes the statistics; the [rows] view of rstd stays outside the region, as an
    // alias of what it writes, and the alias of mean (removed by the canonical form) is claimed
    // by the region and runs right after its fused step.
    std::vector<std::string> outs = {"mean", "rstd", "y"};
    if (std::string(saved) == "stats_x32") outs = {"mean", "rstd", "x32", "y"};
    EXPECT_EQ(names(g, r.outputs), outs) << saved;
    const bool views = std::string(saved) == "stats_views";
    EXPECT_EQ(r.nodes.size() + (views ? 1 : 0), g.nodes.size()) << saved;
    EXPECT_EQ(names(g, r.tail.empty() ? std::vector<int>{}
                                      : std::vector<int>{g.nodes[r.tail[0].node].outputs[0]}),
              views ? std::vector<std::string>{"mean_out"} : std::vector<std::string>{})
        << saved;
  }
}

TEST(LayerNormFwdMatch, NarrowingWeightCastStaysOutside) {
  // weight.to(bfloat16) from float32 rounds: not absorbed into the region (the kernel reads the
  // cast weight, computed eagerly first), unlike the exact upcasts.
  json t = rmsnorm_trace(4, 32, "bfloat16", "meta");
  for (auto& in : t["inputs"])
    if (in["id"] == "weight") in["dtype"] = "float32";
  json cast = {{"id", "wlow"},
               {"op", "prims.convert_element_type.default"},
               {"args", {ref("weight"), {{"dtype", "bfloat16"}}}},
               {"kwargs", json::object()},
               {"outputs", {tensor({32}, "bfloat16")}}};
  t["nodes"].insert(t["nodes"].begin(), cast);
  for (auto& n : t["nodes"])
    if (n["id"] == "y") n["args"][1] = ref("wlow");
  Graph g = parse_trace(t, "<narrowing>");
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  EXPECT_EQ(g.values[params(p.regions[0]).epilogue[1].weight].name, "wlow");
  EXPECT_EQ(p.node_region[0], -1);  // the cast runs eagerly
}

TEST(LayerNormFwdMatch, EpsTensorMustBeOneFloat32) {
  for (const char* dtype : {"bfloat16", "float64"}) {
    json t = rmsnorm_trace(4, 32, "bfloat16", "eps_tensor");
    for (auto& in : t["inputs"])
      if (in["id"] == "eps") in["dtype"] = dtype;
    EXPECT_TRUE(plan_of(parse_trace(t, dtype)).regions.empty()) << dtype;
  }
}

// Both kernels take every training form the matcher claims (the GPU tests then run them): the
// binder finds nothing unsupported in the saved statistics, the upcast x, offsets or eps tensors.
TEST(LayerNormFwdMatch, BothVariantsBindEveryTrainingForm) {
  std::vector<Graph> graphs;
  for (const char* name :
       {"nanogpt_layernorm_train_fwd_16x1024x1600", "nanogpt_layernorm_nobias_train_fwd_2x8x1600",
        "meta_llama_rmsnorm_train_fwd_2x4096x4096", "litgpt_rmsnorm_train_fwd_2x8x4096",
        "litgpt_rmsnorm_unit_offset_train_fwd_2x4096x4096"})
    graphs.push_back(load_trace(trace_path(name)));
  for (const char* form :
       {"meta", "hf", "litgpt", "unit_offset", "unit_offset_f32", "eps_tensor", "x32"})
    graphs.push_back(parse_trace(rmsnorm_trace(33, 2048, "bfloat16", form), form));
  for (const char* saved : {"stats", "stats_x32", "stats_views"})
    graphs.push_back(parse_trace(layernorm_trace(33, 1600, "float16", "affine", saved), saved));
  for (const Graph& g : graphs) {
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 1u) << g.name;
    for (const VariantSpec& v : p.regions[0].fusion->variants) {
      FakeBuffers ctx(g);
      Binding b = p.regions[0].fusion->bind(g, p.regions[0], v, ctx);
      EXPECT_EQ(b.unsupported, "") << g.name << " " << v.name;
      EXPECT_TRUE(b.launch) << g.name << " " << v.name;
    }
  }
}

namespace {

std::vector<std::string> row_export_names(const Graph& g, const layernorm_fwd::Params& p) {
  std::vector<std::string> out;
  for (const auto& e : p.row_exports)
    out.push_back(g.values[e.value].name + "@" + std::to_string(e.stage));
  return out;
}

std::vector<std::string> weight_export_names(const Graph& g, const layernorm_fwd::Params& p) {
  std::vector<std::string> out;
  for (const auto& e : p.weight_exports)
    out.push_back(g.values[e.value].name + "@" + std::to_string(e.step) +
                  (e.offset ? "+offset" : ""));
  return out;
}

}  // namespace

// --- residual add prologue (issue 24): h = x + residual before the norm, h returned ----------

namespace {

std::string name_of(const Graph& g, int v) {
  return v < 0 ? "" : g.values[v].name;
}

// The add's two operands, sorted (the canonical form may order a commutative add's operands
// either way; the kernels add them in fp32, where the order does not matter).
std::string addends(const Graph& g, const layernorm_fwd::Params& p) {
  std::string a = name_of(g, p.x), b = name_of(g, p.residual);
  return a < b ? a + "+" + b : b + "+" + a;
}

// The reasons the plan gives for declining candidates at node `id`.

}  // namespace

// The add-norm blocks captured through torch.compile from user code (traces/byog/), both
// partitioners, both shapes: the add joins the region, which reads x and residual and writes y,
// h (returned, and its alias through the region's tail) and the saved statistics in one pass.
TEST(LayerNormFwdMatch, ByogAddNormFusesTheResidualAdd) {
  for (const std::string model : {"llama_add_rmsnorm", "gpt2_add_layernorm"}) {
    for (const std::string part : {"mincut", "default"}) {
      for (const std::string shape : {"2x8x256", "2x4096x4096"}) {
        const std::string name = "byog/" + model + "_" + part + "_train_fwd_" + shape;
        Graph g = load_trace(trace_path(name));
        Plan p = plan_of(g);
        ASSERT_EQ(p.regions.size(), 1u) << name << " declined: " << declined_at(g, p, "add");
        const Region& r = p.regions[0];
        const auto& pr = params(r);
        EXPECT_EQ(addends(g, pr), "residual+x") << name;
        EXPECT_EQ(name_of(g, pr.h), "add") << name;
        EXPECT_EQ(pr.h_round, DType::kBFloat16) << name;
        EXPECT_EQ(pr.kind,
                  model == "gpt2_add_layernorm" ? NormKind::kLayerNorm : NormKind::kRMSNorm)
            << name;
        // The add (and its alias) are the region's, and so is every other node: the default
        // partition's Llama returns the bf16 normalized x (the weight multiply's input), which
        // the region exports after its rounding step.
        EXPECT_GE(p.node_region[g.values[g.find_value("add")].producer], 0) << name;
        EXPECT_EQ(std::count(p.node_region.begin(), p.node_region.end(), -1), 0) << name;
        EXPECT_EQ(row_export_names(g, pr),
                  model == "llama_add_rmsnorm" && part == "default"
                      ? std::vector<std::string>{"convert_element_type_1@0"}
                      : std::vector<std::string>{})
            << name;
        EXPECT_EQ(declined_at(g, p, "add"), "") << name;
        std::set<std::string> ins;
        for (int v : r.inputs) ins.insert(g.values[v].name);
        EXPECT_TRUE(ins.count("x") && ins.count("residual") && !ins.count("add")) << name;
        std::set<std::string> outs;
        for (int v : r.outputs) outs.insert(g.values[v].name);
        EXPECT_TRUE(outs.count("add")) << name;
        json d = r.fusion->describe(g, r);
        EXPECT_EQ(d["residual"], name_of(g, pr.residual)) << name;
        EXPECT_EQ(d["h"], "add") << name;
        // Cost: x, residual read, h and y written (and the weights, statistics, x32 if exported).
        const int64_t elems = pr.rows * pr.cols;
        double bytes = 0;
        for (int v : r.inputs) bytes += static_cast<double>(g.meta(v).nbytes());
        for (int v : r.outputs) bytes += static_cast<double>(g.meta(v).nbytes());
        EXPECT_EQ(r.fusion->cost(g, r).bytes, bytes) << name;
        const double xr = static_cast<double>(elems * 2);
        double extra = (pr.x32 >= 0 ? 2 * xr : 0) + (pr.mean >= 0 ? pr.rows * 4 : 0) + pr.rows * 4;
        for (const auto& st : pr.epilogue)
          if (st.weight >= 0) extra += static_cast<double>(pr.cols * 2);
        for (const auto& e : pr.row_exports) extra += static_cast<double>(g.meta(e.value).nbytes());
        EXPECT_EQ(bytes, 4 * xr + extra) << name;
      }
    }
  }
}

// Synthetic add-norms: RMSNorm and LayerNorm, h returned or used by the norm alone.
TEST(LayerNormFwdMatch, SyntheticResidualAdd) {
  for (bool ln : {false, true}) {
    for (bool ret : {true, false}) {
      json t = ln ? layernorm_trace(6, 64, "bfloat16", "affine", "stats")
                  : rmsnorm_trace(6, 64, "bfloat16", "meta");
      Graph g = parse_trace(with_residual(t, ret), "<residual>");
      Plan p = plan_of(g);
      ASSERT_EQ(p.regions.size(), 1u) << ln << ret;
      const Region& r = p.regions[0];
      const auto& pr = params(r);
      EXPECT_EQ(r.nodes.size(), g.nodes.size()) << ln << ret;
      EXPECT_EQ(addends(g, pr), "residual+x");
      EXPECT_EQ(name_of(g, pr.h), ret ? "h" : "") << ln << ret;
      EXPECT_EQ(pr.h_round, DType::kBFloat16);
      const double elem = 6 * 64 * 2;
      const double w = (ln ? 2 : 1) * 64 * 2, stats = (ln ? 2 : 1) * 6 * 4;
      EXPECT_EQ(r.fusion->cost(g, r).bytes, elem * (ret ? 4 : 3) + w + stats) << ln << ret;
    }
  }
  // float32 activations: the sum is float32, not rounded (h_round float32).
  Graph g = parse_trace(with_residual(layernorm_trace(4, 32, "float32")), "<residual-f32>");
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  EXPECT_EQ(addends(g, params(p.regions[0])), "residual+x");
  EXPECT_EQ(params(p.regions[0]).h_round, DType::kFloat32);
}

// An add that cannot be the kernel's prologue stays outside, declined with its reason; the norm
// is still fused and reads h.
TEST(LayerNormFwdMatch, ResidualAddDeclinedWithAReason) {
  struct Case {
    const char* what;
    json trace;
    const char* reason;
  };
  json early = with_residual(rmsnorm_trace(6, 64, "bfloat16", "meta"));
  // A reader of h before the region's last node: the fused step would run after it.
  early["nodes"].insert(early["nodes"].begin() + 1,
                        json{{"id", "early"},
                             {"op", "aten.mul.Tensor"},
                             {"args", {ref("h"), 2.0}},
                             {"kwargs", json::object()},
                             {"outputs", {tensor({6, 64}, "bfloat16")}}});
  early["outputs"].push_back("early");
  json alpha = with_residual(rmsnorm_trace(6, 64, "bfloat16", "meta"));
  alpha["nodes"][0]["kwargs"]["alpha"] = 2;
  const Case cases[] = {
      {"mixed_dtypes", with_residual(rmsnorm_trace(6, 64, "bfloat16", "meta"), true, "float32"),
       "mixed dtypes"},
      {"broadcast", with_residual(rmsnorm_trace(6, 64, "bfloat16", "meta"), true, "", {64}),
       "broadcast"},
      {"read_before", early, "read before the region's last node, by node 'early'"},
      {"alpha", alpha, "alpha is 2"},
  };
  for (const Case& c : cases) {
    Graph g = parse_trace(c.trace, c.what);
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 1u) << c.what;
    const auto& pr = params(p.regions[0]);
    EXPECT_EQ(pr.residual, -1) << c.what;
    EXPECT_EQ(pr.h, -1) << c.what;
    EXPECT_EQ(name_of(g, pr.x), "h") << c.what;  // the region reads the sum
    EXPECT_EQ(p.node_region[g.values[g.find_value("h")].producer], -1)
        << c.what;  // the add runs eagerly
    EXPECT_NE(declined_at(g, p, "h").find(c.reason), std::string::npos)
        << c.what << ": " << declined_at(g, p, "h");
  }
}

// What the h_unrounded mutant (tests/gpu_mutants.cpp) computes, in float64 on the CPU: the graph
// with the add's sum kept in float32 instead of rounded to bfloat16. Its y must fail the numerics
// check against the true graph's y: the mutant test's premise, on the traces it runs on.
TEST(LayerNormFwdMatch, StatisticsOfTheUnroundedSumAreCaught) {
  for (const char* name : {"byog/llama_add_rmsnorm_mincut_train_fwd_2x8x256",
                           "byog/llama_add_rmsnorm_default_train_fwd_2x8x256",
                           "byog/gpt2_add_layernorm_mincut_train_fwd_2x8x256",
                           "byog/gpt2_add_layernorm_default_train_fwd_2x8x256"}) {
    json t = read_json(trace_path(name));
    Graph g = load_trace(trace_path(name));
    // add = x.float() + residual.float(): the same sum, not rounded.
    for (auto& n : t["nodes"]) {
      if (n["id"] == "add") n["args"] = {ref("x32_in"), ref("residual32_in")};
      if (n["id"] == "add" || (n["op"] == "aten.alias.default" && n["args"][0]["ref"] == "add"))
        n["outputs"][0]["dtype"] = "float32";
    }
    for (const char* in : {"x", "residual"}) {
      json up = {{"id", std::string(in) + "32_in"},
                 {"op", "prims.convert_element_type.default"},
                 {"args", {ref(in), {{"dtype", "float32"}}}},
                 {"kwargs", json::object()},
                 {"outputs", {t["nodes"][0]["outputs"][0]}}};
      up["outputs"][0]["dtype"] = "float32";
      t["nodes"].insert(t["nodes"].begin(), up);
    }
    t.erase("golden");
    Graph unrounded = parse_trace(t, "<unrounded>");
    Plan plan = make_plan(g, fusion_registry());
    const auto bounds = default_value_bounds(g);
    const int y = g.outputs[0];
    for (uint64_t seed : {41u, 42u}) {
      auto in = generate_inputs(g, seed);
      auto want = run_reference(g, in);
      auto got = run_reference(unrounded, in);  // the inputs come first: the same value indices
      const int uy = unrounded.find_value(g.values[y].name);
      auto r = check_numerics("y", got.at(uy), want.at(y), output_bounds(g, plan, bounds, y));
      EXPECT_FALSE(r.pass()) << name << " seed " << seed << ": rel_l2 " << r.rel_l2;
    }
  }
}

// --- default-partitioner forwards: intermediates saved for the backward (issue 24) -----------

// aot_autograd's default partitioner saves what the backward reads as the forward computed it:
// the fp32 normalized value (Gemma, Gemma 2/3, OLMo 2, the per-head norm of Gemma 3), Gemma's
// fp32 1 + w, Cohere's x - mean (twice: two identical subs) and its fp32 weight. The region
// still covers the whole norm and exports each of them in its own dtype; both variants bind.
TEST(LayerNormFwdMatch, ByogDefaultForwardsExportTheirIntermediates) {
  struct Case {
    const char* model;
    NormKind kind;
    std::vector<std::string> rows;     // value@stage (-2 centered, -1 normalized, k step k)
    std::vector<std::string> weights;  // value@step(+offset)
  };
  const Case cases[] = {
      {"gemma_rmsnorm", NormKind::kRMSNorm, {"mul@-1"}, {"add_1@0+offset"}},
      {"gemma2_rmsnorm", NormKind::kRMSNorm, {"mul@-1"}, {"add_1@0+offset"}},
      {"gemma3_rmsnorm", NormKind::kRMSNorm, {"mul@-1"}, {"add_1@0+offset"}},
      {"gemma3_qk_norm", NormKind::kRMSNorm, {"mul@-1"}, {"add_1@0+offset"}},
      {"olmo2_rmsnorm", NormKind::kRMSNorm, {"mul@-1"}, {}},
      {"cohere_layernorm",
       NormKind::kLayerNorm,
       {"sub@-2", "sub_1@-2", "mul@-1"},
       {"convert_element_type_1@0"}},
  };
  for (const Case& c : cases) {
    const bool per_head = std::string(c.model).find("qk_norm") != std::string::npos;
    for (const std::string shape :
         {per_head ? "2x8x4x64" : "2x8x256", per_head ? "2x4096x32x128" : "2x4096x4096"}) {
      const std::string name = std::string("byog/") + c.model + "_default_train_fwd_" + shape;
      Graph g = load_trace(trace_path(name));
      Plan p = plan_of(g);
      ASSERT_EQ(p.regions.size(), 1u) << name;
      EXPECT_TRUE(p.declined.empty()) << name << ": " << p.declined[0].reason;
      const Region& r = p.regions[0];
      const auto& pr = params(r);
      EXPECT_EQ(pr.kind, c.kind) << name;
      EXPECT_EQ(row_export_names(g, pr), c.rows) << name;
      EXPECT_EQ(weight_export_names(g, pr), c.weights) << name;
      // Every node but the per-head norm's views (q as [B, T, H, D], y permuted) is the region's.
      EXPECT_EQ(std::count(p.node_region.begin(), p.node_region.end(), -1), per_head ? 2 : 0)
          << name;
      // y is bf16, as x; the exported intermediates float32.
      EXPECT_EQ(g.meta(pr.out).dtype, DType::kBFloat16) << name;
      for (const auto& e : pr.row_exports) EXPECT_EQ(g.meta(e.value).dtype, DType::kFloat32);
      std::set<std::string> outs;
      for (int v : r.outputs) outs.insert(g.values[v].name);
      for (const auto& e : pr.row_exports) EXPECT_TRUE(outs.count(g.values[e.value].name));
      for (const auto& e : pr.weight_exports) EXPECT_TRUE(outs.count(g.values[e.value].name));
      // Cost: x read, y written (bf16), each row export written (fp32), the weight read (bf16),
      // the weight export written (fp32), the saved statistics (fp32 per row) and x32 if saved.
      const double elems = static_cast<double>(pr.rows * pr.cols);
      const double want =
          elems * (2 + 2 + 4.0 * static_cast<double>(pr.row_exports.size())) +
          static_cast<double>(pr.cols) * (2 + 4.0 * static_cast<double>(pr.weight_exports.size())) +
          (pr.rstd >= 0 ? 4.0 * static_cast<double>(pr.rows) : 0) +
          (pr.mean >= 0 ? 4.0 * static_cast<double>(pr.rows) : 0) + (pr.x32 >= 0 ? 4 * elems : 0);
      EXPECT_EQ(r.fusion->cost(g, r).bytes, want) << name;
      json d = r.fusion->describe(g, r);
      EXPECT_EQ(d["saved"]["rows"].size(), c.rows.size()) << name;
      for (const VariantSpec& v : r.fusion->variants) {
        FakeBuffers ctx(g);
        Binding b = r.fusion->bind(g, r, v, ctx);
        EXPECT_EQ(b.unsupported, "") << name << " " << v.name;
        EXPECT_TRUE(b.launch) << name << " " << v.name;
      }
    }
  }
}

// The same models through Inductor's min-cut partitioner: nothing but y and the statistics leaves
// the region (the backward recomputes the rest), so nothing is exported; Cohere's two-pass
// LayerNorm is one region from the upcast to y, exporting its mean and rstd.
TEST(LayerNormFwdMatch, ByogMincutForwardsExportNoIntermediates) {
  for (const char* model : {"gemma_rmsnorm", "gemma2_rmsnorm", "gemma3_rmsnorm", "olmo2_rmsnorm",
                            "cohere_layernorm", "gemma3_qk_norm"}) {
    const bool per_head = std::string(model).find("qk_norm") != std::string::npos;
    const std::string name =
        std::string("byog/") + model + "_mincut_train_fwd_" + (per_head ? "2x8x4x64" : "2x8x256");
    Graph g = load_trace(trace_path(name));
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 1u) << name;
    const auto& pr = params(p.regions[0]);
    EXPECT_TRUE(pr.row_exports.empty()) << name;
    EXPECT_TRUE(pr.weight_exports.empty()) << name;
    if (std::string(model) == "cohere_layernorm") {
      EXPECT_EQ(pr.kind, NormKind::kLayerNorm);
      EXPECT_EQ(name_of(g, pr.mean), "mean");
      EXPECT_EQ(name_of(g, pr.rstd), "rsqrt");
      EXPECT_EQ(name_of(g, pr.x), "hidden_states");
      EXPECT_EQ(p.regions[0].nodes.size(), g.nodes.size()) << name;
      EXPECT_DOUBLE_EQ(pr.eps, 1e-5);
    }
  }
}

// An exported intermediate is exported at its place in the chain; what the kernels cannot write
// still declines, with its reason: the variance or var + eps read outside (not a value of the
// row chain), the normalized value read by a second node (the chain cannot continue through it).
TEST(LayerNormFwdMatch, ExportsAndDeclinesOfIntermediates) {
  {  // nanoGPT's centered x returned: exported at kStageCentered, the region still whole.
    json t = read_json(trace_path("nanogpt_layernorm_fwd_2x8x1600"));
    t.erase("golden");
    t["outputs"].push_back("sub");
    Graph g = parse_trace(t, "<centered>");
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 1u);
    EXPECT_EQ(row_export_names(g, params(p.regions[0])),
              std::vector<std::string>{"sub@" + std::to_string(kStageCentered)});
    EXPECT_EQ(p.regions[0].nodes.size(), g.nodes.size());
  }
  {  // the weight multiply's result returned: exported after epilogue step 0 (w * xhat).
    json t = read_json(trace_path("nanogpt_layernorm_fwd_2x8x1600"));
    t.erase("golden");
    t["outputs"].push_back("mul_1");
    Graph g = parse_trace(t, "<step0>");
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 1u);
    EXPECT_EQ(row_export_names(g, params(p.regions[0])), std::vector<std::string>{"mul_1@0"});
  }
  for (const char* escapes : {"getitem", "add"}) {
    json t = read_json(trace_path("nanogpt_layernorm_fwd_2x8x1600"));
    t.erase("golden");
    t["outputs"].push_back(escapes);
    Graph g = parse_trace(t, "<escape>");
    Plan p = plan_of(g);
    EXPECT_TRUE(p.regions.empty()) << escapes;
    EXPECT_NE(declined_at(g, p, "var_mean").find("the variance is not read only by"),
              std::string::npos)
        << escapes << ": " << declined_at(g, p, "var_mean");
  }
  {  // the normalized value read by the epilogue and by a second node: y stops there.
    json t = read_json(trace_path("byog/gemma_rmsnorm_default_train_fwd_2x8x256"));
    t.erase("golden");
    t["nodes"].push_back({{"id", "late"},
                          {"op", "aten.mul.Tensor"},
                          {"args", {ref("mul"), 2.0}},
                          {"kwargs", json::object()},
                          {"outputs", {tensor({2, 8, 256}, "float32")}}});
    t["outputs"].push_back("late");
    Graph g = parse_trace(t, "<two-readers>");
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 1u);
    const auto& pr = params(p.regions[0]);
    EXPECT_EQ(name_of(g, pr.out), "mul");  // the region ends at the fp32 normalized value
    EXPECT_TRUE(pr.row_exports.empty());
    for (const VariantSpec& v : p.regions[0].fusion->variants) {  // y in fp32 beside bf16 x
      FakeBuffers ctx(g);
      EXPECT_EQ(p.regions[0].fusion->bind(g, p.regions[0], v, ctx).unsupported, "") << v.name;
    }
  }
}

// Every bundled forward with a norm (traces/, traces/byog/ at both shapes, the decoder layers;
// the linear and rotary captures have none, and nothing there may be declined either) fuses it:
// each row reduction the matcher tries is in a region, nothing is declined, and both variants bind
// every region as recorded (strides, dtypes, exports): no eager fallback.
TEST(LayerNormFwdMatch, EveryBundledNormForwardFusesAndBinds) {
  namespace fs = std::filesystem;
  int traces = 0, regions = 0;
  for (const char* sub : {"", "byog", "byog/decoder", "byog/linear", "byog/rope"}) {
    if (!fs::is_directory(fs::path(REPLAY_TRACES_DIR) / sub)) continue;
    for (const auto& e : fs::directory_iterator(fs::path(REPLAY_TRACES_DIR) / sub)) {
      const std::string stem = e.path().stem().string();
      if (e.path().extension() != ".json" || stem.find("_fwd_") == std::string::npos) continue;
      Graph g = load_trace(e.path().string(), cut_options());
      Plan p = plan_of(g);
      for (const auto& d : p.declined)
        ADD_FAILURE() << stem << ": '" << g.nodes[d.node].id << "' declined: " << d.reason;
      for (size_t i = 0; i < g.nodes.size(); ++i)
        if (g.nodes[i].op == Op::kVarMean || g.nodes[i].op == Op::kMeanDim) {
          EXPECT_GE(p.node_region[i], 0) << stem << ": '" << g.nodes[i].id << "' not fused";
        }
      for (const Region& r : p.regions) {
        ++regions;
        for (const VariantSpec& v : r.fusion->variants) {
          FakeBuffers ctx(g);
          EXPECT_EQ(r.fusion->bind(g, r, v, ctx).unsupported, "") << stem << " " << v.name;
        }
      }
      traces += !p.regions.empty();
    }
  }
  EXPECT_GE(traces, 100);  // 28 in traces/, 76 in byog/, 4 decoder layers
  EXPECT_GE(regions, traces);
}

// The optimized kernel reads x and the residual through the read-only data path: an output that
// overlaps either (an in-place norm) is refused with the reason; the baseline takes it.
TEST(LayerNormFwdSupports, OutputOverlappingTheInputIsRefusedByTheOptimizedKernel) {
  alignas(16) static uint16_t buf[8 * 64];
  NormFwdArgs a;
  a.rows = 4;
  a.cols = 64;
  a.x_dtype = a.out_dtype = DType::kBFloat16;
  a.x_row_stride = a.out_row_stride = 64;
  a.x = buf;
  a.out = buf + 4 * 64;  // right after x: no overlap
  EXPECT_EQ(layernorm_fwd_supports(a, NormVariant::kOptimized), "");
  a.out = buf + 3 * 64;  // x's last row
  EXPECT_EQ(layernorm_fwd_supports(a, NormVariant::kOptimized),
            "an output overlaps x or the residual (in place)");
  EXPECT_EQ(layernorm_fwd_supports(a, NormVariant::kBaseline), "");
  a.out = buf + 4 * 64;
  a.residual = buf + 4 * 64;  // h = x + residual written over the residual's rows
  a.residual_row_stride = 64;
  a.h_round = DType::kBFloat16;
  EXPECT_EQ(layernorm_fwd_supports(a, NormVariant::kOptimized),
            "an output overlaps x or the residual (in place)");
}
