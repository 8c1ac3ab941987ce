// norm_bwd without affine parameters (dx only) on the GPU: both variants against the float64
// reference on synthetic LayerNorm / RMSNorm backwards without weight (every kernel geometry,
// each dtype, every statistics form), on OLMo's captured LayerNorm backward (PyTorch's golden
// outputs at 2x8x256, generated inputs at 2x4096x4096; the default partitioner's float32 x falls
// back with its reason), the two variants bit-identical (the same row kernel), and the mutants
// (tests/mutants.hpp) that must make dx FAIL.
#include "impls/fusions/binding.hpp"
#include "impls/fusions/norm_bwd/params.hpp"
#include "impls/fusions/norm_bwd/tests/edited_bind.hpp"
#include "impls/fusions/norm_bwd/tests/mutants.hpp"
#include "impls/fusions/norm_bwd/tests/synthetic.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "workloads/loader/safetensors.hpp"
#include "workloads/loader/trace_loader.hpp"

using namespace replay;
using namespace replay::test;

namespace replay::fusions {
extern const FusionSpec norm_bwd;
}

namespace {

// Runs `variant` of g (norm_bwd only, params edited by `edit`) on `inputs`; returns dx and
// whether it passes the harness's check against `want`. The region must be dx only and fused.
std::pair<HostTensor, bool> run_dx(const Graph& g, const std::string& variant,
                                   const std::map<int, HostTensor>& inputs,
                                   const std::map<int, HostTensor>& want,
                                   std::function<void(norm_bwd::Params&)> edit = nullptr) {
  g_edit = std::move(edit);
  FusionSpec spec = fusions::norm_bwd;
  spec.bind = edited_bind;
  const FusionSpec* fusions[] = {&spec};
  Plan plan = make_plan(g, fusions);
  EXPECT_EQ(plan.regions.size(), 1u) << g.name;
  if (plan.regions.size() != 1u) return {};
  const auto& p = std::any_cast<const norm_bwd::Params&>(plan.regions[0].params);
  EXPECT_LT(p.dw, 0) << g.name << ": not a dx-only region";
  GpuProgram prog(g, plan, variant, inputs, nullptr);
  EXPECT_EQ(prog.fallback_reason(0), "") << g.name << " " << variant;
  prog.poison_outputs(nullptr);
  prog.run_all(LaunchContext{});
  REPLAY_CUDA(cudaDeviceSynchronize());
  g_edit = nullptr;
  EXPECT_EQ(g.outputs.size(), 1u);
  const int v = g.outputs[0];
  HostTensor dx = prog.download(v, nullptr);
  const auto bounds = default_value_bounds(g);
  auto res = check_numerics(g.values[v].name, dx, want.at(v), output_bounds(g, plan, bounds, v));
  return {dx, res.pass()};
}

void expect_passes(const Graph& g, uint64_t seed) {
  auto ref = run_reference(g, generate_inputs(g, seed));
  HostTensor first;
  for (const char* variant : {"baseline", "optimized"}) {
    auto [dx, ok] = run_dx(g, variant, ref, ref);
    EXPECT_TRUE(ok) << g.name << " " << variant << " seed " << seed;
    // Both variants are the same row kernel over the same grid: bit-identical dx.
    if (first.data.empty())
      first = dx;
    else
      EXPECT_EQ(dx.data, first.data) << g.name << ": baseline and optimized differ";
  }
}

struct Shape {
  int64_t rows, cols;
  std::string dtype;
  bool layernorm;
};

class DxOnlyShapesGpu : public ::testing::TestWithParam<Shape> {};

}  // namespace

// Every geometry: C = 64 (8 threads per row) up to 8192 (512 threads per row), rows not a
// multiple of the rows per block iteration, each dtype.
TEST_P(DxOnlyShapesGpu, BothVariantsMatchReference) {
  REQUIRE_GPU();
  const Shape& s = GetParam();
  NormBwdForm f;
  f.affine = false;
  f.lead = {s.rows};
  f.cols = s.cols;
  f.dtype = s.dtype;
  f.layernorm = s.layernorm;
  expect_passes(parse_trace(norm_bwd_trace(f), "<dx-only shape>"), 3);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DxOnlyShapesGpu,
    ::testing::Values(Shape{7, 64, "bfloat16", true}, Shape{333, 384, "bfloat16", true},
                      Shape{333, 384, "bfloat16", false}, Shape{2048, 1600, "bfloat16", true},
                      Shape{65, 4096, "bfloat16", false}, Shape{65, 8192, "bfloat16", true},
                      Shape{77, 1600, "float16", true}, Shape{50, 1024, "float32", false},
                      Shape{9, 8192, "float32", true}),
    [](const auto& info) {
      const Shape& s = info.param;
      return std::to_string(s.rows) + "x" + std::to_string(s.cols) + "_" + s.dtype +
             (s.layernorm ? "_ln" : "_rms");
    });

