// scaled_mm on the GPU: both variants against the float64 reference on the bundled float8 linear
// traces and on synthetic forms (the reshape form, bias, float32 output, fast accumulation,
// tensorwise and rowwise); the optimized variant bit-identical run to run, at the realistic shape
// too; and mutants that must FAIL the numerics check: rowwise scales swapped (scale_a for
// scale_b), the first element of a rowwise scale used as a tensorwise one, the reciprocal dropped
// (the GEMM scaled by s instead of 1 / s); the float8 GEMM's speed at 8192^3 against bfloat16.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>

#include "impls/eager/gemm.hpp"
#include "impls/fusions/binding.hpp"
#include "impls/fusions/scaled_mm/params.hpp"
#include "impls/fusions/scaled_mm/tests/synthetic.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/loader/trace_loader.hpp"

namespace replay::fusions {
extern const FusionSpec scaled_mm;
}

using namespace replay;
using namespace replay::test;

namespace {

struct GpuCase {
  std::string name;
  std::function<Graph()> load;
};

Graph bundled(const std::string& trace) {
  return load_trace(trace_path(trace));
}

Float8Form form(bool rowwise, std::string bias, std::string out, bool fast) {
  Float8Form f;
  f.B = 4;
  f.T = 64;
  f.K = 512;
  f.N = 384;
  f.rowwise = rowwise;
  f.bias = bias;
  f.out_dtype = out;
  f.fast_accum = fast;
  return f;
}

std::vector<GpuCase> cases() {
  std::vector<GpuCase> out;
  for (const char* t :
       {"float8_linear_rowwise_train_fwd_2x8x64x32", "float8_linear_rowwise_train_bwd_2x8x64x32",
        "float8_linear_tensorwise_train_fwd_2x8x64x32",
        "float8_linear_tensorwise_train_bwd_2x8x64x32",
        // torchao's recipes through the backend (traces/byog/float8/): the rowwise_with_gw_hp
        // grad_input's broadcast weight scale, the default partitioner's recomputed
        // quantizations, the 2-D form
        "byog/float8/float8_rowwise_gw_hp_mincut_train_bwd_2x8x64x32",
        "byog/float8/float8_tensorwise_default_train_bwd_2x8x64x32",
        "byog/float8/float8_rowwise_2d_mincut_train_fwd_16x64x32"})
    out.push_back({t, [t] { return bundled(t); }});
  Float8Form saved = form(false, "", "bfloat16", false);
  saved.save_recip = true;
  Float8Form broadcast = form(true, "", "bfloat16", false);
  broadcast.broadcast_w = true;
  Float8Form e5m2 = form(true, "", "bfloat16", false);
  e5m2.a_dtype = "float8_e5m2";
  const std::pair<const char*, Float8Form> forms[] = {
      {"synthetic_rowwise_bf16", form(true, "", "bfloat16", false)},
      {"synthetic_tensorwise_bf16", form(false, "", "bfloat16", false)},
      {"synthetic_rowwise_bias_f32_fast", form(true, "bfloat16", "float32", true)},
      {"synthetic_tensorwise_bias_bf16", form(false, "bfloat16", "bfloat16", false)},
      {"synthetic_rowwise_f16_bias_f16", form(true, "float16", "float16", false)},
      {"synthetic_tensorwise_saved_reciprocals", saved},
      {"synthetic_rowwise_e5m2_x_e4m3", e5m2},
      {"synthetic_rowwise_broadcast_weight_scale", broadcast},
  };
  for (const auto& [n, f] : forms) {
    const Float8Form fm = f;
    const std::string name = n;
    out.push_back({name, [fm, name] { return parse_trace(float8_linear_trace(fm), name); }});
  }
  return out;
}

int scaled_mm_regions(const Plan& plan) {
  int n = 0;
  for (const Region& r : plan.regions) n += r.fusion == &fusions::scaled_mm;
  return n;
}

class ScaledMmGpu : public ::testing::TestWithParam<std::tuple<size_t, std::string>> {};

}  // namespace

