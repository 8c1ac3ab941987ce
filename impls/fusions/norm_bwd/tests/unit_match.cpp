// The norm_bwd matcher: every bundled backward trace (positive, with region nodes, inputs,
// outputs and params checked), every synthetic form the issue lists (weight before/after the
// down-cast, x * (1 + w), no bias, RMS without mean, eps as an input, recomputed or saved
// statistics, saved normalized x, commuted operands, mean vs sum/C, dy summed from two
// gradients), the negatives (only one of the two reductions, reductions over unrelated inputs,
// an escaping intermediate, a wrong divisor), and the cost model's bytes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "impls/fusions/norm_bwd/params.hpp"
#include "impls/fusions/norm_bwd/tests/synthetic.hpp"
#include "impls/fusions/registry.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/plan/plan.hpp"

using namespace replay;
using namespace replay::test;
using nlohmann::json;

namespace replay::fusions {
extern const FusionSpec norm_bwd;
}

namespace {

Plan plan_of(const Graph& g) {
  const FusionSpec* only[] = {&fusions::norm_bwd};
  return make_plan(g, only);
}

const norm_bwd::Params& params(const Region& r) {
  return std::any_cast<const norm_bwd::Params&>(r.params);
}

std::string name_of(const Graph& g, int v) {
  return v < 0 ? "" : g.values[v].name;
}

std::set<std::string> names(const Graph& g, const std::vector<int>& vs) {
  std::set<std::string> s;
  for (int v : vs) s.insert(g.values[v].name);
  return s;
}

struct BundledCase {
  std::string trace;
  bool layernorm;
  std::set<std::string> inputs;
  std::string dx, dw, db;  // db "" without bias
  DType g_round, xhat_round, dwt_round, w_round;
  double w_offset;
};

const DType f32 = DType::kFloat32, bf16 = DType::kBFloat16;

void PrintTo(const BundledCase& c, std::ostream* os) {
  *os << c.trace;
}

class NormBwdBundled : public ::testing::TestWithParam<BundledCase> {};

}  // namespace

TEST_P(NormBwdBundled, WholeGraphIsOneRegion) {
  const BundledCase& c = GetParam();
  for (const char* shape : {"small", "large"}) {
    std::string trace = c.trace;
    if (std::string(shape) == "large") {  // the realistic capture of the same module
      std::string large;
      for (const auto& e : std::filesystem::directory_iterator(REPLAY_TRACES_DIR)) {
        const std::string n = e.path().stem().string();
        if (e.path().extension() == ".json" && n != trace &&
            n.substr(0, n.rfind('_')) == trace.substr(0, trace.rfind('_')))
          large = n;
      }
      if (large.empty()) continue;
      trace = large;
    }
    SCOPED_TRACE(trace);
    Graph g = load_trace(trace_path(trace));
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 1u);
    const Region& r = p.regions[0];
    EXPECT_EQ(r.nodes.size(), g.nodes.size());  // the whole backward graph
    EXPECT_TRUE(p.dropped.empty());
    const auto& pr = params(r);
    EXPECT_EQ(pr.layernorm, c.layernorm);
    EXPECT_EQ(pr.stats, NormBwdStats::kSaved);
    EXPECT_EQ(names(g, r.inputs), c.inputs);
    std::set<std::string> outs = {c.dx, c.dw};
    if (!c.db.empty()) outs.insert(c.db);
    EXPECT_EQ(names(g, r.outputs), outs);
    EXPECT_EQ(name_of(g, pr.x), "x");
    EXPECT_EQ(name_of(g, pr.dy), "tangents_1");
    EXPECT_EQ(name_of(g, pr.w), "weight");
    EXPECT_EQ(name_of(g, pr.dx), c.dx);
    EXPECT_EQ(name_of(g, pr.dw), c.dw);
    EXPECT_EQ(name_of(g, pr.db), c.db);
    EXPECT_EQ(pr.cols, g.meta(pr.x).shape.back());
    EXPECT_EQ(pr.rows * pr.cols, g.meta(pr.x).numel());
    EXPECT_EQ(pr.g_round, c.g_round);
    EXPECT_EQ(pr.xhat_round, c.xhat_round);
    EXPECT_EQ(pr.dwt_round, c.dwt_round);
    EXPECT_EQ(pr.w_round, c.w_round);
    EXPECT_EQ(pr.w_offset, c.w_offset);
    EXPECT_EQ(pr.dx_round, bf16);
    EXPECT_EQ(pr.dw_round, bf16);
    if (!c.db.empty()) {
      EXPECT_EQ(pr.db_round, bf16);
    }
    // The cost: x, dy read, dx written, w, the statistics, dw (and db): each once.
    const double act = static_cast<double>(g.meta(pr.x).nbytes());
    const double vec = static_cast<double>(g.meta(pr.w).nbytes());
    const double stats = static_cast<double>(pr.rows) * 4 * (c.layernorm ? 2 : 1);
    EXPECT_DOUBLE_EQ(r.fusion->cost(g, r).bytes, 3 * act + vec * (c.db.empty() ? 2 : 3) + stats);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Traces, NormBwdBundled,
    ::testing::Values(BundledCase{"nanogpt_layernorm_train_bwd_2x8x1600",
                                  true,
                                  {"x", "weight", "getitem_1", "rsqrt", "tangents_1"},
                                  "convert_element_type_6",
                                  "convert_element_type_7",
                                  "convert_element_type_8",
                                  f32,
                                  f32,
                                  f32,
                                  f32,
                                  0},
                      BundledCase{"nanogpt_layernorm_nobias_train_bwd_2x8x1600",
                                  true,
                                  {"x", "weight", "getitem_1", "rsqrt", "tangents_1"},
                                  "convert_element_type_5",
                                  "convert_element_type_6",
                                  "",
                                  f32,
                                  f32,
                                  f32,
                                  f32,
                                  0},
                      // weight applied after the down-cast: g, xhat and the dw term are bf16
                      BundledCase{"meta_llama_rmsnorm_train_bwd_2x8x4096",
                                  false,
                                  {"x", "weight", "rsqrt", "tangents_1"},
                                  "convert_element_type_3",
                                  "view",
                                  "",
                                  bf16,
                                  bf16,
                                  bf16,
                                  f32,
                                  0},
                      // weight applied before the down-cast
                      BundledCase{"litgpt_rmsnorm_train_bwd_2x8x4096",
                                  false,
                                  {"x", "weight", "rsqrt", "tangents_1"},
                                  "convert_element_type_5",
                                  "convert_element_type_4",
                                  "",
                                  f32,
                                  f32,
                                  f32,
                                  f32,
                                  0},
                      // x * (1 + w), 1 + w in bf16
                      BundledCase{"litgpt_rmsnorm_unit_offset_train_bwd_2x8x4096",
                                  false,
                                  {"x", "weight", "rsqrt", "tangents_1"},
                                  "convert_element_type_5",
                                  "convert_element_type_4",
                                  "",
                                  f32,
                                  f32,
                                  f32,
                                  bf16,
                                  1}),
    [](const auto& info) { return test_name(info.param.trace); });

