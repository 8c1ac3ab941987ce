// layernorm_fwd on the GPU: synthetic norms covering every kernel geometry, dtype and epilogue
// shape, the residual add prologue (synthetic and traces/byog/ add-norms), and the eager fallback
// with its reason. The bundled traces run in tests/gpu.
#include "impls/fusions/layernorm_fwd/params.hpp"
#include "impls/fusions/layernorm_fwd/tests/synthetic.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "workloads/loader/safetensors.hpp"
#include "workloads/loader/trace_loader.hpp"

using namespace replay;
using namespace replay::test;

// Shapes that exercise every code path of the optimized kernel: 16 threads per row (up to 64
// vectors, one block per 8 rows), one warp per row with 1..8 vectors per thread, 4 warps per row,
// rows not a multiple of the rows per block, each dtype, and enough rows that every persistent
// group goes round its ring of rows in flight more than once (3001 x 4096: 4 warps x 4 vectors, 2
// rows in flight; 4099 x 384 float32: a warp x 3 vectors, 2 rows) or that the short-row grid has
// thousands of blocks (20011 x 384: 16 x 3 vectors; 9001 x 512 float16: 16 x 4; 5003 x 128: 16 x
// 1).
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
                      std::make_tuple(19, 4096, "float32"), std::make_tuple(20011, 384, "bfloat16"),
                      std::make_tuple(3001, 4096, "bfloat16"),
                      std::make_tuple(9001, 512, "float16"), std::make_tuple(5003, 128, "bfloat16"),
                      std::make_tuple(4099, 384, "float32")));

// Every epilogue shape: the compiled ones (affine, scale, none) and the generic run-time path.
class NormEpilogue : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(NormEpilogue, AllVariantsMatchReference) {
  REQUIRE_GPU();
  auto [epilogue, dtype] = GetParam();
  Graph g = parse_trace(layernorm_trace(97, 1600, dtype, epilogue), "<synthetic>");
  ASSERT_EQ(make_plan(g, fusion_registry()).regions.size(), 1u) << epilogue;
  for (const char* variant : {"eager", "baseline", "optimized"})
    expect_variant_matches(g, variant, 13);
}

INSTANTIATE_TEST_SUITE_P(Shapes, NormEpilogue,
                         ::testing::Combine(::testing::Values("affine", "scale", "none", "mixed"),
                                            ::testing::Values("bfloat16", "float16", "float32")));

TEST(LayerNormFwdGpu, TooLongRowFallsBackWithAReason) {
  REQUIRE_GPU();
  Graph g = parse_trace(layernorm_trace(4, 16384, "bfloat16"), "<long-row>");
  Plan plan = make_plan(g, fusion_registry());
  auto ref = run_reference(g, generate_inputs(g, 5));
  GpuProgram prog(g, plan, "optimized", ref, nullptr);
  EXPECT_NE(prog.fallback_reason(0).find("longer than"), std::string::npos);
  prog.poison_outputs(nullptr);
  prog.run_all(LaunchContext{});  // the region's nodes ran eagerly instead
  REPLAY_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(check_numerics("y", prog.download(g.outputs[0], nullptr), ref.at(g.outputs[0]),
                             default_value_bounds(g)[g.outputs[0]])
                  .pass());
}

// A variance correction (var_mean(correction=1)) runs fused and matches the reference.
TEST(LayerNormFwdGpu, VarianceCorrectionRunsFused) {
  REQUIRE_GPU();
  nlohmann::json t = layernorm_trace(129, 1600, "bfloat16");
  for (auto& n : t["nodes"])
    if (n["id"] == "var_mean") n["kwargs"]["correction"] = 1;
  Graph g = parse_trace(t, "<unbiased>");
  for (const char* variant : {"eager", "baseline", "optimized"})
    expect_variant_matches(g, variant, 17);
}

// Training forwards: the region also writes what the backward saves (mean, rstd; the upcast x in
// "stats_x32"); every graph output, those included, is checked against the reference, fused.
class TrainingLayerNorm : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(TrainingLayerNorm, SavedStatisticsMatchReference) {
  REQUIRE_GPU();
  auto [saved, dtype] = GetParam();
  // Each geometry of the optimized kernel: one warp per row, four (the longest row it holds).
  const int64_t longest = dtype == "float32" ? 4096 : 8192;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{333, 1600}, {65, longest}, {7, 256}}) {
    Graph g = parse_trace(layernorm_trace(rows, cols, dtype, "affine", saved), "<training>");
    ASSERT_EQ(make_plan(g, fusion_registry()).regions.size(), 1u) << saved;
    for (const char* variant : {"eager", "baseline", "optimized"})
      expect_variant_matches(g, variant, 19);
  }
}

