// GPU tests shared by every fusion (ggml's test-backend-ops loop): every bundled trace × every
// GPU variant of the fusions its plan uses, against the float64 reference on fresh inputs, with
// outputs poisoned before each run; PyTorch's golden outputs; poison catches unwritten outputs.
// Skip visibly without a CUDA device.
#include <filesystem>

#include "gpu_test_util.hpp"
#include "harness/replay/variants.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/loader/safetensors.hpp"
#include "workloads/loader/trace_loader.hpp"

using namespace replay;
using namespace replay::test;

namespace {

struct Case {
  std::string trace, variant;
};

// Every (bundled trace, GPU variant) pair, found at test registration.
std::vector<Case> bundled_cases() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(REPLAY_TRACES_DIR))
    if (e.path().extension() == ".json") files.push_back(e.path().stem().string());
  std::sort(files.begin(), files.end());
  std::vector<Case> out;
  for (const auto& f : files) {
    Graph g = load_trace(trace_path(f));
    for (const auto& v : plan_variants(make_plan(g, fusion_registry())))
      if (v.is_gpu()) out.push_back({f, v.name});
  }
  return out;
}

class BundledTrace : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(BundledTrace, VariantMatchesReference) {
  REQUIRE_GPU();
  Graph g = load_trace(trace_path(GetParam().trace));
  for (uint64_t seed : {1u, 2u}) expect_variant_matches(g, GetParam().variant, seed);
}

INSTANTIATE_TEST_SUITE_P(AllVariants, BundledTrace, ::testing::ValuesIn(bundled_cases()),
                         [](const auto& info) {
                           return info.param.trace + "_" + info.param.variant;
                         });

TEST(GpuReplay, PoisonCatchesUnwrittenOutputs) {
  REQUIRE_GPU();
  Graph g = load_trace(trace_path("nanogpt_layernorm_fwd_2x8x1600"));
  auto ref = run_reference(g, generate_inputs(g, 3));
  GpuProgram prog(g, make_plan(g, fusion_registry()), "optimized", ref, nullptr);
  prog.poison_outputs(nullptr);  // and never run: the check must fail
  REPLAY_CUDA(cudaDeviceSynchronize());
  auto res = check_numerics("y", prog.download(g.outputs[0], nullptr), ref.at(g.outputs[0]),
                            default_value_bounds(g)[g.outputs[0]]);
  EXPECT_FALSE(res.pass());
  EXPECT_EQ(res.nonfinite_mismatch, res.numel);
}

TEST(GpuReplay, GoldenInputsMatchPyTorchOutputs) {
  REQUIRE_GPU();
  for (const char* name : {"nanogpt_layernorm_fwd_2x8x1600", "llama_rmsnorm_fwd_2x8x4096"}) {
    Graph g = load_trace(trace_path(name));
    Plan plan = make_plan(g, fusion_registry());
    auto golden = read_safetensors(g.golden->path);
    std::map<int, HostTensor> in;
    for (int v : g.inputs) in[v] = golden.at(g.values[v].name);
    for (const auto& variant : plan_variants(plan)) {
      if (!variant.is_gpu()) continue;
      GpuProgram prog(g, plan, variant.name, in, nullptr);
      prog.poison_outputs(nullptr);
      prog.run_all(LaunchContext{});
      REPLAY_CUDA(cudaDeviceSynchronize());
      int out = g.outputs[0];
      auto res = check_numerics(g.values[out].name, prog.download(out, nullptr),
                                golden.at(g.values[out].name), default_value_bounds(g)[out]);
      EXPECT_TRUE(res.pass()) << name << " " << variant.name << " vs PyTorch: " << res.failure();
    }
  }
}