// Every other bundled backward trace of a norm (captures added later: Hugging Face Llama, the
// PyTorch PR 165370 shapes, eps as a tensor) is claimed whole as well.
TEST(NormBwdMatch, EveryBundledNormBackwardIsClaimed) {
  int seen = 0;
  for (const auto& e : std::filesystem::directory_iterator(REPLAY_TRACES_DIR)) {
    const std::string n = e.path().stem().string();
    if (e.path().extension() != ".json" || n.find("_train_bwd_") == std::string::npos) continue;
    const bool norm = n.find("norm") != std::string::npos;
    Graph g = load_trace(e.path().string());
    Plan p = plan_of(g);
    SCOPED_TRACE(n);
    if (!norm) {  // MLP, RoPE, linear backward graphs have no norm backward
      EXPECT_TRUE(p.regions.empty());
      continue;
    }
    ++seen;
    ASSERT_EQ(p.regions.size(), 1u);
    EXPECT_EQ(p.regions[0].nodes.size(), g.nodes.size());
  }
  EXPECT_GE(seen, 10);
}

namespace {

struct FormCase {
  std::string name;
  NormBwdForm form;
  NormBwdStats stats;
  int eager_nodes = 0;  // nodes outside the region
};

NormBwdForm form(std::function<void(NormBwdForm&)> f) {
  NormBwdForm x;
  f(x);
  return x;
}

void PrintTo(const FormCase& c, std::ostream* os) {
  *os << c.name;
}

class NormBwdForms : public ::testing::TestWithParam<FormCase> {};

}  // namespace

namespace {

// The name under which the graph sees value `v` of region `r`: the output of an identity node the
// canonical form removed and the region runs after its fused step (a float32 -> float32 convert
// of dx), else v's own.
std::string exported_as(const Graph& g, const Region& r, int v) {
  for (const TailAlias& t : r.tail)
    if (t.source == v) return g.values[g.nodes[t.node].outputs[0]].name;
  return v < 0 ? "" : g.values[v].name;
}

}  // namespace