INSTANTIATE_TEST_SUITE_P(Saved, TrainingLayerNorm,
                         ::testing::Combine(::testing::Values("stats", "stats_x32", "stats_views"),
                                            ::testing::Values("bfloat16", "float16", "float32")),
                         [](const auto& info) {
                           return test_name(std::get<0>(info.param) + "_" +
                                            std::get<1>(info.param));
                         });

// RMSNorm as model code writes it (Meta, Hugging Face, litgpt, unit offset in bf16 and fp32, eps
// as a tensor, the upcast x exported), each returning rstd.
class TrainingRMSNorm : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(TrainingRMSNorm, AllVariantsMatchReference) {
  REQUIRE_GPU();
  auto [form, dtype] = GetParam();
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{129, 4096}, {1001, 2048}, {3, 64}}) {
    Graph g = parse_trace(rmsnorm_trace(rows, cols, dtype, form), "<rmsnorm>");
    ASSERT_EQ(make_plan(g, fusion_registry()).regions.size(), 1u) << form;
    for (const char* variant : {"eager", "baseline", "optimized"})
      expect_variant_matches(g, variant, 23);
  }
}

INSTANTIATE_TEST_SUITE_P(Forms, TrainingRMSNorm,
                         ::testing::Combine(::testing::Values("meta", "hf", "litgpt", "unit_offset",
                                                              "unit_offset_f32", "eps_tensor",
                                                              "x32"),
                                            ::testing::Values("bfloat16", "float16")),
                         [](const auto& info) {
                           return test_name(std::get<0>(info.param) + "_" +
                                            std::get<1>(info.param));
                         });

