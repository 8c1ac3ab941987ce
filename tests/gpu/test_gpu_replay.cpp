// GPU tests: every variant of every bundled trace, and synthetic norms of other shapes and dtypes,
// against the float64 reference, with outputs poisoned before each run. Skip visibly without a
// CUDA device.
#include <gtest/gtest.h>

#include "../unit/test_util.hpp"
#include "harness/gpu_replay.hpp"
#include "harness/numerics.hpp"
#include "impls/reference/reference.hpp"
#include "workloads/trace_loader.hpp"

using namespace replay;
using namespace replay::test;

namespace {

#define REQUIRE_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "skipped: no CUDA device"

// Runs `variant` of g on `inputs` and checks every graph output; returns the failures' text.
void expect_variant_matches(const Graph& g, const std::string& variant, uint64_t seed) {
  Plan plan = make_plan(g);
  auto ref = run_reference(g, generate_inputs(g, seed));
  GpuProgram prog(g, plan, variant, ref);
  for (size_t r = 0; r < plan.regions.size(); ++r)
    EXPECT_EQ(prog.fallback_reason(static_cast<int>(r)), "") << g.name << " " << variant;
  prog.poison_outputs(nullptr);
  prog.run_all(nullptr);
  REPLAY_CUDA(cudaDeviceSynchronize());
  for (int v : g.outputs) {
    auto res = compare_tensors(g.values[v].name, prog.download(v), ref.at(v),
                               default_tolerance(g.meta(v).dtype));
    EXPECT_TRUE(res.pass()) << g.name << " " << variant << ": " << res.mismatches << "/"
                            << res.numel << " mismatched, " << res.nan_count << " NaN, max abs err "
                            << res.max_abs_err;
    EXPECT_LT(res.rel_l2, 5e-3) << g.name << " " << variant;
  }
}

class BundledTrace : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

}  // namespace

TEST_P(BundledTrace, VariantMatchesReference) {
  REQUIRE_GPU();
  auto [trace, variant] = GetParam();
  Graph g = load_trace(trace_path(trace));
  for (uint64_t seed : {1u, 2u}) expect_variant_matches(g, variant, seed);  // fresh inputs
}

INSTANTIATE_TEST_SUITE_P(AllVariants, BundledTrace,
                         ::testing::Combine(::testing::Values("nanogpt_layernorm_fwd_2x8x1600",
                                                              "nanogpt_layernorm_fwd_16x128x1600",
                                                              "nanogpt_layernorm_fwd_16x1024x1600",
                                                              "llama_rmsnorm_fwd_2x8x4096"),
                                            ::testing::Values("eager", "baseline", "optimized")));

TEST(GpuReplay, PoisonCatchesUnwrittenOutputs) {
  REQUIRE_GPU();
  Graph g = load_trace(trace_path("nanogpt_layernorm_fwd_2x8x1600"));
  auto ref = run_reference(g, generate_inputs(g, 3));
  GpuProgram prog(g, make_plan(g), "optimized", ref);
  prog.poison_outputs(nullptr);  // and never run: the check must fail
  REPLAY_CUDA(cudaDeviceSynchronize());
  auto res = compare_tensors("y", prog.download(g.outputs[0]), ref.at(g.outputs[0]),
                             default_tolerance(DType::kBFloat16));
  EXPECT_FALSE(res.pass());
  EXPECT_EQ(res.nan_count, res.numel);
}

TEST(GpuReplay, GoldenInputsMatchPyTorchOutputs) {
  REQUIRE_GPU();
  for (const char* name : {"nanogpt_layernorm_fwd_2x8x1600", "llama_rmsnorm_fwd_2x8x4096"}) {
    Graph g = load_trace(trace_path(name));
    auto golden = read_safetensors(g.golden->path);
    std::map<int, HostTensor> in;
    for (int v : g.inputs) in[v] = golden.at(g.values[v].name);
    for (const char* variant : {"eager", "baseline", "optimized"}) {
      GpuProgram prog(g, make_plan(g), variant, in);
      prog.poison_outputs(nullptr);
      prog.run_all(nullptr);
      REPLAY_CUDA(cudaDeviceSynchronize());
      int out = g.outputs[0];
      auto res =
          compare_tensors(g.values[out].name, prog.download(out), golden.at(g.values[out].name),
                          default_tolerance(g.meta(out).dtype));
      EXPECT_TRUE(res.pass()) << name << " " << variant << " vs PyTorch: " << res.mismatches;
    }
  }
}

// Shapes that exercise every code path of the optimized kernel: one warp per row with 1..8
// vectors per thread, 4 warps per row, rows not a multiple of the rows per block, and each dtype.
class SyntheticNorm : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, std::string>> {};

TEST_P(SyntheticNorm, AllVariantsMatchReference) {
  REQUIRE_GPU();
  auto [rows, cols, dtype] = GetParam();
  Graph g = parse_trace(layernorm_trace(rows, cols, dtype), "<synthetic>");
  for (const char* variant : {"eager", "baseline", "optimized"})
    expect_variant_matches(g, variant, 11);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SyntheticNorm,
    ::testing::Values(std::make_tuple(1, 8, "bfloat16"), std::make_tuple(7, 256, "bfloat16"),
                      std::make_tuple(333, 768, "bfloat16"),
                      std::make_tuple(1001, 2048, "bfloat16"),
                      std::make_tuple(129, 4096, "bfloat16"), std::make_tuple(65, 8192, "bfloat16"),
                      std::make_tuple(77, 1600, "float16"), std::make_tuple(50, 1024, "float32"),
                      std::make_tuple(19, 4096, "float32")));

// Every epilogue shape: the compiled ones (affine, scale, none) and the generic run-time path.
class NormEpilogue : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(NormEpilogue, AllVariantsMatchReference) {
  REQUIRE_GPU();
  auto [epilogue, dtype] = GetParam();
  Graph g = parse_trace(layernorm_trace(97, 1600, dtype, epilogue), "<synthetic>");
  ASSERT_EQ(make_plan(g).regions.size(), 1u) << epilogue;
  for (const char* variant : {"eager", "baseline", "optimized"})
    expect_variant_matches(g, variant, 13);
}

INSTANTIATE_TEST_SUITE_P(Shapes, NormEpilogue,
                         ::testing::Combine(::testing::Values("affine", "scale", "none", "mixed"),
                                            ::testing::Values("bfloat16", "float16", "float32")));

TEST(GpuReplay, TooLongRowFallsBackWithAReason) {
  REQUIRE_GPU();
  Graph g = parse_trace(layernorm_trace(4, 16384, "bfloat16"), "<long-row>");
  Plan plan = make_plan(g);
  auto ref = run_reference(g, generate_inputs(g, 5));
  GpuProgram prog(g, plan, "optimized", ref);
  EXPECT_NE(prog.fallback_reason(0).find("longer than"), std::string::npos);
  prog.poison_outputs(nullptr);
  prog.run_all(nullptr);  // the region's nodes ran eagerly instead
  REPLAY_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(compare_tensors("y", prog.download(g.outputs[0]), ref.at(g.outputs[0]),
                              default_tolerance(DType::kBFloat16))
                  .pass());
}
