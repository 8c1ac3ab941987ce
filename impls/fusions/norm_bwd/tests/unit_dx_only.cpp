// norm_bwd without affine parameters (dx only, issue 24): the matcher on OLMo's LayerNorm
// backward (F.layer_norm(x, shape, None, None, eps), both partitioners, both shapes) and on
// synthetic LayerNorm / RMSNorm backwards without weight in every statistics form; the
// negatives, each with the reason `replay plan` gives (and none for row sums that are not a norm
// backward's); a dx-only match never takes nodes of a full (dw) match; the CPU model of the
// kernels (tests/model.hpp) against PyTorch's outputs and the float64 reference; the mutants
// make it FAIL.
#include <gtest/gtest.h>

#include <set>

#include "harness/report/numerics.hpp"
#include "impls/fusions/norm_bwd/params.hpp"
#include "impls/fusions/norm_bwd/tests/model.hpp"
#include "impls/fusions/norm_bwd/tests/mutants.hpp"
#include "impls/fusions/norm_bwd/tests/synthetic.hpp"
#include "impls/fusions/registry.hpp"
#include "impls/reference/reference.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/safetensors.hpp"
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

Matches matches_of(const Graph& g) {
  Matches m;
  norm_bwd::match(g, m);
  return m;
}

const norm_bwd::Params& params(const Region& r) {
  return std::any_cast<const norm_bwd::Params&>(r.params);
}

std::string name_of(const Graph& g, int v) {
  return v < 0 ? "" : g.values[v].name;
}

int node_of(const Graph& g, const std::string& id) {
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].id == id) return static_cast<int>(i);
  return -1;
}

// The declines' reasons at node `id`, joined.
std::string declined_at(const Graph& g, const Matches& m, const std::string& id) {
  std::string r;
  for (const Decline& d : m.declined)
    if (d.node == node_of(g, id)) r += d.reason + "; ";
  return r;
}

const DType f32 = DType::kFloat32, bf16 = DType::kBFloat16;

NormBwdForm noaffine(std::function<void(NormBwdForm&)> f = nullptr) {
  NormBwdForm x;
  x.affine = false;
  if (f) f(x);
  return x;
}

class DxOnlyOlmo : public ::testing::TestWithParam<std::string> {};

}  // namespace

// OLMo's LayerNorm without affine parameters, captured through torch.compile: the whole backward
// graph is one dx-only region reading x, dy, the saved mean and rstd, and nothing is declined.
TEST_P(DxOnlyOlmo, WholeGraphIsOneDxOnlyRegion) {
  const std::string trace = GetParam();
  Graph g = load_trace(trace_path(trace));
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  const Region& r = p.regions[0];
  EXPECT_EQ(r.nodes.size(), g.nodes.size());
  EXPECT_TRUE(p.dropped.empty());
  EXPECT_TRUE(matches_of(g).declined.empty());
  const auto& pr = params(r);
  const bool mincut = trace.find("mincut") != std::string::npos;
  EXPECT_TRUE(pr.layernorm);
  EXPECT_EQ(pr.stats, NormBwdStats::kSaved);
  // The default partitioner saves x already up-cast to float32.
  EXPECT_EQ(name_of(g, pr.x), mincut ? "hidden_states" : "convert_element_type");
  EXPECT_EQ(name_of(g, pr.dy), "tangents_1");
  EXPECT_EQ(name_of(g, pr.mean), "getitem_1");
  EXPECT_EQ(name_of(g, pr.rstd), "rsqrt");
  EXPECT_EQ(pr.w, -1);
  EXPECT_EQ(pr.dw, -1);
  EXPECT_EQ(pr.db, -1);
  EXPECT_EQ(name_of(g, pr.dx), "convert_element_type_3");
  EXPECT_EQ(pr.dx_round, bf16);
  EXPECT_EQ(pr.g_round, f32);
  EXPECT_EQ(pr.cols, g.meta(pr.x).shape.back());
  EXPECT_EQ(pr.rows * pr.cols, g.meta(pr.x).numel());
  std::set<std::string> in;
  for (int v : r.inputs) in.insert(g.values[v].name);
  EXPECT_EQ(in, (std::set<std::string>{name_of(g, pr.x), "tangents_1", "getitem_1", "rsqrt"}));
  // x and dy read, dx written, mean and rstd read: each once.
  const double bytes = static_cast<double>(g.meta(pr.x).nbytes() + 2 * g.meta(pr.dy).nbytes()) +
                       2.0 * static_cast<double>(pr.rows) * 4;
  EXPECT_DOUBLE_EQ(r.fusion->cost(g, r).bytes, bytes);
  json d = r.fusion->describe(g, r);
  EXPECT_EQ(d["kind"], "layernorm");
  EXPECT_EQ(d["dx_only"], true);
  EXPECT_TRUE(d["w"].is_null());
  EXPECT_TRUE(d["dw"].is_null());
  // Through the registry: norm_bwd claims it, nothing runs eagerly.
  json j = plan_to_json(g, make_plan(g, fusion_registry()));
  ASSERT_EQ(j["regions"].size(), 1u);
  EXPECT_EQ(j["regions"][0]["fusion"], "norm_bwd");
  EXPECT_TRUE(j["eager_nodes"].empty());
}

