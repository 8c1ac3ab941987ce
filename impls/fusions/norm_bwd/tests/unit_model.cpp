// norm_bwd numerics without a GPU: the reference against PyTorch's golden tensors for every
// bundled backward trace that has them, and the CPU model of the kernels (tests/model.hpp:
// the matched params, fp32 arithmetic, the roundings and the split/partial summation order)
// against the float64 reference with the harness's bounds — on the golden inputs, on fresh
// seeds, for every synthetic form and several split sizes. The mutants (tests/mutants.hpp) make
// the model FAIL: the check catches a wrong dx, dw or db.
#include <gtest/gtest.h>

#include <filesystem>

#include "harness/report/numerics.hpp"
#include "impls/fusions/norm_bwd/tests/model.hpp"
#include "impls/fusions/norm_bwd/tests/mutants.hpp"
#include "impls/fusions/norm_bwd/tests/synthetic.hpp"
#include "impls/reference/reference.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/safetensors.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/plan/plan.hpp"

using namespace replay;
using namespace replay::test;

namespace replay::fusions {
extern const FusionSpec norm_bwd;
}

namespace {

struct Matched {
  Plan plan;
  const norm_bwd::Params* p = nullptr;
};

Matched match_one(const Graph& g) {
  const FusionSpec* only[] = {&fusions::norm_bwd};
  Matched m;
  m.plan = make_plan(g, only);
  if (m.plan.regions.size() == 1)
    m.p = &std::any_cast<const norm_bwd::Params&>(m.plan.regions[0].params);
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

// The model's outputs by value index, and the graph outputs of the eager nodes around the region
// (a per-head norm's dy permute before it, the view of dx after it), evaluated by the reference on
// the model's values.
std::map<int, HostTensor> model_outputs(const Graph& g, const norm_bwd::Params& p,
                                        const std::map<int, HostTensor>& values, int64_t split,
                                        int rpi) {
  const Plan plan = match_one(g).plan;
  std::map<int, HostTensor> env = values;
  auto eval = [&](size_t n) {
    for (const Operand& o : g.nodes[n].operands)
      if (o.is_tensor() && !env.count(o.value)) return;
    auto outs = reference_node(g, g.nodes[n], env);
    for (size_t k = 0; k < outs.size(); ++k) env[g.nodes[n].outputs[k]] = std::move(outs[k]);
  };
  for (size_t n = 0; n < g.nodes.size(); ++n)  // the region's inputs (eager views of inputs)
    if (plan.node_region[n] < 0) eval(n);
  NormBwdModelOut o = run_norm_bwd_model(g, p, env, split, rpi);
  std::map<int, HostTensor> m = {{p.dx, o.dx}};
  if (p.dw >= 0) m[p.dw] = o.dw;
  if (p.db >= 0) m[p.db] = o.db;
  for (const auto& [v, t] : m) env[v] = t;
  for (const Region& r : plan.regions)
    for (const TailAlias& t : r.tail)
      if (env.count(t.source)) env[g.nodes[t.node].outputs[0]] = env.at(t.source);
  for (size_t n = 0; n < g.nodes.size(); ++n)  // again, on the model's outputs
    if (plan.node_region[n] < 0) eval(n);
  for (int v : g.outputs)
    if (!m.count(v) && env.count(v) && g.values[v].producer >= 0 &&
        plan.node_region[g.values[v].producer] < 0)
      m[v] = env.at(v);
  return m;
}

// Every graph output of the model against `want` (value -> tensor); failures as text.
std::string check(const Graph& g, const Matched& m, const std::map<int, HostTensor>& got,
                  const std::map<int, HostTensor>& want) {
  const auto bounds = default_value_bounds(g);
  // What the region's tail (identity nodes run after the fused step) passes on.
  std::map<int, HostTensor> all = got;
  for (const Region& r : m.plan.regions)
    for (const TailAlias& t : r.tail) all[g.nodes[t.node].outputs[0]] = all.at(t.source);
  std::string bad;
  for (int v : g.outputs) {
    auto r = check_numerics(g.values[v].name, all.at(v), want.at(v),
                            output_bounds(g, m.plan, bounds, v));
    if (!r.pass()) bad += g.values[v].name + ": " + r.failure() + "; ";
  }
  return bad;
}

// The splits a kernel may run with: one group row at a time (many partials), an odd split, the
// whole graph in one block.
std::vector<int64_t> splits(int64_t rows, int rpi) {
  return {rpi, 3 * rpi + 1, rows};
}

std::vector<std::string> bundled_norm_bwd(bool golden_only) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(REPLAY_TRACES_DIR)) {
    const std::string n = e.path().stem().string();
    if (e.path().extension() != ".json" || n.find("_train_bwd_") == std::string::npos ||
        n.find("norm") == std::string::npos)
      continue;
    std::filesystem::path st = e.path();
    st.replace_extension(".safetensors");
    if (golden_only && !std::filesystem::exists(st)) continue;
    out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The small add-norm backwards captured from user code (traces/byog/, with PyTorch's tensors):
// the norm's dx plus the residual stream's other gradient, a dx epilogue add.
std::vector<std::string> byog_add_norm_bwd() {
  return {"byog/llama_add_rmsnorm_mincut_train_bwd_2x8x256",
          "byog/llama_add_rmsnorm_default_train_bwd_2x8x256",
          "byog/gpt2_add_layernorm_mincut_train_bwd_2x8x256",
          "byog/gpt2_add_layernorm_default_train_bwd_2x8x256"};
}

// The small default-partition backwards of traces/byog/ (with PyTorch's tensors): a float32 x
// beside a bfloat16 dy and dx, dw reading the saved normalized value (Params::xs); the per-head
// norms (qk_norm), whose dy is a transposed view; T5's and Cohere's min-cut backwards.
std::vector<std::string> byog_default_norm_bwd() {
  std::vector<std::string> out;
  for (const char* m : {"llama_rmsnorm", "mistral_rmsnorm", "qwen2_rmsnorm", "qwen3_rmsnorm",
                        "phi3_rmsnorm", "deepseek_v3_rmsnorm", "llama_rmsnorm_eps_buffer",
                        "olmo2_rmsnorm", "gemma_rmsnorm", "gemma2_rmsnorm", "gemma3_rmsnorm"})
    out.push_back(std::string("byog/") + m + "_default_train_bwd_2x8x256");
  for (const char* m : {"qwen3_qk_norm", "gemma3_qk_norm"})
    for (const char* part : {"default", "mincut"})
      out.push_back(std::string("byog/") + m + "_" + part + "_train_bwd_2x8x4x64");
  // T5 (dx's two terms rounded apart) and Cohere (recentered xhat term), min-cut.
  out.push_back("byog/t5_layernorm_mincut_train_bwd_2x8x256");
  out.push_back("byog/cohere_layernorm_mincut_train_bwd_2x8x256");
  return out;
}

class NormBwdGolden : public ::testing::TestWithParam<std::string> {};

}  // namespace

// The reference and the kernel model against PyTorch's outputs of the captured training step.
TEST_P(NormBwdGolden, ReferenceAndModelMatchPyTorch) {
  Graph g = load_trace(trace_path(GetParam()));
  ASSERT_TRUE(g.golden.has_value());
  auto golden = read_safetensors(g.golden->path);
  std::map<int, HostTensor> in, want;
  for (int v : g.inputs) in[v] = golden.at(g.values[v].name);
  for (int v : g.outputs) want[v] = golden.at(g.values[v].name);
  Matched m = match_one(g);
  ASSERT_NE(m.p, nullptr);
  auto ref = run_reference(g, in);
  EXPECT_EQ(check(g, m, ref, want), "") << "reference vs PyTorch";
  const int rpi = rows_per_iter(g, *m.p);
  for (int64_t split : splits(m.p->rows, rpi))
    EXPECT_EQ(check(g, m, model_outputs(g, *m.p, in, split, rpi), want), "")
        << "model vs PyTorch, split " << split;
}

INSTANTIATE_TEST_SUITE_P(Traces, NormBwdGolden, ::testing::ValuesIn(bundled_norm_bwd(true)),
                         [](const auto& info) { return test_name(info.param); });
INSTANTIATE_TEST_SUITE_P(AddNorm, NormBwdGolden, ::testing::ValuesIn(byog_add_norm_bwd()),
                         [](const auto& info) { return test_name(info.param); });
INSTANTIATE_TEST_SUITE_P(DefaultPartition, NormBwdGolden,
                         ::testing::ValuesIn(byog_default_norm_bwd()),
                         [](const auto& info) { return test_name(info.param); });

// The dx epilogue add on fresh seeds and several splits (the add-norm backwards above and a
// synthetic LayerNorm and RMSNorm), and without it (the dropped_dx_add mutant) dx fails.
TEST(NormBwdModelDxAdd, PassesAndDroppingTheAddFails) {
  std::vector<Graph> graphs;
  for (const auto& name : byog_add_norm_bwd()) graphs.push_back(load_trace(trace_path(name)));
  for (bool ln : {true, false}) {
    NormBwdForm f;
    f.layernorm = ln;
    f.dx_add = "same";
    graphs.push_back(parse_trace(norm_bwd_trace(f), ln ? "<ln-dx-add>" : "<rms-dx-add>"));
  }
  for (const Graph& g : graphs) {
    Matched m = match_one(g);
    ASSERT_NE(m.p, nullptr) << g.name;
    ASSERT_GE(m.p->dx_add, 0) << g.name;
    const int rpi = rows_per_iter(g, *m.p);
    const auto bounds = default_value_bounds(g);
    for (uint64_t seed : {3u, 4u}) {
      auto vals = run_reference(g, generate_inputs(g, seed));
      for (int64_t split : splits(m.p->rows, rpi))
        EXPECT_EQ(check(g, m, model_outputs(g, *m.p, vals, split, rpi), vals), "")
            << g.name << " seed " << seed << " split " << split;
      norm_bwd::Params bad = *m.p;
      bad.dx_add = -1;
      const int dx = m.p->dx;
      EXPECT_FALSE(check_numerics("dx", model_outputs(g, bad, vals, rpi, rpi).at(dx), vals.at(dx),
                                  output_bounds(g, m.plan, bounds, dx))
                       .pass())
          << g.name << " seed " << seed << ": dx without the add passed";
    }
  }
}

namespace {

struct ModelCase {
  std::string name;
  NormBwdForm form;
};

NormBwdForm shaped(std::function<void(NormBwdForm&)> f) {
  NormBwdForm x;
  x.lead = {64, 9};  // 576 rows
  f(x);
  return x;
}

void PrintTo(const ModelCase& c, std::ostream* os) {
  *os << c.name;
}

class NormBwdModel : public ::testing::TestWithParam<ModelCase> {};

}  // namespace

// The model against the float64 reference on fresh seeds: every form, several splits.
TEST_P(NormBwdModel, PassesOnFreshSeeds) {
  Graph g = parse_trace(norm_bwd_trace(GetParam().form), GetParam().name);
  Matched m = match_one(g);
  ASSERT_NE(m.p, nullptr);
  const int rpi = rows_per_iter(g, *m.p);
  for (uint64_t seed : {1u, 2u}) {
    auto vals = run_reference(g, generate_inputs(g, seed));
    for (int64_t split : splits(m.p->rows, rpi))
      EXPECT_EQ(check(g, m, model_outputs(g, *m.p, vals, split, rpi), vals), "")
          << "seed " << seed << " split " << split;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Forms, NormBwdModel,
    ::testing::Values(ModelCase{"ln", shaped([](auto&) {})},
                      ModelCase{"ln_1600", shaped([](auto& f) { f.cols = 1600; })},
                      ModelCase{"ln_mean_commuted", shaped([](auto& f) { f.dx_form = "mean"; })},
                      ModelCase{"ln_unit_offset", shaped([](auto& f) { f.unit_offset = true; })},
                      ModelCase{"ln_fp16", shaped([](auto& f) { f.dtype = "float16"; })},
                      ModelCase{"ln_fp32", shaped([](auto& f) { f.dtype = "float32"; })},
                      ModelCase{"ln_recompute", shaped([](auto& f) { f.stats = "recompute"; })},
                      ModelCase{"ln_recompute_eps_tensor",
                                shaped([](auto& f) { f.stats = "recompute_eps_tensor"; })},
                      ModelCase{"ln_normalized_x", shaped([](auto& f) { f.stats = "normalized"; })},
                      ModelCase{"ln_dy_summed", shaped([](auto& f) { f.dy_is_sum = true; })},
                      ModelCase{"rms", shaped([](auto& f) { f.layernorm = false; })},
                      ModelCase{"rms_4096", shaped([](auto& f) {
                                  f.layernorm = false;
                                  f.cols = 4096;
                                  f.lead = {96};
                                })},
                      ModelCase{"rms_weight_after_downcast", shaped([](auto& f) {
                                  f.layernorm = false;
                                  f.weight_after_downcast = true;
                                })},
                      ModelCase{"rms_unit_offset", shaped([](auto& f) {
                                  f.layernorm = false;
                                  f.unit_offset = true;
                                })},
                      ModelCase{"rms_recompute_eps_tensor", shaped([](auto& f) {
                                  f.layernorm = false;
                                  f.stats = "recompute_eps_tensor";
                                })},
                      ModelCase{"rms_normalized_x", shaped([](auto& f) {
                                  f.layernorm = false;
                                  f.stats = "normalized";
                                })}),
    [](const auto& info) { return info.param.name; });

// Many rows into few partials: 16384 rows of 384 at the heuristic's split for 132 SMs x 2 blocks
// (the accumulation error of long fp32 column sums stays within the bounds).
TEST(NormBwdModelLong, ManyRowsPerPartial) {
  for (bool ln : {true, false}) {
    NormBwdForm f;
    f.lead = {16384};
    f.layernorm = ln;
    Graph g = parse_trace(norm_bwd_trace(f), "<long>");
    Matched m = match_one(g);
    ASSERT_NE(m.p, nullptr);
    const int rpi = rows_per_iter(g, *m.p);
    auto vals = run_reference(g, generate_inputs(g, 5));
    const int64_t split = (16384 + 263) / 264 / rpi * rpi + rpi;
    EXPECT_EQ(check(g, m, model_outputs(g, *m.p, vals, split, rpi), vals), "") << ln;
  }
}

namespace {

class NormBwdMutants : public ::testing::TestWithParam<std::string> {};

}  // namespace

// Every mutant makes the outputs it names FAIL, on every bundled backward trace it applies to,
// while the unmutated model PASSES.
TEST_P(NormBwdMutants, EveryMutantFails) {
  Graph g = load_trace(trace_path(GetParam()));
  Matched m = match_one(g);
  ASSERT_NE(m.p, nullptr);
  const int rpi = rows_per_iter(g, *m.p);
  auto vals = run_reference(g, generate_inputs(g, 11));
  const auto bounds = default_value_bounds(g);
  ASSERT_EQ(check(g, m, model_outputs(g, *m.p, vals, rpi, rpi), vals), "");
  for (const auto& mu : norm_bwd_mutants()) {
    if (!mu.applies(*m.p)) continue;
    norm_bwd::Params bad = *m.p;
    mu.mutate(bad);
    auto got = model_outputs(g, bad, vals, rpi, rpi);
    auto fails = [&](int v) {
      return v >= 0 &&
             !check_numerics("y", got.at(v), vals.at(v), output_bounds(g, m.plan, bounds, v))
                  .pass();
    };
    if (mu.fails_dx) {
      EXPECT_TRUE(fails(m.p->dx)) << mu.name << ": dx passed";
    }
    if (mu.fails_dw) {
      EXPECT_TRUE(fails(m.p->dw)) << mu.name << ": dw passed";
    }
    if (mu.fails_db && m.p->db >= 0) {
      EXPECT_TRUE(fails(m.p->db)) << mu.name << ": db passed";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Traces, NormBwdMutants, ::testing::ValuesIn(bundled_norm_bwd(true)),
                         [](const auto& info) { return test_name(info.param); });
INSTANTIATE_TEST_SUITE_P(AddNorm, NormBwdMutants, ::testing::ValuesIn(byog_add_norm_bwd()),
                         [](const auto& info) { return test_name(info.param); });
INSTANTIATE_TEST_SUITE_P(DefaultPartition, NormBwdMutants,
                         ::testing::ValuesIn(byog_default_norm_bwd()),
                         [](const auto& info) { return test_name(info.param); });