TEST_P(NormBwdForms, Matches) {
  const FormCase& c = GetParam();
  Graph g = parse_trace(norm_bwd_trace(c.form), c.name);
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  const Region& r = p.regions[0];
  EXPECT_EQ(static_cast<int>(g.nodes.size() - r.nodes.size()), c.eager_nodes);
  const auto& pr = params(r);
  EXPECT_EQ(pr.layernorm, c.form.layernorm);
  EXPECT_EQ(pr.stats, c.stats);
  EXPECT_EQ(pr.cols, c.form.cols);
  EXPECT_EQ(name_of(g, pr.x), "x");
  EXPECT_EQ(name_of(g, pr.dy), c.form.dy_is_sum ? "dy_sum" : "tangents_1");
  EXPECT_EQ(name_of(g, pr.w), "weight");
  EXPECT_EQ(exported_as(g, r, pr.dx), "dx");
  EXPECT_EQ(exported_as(g, r, pr.dw), "dw");
  EXPECT_EQ(exported_as(g, r, pr.db), c.form.layernorm && c.form.bias ? "db" : "");
  EXPECT_EQ(pr.w_offset, c.form.unit_offset ? 1 : 0);
  const DType low = c.form.weight_after_downcast ? bf16 : f32;
  EXPECT_EQ(pr.g_round, low);
  EXPECT_EQ(pr.xhat_round, low);
  EXPECT_EQ(pr.dwt_round, low);
  if (c.stats == NormBwdStats::kRecompute) {
    EXPECT_DOUBLE_EQ(pr.eps + (pr.eps_value >= 0 ? 1e-5 : 0), 1e-5);
    EXPECT_EQ(name_of(g, pr.eps_value), c.form.stats == "recompute_eps_tensor" ? "eps" : "");
    EXPECT_EQ(pr.mean, -1);
    EXPECT_EQ(pr.rstd, -1);
    EXPECT_EQ(pr.correction, 0);
  } else {
    EXPECT_EQ(name_of(g, pr.rstd), "rstd");
    EXPECT_EQ(name_of(g, pr.mean),
              c.stats == NormBwdStats::kSaved && c.form.layernorm ? "mean" : "");
  }
  // `replay plan` shows the same.
  json d = r.fusion->describe(g, r);
  EXPECT_EQ(d["kind"], c.form.layernorm ? "layernorm" : "rmsnorm");
  EXPECT_EQ(d["dx"], name_of(g, pr.dx));
}

INSTANTIATE_TEST_SUITE_P(
    Forms, NormBwdForms,
    ::testing::Values(
        FormCase{"ln", NormBwdForm{}, NormBwdStats::kSaved},
        FormCase{"ln_nobias", form([](auto& f) { f.bias = false; }), NormBwdStats::kSaved},
        FormCase{"ln_mean_commuted", form([](auto& f) { f.dx_form = "mean"; }),
                 NormBwdStats::kSaved},
        FormCase{"ln_unit_offset", form([](auto& f) { f.unit_offset = true; }),
                 NormBwdStats::kSaved},
        FormCase{"ln_fp16_3d", form([](auto& f) {
                   f.dtype = "float16";
                   f.lead = {2, 3, 5};
                   f.cols = 1600;
                 }),
                 NormBwdStats::kSaved},
        FormCase{"ln_fp32", form([](auto& f) { f.dtype = "float32"; }), NormBwdStats::kSaved},
        FormCase{"ln_recompute", form([](auto& f) { f.stats = "recompute"; }),
                 NormBwdStats::kRecompute},
        FormCase{"ln_recompute_eps_tensor", form([](auto& f) { f.stats = "recompute_eps_tensor"; }),
                 NormBwdStats::kRecompute},
        FormCase{"ln_normalized_x", form([](auto& f) { f.stats = "normalized"; }),
                 NormBwdStats::kNormalized},
        FormCase{"ln_dy_summed", form([](auto& f) { f.dy_is_sum = true; }), NormBwdStats::kSaved,
                 1},
        FormCase{"rms", form([](auto& f) { f.layernorm = false; }), NormBwdStats::kSaved},
        FormCase{"rms_mean_commuted", form([](auto& f) {
                   f.layernorm = false;
                   f.dx_form = "mean";
                 }),
                 NormBwdStats::kSaved},
        FormCase{"rms_weight_after_downcast", form([](auto& f) {
                   f.layernorm = false;
                   f.weight_after_downcast = true;
                 }),
                 NormBwdStats::kSaved},
        FormCase{"rms_unit_offset", form([](auto& f) {
                   f.layernorm = false;
                   f.unit_offset = true;
                 }),
                 NormBwdStats::kSaved},
        FormCase{"rms_recompute", form([](auto& f) {
                   f.layernorm = false;
                   f.stats = "recompute";
                 }),
                 NormBwdStats::kRecompute},
        FormCase{"rms_recompute_eps_tensor_weight_after", form([](auto& f) {
                   f.layernorm = false;
                   f.stats = "recompute_eps_tensor";
                   f.weight_after_downcast = true;
                 }),
                 NormBwdStats::kRecompute},
        FormCase{"rms_normalized_x", form([](auto& f) {
                   f.layernorm = false;
                   f.stats = "normalized";
                 }),
                 NormBwdStats::kNormalized}),
    [](const auto& info) { return info.param.name; });

namespace {

struct Negative {
  std::string name;
  NormBwdForm form;
};

void PrintTo(const Negative& c, std::ostream* os) {
  *os << c.name;
}

class NormBwdNegative : public ::testing::TestWithParam<Negative> {};

}  // namespace

TEST_P(NormBwdNegative, NoRegion) {
  Graph g = parse_trace(norm_bwd_trace(GetParam().form), GetParam().name);
  Plan p = plan_of(g);
  EXPECT_TRUE(p.regions.empty());
  EXPECT_EQ(std::count(p.node_region.begin(), p.node_region.end(), -1),
            static_cast<long>(g.nodes.size()));
}