TEST_P(ScaledMmGpu, PassesNumerics) {
  REQUIRE_GPU();
  const auto& [ci, variant] = GetParam();
  const GpuCase c = cases()[ci];
  Graph g = c.load();
  const Plan plan = make_plan(g, fusion_registry());
  ASSERT_GT(scaled_mm_regions(plan), 0) << c.name << ": no scaled_mm region";
  const auto bounds = default_value_bounds(g);
  for (uint64_t seed : {41u, 42u}) {
    auto ref = run_reference(g, generate_inputs(g, seed));
    GpuProgram prog(g, plan, variant, ref, nullptr);
    expect_fused_where_available(plan, prog, variant, c.name);
    prog.poison_outputs(nullptr);
    prog.run_all(LaunchContext{});
    REPLAY_CUDA(cudaDeviceSynchronize());
    for (int v : g.outputs) {
      const auto res = check_value(g, v, prog.download(v, nullptr), ref.at(v), ref,
                                   output_bounds(g, plan, bounds, v));
      EXPECT_TRUE(res.pass()) << c.name << " " << variant << " seed " << seed << " "
                              << g.values[v].name << ": " << res.failure();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Traces, ScaledMmGpu,
                         ::testing::Combine(::testing::Range<size_t>(0, cases().size()),
                                            ::testing::Values("baseline", "optimized")),
                         [](const auto& info) {
                           return test_name(cases()[std::get<0>(info.param)].name + "_" +
                                            std::get<1>(info.param));
                         });

// The optimized variant writes the same bytes every time: twice from one program, and from a
// second program of the same graph (the algorithm chosen once per problem, cached: not timed
// again). At the realistic 8192 x 4096 x 4096 shape (inputs generated, no reference needed) and at
// a tall K with small M and N, the shape where cuBLASLt's candidates split K.
TEST(ScaledMmGpuDeterminism, OptimizedIsBitIdenticalRunToRun) {
  REQUIRE_GPU();
  Float8Form tall;
  tall.B = 1;
  tall.T = 64;
  tall.K = 16384;
  tall.N = 64;
  std::vector<std::pair<std::string, std::function<Graph()>>> graphs = {
      {"float8_linear_rowwise_train_fwd_2x4096x4096x4096",
       [] { return bundled("float8_linear_rowwise_train_fwd_2x4096x4096x4096"); }},
      {"float8_linear_tensorwise_train_bwd_2x4096x4096x4096",
       [] { return bundled("float8_linear_tensorwise_train_bwd_2x4096x4096x4096"); }},
      {"synthetic_tall_k_rowwise", [tall] { return parse_trace(float8_linear_trace(tall), "t"); }},
  };
  tall.rowwise = false;
  graphs.push_back({"synthetic_tall_k_tensorwise",
                    [tall] { return parse_trace(float8_linear_trace(tall), "t"); }});
  for (const auto& [label, load] : graphs) {
    Graph g = load();
    const Plan plan = make_plan(g, fusion_registry());
    ASSERT_GT(scaled_mm_regions(plan), 0) << label;
    const auto inputs = generate_inputs(g, 7);
    auto run = [&](const GpuProgram& prog) {
      prog.poison_outputs(nullptr);
      prog.run_all(LaunchContext{});
      REPLAY_CUDA(cudaDeviceSynchronize());
      std::vector<HostTensor> outs;
      for (int v : g.outputs) outs.push_back(prog.download(v, nullptr));
      return outs;
    };
    GpuProgram first(g, plan, "optimized", inputs, nullptr);
    expect_fused_where_available(plan, first, "optimized", label);
    const auto a = run(first), b = run(first);
    const int64_t tuned = gemm_counters().tuned_problems;
    GpuProgram second(g, plan, "optimized", inputs, nullptr);
    EXPECT_EQ(gemm_counters().tuned_problems, tuned) << label << ": the choice was not cached";
    const auto c = run(second);
    for (size_t i = 0; i < g.outputs.size(); ++i) {
      const std::string& v = g.values[g.outputs[i]].name;
      EXPECT_TRUE(a[i].data == b[i].data) << label << " " << v << ": run 2 differs from run 1";
      EXPECT_TRUE(a[i].data == c[i].data) << label << " " << v << ": program 2 differs";
      for (double x : a[i].data) ASSERT_FALSE(std::isnan(x)) << label << " " << v << ": unwritten";
    }
  }
}

// cuBLASLt's float8 path refuses what it cannot read in place, with the reason, at preparation:
// a row-major mat2, e5m2 x e5m2.
TEST(ScaledMmGpuDeterminism, PrepareRefusesNonTnLayouts) {
  REQUIRE_GPU();
  DeviceBuffer a(64 * 64), b(64 * 64), d(64 * 64 * 2), s(16);
  ScaledMatmulOperands m;
  m.a = device_tensor(a.get(), TensorMeta{{64, 64}, {64, 1}, DType::kFloat8E4M3});
  m.b = device_tensor(b.get(), TensorMeta{{64, 64}, {64, 1}, DType::kFloat8E4M3});  // row-major
  m.d = device_tensor(d.get(), TensorMeta{{64, 64}, {64, 1}, DType::kBFloat16});
  m.scale_a = m.scale_b = s.get();
  PreparedMatmul p = prepare_scaled_matmul("row_major_mat2", m);
  EXPECT_FALSE(p.launch);
  EXPECT_NE(p.unsupported.find("TN layout"), std::string::npos) << p.unsupported;
  m.b = device_tensor(b.get(), TensorMeta{{64, 64}, {1, 64}, DType::kFloat8E4M3});  // TN
  p = prepare_scaled_matmul("tn", m);
  EXPECT_TRUE(p.launch) << p.unsupported;
  EXPECT_FALSE(p.algo.empty());
  m.a.dtype = m.b.dtype = DType::kFloat8E5M2;
  p = prepare_scaled_matmul("e5m2", m);
  EXPECT_NE(p.unsupported.find("e5m2 x float8_e5m2"), std::string::npos) << p.unsupported;
}

// --- mutants ----------------------------------------------------------------------------------

namespace {

enum class Mutant { kSwappedScales, kTensorwiseForRowwise, kDroppedReciprocal };
Mutant g_mutant = Mutant::kSwappedScales;

// Hands out the scale sources as one-element tensors at their first element (the tensorwise
// mutant reads a rowwise scale's first element only).
class FirstElementScales : public BindContext {
 public:
  FirstElementScales(BindContext& in, int a, int b) : in_(in), a_(a), b_(b) {}
  BoundTensor tensor(int value) override {
    BoundTensor t = in_.tensor(value);
    if (value == a_ || value == b_) t.layout = TensorMeta{{}, {}, t.layout.dtype};
    return t;
  }
  void* workspace(size_t bytes) override { return in_.workspace(bytes); }

 private:
  BindContext& in_;
  int a_, b_;
};

Binding mutant_bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  Region m = r;
  auto p = std::any_cast<scaled_mm::Params>(r.params);
  switch (g_mutant) {
    case Mutant::kSwappedScales:
      std::swap(p.scale_a, p.scale_b);
      break;
    case Mutant::kTensorwiseForRowwise: {
      p.rowwise = false;
      m.params = p;
      FirstElementScales first(ctx, p.scale_a.source, p.scale_b.source);
      return scaled_mm::bind(g, m, v, first);
    }
    case Mutant::kDroppedReciprocal:
      p.scale_a.reciprocal = p.scale_b.reciprocal = false;  // read s where 1 / s was asked
      break;
  }
  m.params = p;
  return scaled_mm::bind(g, m, v, ctx);
}

// Runs `variant` with the mutant on `g` (this fusion alone) and expects the region's result to
// FAIL the numerics check, seeds 41 and 42.
void expect_mutant_fails(const Graph& g, Mutant mu, const std::string& variant) {
  g_mutant = mu;
  FusionSpec spec = fusions::scaled_mm;
  spec.bind = mutant_bind;
  const FusionSpec* only[] = {&spec};
  Plan plan = make_plan(g, only);
  ASSERT_FALSE(plan.regions.empty());
  const auto& p = std::any_cast<const scaled_mm::Params&>(plan.regions[0].params);
  const auto bounds = default_value_bounds(g);
  for (uint64_t seed : {41u, 42u}) {
    auto ref = run_reference(g, generate_inputs(g, seed));
    GpuProgram prog(g, plan, variant, ref, nullptr);
    ASSERT_EQ(prog.fallback_reason(0), "") << "the mutant must run the fused path";
    prog.poison_outputs(nullptr);
    prog.run_all(LaunchContext{});
    REPLAY_CUDA(cudaDeviceSynchronize());
    const auto res = check_numerics(g.values[p.out].name, prog.download(p.out, nullptr),
                                    ref.at(p.out), output_bounds(g, plan, bounds, p.out));
    EXPECT_FALSE(res.pass()) << g.name << " " << variant << ": the mutant passed";
  }
}

Graph square_rowwise() {  // M == N, so that swapped rowwise scales still fit their operands
  Float8Form f;
  f.B = 2;
  f.T = 64;
  f.K = 256;
  f.N = 128;
  return parse_trace(float8_linear_trace(f), "square_rowwise");
}

}  // namespace

TEST(ScaledMmMutant, SwappedRowwiseScalesFail) {
  REQUIRE_GPU();
  for (const char* variant : {"baseline", "optimized"})
    expect_mutant_fails(square_rowwise(), Mutant::kSwappedScales, variant);
}

TEST(ScaledMmMutant, TensorwiseScaleForRowwiseFails) {
  REQUIRE_GPU();
  for (const char* variant : {"baseline", "optimized"}) {
    expect_mutant_fails(square_rowwise(), Mutant::kTensorwiseForRowwise, variant);
    expect_mutant_fails(bundled("float8_linear_rowwise_train_fwd_2x8x64x32"),
                        Mutant::kTensorwiseForRowwise, variant);
  }
}

// The reciprocals the region computes (scales that are no quantization's: graph inputs here).
TEST(ScaledMmMutant, DroppedReciprocalFails) {
  REQUIRE_GPU();
  Float8Form tensorwise;
  tensorwise.rowwise = false;
  for (const char* variant : {"baseline", "optimized"}) {
    expect_mutant_fails(square_rowwise(), Mutant::kDroppedReciprocal, variant);
    expect_mutant_fails(parse_trace(float8_linear_trace(tensorwise), "tensorwise"),
                        Mutant::kDroppedReciprocal, variant);
  }
}

// --- speed ------------------------------------------------------------------------------------

namespace {

// Median time of one launch of `f` on the legacy stream, µs: 3 warm-ups, then 20 launches each
// between CUDA events.
double median_us(const std::function<void(cudaStream_t)>& f) {
  for (int i = 0; i < 3; ++i) f(nullptr);
  cudaEvent_t e0, e1;
  REPLAY_CUDA(cudaEventCreate(&e0));
  REPLAY_CUDA(cudaEventCreate(&e1));
  std::vector<double> us;
  for (int i = 0; i < 20; ++i) {
    REPLAY_CUDA(cudaEventRecord(e0, nullptr));
    f(nullptr);
    REPLAY_CUDA(cudaEventRecord(e1, nullptr));
    REPLAY_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    REPLAY_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    us.push_back(ms * 1e3);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// A device buffer of n random finite elements: float8_e4m3fn bytes (exponent field at most 14),
// or bfloat16 values of magnitude 2^-7 to 1.
DeviceBuffer random_buffer(int64_t n, DType t) {
  DeviceBuffer b(static_cast<size_t>(n) * dtype_size(t));
  std::vector<uint8_t> h(b.bytes());
  uint64_t x = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return x;
  };
  if (t == DType::kFloat8E4M3) {
    for (auto& v : h) v = static_cast<uint8_t>(next() & 0xF7);
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t r = next();
      const uint16_t bits = static_cast<uint16_t>(((r & 1) << 15) | ((120 + ((r >> 1) & 7)) << 7) |
                                                  ((r >> 4) & 0x7F));
      std::memcpy(&h[static_cast<size_t>(i) * 2], &bits, 2);
    }
  }
  REPLAY_CUDA(cudaMemcpy(b.get(), h.data(), h.size(), cudaMemcpyHostToDevice));
  return b;
}

}  // namespace

// Issue 27's goal at 8192^3 on an H200: the rowwise float8 GEMM >= 1.85x the bfloat16 GEMM and
// within 3 % of PyTorch's _scaled_mm (895 µs rowwise, 1012 µs tensorwise, bf16 mm 1606 µs,
// measured in PyTorch 2.11). Prints the times; asserts 1.7x, well above what a path that lost
// the float8 kernels (the float32 fallback, a bf16 GEMM: ~1x) would give (TUNING.md).
TEST(ScaledMmGpuSpeed, Float8GemmAt8192CubedAgainstBf16) {
  REQUIRE_GPU();
  constexpr int64_t S = 8192;
  const DeviceBuffer a8 = random_buffer(S * S, DType::kFloat8E4M3),
                     b8 = random_buffer(S * S, DType::kFloat8E4M3),
                     a16 = random_buffer(S * S, DType::kBFloat16),
                     b16 = random_buffer(S * S, DType::kBFloat16);
  DeviceBuffer d(static_cast<size_t>(S * S) * 2);
  std::vector<float> ones(S, 1.0f);
  DeviceBuffer sa(S * sizeof(float)), sb(S * sizeof(float));
  REPLAY_CUDA(cudaMemcpy(sa.get(), ones.data(), S * sizeof(float), cudaMemcpyHostToDevice));
  REPLAY_CUDA(cudaMemcpy(sb.get(), ones.data(), S * sizeof(float), cudaMemcpyHostToDevice));
  const TensorMeta row{{S, S}, {S, 1}, DType::kFloat8E4M3}, col{{S, S}, {1, S}, DType::kFloat8E4M3};
  double us[2] = {0, 0};
  for (bool rowwise : {true, false}) {
    ScaledMatmulOperands m;
    m.a = device_tensor(a8.get(), row);
    m.b = device_tensor(b8.get(), col);
    m.d = device_tensor(d.get(), TensorMeta{{S, S}, {S, 1}, DType::kBFloat16});
    m.scale_a = sa.get();
    m.scale_b = sb.get();
    m.rowwise = rowwise;
    m.tune = true;
    const PreparedMatmul p = prepare_scaled_matmul(rowwise ? "rowwise" : "tensorwise", m);
    ASSERT_TRUE(p.launch) << p.unsupported;
    us[rowwise ? 0 : 1] = median_us(p.launch);
    std::printf("float8 %s 8192^3: %.1f us (%d candidates, chose %s)\n",
                rowwise ? "rowwise" : "tensorwise", us[rowwise ? 0 : 1], p.candidates,
                p.algo.c_str());
  }
  MatmulOperands mo;
  mo.a = device_tensor(a16.get(), TensorMeta{{S, S}, {S, 1}, DType::kBFloat16});
  mo.b = device_tensor(b16.get(), TensorMeta{{S, S}, {1, S}, DType::kBFloat16});
  mo.d = device_tensor(d.get(), TensorMeta{{S, S}, {S, 1}, DType::kBFloat16});
  const double bf16 = median_us(prepare_matmul("bf16", mo));
  std::printf(
      "bf16 8192^3: %.1f us; rowwise %.2fx, tensorwise %.2fx (goal: rowwise >= 1.85x, "
      "<= 922 us = PyTorch's 895 us + 3 %%)\n",
      bf16, bf16 / us[0], bf16 / us[1]);
  EXPECT_GE(bf16 / us[0], 1.7);
  EXPECT_GE(bf16 / us[1], 1.5);
}
