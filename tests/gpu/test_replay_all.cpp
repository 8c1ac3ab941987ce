// GPU tests shared by every fusion (ggml's test-backend-ops loop): every bundled trace × every
// GPU variant of the fusions its plan uses, against the float64 reference on fresh inputs, with
// outputs poisoned before each run; PyTorch's golden outputs; poison catches unwritten outputs.
// Skip visibly without a CUDA device.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "gpu_test_util.hpp"
#include "harness/measure/cupti_tracer.hpp"
#include "harness/measure/timing.hpp"
#include "harness/replay/variants.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/loader/safetensors.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/ops/matmul.hpp"
#include "workloads/ops/op.hpp"

using namespace replay;
using namespace replay::test;

namespace {

// Every bundled trace (and the small byog captures), found at test registration.
std::vector<std::string> bundled_traces() {
  return bundled_trace_names();
}

// Captured graphs whose region runs eagerly in the fused variants, and why: the gaps this suite
// tracks (a trace that starts to fuse fails here until it leaves the list).
const std::map<std::string, std::string> kKnownFallbacks = {
    // None at present: every region of the bundled norm captures runs fused (T5's and Cohere's
    // default-partition backwards have no region: norm_bwd declines them with its reason).
};

// Every region runs fused, or the trace is a known gap that falls back for its stated reason.
void expect_fused_or_known(const Plan& plan, const GpuProgram& prog, const std::string& variant,
                           const std::string& trace) {
  auto known = kKnownFallbacks.find(trace);
  if (known == kKnownFallbacks.end())
    return expect_fused_where_available(plan, prog, variant, trace);
  bool fell_back = false, has_variant = false;
  for (size_t r = 0; r < plan.regions.size(); ++r) {
    has_variant |= plan.regions[r].fusion->find_variant(variant) != nullptr;
    const std::string why = prog.fallback_reason(static_cast<int>(r));
    if (why.empty()) continue;
    fell_back = true;
    EXPECT_NE(why.find(known->second), std::string::npos) << trace << " " << variant << ": " << why;
  }
  EXPECT_TRUE(fell_back || !has_variant)
      << trace << " " << variant << " fuses now: take it off kKnownFallbacks";
}

class BundledTrace : public ::testing::TestWithParam<std::string> {};

}  // namespace

// Every GPU variant of the fusions a trace's plan uses, against the reference on 20 fresh seeds
// (generated inputs, also for traces that carry PyTorch's), outputs poisoned before each run.
// Every variant must pass every seed, with one allowance: an output downstream of a bfloat16 /
// float16 GEMM may miss its bounds on up to 3 of the 20 seeds. On an H200
// (2026-11-26) 1 to 3 of 20 seeds exceed those bounds in every variant, eager included, on GEMM
// chains (MLP backwards, linear + GELU, decoder layers): the bounds model under-predicts their
// rounding flips (harness/report/NUMERICS.md). Outputs not downstream of such a GEMM, and any
// NaN/Inf mismatch anywhere, get no allowance; a wrong kernel, a dropped bias or a transposed
// weight fails nearly every seed (the mutation tests).
TEST_P(BundledTrace, EveryVariantPassesOnTwentyFreshSeeds) {
  REQUIRE_GPU();
  constexpr int kSeeds = 20, kGemmSeedsToPass = 17;
  Graph g = load_trace(trace_path(GetParam()), cut_options());
  Plan plan = make_plan(g, fusion_registry());
  const auto bounds = default_value_bounds(g);
  std::vector<bool> after_gemm(g.values.size(), false);  // downstream of a 16-bit GEMM
  for (const Node& n : g.nodes) {
    const std::string cls = matmul_class(g, n);
    bool d = cls == "bf16" || cls == "fp16";
    for (const auto& o : n.operands) d = d || (o.is_tensor() && after_gemm[o.value]);
    for (int v : n.outputs) after_gemm[v] = d;
  }
  std::map<std::string, int> passed;
  std::map<std::string, std::string> failures, hard;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    auto ref = run_reference(g, generate_inputs(g, seed));
    for (const auto& variant : plan_variants(plan)) {
      if (!variant.is_gpu()) continue;
      GpuProgram prog(g, plan, variant.name, ref, nullptr);
      expect_fused_or_known(plan, prog, variant.name, GetParam());
      prog.poison_outputs(nullptr);
      prog.run_all(LaunchContext{});
      bool all = true;
      for (int v : g.outputs) {
        auto res = check_value(g, v, prog.download(v, nullptr), ref.at(v), ref,
                               output_bounds(g, plan, bounds, v));
        if (res.pass()) continue;
        all = false;
        const std::string line =
            "\n  seed " + std::to_string(seed) + " " + g.values.at(v).name + ": " + res.failure();
        failures[variant.name] += line;
        if (!after_gemm[v] || res.nonfinite_mismatch > 0) hard[variant.name] += line;
      }
      passed[variant.name] += all;
    }
  }
  for (const auto& [variant, n] : passed) {
    EXPECT_TRUE(hard[variant].empty())
        << variant << " failed outside the GEMM-chain allowance:" << hard[variant];
    EXPECT_GE(n, kGemmSeedsToPass)
        << variant << " passed " << n << " of " << kSeeds << " seeds" << failures[variant];
    if (n < kSeeds)
      std::printf("note: %s %s passed %d of %d seeds (outputs downstream of a 16-bit GEMM):%s\n",
                  GetParam().c_str(), variant.c_str(), n, kSeeds, failures[variant].c_str());
  }
}