// Every statistics form and the mean form of dx.
TEST(DxOnlyGpu, FormsMatchReference) {
  REQUIRE_GPU();
  const std::vector<std::function<void(NormBwdForm&)>> forms = {
      [](auto& f) { f.dx_form = "mean"; },
      [](auto& f) { f.stats = "recompute"; },
      [](auto& f) { f.stats = "recompute_eps_tensor"; },
      [](auto& f) {
        f.stats = "normalized";
        f.dtype = "float32";
      },
      [](auto& f) {
        f.layernorm = false;
        f.dx_form = "mean";
      },
      [](auto& f) {
        f.layernorm = false;
        f.stats = "recompute";
      },
      [](auto& f) {
        f.layernorm = false;
        f.stats = "recompute_eps_tensor";
        f.dtype = "float16";
      },
      [](auto& f) {
        f.layernorm = false;
        f.stats = "normalized";
        f.dtype = "float32";
      },
  };
  for (const auto& set : forms) {
    NormBwdForm f;
    f.affine = false;
    f.lead = {16, 37};
    set(f);
    Graph g = parse_trace(norm_bwd_trace(f), "<dx-only form>");
    SCOPED_TRACE(g.name);
    for (uint64_t seed : {5u, 6u}) expect_passes(g, seed);
  }
}

// OLMo captured with `partitioner` ("mincut": bf16 x saved; "default": x saved up-cast to
// float32 beside bf16 dy and dx, the kernels' mixed form): PyTorch's inputs and outputs at
// 2x8x256, generated inputs at 2x4096x4096, both variants fused.
namespace {
void expect_olmo_matches_pytorch_and_reference(const std::string& partitioner) {
  const std::string stem = "byog/olmo_layernorm_" + partitioner + "_train_bwd_";
  {
    Graph g = load_trace(trace_path(stem + "2x8x256"));
    ASSERT_TRUE(g.golden.has_value());
    auto golden = read_safetensors(g.golden->path);
    std::map<int, HostTensor> in, want;
    for (int v : g.inputs) in[v] = golden.at(g.values[v].name);
    for (int v : g.outputs) want[v] = golden.at(g.values[v].name);
    for (const char* variant : {"baseline", "optimized"})
      EXPECT_TRUE(run_dx(g, variant, in, want).second) << variant << " vs PyTorch";
  }
  Graph g = load_trace(trace_path(stem + "2x4096x4096"));
  for (uint64_t seed : {1u, 2u}) expect_passes(g, seed);
  for (const char* variant : {"baseline", "optimized"})
    expect_variant_matches(g, variant, 3);  // through the registry
}
}  // namespace

TEST(DxOnlyGpu, OlmoMincutMatchesPyTorchAndReference) {
  REQUIRE_GPU();
  expect_olmo_matches_pytorch_and_reference("mincut");
}

TEST(DxOnlyGpu, OlmoDefaultMatchesPyTorchAndReference) {
  REQUIRE_GPU();
  expect_olmo_matches_pytorch_and_reference("default");
}

// Deliberately wrong launches of the real kernels: every mutant that applies to a dx-only region
// and names dx makes dx FAIL, in both variants (the unmutated launch passes).
TEST(DxOnlyGpu, EveryMutantFails) {
  REQUIRE_GPU();
  std::vector<Graph> graphs;
  graphs.push_back(load_trace(trace_path("byog/olmo_layernorm_mincut_train_bwd_2x8x256")));
  graphs.push_back(load_trace(trace_path("byog/olmo_layernorm_default_train_bwd_2x8x256")));
  NormBwdForm rms;
  rms.affine = false;
  rms.layernorm = false;
  rms.lead = {16, 37};
  graphs.push_back(parse_trace(norm_bwd_trace(rms), "<rms>"));
  rms.stats = "recompute";
  graphs.push_back(parse_trace(norm_bwd_trace(rms), "<rms-recompute>"));
  int ran = 0;
  bool dropped_s1 = false;
  for (const Graph& g : graphs) {
    const FusionSpec* only[] = {&fusions::norm_bwd};
    const auto plan = make_plan(g, only);
    ASSERT_EQ(plan.regions.size(), 1u);
    const auto& p = std::any_cast<const norm_bwd::Params&>(plan.regions[0].params);
    for (uint64_t seed : {41u, 42u}) {
      auto ref = run_reference(g, generate_inputs(g, seed));
      for (const char* variant : {"baseline", "optimized"}) {
        ASSERT_TRUE(run_dx(g, variant, ref, ref).second) << g.name << " " << variant;
        for (const auto& mu : norm_bwd_mutants()) {
          if (!mu.applies(p) || !mu.fails_dx) continue;
          // A float32 x beside a bfloat16 dy swapped is a float32 dy: not a launch the kernels
          // take.
          if (mu.name == "swapped_x_dy" && g.meta(p.x).dtype != g.meta(p.dy).dtype) continue;
          ++ran;
          dropped_s1 |= mu.name == "dx_only_dropped_s1";
          EXPECT_FALSE(run_dx(g, variant, ref, ref, mu.mutate).second)
              << g.name << " " << variant << " " << mu.name << ": dx passed";
        }
      }
    }
  }
  EXPECT_GE(ran, 8);
  EXPECT_TRUE(dropped_s1);
}