// Residual add prologue (issue 24): h = x + residual before the norm, h returned or used by the
// norm alone, each kernel geometry (one warp per row, four, the longest row) and dtype; every
// graph output (y, h, the saved statistics) against the reference, fused.
class ResidualNorm : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(ResidualNorm, AllVariantsMatchReference) {
  REQUIRE_GPU();
  auto [form, dtype] = GetParam();
  const int64_t longest = dtype == "float32" ? 4096 : 8192;
  for (auto [rows, cols] :
       {std::pair<int64_t, int64_t>{333, 1600}, {65, longest}, {7, 256}, {1001, 2048}}) {
    for (bool return_h : {true, false}) {
      nlohmann::json t = form == "layernorm" ? layernorm_trace(rows, cols, dtype, "affine", "stats")
                                             : rmsnorm_trace(rows, cols, dtype, form);
      Graph g = parse_trace(with_residual(t, return_h), "<residual>");
      Plan plan = make_plan(g, fusion_registry());
      ASSERT_EQ(plan.regions.size(), 1u) << form;
      ASSERT_GE(std::any_cast<const layernorm_fwd::Params&>(plan.regions[0].params).residual, 0);
      for (const char* variant : {"eager", "baseline", "optimized"})
        expect_variant_matches(g, variant, 29);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Forms, ResidualNorm,
    ::testing::Values(std::make_tuple("layernorm", "bfloat16"),
                      std::make_tuple("layernorm", "float16"),
                      std::make_tuple("layernorm", "float32"), std::make_tuple("meta", "bfloat16"),
                      std::make_tuple("hf", "float16"), std::make_tuple("litgpt", "bfloat16"),
                      std::make_tuple("x32", "bfloat16")),
    [](const auto& info) {
      return test_name(std::get<0>(info.param) + "_" + std::get<1>(info.param));
    });

// The norm forwards captured through torch.compile from user code (traces/byog/): both variants
// against the reference on fresh seeds, fused, every output checked (y, h and its alias, the saved
// statistics and intermediates); the small shapes also on PyTorch's own tensors.
namespace {
void expect_byog_forward(const std::string& name) {
  Graph g = load_trace(trace_path(name));
  Plan plan = make_plan(g, fusion_registry());
  ASSERT_EQ(plan.regions.size(), 1u);
  const uint64_t seeds = g.golden ? 5 : 1;  // the realistic shapes' reference takes a while
  for (uint64_t seed = 1; seed <= seeds; ++seed)
    for (const char* variant : {"baseline", "optimized"}) expect_variant_matches(g, variant, seed);
  if (!g.golden) return;
  auto golden = read_safetensors(g.golden->path);
  std::map<int, HostTensor> in;
  for (int v : g.inputs) in[v] = golden.at(g.values[v].name);
  const auto bounds = default_value_bounds(g);
  auto ref = run_reference(g, in);  // the addends' magnitudes, where an output is a sum
  for (const char* variant : {"baseline", "optimized"}) {
    GpuProgram prog(g, plan, variant, in, nullptr);
    expect_fused_where_available(plan, prog, variant, g.name);
    prog.poison_outputs(nullptr);
    prog.run_all(LaunchContext{});
    REPLAY_CUDA(cudaDeviceSynchronize());
    for (int v : g.outputs) {
      auto res = check_value(g, v, prog.download(v, nullptr), golden.at(g.values[v].name), ref,
                             output_bounds(g, plan, bounds, v));
      EXPECT_TRUE(res.pass()) << variant << " vs PyTorch: " << res.failure();
    }
  }
}
}  // namespace

// The add-norms, both partitioners.
class ByogAddNormFwd : public ::testing::TestWithParam<std::string> {};

TEST_P(ByogAddNormFwd, BothVariantsMatchReference) {
  REQUIRE_GPU();
  {
    Graph g = load_trace(trace_path(GetParam()));
    Plan plan = make_plan(g, fusion_registry());
    ASSERT_EQ(plan.regions.size(), 1u);
    ASSERT_GE(std::any_cast<const layernorm_fwd::Params&>(plan.regions[0].params).residual, 0);
  }
  expect_byog_forward(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Traces, ByogAddNormFwd,
                         ::testing::Values("byog/llama_add_rmsnorm_mincut_train_fwd_2x8x256",
                                           "byog/llama_add_rmsnorm_default_train_fwd_2x8x256",
                                           "byog/gpt2_add_layernorm_mincut_train_fwd_2x8x256",
                                           "byog/gpt2_add_layernorm_default_train_fwd_2x8x256",
                                           "byog/llama_add_rmsnorm_mincut_train_fwd_2x4096x4096",
                                           "byog/gpt2_add_layernorm_default_train_fwd_2x4096x4096"),
                         [](const auto& info) { return test_name(info.param); });

// The default partitioner's forwards that save intermediates (the fp32 normalized value beside the
// bf16 y, Gemma's fp32 1 + w, Cohere's x - mean and fp32 weight): every one is written by both
// variants, in its own dtype.
class ByogSavedIntermediatesFwd : public ::testing::TestWithParam<std::string> {};

TEST_P(ByogSavedIntermediatesFwd, BothVariantsMatchReference) {
  REQUIRE_GPU();
  {
    Graph g = load_trace(trace_path(GetParam()));
    Plan plan = make_plan(g, fusion_registry());
    ASSERT_EQ(plan.regions.size(), 1u);
    ASSERT_FALSE(
        std::any_cast<const layernorm_fwd::Params&>(plan.regions[0].params).row_exports.empty());
  }
  expect_byog_forward(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Traces, ByogSavedIntermediatesFwd,
                         ::testing::Values("byog/gemma_rmsnorm_default_train_fwd_2x8x256",
                                           "byog/gemma2_rmsnorm_default_train_fwd_2x8x256",
                                           "byog/gemma3_rmsnorm_default_train_fwd_2x8x256",
                                           "byog/gemma3_qk_norm_default_train_fwd_2x8x4x64",
                                           "byog/olmo2_rmsnorm_default_train_fwd_2x8x256",
                                           "byog/cohere_layernorm_default_train_fwd_2x8x256",
                                           "byog/llama_rmsnorm_default_train_fwd_2x8x256",
                                           "byog/gemma_rmsnorm_default_train_fwd_2x4096x4096",
                                           "byog/cohere_layernorm_default_train_fwd_2x4096x4096"),
                         [](const auto& info) { return test_name(info.param); });
