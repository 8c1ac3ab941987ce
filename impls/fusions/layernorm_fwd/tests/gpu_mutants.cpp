// Deliberately wrong layernorm_fwd kernels: the real baseline and optimized kernels launched with
// wrong arguments (eps off, biased variance, a dropped affine step or weight offset, the last row
// not computed; with a residual add prologue, the residual dropped or the statistics taken on the
// unrounded sum; the saved intermediates of a default-partitioner forward taken at the wrong stage,
// Gemma's saved 1 + w without its offset), on inference and training forwards and the byog
// captures. Each must FAIL the numerics check of some output on every norm trace it applies to; the
// same kernels with the right arguments PASS (tests/gpu/test_replay_all.cpp).
#include "impls/fusions/binding.hpp"
#include "impls/fusions/layernorm_fwd/params.hpp"
#include "impls/fusions/registry.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/loader/trace_loader.hpp"

namespace replay::fusions {
extern const FusionSpec layernorm_fwd;
}

using namespace replay;
using namespace replay::test;

namespace {

struct Mutant {
  const char* name;
  bool (*applies)(const layernorm_fwd::Params&);
  void (*mutate)(layernorm_fwd::Params&);
  /// Only the optimized kernel can go wrong this way; the baseline is skipped, saying why.
  const char* baseline_immune = nullptr;
};

bool always(const layernorm_fwd::Params&) {
  return true;
}
bool is_layernorm(const layernorm_fwd::Params& p) {
  return p.kind == NormKind::kLayerNorm;
}
bool has_step(const layernorm_fwd::Params& p, EpilogueOp op) {
  for (const auto& s : p.epilogue)
    if (s.op == op) return true;
  return false;
}
bool has_residual(const layernorm_fwd::Params& p) {
  return p.residual >= 0;
}
bool rounds_h(const layernorm_fwd::Params& p) {
  return p.residual >= 0 && (p.h_round == DType::kBFloat16 || p.h_round == DType::kFloat16);
}
bool has_row_exports(const layernorm_fwd::Params& p) {
  return !p.row_exports.empty();
}
bool exports_offset_weight(const layernorm_fwd::Params& p) {
  for (const auto& e : p.weight_exports)
    if (e.offset) return true;
  return false;
}
bool has_offset(const layernorm_fwd::Params& p) {
  for (const auto& s : p.epilogue)
    if (s.offset != 0) return true;
  return false;
}
void drop_step(layernorm_fwd::Params& p, EpilogueOp op) {
  for (size_t i = 0; i < p.epilogue.size(); ++i)
    if (p.epilogue[i].op == op) {
      p.epilogue.erase(p.epilogue.begin() + static_cast<long>(i));
      return;
    }
}

const Mutant kMutants[] = {
    {"eps_x100", always, [](layernorm_fwd::Params& p) { p.eps *= 100; }},
    {"eps_1e-2", always, [](layernorm_fwd::Params& p) { p.eps = 1e-2; }},
    {"biased_variance", is_layernorm, [](layernorm_fwd::Params& p) { p.correction = 1; }},
    // Not where the region also exports that weight (Gemma's 1 + w, Cohere's upcast weight): the
    // binder refuses an exported weight without its step, so no kernel would run;
    // weight_export_without_offset covers those regions.
    {"dropped_weight",
     [](const layernorm_fwd::Params& p) {
       return has_step(p, EpilogueOp::kMul) && p.weight_exports.empty();
     },
     [](layernorm_fwd::Params& p) { drop_step(p, EpilogueOp::kMul); }},
    {"dropped_bias", [](const layernorm_fwd::Params& p) { return has_step(p, EpilogueOp::kAdd); },
     [](layernorm_fwd::Params& p) { drop_step(p, EpilogueOp::kAdd); }},
    {"lost_last_row", always, [](layernorm_fwd::Params& p) { p.rows -= 1; }},
    {"dropped_weight_offset", has_offset,
     [](layernorm_fwd::Params& p) {
       for (auto& s : p.epilogue) s.offset = 0;
     }},
    // The prologue's add left out: the norm (and h) get x alone.
    {"dropped_residual", has_residual, [](layernorm_fwd::Params& p) { p.residual = -1; }},
    // The statistics and the normalize on the fp32 sum, not on h rounded as the graph rounds it
    // (h itself is still stored rounded: only y can show it).
    {"h_unrounded", rounds_h, [](layernorm_fwd::Params& p) { p.h_round = DType::kFloat32; },
     "the baseline's add kernel stores h in x's dtype and its norm kernels read it back: they "
     "cannot see an unrounded h"},
    // A default-partitioner forward's saved intermediates taken at the wrong place in the chain:
    // x - mean after the rstd multiply, any later stage one step further on (the last step's
    // result one step earlier). Shifting a step's result back onto a pure rounding is no mutation
    // when the export has that rounding's dtype (Llama's bf16 normalized value), so forward first.
    {"export_stage_shifted", has_row_exports,
     [](layernorm_fwd::Params& p) {
       const int last = static_cast<int>(p.epilogue.size()) - 1;
       for (auto& e : p.row_exports)
         e.stage = e.stage == kStageCentered ? kStageNormalized
                   : e.stage < last          ? e.stage + 1
                                             : e.stage - 1;
     }},
    // Gemma's saved fp32 1 + w written as w.
    {"weight_export_without_offset", exports_offset_weight,
     [](layernorm_fwd::Params& p) {
       for (auto& e : p.weight_exports) e.offset = false;
     }},
};

// The mutant being bound (a FusionSpec's bind is a plain function pointer).
const Mutant* g_mutant = nullptr;

Binding mutant_bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  Region m = r;
  auto p = std::any_cast<layernorm_fwd::Params>(r.params);
  g_mutant->mutate(p);
  m.params = p;
  return layernorm_fwd::bind(g, m, v, ctx);
}