INSTANTIATE_TEST_SUITE_P(
    Forms, NormBwdNegative,
    ::testing::Values(Negative{"only_row_reduction", form([](auto& f) {
                                 f.drop_dw = true;
                                 f.bias = false;
                               })},
                      Negative{"only_row_reduction_rms", form([](auto& f) {
                                 f.drop_dw = true;
                                 f.layernorm = false;
                               })},
                      Negative{"only_column_reductions", form([](auto& f) { f.drop_dx = true; })},
                      Negative{"column_reduction_over_unrelated_input",
                               form([](auto& f) { f.dw_unrelated = true; })},
                      Negative{"rms_column_reduction_over_unrelated_input", form([](auto& f) {
                                 f.dw_unrelated = true;
                                 f.layernorm = false;
                               })},
                      Negative{"xhat_escapes", form([](auto& f) { f.xhat_escapes = true; })},
                      Negative{"dx_wrong_divisor",
                               form([](auto& f) { f.dx_wrong_divisor = true; })},
                      Negative{"rms_dx_wrong_divisor", form([](auto& f) {
                                 f.layernorm = false;
                                 f.dx_wrong_divisor = true;
                               })},
                      Negative{"ln_dx_mean_form_wrong_divisor", form([](auto& f) {
                                 f.dx_form = "mean";
                                 f.dx_wrong_divisor = true;
                               })}),
    [](const auto& info) { return info.param.name; });

// db over an unrelated tensor: the norm backward (dx, dw) is still claimed, that sum is not.
TEST(NormBwdMatch, UnrelatedBiasReductionStaysOutside) {
  Graph g = parse_trace(norm_bwd_trace(form([](auto& f) { f.db_unrelated = true; })), "<db>");
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  EXPECT_EQ(params(p.regions[0]).db, -1);
  std::set<std::string> eager;
  for (size_t n = 0; n < g.nodes.size(); ++n)
    if (p.node_region[n] < 0) eager.insert(g.nodes[n].id);
  EXPECT_EQ(eager, (std::set<std::string>{"ob32", "db32", "db"}));
}

// A LayerNorm whose dx lacks the mean term (sum(g)) is not a norm backward: rejected as
// LayerNorm, and not taken as RMSNorm either (xhat has the mean in it).
TEST(NormBwdMatch, LayerNormWithoutMeanTermIsRejected) {
  json t = norm_bwd_trace(NormBwdForm{});
  for (auto& n : t["nodes"])
    if (n["id"] == "a") n["args"][1] = 0.0;  // C*g - 0 instead of C*g - sum(g)
  EXPECT_TRUE(plan_of(parse_trace(t, "<no-s1>")).regions.empty());
}

// Two norms in one graph (same shape): two regions.
TEST(NormBwdMatch, TwoNormsTwoRegions) {
  json a = norm_bwd_trace(NormBwdForm{});
  json b = norm_bwd_trace(form([](auto& f) { f.layernorm = false; }));
  auto rename = [](json& j, const std::string& s) {  // suffix every id and ref in b
    std::function<void(json&)> walk = [&](json& v) {
      if (v.is_object()) {
        if (v.contains("ref")) v["ref"] = v["ref"].get<std::string>() + s;
        for (auto& [k, x] : v.items()) walk(x);
      } else if (v.is_array()) {
        for (auto& x : v) walk(x);
      }
    };
    for (auto& i : j["inputs"]) i["id"] = i["id"].get<std::string>() + s;
    for (auto& n : j["nodes"]) {
      n["id"] = n["id"].get<std::string>() + s;
      walk(n["args"]);
    }
    for (auto& o : j["outputs"]) o = o.get<std::string>() + s;
  };
  rename(b, "_b");
  for (auto& i : b["inputs"]) a["inputs"].push_back(i);
  for (auto& n : b["nodes"]) a["nodes"].push_back(n);
  for (auto& o : b["outputs"]) a["outputs"].push_back(o);
  Graph g = parse_trace(a, "<two>");
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 2u);
  EXPECT_TRUE(params(p.regions[0]).layernorm != params(p.regions[1]).layernorm);
  EXPECT_EQ(p.regions[0].nodes.size() + p.regions[1].nodes.size(), g.nodes.size());
}