// The CUDA-graph timing mode replays a graph captured from the program: every variant of every
// bundled trace must capture, and the captured graph, launched on outputs poisoned after the
// capture, must write exactly what the program writes when it runs directly (every kernel is
// deterministic: no result depends on block order). A program that stages data on the host or
// allocates while it enqueues would fail here rather than be timed as something else. The small
// traces (those with golden tensors) keep this quick; a realistic trace of several families (the
// split reductions, GEMMs and float8 scaling that only large shapes take) is in the list below.
TEST_P(BundledTrace, CapturedCudaGraphWritesWhatTheProgramWrites) {
  REQUIRE_GPU();
  static const std::set<std::string> kRealistic = {
      "nanogpt_layernorm_train_bwd_16x1024x1600",
      "float8_linear_rowwise_train_fwd_2x4096x4096x4096", "litgpt_rope_train_bwd_2x4096x40x40x128"};
  Graph g = load_trace(trace_path(GetParam()), cut_options());
  if (!g.golden && !kRealistic.count(GetParam()))
    GTEST_SKIP() << "realistic shape: its float64 reference takes too long for this test";
  Plan plan = make_plan(g, fusion_registry());
  auto ref = run_reference(g, generate_inputs(g, 5));
  cudaStream_t cs = nullptr;
  REPLAY_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
  for (const auto& variant : plan_variants(plan)) {
    if (!variant.is_gpu()) continue;
    GpuProgram prog(g, plan, variant.name, ref, nullptr);
    LaunchContext c;
    c.stream = cs;
    prog.run_all(c);  // also the warm-up: one-time setup (cuBLASLt algorithms) outside the capture
    std::map<int, HostTensor> direct;
    for (int v : g.outputs) direct[v] = prog.download(v, cs);
    std::unique_ptr<CapturedGraph> graph;
    try {
      graph = std::make_unique<CapturedGraph>([&](cudaStream_t) { prog.run_all(c); }, cs);
    } catch (const std::runtime_error& e) {
      ADD_FAILURE() << g.name << " " << variant.name << ": " << e.what();
      continue;
    }
    prog.poison_outputs(cs);
    graph->launch(cs);
    for (int v : g.outputs) {
      const HostTensor out = prog.download(v, cs);
      size_t diff = 0, first = 0;
      for (size_t i = 0; i < out.data.size(); ++i) {
        const double a = out.data[i], b = direct[v].data[i];
        if (!(a == b || (std::isnan(a) && std::isnan(b))) && diff++ == 0) first = i;
      }
      EXPECT_EQ(diff, 0u) << variant.name << " " << g.values[v].name << ": graph differs from the "
                          << "direct run at " << diff << " elements, first at " << first;
    }
  }
  REPLAY_CUDA(cudaStreamDestroy(cs));
}

