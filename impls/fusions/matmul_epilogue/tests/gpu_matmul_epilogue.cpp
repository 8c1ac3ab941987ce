// matmul_epilogue on the GPU: both variants against the float64 reference on the bundled linear /
// MLP traces and on synthetic forms (the harness's own verdict, every graph output, fresh seeds);
// and mutants that must FAIL it: the bias dropped, GELU tanh for erf, the weight read without its
// transpose. The decoder layers are left to `replay run` (their deep GEMM chains exceed the
// bounds on some seeds in every variant, eager included: tests/gpu/test_replay_all.cpp).
#include <functional>

#include "impls/eager/gemm.hpp"
#include "impls/fusions/binding.hpp"
#include "impls/fusions/matmul_epilogue/kernels.hpp"
#include "impls/fusions/matmul_epilogue/params.hpp"
#include "impls/fusions/matmul_epilogue/tests/synthetic.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/loader/trace_loader.hpp"

namespace replay::fusions {
extern const FusionSpec matmul_epilogue;
}

using namespace replay;
using namespace replay::test;
using replay::matmul_epilogue::Act;
using replay::matmul_epilogue::act_name;
using replay::matmul_epilogue::act_tabulable;
using replay::matmul_epilogue::build_act_table;
using replay::matmul_epilogue::epilogue_vectorized;
using replay::matmul_epilogue::EpilogueArgs;
using replay::matmul_epilogue::FwdGeometry;
using replay::matmul_epilogue::kTableEntries;
using replay::matmul_epilogue::launch_epilogue;
using replay::matmul_epilogue::set_forward_geometry;

namespace {

struct GpuCase {
  std::string name;
  std::function<Graph()> load;
};

Graph bundled(const std::string& trace) {
  LoadOptions opt;
  return load_trace(trace_path(trace), opt);
}

LinearForm synth(std::string weight, std::string bias, std::string act, bool save_pre,
                 bool residual = false) {
  LinearForm f;
  f.B = 4;
  f.T = 64;
  f.C = 256;
  f.N = 384;
  f.weight = weight;
  f.bias = bias;
  f.act = act;
  f.save_pre = save_pre;
  f.residual = residual;
  return f;
}

// The backward graphs at [M, N] = [1024, 512] after a K = 512 GEMM (the bias gradient over several
// row blocks, the kernel over many CTAs); nanoGPT's pre-activation at std 1 (the capture's 0.16
// hides a wrong GELU derivative within the bounds: unit_numerics.cpp).
std::vector<std::pair<std::string, nlohmann::json>> rescaled_backwards() {
  const std::map<int64_t, int64_t> nano{{8, 512}, {16, 1024}, {64, 512}, {256, 512}};
  std::vector<std::pair<std::string, nlohmann::json>> out;
  for (const char* t : {"nanogpt_mlp_train_bwd_2x8x64", "nanogpt_mlp_gelu_tanh_train_bwd_2x8x64"}) {
    nlohmann::json j = rescaled_trace(t, nano);
    for (auto& in : j["inputs"])
      if (in["id"] == "addmm") in["stats"] = {{"mean", 0.0}, {"std", 1.0}, {"min", -6}, {"max", 6}};
    out.push_back({std::string(t) + "_rescaled_1024x512", j});
  }
  out.push_back({"llama_swiglu_mlp_train_bwd_rescaled_1024x512",
                 rescaled_trace("llama_swiglu_mlp_train_bwd_2x8x64x176",
                                {{8, 512}, {16, 1024}, {64, 512}, {176, 512}})});
  // dW GEMMs with the bias gradient on them (K = 1024 tokens): nn.Linear's and Conv1D's.
  out.push_back({"qwen2_q_proj_mincut_train_bwd_rescaled_1024x512",
                 rescaled_trace("byog/linear/qwen2_q_proj_mincut_train_bwd_2x8x128",
                                {{8, 512}, {16, 1024}, {128, 512}})});
  out.push_back({"gpt2_c_attn_mincut_train_bwd_rescaled_1024x768",
                 rescaled_trace("byog/linear/gpt2_c_attn_mincut_train_bwd_2x8x128",
                                {{8, 512}, {16, 1024}, {128, 256}, {384, 768}})});
  return out;
}

std::vector<GpuCase> cases() {
  std::vector<GpuCase> out;
  for (const char* t :
       {"nanogpt_mlp_train_fwd_2x8x64", "nanogpt_mlp_train_fwd_8x1024x1600",
        "nanogpt_mlp_gelu_tanh_train_fwd_2x8x64", "nanogpt_mlp_gelu_tanh_train_fwd_8x1024x1600",
        "nanogpt_mlp_train_bwd_2x8x64", "llama_swiglu_mlp_train_fwd_2x8x64x176",
        "llama_swiglu_mlp_train_bwd_2x8x64x176", "linear_fp32_train_fwd_2x8x64x32",
        "byog/linear/phi3_mlp_mincut_train_fwd_2x8x128",
        "byog/linear/gemma_mlp_mincut_train_fwd_2x8x128",
        "byog/linear/bert_intermediate_mincut_train_fwd_2x8x128",
        "byog/linear/llama_mlp_mincut_train_bwd_2x8x128",
        // backward epilogues: GELU erf / tanh derivative with the bias gradient, the gated pair
        // (recomputed or saved activation), Phi-3's pair feeding a cat
        "nanogpt_mlp_gelu_tanh_train_bwd_2x8x64", "byog/linear/llama_mlp_default_train_bwd_2x8x128",
        "byog/linear/gemma_mlp_mincut_train_bwd_2x8x128",
        "byog/linear/gemma_mlp_default_train_bwd_2x8x128",
        "byog/linear/phi3_mlp_mincut_train_bwd_2x8x128",
        "byog/linear/phi3_mlp_default_train_bwd_2x8x128",
        // dW GEMMs with the bias gradient (BGRADB: nn.Linear; BGRADA: GPT-2 Conv1D)
        "byog/linear/qwen2_q_proj_mincut_train_bwd_2x8x128",
        "byog/linear/qwen2_q_proj_default_train_bwd_2x8x128",
        "byog/linear/gpt2_c_attn_mincut_train_bwd_2x8x128",
        "byog/linear/gpt2_mlp_mincut_train_bwd_2x8x128",
        // default-partition forwards: saved views of the GEMM outputs left as aliases, the gated
        // activation written too; GPT-2's bf16 gelu_new tabulated
        "byog/linear/llama_mlp_default_train_fwd_2x8x128",
        "byog/linear/gemma_mlp_default_train_fwd_2x8x128",
        "byog/linear/phi3_mlp_default_train_fwd_2x8x128",
        "byog/linear/bert_intermediate_default_train_fwd_2x8x128",
        "byog/linear/gpt2_mlp_mincut_train_fwd_2x8x128"})
    out.push_back({t, [t] { return bundled(t); }});
  for (const auto& [n, t] : rescaled_backwards()) {
    const std::string name = n;
    const nlohmann::json trace = t;
    out.push_back({name, [trace, name] { return parse_trace(trace, name); }});
  }
  const std::pair<const char*, LinearForm> forms[] = {
      {"synthetic_linear_addmm_gelu_erf", synth("linear", "addmm", "gelu_erf", false)},
      {"synthetic_conv1d_addmm_gelu_tanh_saved", synth("conv1d", "addmm", "gelu_tanh", true)},
      {"synthetic_linear_mm_add_gelu_erf", synth("linear", "add", "gelu_erf", true)},
      {"synthetic_linear_mm_silu", synth("linear", "none", "silu", false)},
      {"synthetic_linear_mm_residual", synth("linear", "none", "none", false, true)},
      {"synthetic_conv1d_addmm_residual", synth("conv1d", "addmm", "none", false, true)},
      {"synthetic_linear_addmm_quick_gelu", synth("linear", "addmm", "quick_gelu", false)},
      {"synthetic_conv1d_addmm_gelu_new_bf16", synth("conv1d", "addmm", "gelu_new_bf16", true)},
      {"synthetic_linear_mm_add_relu2", synth("linear", "add", "relu2", false)},
  };
  for (const auto& [n, f] : forms) {
    const LinearForm form = f;
    const std::string name = n;
    out.push_back({name, [form, name] { return parse_trace(linear_trace(form), name); }});
  }
  return out;
}

class MatmulEpilogueGpu : public ::testing::TestWithParam<std::tuple<size_t, std::string>> {};

}  // namespace