// In the registry, after layernorm_fwd; the plan JSON lists its variants and params.
TEST(NormBwdMatch, PlanJsonThroughTheRegistry) {
  Graph g = load_trace(trace_path("nanogpt_layernorm_train_bwd_2x8x1600"));
  json j = plan_to_json(g, make_plan(g, fusion_registry()));
  ASSERT_EQ(j["regions"].size(), 1u);
  EXPECT_EQ(j["regions"][0]["fusion"], "norm_bwd");
  EXPECT_EQ(j["regions"][0]["variants"],
            json::array({"reference", "eager", "baseline", "optimized"}));
  EXPECT_EQ(j["regions"][0]["params"]["kind"], "layernorm");
  EXPECT_EQ(j["regions"][0]["params"]["mean"], "getitem_1");
  EXPECT_TRUE(j["eager_nodes"].empty());
  // x, dy read and dx written (2*8*1600 bf16 each), w read, dw and db written (1600 bf16 each),
  // mean and rstd read (16 fp32 each).
  EXPECT_EQ(j["regions"][0]["cost"]["bytes"], 3 * (2 * 8 * 1600 * 2) + 3 * 1600 * 2 + 2 * 16 * 4);
}

// A cast through an integer dtype truncates: x -> int32 -> float32 is not x. Found by review: the
// algebra passed such casts through as exact, so the kernel would have computed the backward of
// the un-truncated input. Now the integer value is a leaf: whatever is claimed reads it, never
// the floating input behind it (and the binder declines an integer x, dy or w).
TEST(NormBwdMatch, IntegerCastIsALeafNotAnIdentity) {
  auto convert = [](const std::string& id, const std::string& src, std::vector<int64_t> shape) {
    return json{{"id", id},
                {"op", "prims.convert_element_type.default"},
                {"args", {test::ref(src), {{"dtype", "int32"}}}},
                {"kwargs", json::object()},
                {"outputs", json::array({tensor(shape, "int32")})}};
  };
  const std::vector<int64_t> full = {4, 8, 384}, col = {384};
  for (const auto& [src, via, shape] :
       {std::tuple{std::string("x"), std::string("x32"), full},
        std::tuple{std::string("tangents_1"), std::string("dy32"), full},
        std::tuple{std::string("weight"), std::string("w32"), col}}) {
    NormBwdForm f;
    f.lead = {4, 8};
    json t = norm_bwd_trace(f);
    auto& nodes = t["nodes"];
    size_t at = 0;
    while (at < nodes.size() && nodes[at]["id"] != via) ++at;
    ASSERT_LT(at, nodes.size()) << via;
    nodes[at]["args"][0] = test::ref(src + "_int");
    nodes.insert(nodes.begin() + static_cast<long>(at), convert(src + "_int", src, shape));
    Graph g = parse_trace(t, "<" + src + " through int32>");
    Matches rs;
    norm_bwd::match(g, rs);
    for (const Region& r : rs.regions) {
      const auto& p = std::any_cast<const norm_bwd::Params&>(r.params);
      for (int v : {p.x, p.dy, p.w})
        EXPECT_NE(g.values[v].name, src) << src << " is read past its int32 cast";
    }
  }
}

// --- dx epilogue add (issue 24): the backward of a fused add-norm ------------------------------

// The add-norm backwards captured from user code (traces/byog/), both partitioners and shapes:
// `add_3 = tangents_2 + dx.to(bf16)` (the gradient of h from its other reader plus the norm's dx)
// joins the region, which reads tangents_2 and exports add_3 (and its alias, the region's tail).
TEST(NormBwdMatch, ByogAddNormBackwardTakesTheDxAdd) {
  for (const std::string model : {"llama_add_rmsnorm", "gpt2_add_layernorm"}) {
    for (const std::string part : {"mincut", "default"}) {
      for (const std::string shape : {"2x8x256", "2x4096x4096"}) {
        const std::string name = "byog/" + model + "_" + part + "_train_bwd_" + shape;
        Graph g = load_trace(trace_path(name));
        Plan p = plan_of(g);
        ASSERT_EQ(p.regions.size(), 1u) << name;
        const Region& r = p.regions[0];
        const auto& pr = params(r);
        EXPECT_EQ(name_of(g, pr.dx), "add_3") << name;
        EXPECT_EQ(name_of(g, pr.dx_add), "tangents_2") << name;
        EXPECT_EQ(name_of(g, pr.dy), "tangents_1") << name;
        EXPECT_EQ(pr.layernorm, model == "gpt2_add_layernorm") << name;
        EXPECT_EQ(pr.dx_round, bf16) << name;
        EXPECT_EQ(std::count(p.node_region.begin(), p.node_region.end(), -1), 0) << name;
        EXPECT_TRUE(names(g, r.inputs).count("tangents_2")) << name;
        EXPECT_TRUE(names(g, r.outputs).count("add_3")) << name;
        EXPECT_EQ(r.fusion->describe(g, r)["dx_add"], "tangents_2") << name;
        double bytes = 0;
        for (int v : r.inputs) bytes += static_cast<double>(g.meta(v).nbytes());
        for (int v : r.outputs) bytes += static_cast<double>(g.meta(v).nbytes());
        EXPECT_EQ(r.fusion->cost(g, r).bytes, bytes) << name;
      }
    }
  }
}