INSTANTIATE_TEST_SUITE_P(Traces, DxOnlyOlmo,
                         ::testing::Values("byog/olmo_layernorm_mincut_train_bwd_2x8x256",
                                           "byog/olmo_layernorm_default_train_bwd_2x8x256",
                                           "byog/olmo_layernorm_mincut_train_bwd_2x4096x4096",
                                           "byog/olmo_layernorm_default_train_bwd_2x4096x4096"),
                         [](const auto& info) { return test_name(info.param); });

namespace {

struct DxCase {
  std::string name;
  NormBwdForm form;
  NormBwdStats stats;
};

void PrintTo(const DxCase& c, std::ostream* os) {
  *os << c.name;
}

class DxOnlyForms : public ::testing::TestWithParam<DxCase> {};

std::vector<DxCase> dx_cases() {
  auto set = [](std::function<void(NormBwdForm&)> f) { return noaffine(std::move(f)); };
  return {
      {"ln", noaffine(), NormBwdStats::kSaved},
      {"ln_mean_commuted", set([](auto& f) { f.dx_form = "mean"; }), NormBwdStats::kSaved},
      {"ln_fp16_3d", set([](auto& f) {
         f.dtype = "float16";
         f.lead = {2, 3, 5};
         f.cols = 1600;
       }),
       NormBwdStats::kSaved},
      {"ln_fp32", set([](auto& f) { f.dtype = "float32"; }), NormBwdStats::kSaved},
      {"ln_recompute", set([](auto& f) { f.stats = "recompute"; }), NormBwdStats::kRecompute},
      {"ln_recompute_eps_tensor", set([](auto& f) { f.stats = "recompute_eps_tensor"; }),
       NormBwdStats::kRecompute},
      {"ln_normalized_x", set([](auto& f) { f.stats = "normalized"; }), NormBwdStats::kNormalized},
      {"rms", set([](auto& f) { f.layernorm = false; }), NormBwdStats::kSaved},
      {"rms_mean_commuted", set([](auto& f) {
         f.layernorm = false;
         f.dx_form = "mean";
       }),
       NormBwdStats::kSaved},
      {"rms_recompute", set([](auto& f) {
         f.layernorm = false;
         f.stats = "recompute";
       }),
       NormBwdStats::kRecompute},
      {"rms_recompute_eps_tensor_4096", set([](auto& f) {
         f.layernorm = false;
         f.stats = "recompute_eps_tensor";
         f.cols = 4096;
         f.lead = {24};
       }),
       NormBwdStats::kRecompute},
      {"rms_normalized_x", set([](auto& f) {
         f.layernorm = false;
         f.stats = "normalized";
       }),
       NormBwdStats::kNormalized},
  };
}

}  // namespace