FusionSpec mutant_spec() {
  FusionSpec s = fusions::layernorm_fwd;
  s.bind = mutant_bind;
  return s;
}

class LayerNormFwdMutant
    : public ::testing::TestWithParam<std::tuple<size_t, std::string, std::string>> {};

}  // namespace

TEST_P(LayerNormFwdMutant, Fails) {
  REQUIRE_GPU();
  auto [mi, trace, variant] = GetParam();
  g_mutant = &kMutants[mi];
  Graph g = load_trace(trace_path(trace));
  const FusionSpec spec = mutant_spec();
  const FusionSpec* fusions[] = {&spec};
  Plan plan = make_plan(g, fusions);
  ASSERT_EQ(plan.regions.size(), 1u);
  if (!g_mutant->applies(std::any_cast<const layernorm_fwd::Params&>(plan.regions[0].params)))
    GTEST_SKIP() << g_mutant->name << " does not apply to " << trace;
  if (g_mutant->baseline_immune && variant == "baseline")
    GTEST_SKIP() << g_mutant->name << ": " << g_mutant->baseline_immune;
  for (uint64_t seed : {41u, 42u}) {
    auto ref = run_reference(g, generate_inputs(g, seed));
    GpuProgram prog(g, plan, variant, ref, nullptr);
    ASSERT_EQ(prog.fallback_reason(0), "") << "the mutant must run the fused kernel";
    prog.poison_outputs(nullptr);
    prog.run_all(LaunchContext{});
    // Some output must fail: y, or the exported value the mutant writes wrongly.
    const auto bounds = default_value_bounds(g);
    std::string passed;
    bool all_pass = true;
    for (int out : g.outputs) {
      auto r =
          check_numerics(g.values[out].name, prog.download(out, nullptr), ref.at(out), bounds[out]);
      all_pass &= r.pass();
      passed += g.values[out].name + " rel_l2 " + std::to_string(r.rel_l2) + " (bound " +
                std::to_string(r.bounds.max_rel_l2) + "); ";
    }
    EXPECT_FALSE(all_pass) << trace << " " << variant << " " << g_mutant->name
                           << " passed: " << passed;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, LayerNormFwdMutant,
    ::testing::Combine(::testing::Range<size_t>(0, std::size(kMutants)),
                       ::testing::Values("nanogpt_layernorm_fwd_16x128x1600",
                                         "nanogpt_layernorm_fwd_2x8x1600",
                                         "llama_rmsnorm_fwd_2x8x4096",
                                         "nanogpt_layernorm_train_fwd_2x8x1600",
                                         "litgpt_rmsnorm_unit_offset_train_fwd_2x8x4096",
                                         "byog/llama_add_rmsnorm_mincut_train_fwd_2x8x256",
                                         "byog/llama_add_rmsnorm_default_train_fwd_2x8x256",
                                         "byog/gpt2_add_layernorm_mincut_train_fwd_2x8x256",
                                         "byog/gpt2_add_layernorm_default_train_fwd_2x8x256",
                                         "byog/gemma_rmsnorm_default_train_fwd_2x8x256",
                                         "byog/olmo2_rmsnorm_default_train_fwd_2x8x256",
                                         "byog/cohere_layernorm_default_train_fwd_2x8x256"),
                       ::testing::Values("baseline", "optimized")),
    [](const auto& info) {
      return test_name(std::string(kMutants[std::get<0>(info.param)].name) + "_" +
                       std::get<1>(info.param) + "_" + std::get<2>(info.param));
    });