TEST_P(MatmulEpilogueGpu, PassesNumerics) {
  REQUIRE_GPU();
  const auto& [ci, variant] = GetParam();
  const GpuCase c = cases()[ci];
  Graph g = c.load();
  const Plan plan = make_plan(g, fusion_registry());
  int regions = 0;
  for (const Region& r : plan.regions) regions += r.fusion == &fusions::matmul_epilogue;
  ASSERT_GT(regions, 0) << c.name << ": no matmul_epilogue region";
  const auto bounds = default_value_bounds(g);
  for (uint64_t seed : {41u, 42u}) {
    auto ref = run_reference(g, generate_inputs(g, seed));
    GpuProgram prog(g, plan, variant, ref, nullptr);
    expect_fused_where_available(plan, prog, variant, c.name);
    prog.poison_outputs(nullptr);
    prog.run_all(LaunchContext{});
    REPLAY_CUDA(cudaDeviceSynchronize());
    for (int v : g.outputs) {  // check_value: an add's addend magnitudes, as the harness does
      const auto res = check_value(g, v, prog.download(v, nullptr), ref.at(v), ref,
                                   output_bounds(g, plan, bounds, v));
      EXPECT_TRUE(res.pass()) << c.name << " " << variant << " seed " << seed << " "
                              << g.values[v].name << ": " << res.failure();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Traces, MatmulEpilogueGpu,
                         ::testing::Combine(::testing::Range<size_t>(0, cases().size()),
                                            ::testing::Values("baseline", "optimized")),
                         [](const auto& info) {
                           return test_name(cases()[std::get<0>(info.param)].name + "_" +
                                            std::get<1>(info.param));
                         });

// --- mutants ----------------------------------------------------------------------------------

namespace {

// A BindContext that hands out the GEMM's weight operand as if it were row-major [K, N] (the
// transpose flag forgotten): the [N, K] weight's bytes read as the wrong matrix.
class UntransposedWeight : public BindContext {
 public:
  UntransposedWeight(BindContext& in, int b) : in_(in), b_(b) {}
  BoundTensor tensor(int value) override {
    BoundTensor t = in_.tensor(value);
    if (value == b_) t.layout.stride = contiguous_strides(t.layout.shape);
    return t;
  }
  void* workspace(size_t bytes) override { return in_.workspace(bytes); }

 private:
  BindContext& in_;
  int b_;
};

enum class Mutant {
  kBiasDropped,
  kTanhForErf,
  kUntransposedWeight,
  kDerivativeTanhForErf,  ///< backward: GELU tanh's derivative on an erf graph
  kGateUpSwapped,         ///< backward: d_gate written where d_up goes and back
  kBiasGradDropped,       ///< backward: the bias gradient not written (the check must see it)
  kTableShort,            ///< a tabulated chain without its last op
  kActOutDropped,         ///< the saved activation of a gated pair not written
  kBiasGradOfX,           ///< a dW GEMM's bias gradient summed over its other operand (x)
};
Mutant g_mutant = Mutant::kBiasDropped;

Binding mutant_bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  Region m = r;
  auto p = std::any_cast<matmul_epilogue::Params>(r.params);
  if (g_mutant == Mutant::kBiasDropped) p.gemm.bias = -1;
  if (g_mutant == Mutant::kTanhForErf && p.act == Act::kGeluErf) p.act = Act::kGeluTanh;
  if (g_mutant == Mutant::kDerivativeTanhForErf && p.bwd.act == Act::kGeluErf)
    p.bwd.act = Act::kGeluTanh;
  if (g_mutant == Mutant::kGateUpSwapped) std::swap(p.bwd.dx, p.bwd.dup);
  if (g_mutant == Mutant::kBiasGradDropped) p.bwd.dbias = -1;
  if (g_mutant == Mutant::kTableShort && p.act == Act::kTable) p.act_values.pop_back();
  if (g_mutant == Mutant::kActOutDropped) p.act_out = -1;
  if (g_mutant == Mutant::kBiasGradOfX && p.wgrad.on) {  // BGRADA for BGRADB; x for the tangent
    p.wgrad.of_a = !p.wgrad.of_a;
    p.wgrad.summed = p.wgrad.of_a ? p.wgrad.summed : p.gemm.b;
  }
  m.params = p;
  if (g_mutant == Mutant::kUntransposedWeight) {
    UntransposedWeight w(ctx, p.gemm.b);
    return matmul_epilogue::bind(g, m, v, w);
  }
  return matmul_epilogue::bind(g, m, v, ctx);
}

// Runs `variant` with the mutant on `g` (this fusion alone) and expects the first region's
// result to FAIL the numerics check, seeds 41 and 42.
void expect_mutant_fails(const Graph& g, Mutant mu, const std::string& variant,
                         const std::string& value = "") {
  g_mutant = mu;
  FusionSpec spec = fusions::matmul_epilogue;
  spec.bind = mutant_bind;
  const FusionSpec* only[] = {&spec};
  Plan plan = make_plan(g, only);
  ASSERT_FALSE(plan.regions.empty());
  const auto& p = std::any_cast<const matmul_epilogue::Params&>(plan.regions[0].params);
  const auto bounds = default_value_bounds(g);
  for (uint64_t seed : {41u, 42u}) {
    auto ref = run_reference(g, generate_inputs(g, seed));
    GpuProgram prog(g, plan, variant, ref, nullptr);
    ASSERT_EQ(prog.fallback_reason(0), "") << "the mutant must run the fused path";
    prog.poison_outputs(nullptr);
    prog.run_all(LaunchContext{});
    REPLAY_CUDA(cudaDeviceSynchronize());
    const int v = value.empty() ? p.out : g.find_value(value);
    const auto res =
        check_numerics(g.values[v].name, prog.download(v, nullptr), ref.at(v), bounds[v]);
    EXPECT_FALSE(res.pass()) << g.name << " " << variant << ": the mutant passed";
  }
}

}  // namespace

TEST(MatmulEpilogueMutant, BiasDroppedFails) {
  REQUIRE_GPU();
  for (const char* variant : {"baseline", "optimized"}) {
    expect_mutant_fails(bundled("nanogpt_mlp_train_fwd_2x8x64"), Mutant::kBiasDropped, variant);
    LinearForm f = synth("conv1d", "addmm", "none", false);
    expect_mutant_fails(parse_trace(linear_trace(f), "bias"), Mutant::kBiasDropped, variant);
  }
}

TEST(MatmulEpilogueMutant, GeluTanhForErfFails) {
  REQUIRE_GPU();
  // [1024, 512] x [512, 1024]: the two GELUs differ by less than a bf16 ulp (1.5e-4 at 1), so a
  // tiny output's handful of flips would be no evidence (unit_numerics.cpp, on the CPU).
  LinearForm f = synth("linear", "addmm", "gelu_erf", true);
  f.B = 4;
  f.T = 256;
  f.C = 512;
  f.N = 1024;
  for (const char* variant : {"baseline", "optimized"})
    expect_mutant_fails(parse_trace(linear_trace(f), "tanh_for_erf"), Mutant::kTanhForErf, variant);
}

TEST(MatmulEpilogueMutant, UntransposedWeightFails) {
  REQUIRE_GPU();
  for (const char* variant : {"baseline", "optimized"}) {
    expect_mutant_fails(bundled("nanogpt_mlp_train_fwd_2x8x64"), Mutant::kUntransposedWeight,
                        variant);
    expect_mutant_fails(bundled("llama_swiglu_mlp_train_fwd_2x8x64x176"),
                        Mutant::kUntransposedWeight, variant);
  }
}

// The vector kernel (16-byte accesses) and the scalar kernel compute the same float32 chain: on
// every chain shape (bias with an exported pre-activation, each activation with its export,
// gating, residual; bf16 and float32 operands) their outputs are bit-identical.
// Also with the activation looked up in its table (build_act_table), where it is tabulable.
TEST(MatmulEpilogueKernel, VectorAndScalarKernelsAreBitIdentical) {
  REQUIRE_GPU();
  // Vectors per thread 1, 2, 4 (the generic instance caps at 2); table threads 512 and 1024, raw
  // lookups on and off: every compiled instance.
  constexpr int kGeometries = 5;
  const FwdGeometry kGeometry[kGeometries] = {
      {1, 1024, true}, {1, 1024, false}, {2, 512, true}, {4, 512, false}, {4, 1024, true}};
  struct Restore {
    ~Restore() { set_forward_geometry(FwdGeometry{}); }
  } restore;
  // N % 8 == 0: vectorizable. M = 96: each thread one vector; 16384: grid-stride steps that wrap
  // rows (the kernels' Cursor).
  for (const int64_t M : {int64_t{96}, int64_t{16384}}) {
    const int64_t N = 264;
    auto mat = [&](DType t) {
      return std::make_pair(DeviceBuffer(static_cast<size_t>(M * N) * dtype_size(t)), t);
    };
    auto fill = [&](const DeviceBuffer& b, DType t, uint64_t seed) {
      std::vector<unsigned char> h(b.bytes());
      uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
      for (size_t i = 0; i < h.size() / dtype_size(t); ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        store_as(t, (static_cast<double>(x % 20001) - 10000.0) / 2500.0, &h[i * dtype_size(t)]);
      }
      ASSERT_EQ(cudaMemcpy(b.get(), h.data(), h.size(), cudaMemcpyHostToDevice), cudaSuccess);
    };
    for (DType zt : {DType::kBFloat16, DType::kFloat32})
      for (Act act : {Act::kNone, Act::kGeluErf, Act::kGeluTanh, Act::kSilu})
        // 0: bias + pre; 1: gating; 2: residual; 3: z alone (with the table and bfloat16 z: the
        // raw lookups of the table kernel)
        for (int extra = 0; extra < 4; ++extra) {
          auto z = mat(zt), up = mat(DType::kBFloat16), res = mat(DType::kBFloat16);
          DeviceBuffer bias(static_cast<size_t>(N) * 2);
          fill(z.first, zt, 1);
          fill(up.first, DType::kBFloat16, 2);
          fill(res.first, DType::kBFloat16, 3);
          {
            std::vector<unsigned char> h(bias.bytes());
            for (int64_t n = 0; n < N; ++n)
              store_as(DType::kBFloat16, 0.01 * (n % 37) - 0.2, &h[n * 2]);
            ASSERT_EQ(cudaMemcpy(bias.get(), h.data(), h.size(), cudaMemcpyHostToDevice),
                      cudaSuccess);
          }
          // The activation's input: the bias step's bf16 result, else z itself.
          const DType act_in = extra == 0 ? DType::kBFloat16 : zt;
          const bool tab = act_tabulable(act, act_in, DType::kBFloat16);
          DeviceBuffer table(static_cast<size_t>(kTableEntries) * 2);
          if (tab)
            build_act_table(act, act_in, DType::kBFloat16, static_cast<uint16_t*>(table.get()),
                            nullptr);
          std::vector<std::vector<unsigned char>> outs;
          // vector, scalar; each with the table; the vector kernels in every compiled geometry
          for (int step = 0; step < (tab ? 4 : 2) * kGeometries; ++step) {
            const int mode = step / kGeometries;
            const bool vec = mode % 2 == 0;
            if (!vec && step % kGeometries) continue;  // the scalar kernels take no geometry
            set_forward_geometry(kGeometry[step % kGeometries]);
            auto y = mat(DType::kBFloat16), pre = mat(DType::kBFloat16),
                 mid = mat(DType::kBFloat16);
            EpilogueArgs a;
            a.M = M, a.N = N;
            a.z = {z.first.get(), zt, N};
            if (extra == 0) {
              a.bias = bias.get(), a.bias_dtype = DType::kBFloat16, a.bias_round = DType::kBFloat16;
              a.pre = {pre.first.get(), DType::kBFloat16, N};
            }
            if (act != Act::kNone) {
              a.act_step = true, a.act = act, a.act_round = DType::kBFloat16;
              a.mid = {mid.first.get(), DType::kBFloat16, N};
            }
            if (extra == 1) a.up = {up.first.get(), DType::kBFloat16, N};
            if (extra == 2) a.res = {res.first.get(), DType::kBFloat16, N};
            a.y = {y.first.get(), DType::kBFloat16, N};
            if (mode >= 2) a.table = static_cast<const uint16_t*>(table.get()), a.table_in = act_in;
            ASSERT_TRUE(epilogue_vectorized(a));
            launch_epilogue(a, nullptr, vec);
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            std::vector<unsigned char> h(3 * y.first.bytes());
            for (int k = 0; k < 3; ++k) {
              const DeviceBuffer& b = k == 0 ? y.first : k == 1 ? pre.first : mid.first;
              ASSERT_EQ(
                  cudaMemcpy(h.data() + k * b.bytes(), b.get(), b.bytes(), cudaMemcpyDeviceToHost),
                  cudaSuccess);
            }
            outs.push_back(std::move(h));
          }
          for (size_t k = 1; k < outs.size(); ++k)
            EXPECT_EQ(outs[0], outs[k]) << "M " << M << ", z " << dtype_name(zt) << ", "
                                        << act_name(act) << ", extra " << extra << ", run " << k;
        }
  }
  // A row stride that is not a multiple of 8 takes the scalar kernel.
  EpilogueArgs odd;
  odd.M = 2, odd.N = 8;
  DeviceBuffer b(64);
  odd.z = {b.get(), DType::kBFloat16, 12};
  odd.y = {b.get(), DType::kBFloat16, 8};
  EXPECT_FALSE(epilogue_vectorized(odd));
}

// --- backward epilogues
// ---------------------------------------------------------------------------

TEST(MatmulEpilogueMutant, BackwardDerivativeTanhForErfFails) {
  REQUIRE_GPU();
  const auto traces = rescaled_backwards();
  for (const char* variant : {"baseline", "optimized"})
    expect_mutant_fails(parse_trace(traces[0].second, traces[0].first),
                        Mutant::kDerivativeTanhForErf, variant);
}

TEST(MatmulEpilogueMutant, BackwardGateAndUpSwappedFails) {
  REQUIRE_GPU();
  for (const char* variant : {"baseline", "optimized"}) {
    expect_mutant_fails(bundled("llama_swiglu_mlp_train_bwd_2x8x64x176"), Mutant::kGateUpSwapped,
                        variant);
    expect_mutant_fails(bundled("byog/linear/gemma_mlp_default_train_bwd_2x8x128"),
                        Mutant::kGateUpSwapped, variant);
  }
}

TEST(MatmulEpilogueMutant, BackwardBiasGradientDroppedFails) {
  REQUIRE_GPU();
  for (const char* variant : {"baseline", "optimized"})
    expect_mutant_fails(bundled("nanogpt_mlp_train_bwd_2x8x64"), Mutant::kBiasGradDropped, variant,
                        "view_8");
}

TEST(MatmulEpilogueMutant, BiasGradientOfTheOtherOperandFails) {
  REQUIRE_GPU();
  // Qwen2's q_proj: dW [128, 128] = tangent^T [128, 16] @ x [16, 128]; the mutant sums x's rows
  // (BGRADA in the optimized variant, the column-sum kernel over x in the baseline).
  for (const char* variant : {"baseline", "optimized"})
    expect_mutant_fails(bundled("byog/linear/qwen2_q_proj_mincut_train_bwd_2x8x128"),
                        Mutant::kBiasGradOfX, variant, "sum_1");
}

TEST(MatmulEpilogueMutant, TabulatedChainWithoutItsLastOpFails) {
  REQUIRE_GPU();
  for (const char* variant : {"baseline", "optimized"}) {
    expect_mutant_fails(parse_trace(linear_trace(synth("conv1d", "addmm", "gelu_new_bf16", false)),
                                    "gelu_new_bf16"),
                        Mutant::kTableShort, variant);
    expect_mutant_fails(bundled("byog/linear/gpt2_mlp_mincut_train_fwd_2x8x128"),
                        Mutant::kTableShort, variant);
  }
}

TEST(MatmulEpilogueMutant, SavedActivationNotWrittenFails) {
  REQUIRE_GPU();
  for (const char* variant : {"baseline", "optimized"})
    expect_mutant_fails(bundled("byog/linear/llama_mlp_default_train_fwd_2x8x128"),
                        Mutant::kActOutDropped, variant, "convert_element_type_3");
}

// The table is the eager executor's own chain over every bit pattern: wherever the fused step's
// GEMM output equals eager's (the variants time their own GEMM algorithm, eager runs the
// heuristic's first, so the two GEMM outputs may differ in a few elements), the tabulated result
// is eager's bit for bit; on GPT-2's bf16 gelu_new (every op rounding) and a float32 QuickGELU.
TEST(MatmulEpilogueTableGpu, TabulatedChainIsBitIdenticalToEager) {
  REQUIRE_GPU();
  const std::vector<std::pair<std::string, std::function<Graph()>>> graphs = {
      {"gpt2", [] { return bundled("byog/linear/gpt2_mlp_mincut_train_fwd_2x8x128"); }},
      {"quick_gelu",
       [] { return parse_trace(linear_trace(synth("linear", "addmm", "quick_gelu", true)), "q"); }},
  };
  for (const auto& [name, load] : graphs) {
    Graph g = load();
    const Plan plan = make_plan(g, fusion_registry());
    const auto& p = std::any_cast<const matmul_epilogue::Params&>(plan.regions.at(0).params);
    ASSERT_EQ(p.act, Act::kTable) << name;
    ASSERT_TRUE(g.values[p.gemm.out].graph_output) << name << ": the GEMM output is returned";
    auto ref = run_reference(g, generate_inputs(g, 7));
    std::map<std::string, std::pair<HostData, HostData>> got;  // variant -> (GEMM output, y)
    for (const char* variant : {"eager", "baseline", "optimized"}) {
      GpuProgram prog(g, plan, variant, ref, nullptr);
      expect_fused_where_available(plan, prog, variant, name);
      prog.poison_outputs(nullptr);
      prog.run_all(LaunchContext{});
      REPLAY_CUDA(cudaDeviceSynchronize());
      got[variant] = {prog.download(p.gemm.out, nullptr).data, prog.download(p.out, nullptr).data};
    }
    const auto& [z_eager, y_eager] = got["eager"];
    for (const char* variant : {"baseline", "optimized"}) {
      const auto& [z, y] = got[variant];
      ASSERT_EQ(z.size(), z_eager.size());
      ASSERT_EQ(y.size(), y_eager.size());
      size_t same_z = 0, mismatched = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        if (z[i] != z_eager[i]) continue;
        ++same_z;
        mismatched += y[i] != y_eager[i];
      }
      std::cout << "[ table ] " << name << " " << variant << ": " << same_z << " of " << y.size()
                << " GEMM outputs equal eager's\n";
      EXPECT_GT(same_z, y.size() / 2) << name << " " << variant;
      EXPECT_EQ(mismatched, 0u) << name << " " << variant;
    }
  }
}