// Every synthetic norm backward without affine parameters: one dx-only region, the whole graph.
TEST_P(DxOnlyForms, Matches) {
  const DxCase& c = GetParam();
  Graph g = parse_trace(norm_bwd_trace(c.form), c.name);
  Plan p = plan_of(g);
  std::string declines;
  for (const Decline& d : matches_of(g).declined)
    declines += g.nodes[d.node].id + ": " + d.reason + "; ";
  ASSERT_EQ(p.regions.size(), 1u) << declines;
  const Region& r = p.regions[0];
  EXPECT_EQ(r.nodes.size(), g.nodes.size());
  const auto& pr = params(r);
  EXPECT_EQ(pr.layernorm, c.form.layernorm);
  EXPECT_EQ(pr.stats, c.stats);
  EXPECT_EQ(name_of(g, pr.x), "x");
  EXPECT_EQ(name_of(g, pr.dy), "tangents_1");
  EXPECT_EQ(pr.w, -1);
  EXPECT_EQ(pr.dw, -1);
  EXPECT_EQ(pr.db, -1);
  // (float32: the f32 -> f32 convert of dx is an identity the region runs after its fused step)
  std::string dx = name_of(g, pr.dx);
  for (const TailAlias& t : r.tail)
    if (t.source == pr.dx) dx = g.values[g.nodes[t.node].outputs[0]].name;
  EXPECT_EQ(dx, "dx");
  EXPECT_EQ(pr.cols, c.form.cols);
  if (c.stats == NormBwdStats::kRecompute) {
    EXPECT_EQ(pr.rstd, -1);
    EXPECT_EQ(name_of(g, pr.eps_value), c.form.stats == "recompute_eps_tensor" ? "eps" : "");
    EXPECT_DOUBLE_EQ(pr.eps + (pr.eps_value >= 0 ? 1e-5 : 0), 1e-5);
  } else {
    EXPECT_EQ(name_of(g, pr.rstd), "rstd");
    EXPECT_EQ(name_of(g, pr.mean),
              c.stats == NormBwdStats::kSaved && c.form.layernorm ? "mean" : "");
  }
  EXPECT_EQ(declines, "");
}

INSTANTIATE_TEST_SUITE_P(Forms, DxOnlyForms, ::testing::ValuesIn(dx_cases()),
                         [](const auto& info) { return info.param.name; });

// Negatives: each leaves the graph eager and says why at the sum(g * xhat) row reduction ("s2"
// in the Inductor form, "mgx" in the mean form).
TEST(DxOnlyMatch, DroppedMeanTermIsDeclined) {
  json t = norm_bwd_trace(noaffine());
  for (auto& n : t["nodes"])
    if (n["id"] == "a") n["args"][1] = 0.0;  // C*g - 0 instead of C*g - sum(g)
  Graph g = parse_trace(t, "<no-s1>");
  EXPECT_TRUE(plan_of(g).regions.empty());
  EXPECT_NE(declined_at(g, matches_of(g), "s2").find("no value of the graph equals dx"),
            std::string::npos)
      << declined_at(g, matches_of(g), "s2");
}

TEST(DxOnlyMatch, WrongDivisorIsDeclined) {
  for (bool ln : {true, false}) {
    Graph g = parse_trace(norm_bwd_trace(noaffine([ln](auto& f) {
                            f.layernorm = ln;
                            f.dx_wrong_divisor = true;
                          })),
                          "<divisor>");
    EXPECT_TRUE(plan_of(g).regions.empty()) << ln;
    EXPECT_NE(declined_at(g, matches_of(g), "s2").find("dx only: sum(dy * xhat) found"),
              std::string::npos)
        << ln << ": " << declined_at(g, matches_of(g), "s2");
  }
}