TEST(NormBwdMatch, SyntheticDxAdd) {
  for (bool ln : {true, false}) {
    NormBwdForm f;
    f.layernorm = ln;
    f.dx_add = "same";
    Graph g = parse_trace(norm_bwd_trace(f), "<dx-add>");
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 1u) << ln;
    const auto& pr = params(p.regions[0]);
    EXPECT_EQ(name_of(g, pr.dx), "dx_total") << ln;
    EXPECT_EQ(name_of(g, pr.dx_add), "dh") << ln;
    EXPECT_EQ(p.regions[0].nodes.size(), g.nodes.size()) << ln;
  }
}

// An add after dx that the kernels cannot take stays outside, declined with its reason; the norm
// backward is still claimed and exports dx.
TEST(NormBwdMatch, DxAddDeclinedWithAReason) {
  for (auto [form, reason] : {std::pair<std::string, std::string>{"mixed", "mixed dtypes"},
                              {"broadcast", "a broadcast add"}}) {
    NormBwdForm f;
    f.dx_add = form;
    Graph g = parse_trace(norm_bwd_trace(f), form);
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 1u) << form;
    const auto& pr = params(p.regions[0]);
    EXPECT_EQ(name_of(g, pr.dx), "dx") << form;
    EXPECT_EQ(pr.dx_add, -1) << form;
    EXPECT_EQ(p.node_region[g.values[g.find_value("dx_total")].producer], -1) << form;
    EXPECT_NE(declined_at(g, p, "dx_total").find(reason), std::string::npos)
        << form << ": " << declined_at(g, p, "dx_total");
  }
}

// --- the default partitioner's saved tensors (issue 24) -----------------------------------------

namespace {

// Backward captures of traces/byog/ by the default partitioner: it saves the fp32 upcast x (read
// by dx with the saved rstd) beside the normalized value `x * rstd` (bf16 in Llama-style
// RMSNorms, fp32 in Gemma's), which the dw term reads; dy is bf16.
struct DefaultCase {
  std::string model, shape;
  std::string xs;  // the saved normalized value dw reads
  DType xs_dtype;
};

std::vector<DefaultCase> default_cases() {
  std::vector<DefaultCase> out;
  for (const char* m :
       {"llama_rmsnorm", "mistral_rmsnorm", "qwen2_rmsnorm", "qwen3_rmsnorm", "phi3_rmsnorm",
        "deepseek_v3_rmsnorm", "llama_rmsnorm_eps_buffer", "llama_add_rmsnorm"})
    for (const char* sh : {"2x8x256", "2x4096x4096"})
      out.push_back({m, sh, "convert_element_type_1", bf16});
  for (const char* m : {"gemma_rmsnorm", "gemma2_rmsnorm", "gemma3_rmsnorm", "olmo2_rmsnorm"})
    for (const char* sh : {"2x8x256", "2x4096x4096"}) out.push_back({m, sh, "mul", f32});
  for (const char* sh : {"2x8x4x64", "2x4096x32x128"}) {
    out.push_back({"qwen3_qk_norm", sh, "convert_element_type_1", bf16});
    out.push_back({"gemma3_qk_norm", sh, "mul", f32});
  }
  return out;
}

}  // namespace

TEST(NormBwdMatch, ByogDefaultPartitionReadsTheSavedXhat) {
  for (const DefaultCase& c : default_cases()) {
    const std::string name = "byog/" + c.model + "_default_train_bwd_" + c.shape;
    SCOPED_TRACE(name);
    Graph g = load_trace(trace_path(name));
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 1u) << (p.declined.empty() ? "" : p.declined[0].reason);
    const Region& r = p.regions[0];
    std::set<std::string> eager;  // the per-head norm's dy permute and dx view stay outside
    for (size_t n = 0; n < g.nodes.size(); ++n)
      if (p.node_region[n] < 0) eager.insert(g.nodes[n].id);
    const std::set<std::string> want_eager = c.model.find("qk_norm") != std::string::npos
                                                 ? std::set<std::string>{"permute_1", "view_2"}
                                                 : std::set<std::string>{};
    EXPECT_EQ(eager, want_eager);
    const auto& pr = params(r);
    EXPECT_FALSE(pr.layernorm);
    EXPECT_EQ(pr.stats, NormBwdStats::kSaved);
    EXPECT_EQ(name_of(g, pr.x), "convert_element_type");  // the fp32 upcast x
    EXPECT_EQ(g.meta(pr.x).dtype, f32);
    EXPECT_EQ(name_of(g, pr.xs), c.xs);
    EXPECT_EQ(g.meta(pr.xs).dtype, c.xs_dtype);
    EXPECT_EQ(g.meta(pr.dy).dtype, bf16);
    EXPECT_EQ(name_of(g, pr.rstd), "rsqrt");
    EXPECT_EQ(pr.xhat_round, f32);  // the saved value is read as it is
    // The saved normalized value is read once more than in the min-cut form: the bytes are
    // every region input and output once (x fp32, xs, dy, dx, w, rstd, dw).
    double bytes = 0;
    for (int v : r.inputs) bytes += static_cast<double>(g.meta(v).nbytes());
    for (int v : r.outputs) bytes += static_cast<double>(g.meta(v).nbytes());
    EXPECT_EQ(r.fusion->cost(g, r).bytes, bytes);
    EXPECT_TRUE(names(g, r.inputs).count(c.xs));
    EXPECT_EQ(r.fusion->describe(g, r)["xs"], c.xs);
  }
}