// Baseline (one kernel per step) and optimized (one fused kernel, the bias gradient's partials
// on the way) give the same bits; the optimized variant gives the same bits run after run (the
// bias gradient's fixed-order reduction).
TEST(MatmulEpilogueBackwardGpu, VariantsBitIdenticalAndDeterministic) {
  REQUIRE_GPU();
  std::vector<Graph> graphs;
  for (const char* t : {"nanogpt_mlp_train_bwd_2x8x64", "llama_swiglu_mlp_train_bwd_2x8x64x176",
                        "byog/linear/gemma_mlp_default_train_bwd_2x8x128",
                        "byog/linear/phi3_mlp_mincut_train_bwd_2x8x128"})
    graphs.push_back(bundled(t));
  for (const auto& [n, t] : rescaled_backwards()) graphs.push_back(parse_trace(t, n));
  for (const Graph& g : graphs) {
    const FusionSpec* only[] = {&fusions::matmul_epilogue};
    const Plan plan = make_plan(g, only);
    int bwd = 0;
    for (const Region& r : plan.regions) {
      const auto& p = std::any_cast<const matmul_epilogue::Params&>(r.params);
      bwd += p.bwd.on || p.wgrad.on;
    }
    ASSERT_GT(bwd, 0) << g.name;
    const auto inputs = generate_inputs(g, 43);
    const auto all = fusion_region_outputs(plan, "matmul_epilogue");
    // A dW GEMM's outputs are not compared across variants: the baseline's column sum adds in
    // another order than cuBLASLt's bias gradient, and the two GEMMs may take other algorithms.
    std::vector<int> outs;
    for (const Region& r : plan.regions)
      if (r.fusion == &fusions::matmul_epilogue &&
          !std::any_cast<const matmul_epilogue::Params&>(r.params).wgrad.on)
        outs.insert(outs.end(), r.outputs.begin(), r.outputs.end());
    GpuProgram base(g, plan, "baseline", inputs, nullptr);
    GpuProgram opt(g, plan, "optimized", inputs, nullptr);
    GpuProgram again(g, plan, "optimized", inputs, nullptr);
    for (GpuProgram* p : {&base, &opt, &again}) {
      expect_fused_where_available(plan, *p, p == &base ? "baseline" : "optimized", g.name);
      p->poison_outputs(nullptr);
      p->run_all(LaunchContext{});
    }
    again.run_all(LaunchContext{});  // a second run on the same buffers
    REPLAY_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ(first_bit_difference(g, base, opt, outs), "") << g.name << ": baseline vs optimized";
    EXPECT_EQ(first_bit_difference(g, opt, again, all), "") << g.name << ": run to run";
  }
}