TEST(DxOnlyMatch, EscapingIntermediateIsDeclined) {
  Graph g = parse_trace(norm_bwd_trace(noaffine([](auto& f) { f.xhat_escapes = true; })), "<esc>");
  EXPECT_TRUE(plan_of(g).regions.empty());
  EXPECT_NE(declined_at(g, matches_of(g), "s2").find("intermediate 'xhat' is a graph output"),
            std::string::npos)
      << declined_at(g, matches_of(g), "s2");
}

// A norm backward with a weight but without its dw (a frozen weight) is not dx-only (w != 1):
// no region, and the reason is given.
TEST(DxOnlyMatch, WeightedNormWithoutDwIsDeclined) {
  for (bool ln : {true, false}) {
    NormBwdForm f;
    f.drop_dw = true;
    f.bias = false;
    f.layernorm = ln;
    Graph g = parse_trace(norm_bwd_trace(f), "<frozen>");
    EXPECT_TRUE(plan_of(g).regions.empty());
    EXPECT_NE(declined_at(g, matches_of(g), "s2").find("[C] value 'weight'"), std::string::npos)
        << ln << ": " << declined_at(g, matches_of(g), "s2");
  }
}

// A weighted norm backward whose dw column sum was declined: that decline says why, the dx-only
// pass adds nothing for its row sums.
TEST(DxOnlyMatch, WeightedNormWithDeclinedDwAddsNoDxOnlyDecline) {
  NormBwdForm f;
  f.dw_unrelated = true;
  Graph g = parse_trace(norm_bwd_trace(f), "<dw-unrelated>");
  Matches m = matches_of(g);
  EXPECT_TRUE(m.regions.empty());
  ASSERT_FALSE(m.declined.empty());
  for (const Decline& d : m.declined)
    EXPECT_EQ(d.reason.find("dx only"), std::string::npos) << d.reason;
}

// Row sums that are not a norm backward's are not reported: softmax backward
// (dx = y * (dy - sum(dy * y))) and a plain row sum of one tensor.
TEST(DxOnlyMatch, OtherRowSumsAreNotReported) {
  const std::vector<int64_t> full = {4, 8, 384}, row = {4, 8, 1};
  auto in = [](const std::string& id, std::vector<int64_t> sh) {
    json t = tensor(sh, "float32");
    t["id"] = id;
    return t;
  };
  auto node = [](const std::string& id, const std::string& op, json args, std::vector<int64_t> sh) {
    return json{{"id", id},
                {"op", op},
                {"args", args},
                {"kwargs", json::object()},
                {"outputs", json::array({tensor(sh, "float32")})}};
  };
  json t = {{"schema", "replay-trace/1"},
            {"name", "softmax_bwd"},
            {"source", {{"model", "synthetic"}, {"phase", "bwd"}}},
            {"world_size", 1},
            {"inputs", {in("y", full), in("dy", full)}},
            {"nodes",
             {node("gy", "aten.mul.Tensor", {ref("dy"), ref("y")}, full),
              node("s", "aten.sum.dim_IntList", {ref("gy"), {2}, true}, row),
              node("d", "aten.sub.Tensor", {ref("dy"), ref("s")}, full),
              node("dx", "aten.mul.Tensor", {ref("y"), ref("d")}, full),
              node("ls", "aten.sum.dim_IntList", {ref("dy"), {2}, true}, row)}},
            {"outputs", {"dx", "ls"}}};
  Graph g = parse_trace(t, "<softmax>");
  Matches m = matches_of(g);
  EXPECT_TRUE(m.regions.empty());
  EXPECT_TRUE(m.declined.empty()) << m.declined[0].reason;
}