// The min-cut captures of the same modules keep reading x alone (no saved normalized value).
TEST(NormBwdMatch, ByogMinCutPartitionHasNoSavedXhat) {
  for (const DefaultCase& c : default_cases()) {
    if (c.shape != "2x8x256" && c.shape != "2x8x4x64") continue;
    const std::string name = "byog/" + c.model + "_mincut_train_bwd_" + c.shape;
    SCOPED_TRACE(name);
    Graph g = load_trace(trace_path(name));
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 1u) << (p.declined.empty() ? "" : p.declined[0].reason);
    EXPECT_EQ(params(p.regions[0]).xs, -1);
  }
}

// A default-partition backward whose dx is not a norm's (dx's 1/C term divided by C/2): dw =
// sum(dy * xs) is found, dx is not, in terms of xs or of the saved x: declined with that reason.
TEST(NormBwdMatch, DefaultPartitionWithAWrongDxIsDeclined) {
  json t = json::parse(std::ifstream(trace_path("byog/llama_rmsnorm_default_train_bwd_2x8x256")));
  bool edited = false;
  for (auto& n : t["nodes"])
    if (n["id"] == "div") n["args"][1] = 128, edited = true;
  ASSERT_TRUE(edited);
  Graph g = parse_trace(t, "<llama-default-wrong-divisor>");
  Plan p = plan_of(g);
  EXPECT_TRUE(p.regions.empty());
  ASSERT_FALSE(p.declined.empty());
  EXPECT_NE(p.declined[0].reason.find("dw = sum(dy * xhat) found"), std::string::npos)
      << p.declined[0].reason;
  EXPECT_NE(p.declined[0].reason.find("nor of the xhat of another [rows, cols] leaf x"),
            std::string::npos)
      << p.declined[0].reason;
}

// T5LayerNorm's min-cut backward: dx = rnd(rnd(rstd * g) + rnd(rest)), the two terms rounded to
// bf16 apart (T5 casts to the weight's dtype before the weight); Cohere's: a two-pass LayerNorm
// whose backward recenters the xhat term (the saved mean makes sum(xhat) no exact zero). Their
// default-partition captures save x twice (a bf16 and an fp32 copy; two centered copies): declined,
// the reason naming both.
TEST(NormBwdMatch, ByogT5AndCohereBackwards) {
  for (const char* shape : {"2x8x256", "2x4096x4096"}) {
    {
      const std::string name = std::string("byog/t5_layernorm_mincut_train_bwd_") + shape;
      Graph g = load_trace(trace_path(name));
      Plan p = plan_of(g);
      ASSERT_EQ(p.regions.size(), 1u) << name;
      EXPECT_EQ(p.regions[0].nodes.size(), g.nodes.size()) << name;
      const auto& pr = params(p.regions[0]);
      EXPECT_FALSE(pr.layernorm) << name;
      EXPECT_EQ(pr.dx_part_round, bf16) << name;
      EXPECT_EQ(pr.dx_round, bf16) << name;
      EXPECT_FALSE(pr.recenter) << name;
      EXPECT_EQ(name_of(g, pr.x), "hidden_states") << name;
    }
    {
      const std::string name = std::string("byog/cohere_layernorm_mincut_train_bwd_") + shape;
      Graph g = load_trace(trace_path(name));
      Plan p = plan_of(g);
      ASSERT_EQ(p.regions.size(), 1u) << name;
      EXPECT_EQ(p.regions[0].nodes.size(), g.nodes.size()) << name;
      const auto& pr = params(p.regions[0]);
      EXPECT_TRUE(pr.layernorm) << name;
      EXPECT_TRUE(pr.recenter) << name;
      EXPECT_EQ(pr.dx_part_round, f32) << name;
      EXPECT_EQ(name_of(g, pr.mean), "mean") << name;
      EXPECT_EQ(pr.db, -1) << name;
      EXPECT_EQ(p.regions[0].fusion->describe(g, p.regions[0])["recenter"], true) << name;
    }
    // Default partition: T5 saves x and x.float() ("widened_from"), Cohere x - mean twice
    // ("same_as"); the canonical form reads one x, and both fuse.
    {
      const std::string name = std::string("byog/t5_layernorm_default_train_bwd_") + shape;
      Graph g = load_trace(trace_path(name));
      Plan p = plan_of(g);
      ASSERT_EQ(p.regions.size(), 1u) << name;
      EXPECT_EQ(p.regions[0].nodes.size(), g.nodes.size()) << name;
      const auto& pr = params(p.regions[0]);
      EXPECT_FALSE(pr.layernorm) << name;
      EXPECT_EQ(pr.dx_part_round, bf16) << name;
      EXPECT_EQ(name_of(g, pr.x), "hidden_states") << name;
      EXPECT_EQ(name_of(g, pr.xs), "convert_element_type_1") << name;
    }
    {
      const std::string name = std::string("byog/cohere_layernorm_default_train_bwd_") + shape;
      Graph g = load_trace(trace_path(name));
      Plan p = plan_of(g);
      ASSERT_EQ(p.regions.size(), 1u) << name;
      EXPECT_EQ(p.regions[0].nodes.size(), g.nodes.size()) << name;
      const auto& pr = params(p.regions[0]);
      EXPECT_TRUE(pr.layernorm) << name;  // x saved centred: no mean read
      EXPECT_TRUE(pr.recenter) << name;
      EXPECT_EQ(pr.mean, -1) << name;
      EXPECT_EQ(name_of(g, pr.x), "sub") << name;
      EXPECT_EQ(name_of(g, pr.xs), "mul") << name;
    }
    // Without the marks the two copies are two tensors: declined, naming the second copy.
    for (const std::string m : {"t5", "cohere"}) {
      const std::string name = "byog/" + m + "_layernorm_default_train_bwd_" + shape;
      json doc = read_json(trace_path(name));
      int unmarked = 0;
      for (auto& in : doc["inputs"]) unmarked += in.erase("widened_from") + in.erase("same_as");
      EXPECT_GE(unmarked, 2) << name;  // the copy, and alias(rsqrt)
      Graph g = parse_trace(doc, trace_path(name));
      Plan p = plan_of(g);
      EXPECT_TRUE(p.regions.empty()) << name;
      ASSERT_FALSE(p.declined.empty()) << name;
      const std::string& why = p.declined[0].reason;
      EXPECT_NE(why.find("second saved copy"), std::string::npos) << why;
      EXPECT_NE(why.find(m == "t5" ? "'convert_element_type' (float32)" : "'sub' (float32)"),
                std::string::npos)
          << why;
    }
  }
}