// Sets an environment variable for a scope (the previous value restored).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_.empty())
      unsetenv(name_);
    else
      setenv(name_, old_.c_str(), 1);
  }

 private:
  const char* name_;
  std::string old_;
};

// The GEMM choices a program recorded for its dW-GEMM regions (matmul_epilogue, wgrad.on).
std::vector<GemmChoice> weight_grad_choices(const Plan& plan, const GpuProgram& prog) {
  std::vector<GemmChoice> out;
  for (size_t r = 0; r < plan.regions.size(); ++r) {
    const Region& reg = plan.regions[r];
    if (reg.fusion != &fusions::matmul_epilogue ||
        !std::any_cast<const matmul_epilogue::Params&>(reg.params).wgrad.on)
      continue;
    for (const GemmChoice& c : prog.gemm_choices(static_cast<int>(r))) out.push_back(c);
  }
  return out;
}

bool has_bgrad_gemm(const std::vector<GemmChoice>& cs) {
  for (const GemmChoice& c : cs)
    if (c.problem.find(", bias gradient of") != std::string::npos) return true;
  return false;
}

// The bias gradient in the dW GEMM (REPLAY_MATMUL_BGRAD=1: cuBLASLt's BGRADB / BGRADA, whatever
// the timing would choose; no fallback to the two steps): the optimized variant runs it (its
// GEMM choice says so), passes the numerics check against the reference (small traces) and gives
// the same bits run to run (no split-K: one order of the sum) at the captures' own shapes too
// (Qwen2's 8192 x 3584 tangent: generated inputs). The baseline runs the two steps.
TEST(MatmulEpilogueWeightGradGpu, BiasGradientInTheGemmPassesAndIsDeterministic) {
  REQUIRE_GPU();
  const ScopedEnv fused("REPLAY_MATMUL_BGRAD", "1");
  for (const char* t : {"byog/linear/qwen2_q_proj_mincut_train_bwd_2x8x128",
                        "byog/linear/gpt2_c_attn_mincut_train_bwd_2x8x128"}) {
    const Graph g = bundled(t);
    const FusionSpec* only[] = {&fusions::matmul_epilogue};
    const Plan plan = make_plan(g, only);
    auto ref = run_reference(g, generate_inputs(g, 46));
    GpuProgram prog(g, plan, "optimized", ref, nullptr);
    expect_fused_where_available(plan, prog, "optimized", t);
    EXPECT_TRUE(has_bgrad_gemm(weight_grad_choices(plan, prog))) << t;
    prog.poison_outputs(nullptr);
    prog.run_all(LaunchContext{});
    REPLAY_CUDA(cudaDeviceSynchronize());
    const auto bounds = default_value_bounds(g);
    for (int v : g.outputs) {
      const auto res = check_numerics(g.values[v].name, prog.download(v, nullptr), ref.at(v),
                                      output_bounds(g, plan, bounds, v));
      EXPECT_TRUE(res.pass()) << t << " " << g.values[v].name << ": " << res.failure();
    }
  }
  std::vector<Graph> graphs;
  for (const char* t : {"byog/linear/qwen2_q_proj_mincut_train_bwd_2x8x128",
                        "byog/linear/gpt2_c_attn_mincut_train_bwd_2x8x128",
                        "byog/linear/qwen2_q_proj_default_train_bwd_1x8192x3584",
                        "byog/linear/gpt2_c_attn_default_train_bwd_8x1024x1024",
                        "nanogpt_mlp_train_bwd_8x1024x1600"})
    graphs.push_back(bundled(t));
  for (const Graph& g : graphs) {
    const FusionSpec* only[] = {&fusions::matmul_epilogue};
    const Plan plan = make_plan(g, only);
    std::vector<int> dbias;
    for (const Region& r : plan.regions) {
      const auto& p = std::any_cast<const matmul_epilogue::Params&>(r.params);
      if (p.wgrad.on) dbias.push_back(p.wgrad.dbias);
    }
    ASSERT_EQ(dbias.size(), 1u) << g.name;
    const auto inputs = generate_inputs(g, 45);
    GpuProgram base(g, plan, "baseline", inputs, nullptr);
    GpuProgram opt(g, plan, "optimized", inputs, nullptr);
    GpuProgram again(g, plan, "optimized", inputs, nullptr);
    for (GpuProgram* p : {&base, &opt, &again}) {
      expect_fused_where_available(plan, *p, p == &base ? "baseline" : "optimized", g.name);
      p->poison_outputs(nullptr);
      p->run_all(LaunchContext{});
    }
    EXPECT_TRUE(has_bgrad_gemm(weight_grad_choices(plan, opt))) << g.name;
    EXPECT_FALSE(has_bgrad_gemm(weight_grad_choices(plan, base))) << g.name;
    again.run_all(LaunchContext{});
    REPLAY_CUDA(cudaDeviceSynchronize());
    const auto outs = fusion_region_outputs(plan, "matmul_epilogue");
    EXPECT_EQ(first_bit_difference(g, opt, again, outs), "") << g.name << ": run to run";
    // The two sums of the same bfloat16 tangent, each float32 rounded once to bfloat16: within
    // an ulp or so of each other (the numerics check holds each against the reference).
    const HostTensor a = base.download(dbias[0], nullptr), b = opt.download(dbias[0], nullptr);
    ASSERT_EQ(a.data.size(), b.data.size());
    double worst = 0, scale = 0;
    for (size_t i = 0; i < a.data.size(); ++i) {
      worst = std::max(worst, std::abs(a.data[i] - b.data[i]));
      scale = std::max(scale, std::abs(a.data[i]));
    }
    EXPECT_LE(worst, scale * 1.6e-2) << g.name << ": baseline and optimized bias gradients";
  }
}