// A full (dw) match comes first and the dx-only pass neither takes its nodes nor reports them;
// beside it, a norm without affine parameters of the same shape is its own dx-only region.
TEST(DxOnlyMatch, FullMatchFirstThenDxOnly) {
  {
    Graph g = parse_trace(norm_bwd_trace(NormBwdForm{}), "<full>");
    Matches m = matches_of(g);
    ASSERT_EQ(m.regions.size(), 1u);
    EXPECT_GE(params(m.regions[0]).dw, 0);
    EXPECT_TRUE(m.declined.empty());
  }
  json a = norm_bwd_trace(NormBwdForm{});
  json b = norm_bwd_trace(noaffine([](auto& f) { f.layernorm = false; }));
  std::function<void(json&)> walk = [&](json& v) {
    if (v.is_object()) {
      if (v.contains("ref")) v["ref"] = v["ref"].get<std::string>() + "_b";
      for (auto& [k, x] : v.items()) walk(x);
    } else if (v.is_array()) {
      for (auto& x : v) walk(x);
    }
  };
  for (auto& i : b["inputs"]) {
    i["id"] = i["id"].get<std::string>() + "_b";
    a["inputs"].push_back(i);
  }
  for (auto& n : b["nodes"]) {
    n["id"] = n["id"].get<std::string>() + "_b";
    walk(n["args"]);
    a["nodes"].push_back(n);
  }
  for (auto& o : b["outputs"]) a["outputs"].push_back(o.get<std::string>() + "_b");
  Graph g = parse_trace(a, "<two>");
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 2u);
  EXPECT_TRUE(p.dropped.empty());
  EXPECT_EQ(p.regions[0].nodes.size() + p.regions[1].nodes.size(), g.nodes.size());
  int full = 0, dx_only = 0;
  for (const Region& r : p.regions) {
    const auto& pr = params(r);
    if (pr.dw >= 0) {
      ++full;
      EXPECT_TRUE(pr.layernorm);
    } else {
      ++dx_only;
      EXPECT_FALSE(pr.layernorm);
      EXPECT_EQ(name_of(g, pr.dx), "dx_b");
    }
  }
  EXPECT_EQ(full, 1);
  EXPECT_EQ(dx_only, 1);
}

// ---------------------------------------------------------------------------------------------
// The CPU model of the kernels (tests/model.hpp) in dx-only mode.

namespace {

struct Matched {
  Plan plan;
  const norm_bwd::Params* p = nullptr;
};

Matched match_one(const Graph& g) {
  Matched m;
  m.plan = plan_of(g);
  if (m.plan.regions.size() == 1) m.p = &params(m.plan.regions[0]);
  return m;
}

int rows_per_iter(const Graph& g, const norm_bwd::Params& p) {
  NormBwdArgs a;
  a.cols = p.cols;
  a.x_dtype = g.meta(p.x).dtype;
  a.dy_dtype = g.meta(p.dy).dtype;
  // Presence of db and of a saved xhat chooses the geometry too (wide rows: neither); the
  // pointers are only tested against null.
  static const float present = 0.f;
  if (p.db >= 0) a.db = const_cast<float*>(&present);
  if (p.xs >= 0) a.xs = &present;
  return norm_bwd_geometry(a).rows_per_iter;
}

// dx of the model, checked against `want` with the harness's bounds; failures as text.
std::string check_dx(const Graph& g, const Matched& m, const norm_bwd::Params& p,
                     const std::map<int, HostTensor>& values, const std::map<int, HostTensor>& want,
                     int64_t split) {
  NormBwdModelOut o = run_norm_bwd_model(g, p, values, split, rows_per_iter(g, *m.p));
  EXPECT_TRUE(o.dw.data.empty());
  EXPECT_TRUE(o.db.data.empty());
  const auto bounds = default_value_bounds(g);
  std::string bad;
  for (int v : g.outputs) {
    int source = v;  // the f32 -> f32 convert of an fp32 dx runs after the fused step
    for (const Region& r : m.plan.regions)
      for (const TailAlias& t : r.tail)
        if (g.nodes[t.node].outputs[0] == v) source = t.source;
    EXPECT_EQ(source, m.p->dx);
    auto r =
        check_numerics(g.values[v].name, o.dx, want.at(v), output_bounds(g, m.plan, bounds, v));
    if (!r.pass()) bad += g.values[v].name + ": " + r.failure() + "; ";
  }
  return bad;
}

}  // namespace