// Named by trace, so --gtest_filter can pick shapes (e.g. -*2x4096x*).
INSTANTIATE_TEST_SUITE_P(Traces, BundledTrace, ::testing::ValuesIn(bundled_traces()),
                         [](const auto& info) { return test_name(info.param); });

// The steps one by one (what the per-step host enqueue times) are the whole replay: labelled by the
// node ids of the ops that launch (views launch nothing), and run in order they write what
// run_all writes.
TEST(GpuReplay, StepsOneByOneAreTheWholeReplay) {
  REQUIRE_GPU();
  Graph g = load_trace(trace_path("nanogpt_layernorm_train_bwd_2x8x1600"));
  Plan plan = make_plan(g, fusion_registry());
  auto ref = run_reference(g, generate_inputs(g, 4));
  GpuProgram prog(g, plan, "eager", ref, nullptr);
  std::vector<std::string> launching;
  for (const Node& n : g.nodes)
    if (op_def(n.op).eager.kernel != EagerLowering::kAlias) launching.push_back(n.id);
  ASSERT_EQ(prog.num_steps(), launching.size());
  for (size_t i = 0; i < prog.num_steps(); ++i) EXPECT_EQ(prog.step_label(i), launching[i]);
  prog.run_all(LaunchContext{});
  std::map<int, HostTensor> direct;
  for (int v : g.outputs) direct[v] = prog.download(v, nullptr);
  prog.poison_outputs(nullptr);
  for (size_t i = 0; i < prog.num_steps(); ++i) prog.run_step(i, LaunchContext{});
  for (int v : g.outputs)
    EXPECT_EQ(prog.download(v, nullptr).data, direct[v].data) << g.values[v].name;
  GpuProgram fused(g, plan, "optimized", ref, nullptr);
  bool region_step = false;
  for (size_t i = 0; i < fused.num_steps(); ++i)
    region_step = region_step || fused.step_label(i).rfind("region ", 0) == 0;
  EXPECT_TRUE(region_step) << "the optimized variant has no fused step";
}

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

// CUPTI is attached only for its pass and detached after: timing after a CUPTI pass agrees with
// timing before it. Measured on the eager variant of the small trace (9 launches in ~28 µs), where
// a profiler left attached, adding per-launch overhead, would show.
TEST(GpuReplay, TimingAgreesBeforeAndAfterACuptiPass) {
  REQUIRE_GPU();
  Graph g = load_trace(trace_path("nanogpt_layernorm_fwd_2x8x1600"));
  Plan plan = make_plan(g, fusion_registry());
  cudaStream_t s = nullptr;
  REPLAY_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  L2Flush l2;
  GpuProgram prog(g, plan, "eager", generate_inputs(g, 1), s);
  LaunchContext ctx;
  ctx.stream = s;
  auto fn = [&](cudaStream_t st) {
    ctx.stream = st;
    prog.run_all(ctx);
  };
  StopRule rule;
  rule.min_samples = rule.max_samples = 300;
  const double before = summarize(time_cold(fn, s, l2, rule).samples_us).median;
  CuptiSummary c = trace_kernels(fn, s);
  EXPECT_EQ(c.error, "");
  EXPECT_FALSE(c.kernels.empty());
  const double after = summarize(time_cold(fn, s, l2, rule).samples_us).median;
  trace_kernels(fn, s);  // attach and detach a second time
  const double after2 = summarize(time_cold(fn, s, l2, rule).samples_us).median;
  EXPECT_NEAR(after / before, 1.0, 0.03) << before << " us before, " << after << " after";
  EXPECT_NEAR(after2 / before, 1.0, 0.03) << before << " us before, " << after2 << " after";
  cudaStreamDestroy(s);
}

// The edge cases of tests/data/edge (0-d reduced over dim 0, stride-0 input, 0-size tensors) on
// the eager executor.
TEST(GpuReplay, EdgeTracesRunEagerly) {
  REQUIRE_GPU();
  for (const char* f : {"sum_0d_dim0", "stride0_input", "zero_size"}) {
    Graph g = load_trace(std::string(REPLAY_TRACES_DIR) + "/../tests/data/edge/" + f + ".json");
    expect_variant_matches(g, "eager", 7);
  }
}