// Unset, the optimized variant times the two forms once per problem: every program bound in the
// process then runs the same one (the same bits), and the region's GEMM choices hold the decision
// and the GEMM of the form that runs only. =0 runs the two steps; another value is an error.
TEST(MatmulEpilogueWeightGradGpu, FusedOrSplitIsDecidedOncePerProblem) {
  REQUIRE_GPU();
  const Graph g = bundled("byog/linear/gpt2_c_attn_default_train_bwd_8x1024x1024");
  const FusionSpec* only[] = {&fusions::matmul_epilogue};
  const Plan plan = make_plan(g, only);
  const auto inputs = generate_inputs(g, 47);
  std::vector<std::vector<GemmChoice>> seen;
  {
    const ScopedEnv timed("REPLAY_MATMUL_BGRAD", "");
    for (int i = 0; i < 3; ++i) {
      GpuProgram prog(g, plan, "optimized", inputs, nullptr);
      expect_fused_where_available(plan, prog, "optimized", g.name);
      seen.push_back(weight_grad_choices(plan, prog));
    }
  }
  ASSERT_EQ(seen[0].size(), 2u) << "the decision and the GEMM that runs";
  const GemmChoice* decision = nullptr;
  const GemmChoice* gemm = nullptr;
  for (const GemmChoice& c : seen[0])
    (c.first_name == "the epilogue in the GEMM" ? decision : gemm) = &c;
  ASSERT_NE(decision, nullptr);
  ASSERT_NE(gemm, nullptr);
  ASSERT_EQ(decision->candidate_us.size(), 2u);
  EXPECT_EQ(has_bgrad_gemm({*gemm}), decision->chosen == 0) << gemm->problem;
  // The margin both ways: the epilogue kept only when 3 % faster, the two steps kept otherwise
  // (or when the epilogue was refused at launch: its time then negative).
  if (decision->chosen == 0)
    EXPECT_LT(decision->candidate_us[0], decision->candidate_us[1] * 0.97);
  else
    EXPECT_TRUE(decision->candidate_us[0] < 0 ||
                decision->candidate_us[0] >= decision->candidate_us[1] * 0.97)
        << decision->candidate_us[0] << " vs " << decision->candidate_us[1];
  for (const auto& s : seen) {
    ASSERT_EQ(s.size(), seen[0].size());
    for (size_t i = 0; i < s.size(); ++i) {
      EXPECT_EQ(s[i].chosen, seen[0][i].chosen);
      EXPECT_EQ(s[i].candidate_us, seen[0][i].candidate_us) << "timed again";
    }
  }
  {
    const ScopedEnv split("REPLAY_MATMUL_BGRAD", "0");
    GpuProgram prog(g, plan, "optimized", inputs, nullptr);
    EXPECT_FALSE(has_bgrad_gemm(weight_grad_choices(plan, prog)));
  }
  {
    const ScopedEnv bad("REPLAY_MATMUL_BGRAD", "yes");
    try {
      GpuProgram prog(g, plan, "optimized", inputs, nullptr);
      ADD_FAILURE() << "REPLAY_MATMUL_BGRAD=yes was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("REPLAY_MATMUL_BGRAD='yes'"), std::string::npos)
          << e.what();
    }
  }
}