// The reference and the model against PyTorch's outputs of OLMo's training step.
TEST(DxOnlyModel, OlmoGoldenMatchesPyTorch) {
  for (const char* trace : {"byog/olmo_layernorm_mincut_train_bwd_2x8x256",
                            "byog/olmo_layernorm_default_train_bwd_2x8x256"}) {
    SCOPED_TRACE(trace);
    Graph g = load_trace(trace_path(trace));
    ASSERT_TRUE(g.golden.has_value());
    auto golden = read_safetensors(g.golden->path);
    std::map<int, HostTensor> in, want;
    for (int v : g.inputs) in[v] = golden.at(g.values[v].name);
    for (int v : g.outputs) want[v] = golden.at(g.values[v].name);
    Matched m = match_one(g);
    ASSERT_NE(m.p, nullptr);
    const auto bounds = default_value_bounds(g);
    auto ref = run_reference(g, in);
    for (int v : g.outputs)
      EXPECT_TRUE(check_numerics("ref", ref.at(v), want.at(v), bounds[v]).pass());
    const int rpi = rows_per_iter(g, *m.p);
    for (int64_t split : {int64_t(rpi), m.p->rows})
      EXPECT_EQ(check_dx(g, m, *m.p, in, want, split), "") << "split " << split;
  }
}

// The model against the float64 reference on fresh seeds, every synthetic dx-only form.
TEST(DxOnlyModel, FormsPassOnFreshSeeds) {
  for (const DxCase& c : dx_cases()) {
    SCOPED_TRACE(c.name);
    NormBwdForm f = c.form;
    if (f.cols <= 1600) f.lead = {64, 9};
    Graph g = parse_trace(norm_bwd_trace(f), c.name);
    Matched m = match_one(g);
    ASSERT_NE(m.p, nullptr);
    for (uint64_t seed : {1u, 2u}) {
      auto vals = run_reference(g, generate_inputs(g, seed));
      EXPECT_EQ(check_dx(g, m, *m.p, vals, vals, 3 * rows_per_iter(g, *m.p) + 1), "")
          << "seed " << seed;
    }
  }
}

// Every mutant that applies makes dx FAIL (the unmutated model passes), on OLMo and on an
// RMSNorm without weight (saved and recomputed statistics).
TEST(DxOnlyModel, EveryMutantFails) {
  std::vector<std::pair<std::string, Graph>> graphs;
  graphs.emplace_back("olmo",
                      load_trace(trace_path("byog/olmo_layernorm_mincut_train_bwd_2x8x256")));
  graphs.emplace_back(
      "rms", parse_trace(norm_bwd_trace(noaffine([](auto& f) { f.layernorm = false; })), "<rms>"));
  graphs.emplace_back("rms_recompute", parse_trace(norm_bwd_trace(noaffine([](auto& f) {
                                                     f.layernorm = false;
                                                     f.stats = "recompute";
                                                   })),
                                                   "<rms-recompute>"));
  std::set<std::string> applied;
  for (const auto& [name, g] : graphs) {
    SCOPED_TRACE(name);
    Matched m = match_one(g);
    ASSERT_NE(m.p, nullptr);
    ASSERT_LT(m.p->dw, 0);
    auto vals = run_reference(g, generate_inputs(g, 11));
    const int rpi = rows_per_iter(g, *m.p);
    ASSERT_EQ(check_dx(g, m, *m.p, vals, vals, rpi), "");
    for (const auto& mu : norm_bwd_mutants()) {
      if (!mu.applies(*m.p) || !mu.fails_dx) continue;
      applied.insert(mu.name);
      norm_bwd::Params bad = *m.p;
      mu.mutate(bad);
      EXPECT_NE(check_dx(g, m, bad, vals, vals, rpi), "") << mu.name << ": dx passed";
    }
  }
  // The dx-only mutant (LayerNorm without its mean term S1) is among them.
  EXPECT_TRUE(applied.count("dx_only_dropped_s1"));
}
