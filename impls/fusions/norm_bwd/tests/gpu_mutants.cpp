// Deliberately wrong norm_bwd kernels: the real baseline and optimized kernels launched with
// wrong params (tests/mutants.hpp). Each must FAIL the numerics check on the outputs it names, on
// every small bundled norm backward trace it applies to; the same kernels with the right params
// PASS (tests/gpu/test_replay_all.cpp).
#include <filesystem>

#include "impls/fusions/binding.hpp"
#include "impls/fusions/norm_bwd/params.hpp"
#include "impls/fusions/norm_bwd/tests/mutants.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/loader/trace_loader.hpp"

namespace replay::fusions {
extern const FusionSpec norm_bwd;
}

using namespace replay;
using namespace replay::test;

namespace {

const NormBwdMutant* g_mutant = nullptr;

Binding mutant_bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  Region m = r;
  auto p = std::any_cast<norm_bwd::Params>(r.params);
  g_mutant->mutate(p);
  m.params = p;
  return norm_bwd::bind(g, m, v, ctx);
}

// The small bundled norm backward traces (those with PyTorch's tensors), and the add-norm ones.
std::vector<std::string> small_traces() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(REPLAY_TRACES_DIR)) {
    const std::string n = e.path().stem().string();
    std::filesystem::path st = e.path();
    st.replace_extension(".safetensors");
    if (e.path().extension() == ".json" && n.find("_train_bwd_") != std::string::npos &&
        n.find("norm") != std::string::npos && std::filesystem::exists(st))
      out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  // The add-norm backwards captured from user code, with a dx epilogue add (traces/byog/).
  for (const char* n : {"byog/llama_add_rmsnorm_mincut_train_bwd_2x8x256",
                        "byog/llama_add_rmsnorm_default_train_bwd_2x8x256",
                        "byog/gpt2_add_layernorm_mincut_train_bwd_2x8x256",
                        "byog/gpt2_add_layernorm_default_train_bwd_2x8x256"})
    out.push_back(n);
  // The default partitioner's forms (float32 x beside bfloat16 dy; dw reading the saved
  // normalized value: bf16 in Llama's, fp32 in Gemma's), and the per-head norms (dy a transposed
  // view; one per saved-xhat dtype and partitioner).
  for (const char* n : {"byog/llama_rmsnorm_default_train_bwd_2x8x256",
                        "byog/gemma_rmsnorm_default_train_bwd_2x8x256",
                        "byog/olmo_layernorm_default_train_bwd_2x8x256",
                        "byog/qwen3_qk_norm_mincut_train_bwd_2x8x4x64",
                        "byog/qwen3_qk_norm_default_train_bwd_2x8x4x64",
                        "byog/gemma3_qk_norm_default_train_bwd_2x8x4x64",
                        "byog/t5_layernorm_mincut_train_bwd_2x8x256",
                        "byog/cohere_layernorm_mincut_train_bwd_2x8x256"})
    out.push_back(n);
  return out;
}

class NormBwdMutantKernel
    : public ::testing::TestWithParam<std::tuple<size_t, std::string, std::string>> {};

}  // namespace

TEST_P(NormBwdMutantKernel, Fails) {
  REQUIRE_GPU();
  auto [mi, trace, variant] = GetParam();
  const auto mutants = norm_bwd_mutants();
  const NormBwdMutant& mu = mutants[mi];
  g_mutant = &mu;
  Graph g = load_trace(trace_path(trace));
  FusionSpec spec = fusions::norm_bwd;
  spec.bind = mutant_bind;
  const FusionSpec* fusions[] = {&spec};
  Plan plan = make_plan(g, fusions);
  ASSERT_EQ(plan.regions.size(), 1u);
  const auto& p = std::any_cast<const norm_bwd::Params&>(plan.regions[0].params);
  if (!mu.applies(p)) GTEST_SKIP() << mu.name << " does not apply to " << trace;
  if (mu.name == "swapped_x_dy" && g.meta(p.x).dtype != g.meta(p.dy).dtype)
    GTEST_SKIP() << "x and dy dtypes differ in " << trace
                 << ": the swapped launch (a float32 dy) is not one the kernels take";
  const auto bounds = default_value_bounds(g);
  for (uint64_t seed : {41u, 42u}) {
    auto ref = run_reference(g, generate_inputs(g, seed));
    GpuProgram prog(g, plan, variant, ref, nullptr);
    ASSERT_EQ(prog.fallback_reason(0), "") << "the mutant must run the fused kernel";
    prog.poison_outputs(nullptr);
    prog.run_all(LaunchContext{});
    auto fails = [&](int v) {
      return !check_numerics(g.values[v].name, prog.download(v, nullptr), ref.at(v), bounds[v])
                  .pass();
    };
    if (mu.fails_dx) {
      EXPECT_TRUE(fails(p.dx)) << trace << " " << variant << " " << mu.name << ": dx passed";
    }
    if (mu.fails_dw && p.dw >= 0) {
      EXPECT_TRUE(fails(p.dw)) << trace << " " << variant << " " << mu.name << ": dw passed";
    }
    if (mu.fails_db && p.db >= 0) {
      EXPECT_TRUE(fails(p.db)) << trace << " " << variant << " " << mu.name << ": db passed";
    }
  }
  g_mutant = nullptr;
}

INSTANTIATE_TEST_SUITE_P(Kernels, NormBwdMutantKernel,
                         ::testing::Combine(::testing::Range<size_t>(0, norm_bwd_mutants().size()),
                                            ::testing::ValuesIn(small_traces()),
                                            ::testing::Values("baseline", "optimized")),
                         [](const auto& info) {
                           return test_name(norm_bwd_mutants()[std::get<0>(info.param)].name + "_" +
                                            std::get<1>(info.param) + "_" +
                                            std::get<2>(info.param));
                         });