// Phi-3's d_gate_up = cat(d_gate, d_up) is placed (Plan::placed_cats): the fused backward writes
// both into their slices of the cat's buffer and no copy runs. The placed program's cat and graph
// outputs must be the bits of the same variant with the cat copied (the plan without placements):
// a slice at the wrong offset or stride would differ. The eager variant copies.
TEST(MatmulEpilogueBackwardGpu, CatOfTheGateAndUpGradientsIsPlaced) {
  REQUIRE_GPU();
  for (const char* t : {"byog/linear/phi3_mlp_default_train_bwd_2x8x128",
                        "byog/linear/phi3_mlp_mincut_train_bwd_2x8x128"}) {
    const Graph g = bundled(t);
    const Plan plan = make_plan(g, fusion_registry());
    ASSERT_EQ(plan.placed_cats.size(), 1u) << t;
    Plan copied = plan;
    copied.placed_cats.clear();
    const auto inputs = generate_inputs(g, 44);
    std::vector<int> values = g.outputs;
    values.push_back(g.nodes[plan.placed_cats[0]].outputs.at(0));
    for (const char* variant : {"optimized", "baseline"}) {
      GpuProgram placed(g, plan, variant, inputs, nullptr);
      GpuProgram copy(g, copied, variant, inputs, nullptr);
      EXPECT_EQ(placed.placed_cats(), plan.placed_cats) << t << " " << variant;
      EXPECT_TRUE(copy.placed_cats().empty());
      EXPECT_EQ(placed.num_steps() + 1, copy.num_steps()) << t << ": one copy fewer";
      for (GpuProgram* p : {&placed, &copy}) {
        p->poison_outputs(nullptr);
        p->run_all(LaunchContext{});
      }
      REPLAY_CUDA(cudaDeviceSynchronize());
      EXPECT_EQ(first_bit_difference(g, placed, copy, values), "") << t << " " << variant;
    }
    GpuProgram eager(g, plan, std::string(kEagerVariant), inputs, nullptr);
    EXPECT_TRUE(eager.placed_cats().empty()) << t;
  }
}