// The binder's row maps for a per-head norm (qk_norm): x and dx contiguous [B, T, H, D], dy the
// transposed view permute(0, 2, 1, 3) of a [B, H, T, D] tangent, a saved value [B, T, H * D].
// Every row r = (b, t, h) of every tensor starts where its own strides put it, through the
// offset function the kernels use; a layout whose leading dims do not merge into 3 has no map.
TEST(NormBwdBind, RowMapsAddressEveryRowOfAPerHeadNorm) {
  const int64_t B = 2, T = 8, H = 4, D = 64;
  TensorMeta x{{B, T, H, D}, {T * H * D, H * D, D, 1}, bf16};
  TensorMeta dy{{B, T, H, D}, {H * T * D, D, T * D, 1}, bf16};
  TensorMeta dx = x;
  TensorMeta xs{{B, T, H * D}, {T * H * D, H * D, 1}, f32};
  NormBwdRowMap mx, mdy, mdx, mxs;
  int64_t n1 = 0, n2 = 0;
  ASSERT_TRUE(
      norm_bwd::row_maps({&x, &dy, &dx, &xs}, B * T * H, D, &n1, &n2, {&mx, &mdy, &mdx, &mxs}));
  EXPECT_EQ(n1, T);
  EXPECT_EQ(n2, H);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t r = (b * T + t) * H + h;
        EXPECT_EQ(norm_bwd_row_offset(n1, n2, mx, r), b * x.stride[0] + t * x.stride[1] + h * D);
        EXPECT_EQ(norm_bwd_row_offset(n1, n2, mdy, r),
                  b * dy.stride[0] + t * dy.stride[1] + h * dy.stride[2])
            << r;
        EXPECT_EQ(norm_bwd_row_offset(n1, n2, mdx, r), r * D);
        EXPECT_EQ(norm_bwd_row_offset(n1, n2, mxs, r), r * D);
      }
  // Plain rows: one stride, n1 = n2 = 1.
  ASSERT_TRUE(norm_bwd::row_maps({&x, &dx}, B * T * H, D, &n1, &n2, {&mx, &mdx}));
  EXPECT_EQ(n1 * n2, 1);
  EXPECT_EQ(norm_bwd_row_offset(n1, n2, mx, 37), 37 * D);
  // A plain tensor whose rows are in another order (a contiguous [B, H, T, D] copy beside the
  // transposed dy): no map, although its numel and row count agree.
  TensorMeta bhtd{{B, H, T, D}, {H * T * D, T * D, D, 1}, bf16};
  EXPECT_FALSE(norm_bwd::row_maps({&bhtd, &dy, &dx}, B * T * H, D, &n1, &n2, {&mx, &mdy, &mdx}));
  // Four leading dims that no stride merges: no map (the binder declines with its reason).
  TensorMeta y{{2, 3, 4, 5, 16}, {16, 2 * 16, 2 * 3 * 16, 2 * 3 * 4 * 16, 1}, bf16};
  EXPECT_FALSE(norm_bwd::row_maps({&y, &y}, 2 * 3 * 4 * 5, 16, &n1, &n2, {&mx, &mdx}));
}