// The dW / dX GEMMs of the backward graphs read their `t`/`permute` views in place (cuBLASLt's
// transpose flags): the eager executor copies no operand.
TEST(MatmulEpilogueBackwardGpu, EagerGemmsReadTransposesInPlace) {
  REQUIRE_GPU();
  for (const char* t : {"nanogpt_mlp_train_bwd_2x8x64", "llama_swiglu_mlp_train_bwd_2x8x64x176",
                        "byog/linear/gpt2_c_attn_mincut_train_bwd_2x8x128",
                        "byog/linear/gpt2_mlp_mincut_train_bwd_2x8x128",
                        "byog/linear/bert_intermediate_mincut_train_bwd_2x8x128",
                        "byog/linear/qwen2_q_proj_mincut_train_bwd_2x8x128",
                        "byog/linear/phi3_mlp_mincut_train_bwd_2x8x128"}) {
    Graph g = bundled(t);
    const Plan plan = make_plan(g, fusion_registry());
    const auto inputs = generate_inputs(g, 41);
    const GemmCounters before = gemm_counters();
    GpuProgram eager(g, plan, std::string(kEagerVariant), inputs, nullptr);
    eager.run_all(LaunchContext{});
    REPLAY_CUDA(cudaDeviceSynchronize());
    const GemmCounters after = gemm_counters();
    EXPECT_GT(after.matmuls, before.matmuls) << t;
    EXPECT_EQ(after.copied_operands, before.copied_operands) << t;
  }
}
