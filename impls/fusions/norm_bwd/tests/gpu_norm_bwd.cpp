// norm_bwd on the GPU: both variants against the float64 reference on synthetic graphs covering
// every kernel geometry (threads per row 8..512, 2..4 vectors per thread), dtype and form; the
// optimized kernel at several split sizes; dw/db bit-identical run to run; the fallback with its
// reason; both variants against PyTorch's golden outputs. The bundled traces also run in
// tests/gpu (every variant, 20 seeds).
#include <filesystem>

#include "impls/fusions/binding.hpp"
#include "impls/fusions/norm_bwd/params.hpp"
#include "impls/fusions/norm_bwd/tests/edited_bind.hpp"
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

// Runs `variant` of g (norm_bwd only, params edited by `edit`) on inputs from `seed`; every
// graph output is checked against the reference. Returns the downloaded outputs.
std::map<int, HostTensor> run_checked(const Graph& g, const std::string& variant, uint64_t seed,
                                      std::function<void(norm_bwd::Params&)> edit = nullptr) {
  g_edit = std::move(edit);
  FusionSpec spec = fusions::norm_bwd;
  spec.bind = edited_bind;
  const FusionSpec* fusions[] = {&spec};
  Plan plan = make_plan(g, fusions);
  EXPECT_EQ(plan.regions.size(), 1u) << g.name;
  auto ref = run_reference(g, generate_inputs(g, seed));
  GpuProgram prog(g, plan, variant, ref, nullptr);
  EXPECT_EQ(prog.fallback_reason(0), "") << g.name << " " << variant;
  prog.poison_outputs(nullptr);
  prog.run_all(LaunchContext{});
  REPLAY_CUDA(cudaDeviceSynchronize());
  const auto bounds = default_value_bounds(g);
  std::map<int, HostTensor> out;
  for (int v : g.outputs) {
    out[v] = prog.download(v, nullptr);
    auto res =
        check_numerics(g.values[v].name, out[v], ref.at(v), output_bounds(g, plan, bounds, v));
    EXPECT_TRUE(res.pass()) << g.name << " " << variant << " seed " << seed << ": "
                            << res.failure();
  }
  g_edit = nullptr;
  return out;
}

struct Shape {
  int64_t rows, cols;
  std::string dtype;
  bool layernorm;
};

void PrintTo(const Shape& s, std::ostream* os) {
  *os << s.rows << "x" << s.cols << "_" << s.dtype << (s.layernorm ? "_ln" : "_rms");
}

class NormBwdShapes : public ::testing::TestWithParam<Shape> {};

}  // namespace

// Every geometry: C = 64 (8 threads per row, masked vectors) up to 8192 (512 threads per row,
// one row per block), rows not a multiple of the rows per block iteration, each dtype.
TEST_P(NormBwdShapes, BothVariantsMatchReference) {
  REQUIRE_GPU();
  const Shape& s = GetParam();
  NormBwdForm f;
  f.lead = {s.rows};
  f.cols = s.cols;
  f.dtype = s.dtype;
  f.layernorm = s.layernorm;
  Graph g = parse_trace(norm_bwd_trace(f), "<shape>");
  for (const char* variant : {"baseline", "optimized"}) run_checked(g, variant, 3);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, NormBwdShapes,
    ::testing::Values(Shape{7, 64, "bfloat16", true}, Shape{333, 384, "bfloat16", true},
                      Shape{333, 384, "bfloat16", false}, Shape{1001, 768, "bfloat16", true},
                      Shape{129, 1024, "bfloat16", false}, Shape{2048, 1600, "bfloat16", true},
                      Shape{65, 4096, "bfloat16", false}, Shape{33, 5120, "bfloat16", true},
                      Shape{65, 8192, "bfloat16", true}, Shape{77, 1600, "float16", true},
                      Shape{50, 384, "float32", false}, Shape{50, 1024, "float32", true},
                      Shape{19, 4096, "float32", true}, Shape{9, 8192, "float32", false}),
    [](const auto& info) {
      const Shape& s = info.param;
      return std::to_string(s.rows) + "x" + std::to_string(s.cols) + "_" + s.dtype +
             (s.layernorm ? "_ln" : "_rms");
    });

namespace {

struct FormCase {
  std::string name;
  std::function<void(NormBwdForm&)> set;
};

void PrintTo(const FormCase& c, std::ostream* os) {
  *os << c.name;
}

class NormBwdFormsGpu : public ::testing::TestWithParam<FormCase> {};

}  // namespace

// Every form the matcher takes runs fused in both variants.
TEST_P(NormBwdFormsGpu, BothVariantsMatchReference) {
  REQUIRE_GPU();
  NormBwdForm f;
  f.lead = {16, 37};
  GetParam().set(f);
  Graph g = parse_trace(norm_bwd_trace(f), GetParam().name);
  for (const char* variant : {"baseline", "optimized"})
    for (uint64_t seed : {5u, 6u}) run_checked(g, variant, seed);
}

INSTANTIATE_TEST_SUITE_P(
    Forms, NormBwdFormsGpu,
    ::testing::Values(FormCase{"ln_nobias", [](auto& f) { f.bias = false; }},
                      FormCase{"ln_mean_commuted", [](auto& f) { f.dx_form = "mean"; }},
                      FormCase{"ln_unit_offset", [](auto& f) { f.unit_offset = true; }},
                      FormCase{"ln_recompute", [](auto& f) { f.stats = "recompute"; }},
                      FormCase{"ln_recompute_eps_tensor",
                               [](auto& f) { f.stats = "recompute_eps_tensor"; }},
                      FormCase{"ln_normalized_x_fp32",
                               [](auto& f) {
                                 f.stats = "normalized";
                                 f.dtype = "float32";
                               }},
                      FormCase{"ln_dy_summed", [](auto& f) { f.dy_is_sum = true; }},
                      FormCase{"rms_weight_after_downcast",
                               [](auto& f) {
                                 f.layernorm = false;
                                 f.weight_after_downcast = true;
                               }},
                      FormCase{"rms_weight_after_downcast_4096",
                               [](auto& f) {
                                 f.layernorm = false;
                                 f.weight_after_downcast = true;
                                 f.cols = 4096;
                               }},
                      FormCase{"ln_nobias_1600",
                               [](auto& f) {
                                 f.bias = false;
                                 f.cols = 1600;
                               }},
                      FormCase{"rms_unit_offset",
                               [](auto& f) {
                                 f.layernorm = false;
                                 f.unit_offset = true;
                               }},
                      FormCase{"rms_recompute",
                               [](auto& f) {
                                 f.layernorm = false;
                                 f.stats = "recompute";
                               }},
                      FormCase{"rms_recompute_eps_tensor_fp16",
                               [](auto& f) {
                                 f.layernorm = false;
                                 f.stats = "recompute_eps_tensor";
                                 f.dtype = "float16";
                               }},
                      FormCase{"rms_normalized_x_fp32",
                               [](auto& f) {
                                 f.layernorm = false;
                                 f.stats = "normalized";
                                 f.dtype = "float32";
                               }}),
    [](const auto& info) { return info.param.name; });

// The optimized kernel at split sizes from one row group per block to one block, and odd ones
// (rounded up to whole row groups by the binder).
TEST(NormBwdGpu, EverySplitSizeMatchesReference) {
  REQUIRE_GPU();
  // LayerNorm with bias at 384 and 1600 columns; RMSNorm (no bias: wide rows, 4 vectors per
  // thread) at 4096, plain and in the Llama form (the packed bf16x2 kernel).
  struct Case {
    int64_t cols;
    bool layernorm, after_downcast;
  };
  for (const Case& c : {Case{384, true, false}, Case{1600, true, false}, Case{4096, false, false},
                        Case{4096, false, true}}) {
    NormBwdForm f;
    f.lead = {3000};
    f.cols = c.cols;
    f.layernorm = c.layernorm;
    f.weight_after_downcast = c.after_downcast;
    Graph g = parse_trace(norm_bwd_trace(f), "<split>");
    for (int64_t split : {1, 16, 17, 64, 100, 512, 3000})
      run_checked(g, "optimized", 9, [split](norm_bwd::Params& p) { p.split_size = split; });
  }
}

// Deterministic: the same inputs give bit-identical dw/db (and dx), run to run and program to
// program, for both variants.
TEST(NormBwdGpu, BitIdenticalRunToRun) {
  REQUIRE_GPU();
  // 384 columns (LayerNorm, RMSNorm); 4096 (RMSNorm: wide rows; plain and the Llama form).
  struct Case {
    int64_t cols;
    bool layernorm, after_downcast;
  };
  for (const Case& c : {Case{384, true, false}, Case{384, false, false}, Case{4096, false, false},
                        Case{4096, false, true}}) {
    NormBwdForm f;
    f.lead = {8192};
    f.cols = c.cols;
    f.layernorm = c.layernorm;
    f.weight_after_downcast = c.after_downcast;
    Graph g = parse_trace(norm_bwd_trace(f), "<determinism>");
    Plan plan = make_plan(g, fusion_registry());
    ASSERT_EQ(plan.regions.size(), 1u);
    auto in = generate_inputs(g, 13);
    for (const char* variant : {"baseline", "optimized"}) {
      GpuProgram a(g, plan, variant, in, nullptr), b(g, plan, variant, in, nullptr);
      a.run_all(LaunchContext{});
      b.run_all(LaunchContext{});
      REPLAY_CUDA(cudaDeviceSynchronize());
      std::map<int, HostTensor> first;
      for (int v : g.outputs) first[v] = a.download(v, nullptr);
      for (int rep = 0; rep < 3; ++rep) {
        a.poison_outputs(nullptr);
        a.run_all(LaunchContext{});
        REPLAY_CUDA(cudaDeviceSynchronize());
        for (int v : g.outputs) {
          EXPECT_EQ(a.download(v, nullptr).data, first[v].data)
              << variant << " " << g.values[v].name << " run " << rep;
          EXPECT_EQ(b.download(v, nullptr).data, first[v].data)
              << variant << " " << g.values[v].name << " other program";
        }
      }
    }
  }
}

// A row longer than the kernels hold runs eagerly, and the reason says so.
TEST(NormBwdGpu, TooLongRowFallsBackWithAReason) {
  REQUIRE_GPU();
  NormBwdForm f;
  f.lead = {4};
  f.cols = 16384;
  f.dtype = "float32";
  Graph g = parse_trace(norm_bwd_trace(f), "<long-row>");
  Plan plan = make_plan(g, fusion_registry());
  ASSERT_EQ(plan.regions.size(), 1u);
  auto ref = run_reference(g, generate_inputs(g, 5));
  for (const char* variant : {"baseline", "optimized"}) {
    GpuProgram prog(g, plan, variant, ref, nullptr);
    EXPECT_NE(prog.fallback_reason(0).find("longer than"), std::string::npos)
        << prog.fallback_reason(0);
    prog.poison_outputs(nullptr);
    prog.run_all(LaunchContext{});
    REPLAY_CUDA(cudaDeviceSynchronize());
    const auto bounds = default_value_bounds(g);
    for (int v : g.outputs)
      EXPECT_TRUE(check_numerics("y", prog.download(v, nullptr), ref.at(v), bounds[v]).pass());
  }
}

// A saved float32 xhat beside a bf16 dy and dx (a float32 x beside a bfloat16 dy: one of the
// kernels' mixed forms) runs fused in both variants and matches the reference.
TEST(NormBwdGpu, MixedDtypeNormalizedXMatchesReference) {
  REQUIRE_GPU();
  for (bool ln : {true, false}) {
    NormBwdForm f;
    f.lead = {16, 37};
    f.stats = "normalized";
    f.layernorm = ln;
    Graph g = parse_trace(norm_bwd_trace(f), "<normalized-bf16>");
    for (const char* variant : {"baseline", "optimized"})
      for (uint64_t seed : {5u, 6u}) run_checked(g, variant, seed);
  }
}

// Both variants on PyTorch's own inputs against PyTorch's outputs, for every bundled norm
// backward trace that carries them.
TEST(NormBwdGpu, GoldenInputsMatchPyTorchOutputs) {
  REQUIRE_GPU();
  int seen = 0;
  for (const auto& e : std::filesystem::directory_iterator(REPLAY_TRACES_DIR)) {
    const std::string n = e.path().stem().string();
    if (e.path().extension() != ".json" || n.find("_train_bwd_") == std::string::npos ||
        n.find("norm") == std::string::npos)
      continue;
    Graph g = load_trace(e.path().string());
    if (!g.golden) continue;
    ++seen;
    Plan plan = make_plan(g, fusion_registry());
    auto golden = read_safetensors(g.golden->path);
    std::map<int, HostTensor> in;
    for (int v : g.inputs) in[v] = golden.at(g.values[v].name);
    const auto bounds = default_value_bounds(g);
    for (const char* variant : {"baseline", "optimized"}) {
      GpuProgram prog(g, plan, variant, in, nullptr);
      expect_fused_where_available(plan, prog, variant, n);
      prog.poison_outputs(nullptr);
      prog.run_all(LaunchContext{});
      REPLAY_CUDA(cudaDeviceSynchronize());
      for (int v : g.outputs) {
        auto res = check_numerics(g.values[v].name, prog.download(v, nullptr),
                                  golden.at(g.values[v].name), bounds[v]);
        EXPECT_TRUE(res.pass()) << n << " " << variant << " vs PyTorch: " << res.failure();
      }
    }
  }
  EXPECT_GE(seen, 5);
}

// dx epilogue add (issue 24: the backward of an add-norm): the norm's dx rounded to its dtype plus
// the residual stream's other gradient, in the dx store of both variants. Synthetic LayerNorm and
// RMSNorm in each dtype, and the add-norm backwards captured from user code (traces/byog/); every
// output against the reference with the harness's own check (the addends' ulps for the sum), and
// the small captures on PyTorch's tensors; dw/db bit-identical run to run with the add.
TEST(NormBwdGpu, DxEpilogueAddMatchesReference) {
  REQUIRE_GPU();
  std::vector<Graph> graphs;
  for (const char* dtype : {"bfloat16", "float16", "float32"})
    for (bool ln : {true, false}) {
      NormBwdForm f;
      f.lead = {16, 37};
      f.cols = ln ? 1600 : 4096;
      f.layernorm = ln;
      f.dtype = dtype;
      f.dx_add = "same";
      graphs.push_back(parse_trace(norm_bwd_trace(f), "<dx-add>"));
    }
  for (const char* name : {"byog/llama_add_rmsnorm_mincut_train_bwd_2x8x256",
                           "byog/gpt2_add_layernorm_mincut_train_bwd_2x8x256",
                           "byog/gpt2_add_layernorm_default_train_bwd_2x8x256",
                           "byog/llama_add_rmsnorm_mincut_train_bwd_2x4096x4096"})
    graphs.push_back(load_trace(trace_path(name)));
  for (const Graph& g : graphs) {
    Plan plan = make_plan(g, fusion_registry());
    ASSERT_EQ(plan.regions.size(), 1u) << g.name;
    const auto& p = std::any_cast<const norm_bwd::Params&>(plan.regions[0].params);
    ASSERT_GE(p.dx_add, 0) << g.name;
    const auto bounds = default_value_bounds(g);
    for (uint64_t seed : {7u, 8u}) {
      auto ref = run_reference(g, generate_inputs(g, seed));
      for (const char* variant : {"baseline", "optimized"}) {
        GpuProgram prog(g, plan, variant, ref, nullptr);
        EXPECT_EQ(prog.fallback_reason(0), "") << g.name << " " << variant;
        prog.poison_outputs(nullptr);
        prog.run_all(LaunchContext{});
        REPLAY_CUDA(cudaDeviceSynchronize());
        for (int v : g.outputs) {
          auto res = check_value(g, v, prog.download(v, nullptr), ref.at(v), ref,
                                 output_bounds(g, plan, bounds, v));
          EXPECT_TRUE(res.pass()) << g.name << " " << variant << " seed " << seed << " "
                                  << g.values[v].name << ": " << res.failure();
        }
        // Without the add (the dropped_dx_add mutant's launch) the sum fails.
        if (seed == 7u) {
          FusionSpec spec = fusions::norm_bwd;
          spec.bind = edited_bind;
          g_edit = [](norm_bwd::Params& q) { q.dx_add = -1; };
          const FusionSpec* only[] = {&spec};
          Plan bad_plan = make_plan(g, only);
          GpuProgram bad(g, bad_plan, variant, ref, nullptr);
          ASSERT_EQ(bad.fallback_reason(0), "");
          bad.poison_outputs(nullptr);
          bad.run_all(LaunchContext{});
          REPLAY_CUDA(cudaDeviceSynchronize());
          EXPECT_FALSE(check_value(g, p.dx, bad.download(p.dx, nullptr), ref.at(p.dx), ref,
                                   output_bounds(g, bad_plan, bounds, p.dx))
                           .pass())
              << g.name << " " << variant << ": dx without the add passed";
          g_edit = nullptr;
        }
      }
    }
    if (!g.golden) continue;
    auto golden = read_safetensors(g.golden->path);
    std::map<int, HostTensor> in;
    for (int v : g.inputs) in[v] = golden.at(g.values[v].name);
    auto ref = run_reference(g, in);  // the addends' magnitudes for the sum's check
    for (const char* variant : {"baseline", "optimized"}) {
      GpuProgram prog(g, plan, variant, in, nullptr);
      prog.poison_outputs(nullptr);
      prog.run_all(LaunchContext{});
      REPLAY_CUDA(cudaDeviceSynchronize());
      for (int v : g.outputs) {
        auto res = check_value(g, v, prog.download(v, nullptr), golden.at(g.values[v].name), ref,
                               output_bounds(g, plan, bounds, v));
        EXPECT_TRUE(res.pass()) << g.name << " " << variant << " vs PyTorch: " << res.failure();
      }
    }
  }
}

// The deterministic column sums are untouched by the dx epilogue add: dw/db (and dx) bit-identical
// run to run and program to program.
TEST(NormBwdGpu, DxEpilogueAddBitIdenticalRunToRun) {
  REQUIRE_GPU();
  NormBwdForm f;
  f.lead = {8192};
  f.dx_add = "same";
  Graph g = parse_trace(norm_bwd_trace(f), "<determinism-dx-add>");
  Plan plan = make_plan(g, fusion_registry());
  ASSERT_EQ(plan.regions.size(), 1u);
  auto in = generate_inputs(g, 13);
  for (const char* variant : {"baseline", "optimized"}) {
    GpuProgram a(g, plan, variant, in, nullptr), b(g, plan, variant, in, nullptr);
    a.run_all(LaunchContext{});
    b.run_all(LaunchContext{});
    REPLAY_CUDA(cudaDeviceSynchronize());
    for (int v : g.outputs) {
      const HostTensor first = a.download(v, nullptr);
      for (int rep = 0; rep < 3; ++rep) {
        a.poison_outputs(nullptr);
        a.run_all(LaunchContext{});
        REPLAY_CUDA(cudaDeviceSynchronize());
        EXPECT_EQ(a.download(v, nullptr).data, first.data) << variant << " " << g.values[v].name;
      }
      EXPECT_EQ(b.download(v, nullptr).data, first.data) << variant << " other program";
    }
  }
}

// The default partitioner's forms (issue 24: a float32 x beside a bfloat16 dy and dx; dw reading
// the saved normalized value, bf16 in Llama's RMSNorm, fp32 in Gemma's; OLMo's LayerNorm without
// affine parameters), the per-head norms (qk_norm: dy a transposed [B, H, T, D] view, rows
// addressed through three strided row dims), T5's min-cut backward (dx's two terms rounded apart)
// and Cohere's (a recentered xhat term), small and realistic shapes: both variants fused,
// against the reference on fresh seeds and against PyTorch's outputs where the trace has them;
// dw bit-identical run to run; the saved xhat replaced by dy (a kernel that ignored it would
// pass) fails dw.
TEST(NormBwdGpu, DefaultPartitionAndPerHeadFormsMatchReference) {
  REQUIRE_GPU();
  for (const char* name : {"byog/llama_rmsnorm_default_train_bwd_2x8x256",
                           "byog/llama_rmsnorm_default_train_bwd_2x4096x4096",
                           "byog/gemma_rmsnorm_default_train_bwd_2x8x256",
                           "byog/gemma_rmsnorm_default_train_bwd_2x4096x4096",
                           "byog/llama_add_rmsnorm_default_train_bwd_2x8x256",
                           "byog/olmo_layernorm_default_train_bwd_2x8x256",
                           "byog/olmo_layernorm_default_train_bwd_2x4096x4096",
                           "byog/qwen3_qk_norm_mincut_train_bwd_2x8x4x64",
                           "byog/qwen3_qk_norm_mincut_train_bwd_2x4096x32x128",
                           "byog/qwen3_qk_norm_default_train_bwd_2x8x4x64",
                           "byog/gemma3_qk_norm_mincut_train_bwd_2x8x4x64",
                           "byog/gemma3_qk_norm_default_train_bwd_2x4096x32x128",
                           "byog/t5_layernorm_mincut_train_bwd_2x8x256",
                           "byog/t5_layernorm_mincut_train_bwd_2x4096x4096",
                           "byog/cohere_layernorm_mincut_train_bwd_2x8x256",
                           "byog/cohere_layernorm_mincut_train_bwd_2x4096x4096"}) {
    Graph g = load_trace(trace_path(name));
    Plan plan = make_plan(g, fusion_registry());
    ASSERT_EQ(plan.regions.size(), 1u) << name;
    const auto& p = std::any_cast<const norm_bwd::Params&>(plan.regions[0].params);
    const auto bounds = default_value_bounds(g);
    auto ref = run_reference(g, generate_inputs(g, 17));
    for (const char* variant : {"baseline", "optimized"}) {
      GpuProgram prog(g, plan, variant, ref, nullptr);
      ASSERT_EQ(prog.fallback_reason(0), "") << name << " " << variant;
      prog.poison_outputs(nullptr);
      prog.run_all(LaunchContext{});
      REPLAY_CUDA(cudaDeviceSynchronize());
      std::map<int, HostTensor> first;
      for (int v : g.outputs) {
        first[v] = prog.download(v, nullptr);
        auto res = check_value(g, v, first[v], ref.at(v), ref, output_bounds(g, plan, bounds, v));
        EXPECT_TRUE(res.pass()) << name << " " << variant << " " << g.values[v].name << ": "
                                << res.failure();
      }
      prog.poison_outputs(nullptr);
      prog.run_all(LaunchContext{});
      REPLAY_CUDA(cudaDeviceSynchronize());
      for (int v : g.outputs)
        EXPECT_EQ(prog.download(v, nullptr).data, first[v].data)
            << name << " " << variant << " " << g.values[v].name << ": not bit-identical";
      if (p.xs >= 0) {  // dw must read the saved normalized value
        FusionSpec spec = fusions::norm_bwd;
        spec.bind = edited_bind;
        g_edit = [](norm_bwd::Params& q) { q.xs = q.dy; };
        const FusionSpec* only[] = {&spec};
        Plan bad_plan = make_plan(g, only);
        GpuProgram bad(g, bad_plan, variant, ref, nullptr);
        ASSERT_EQ(bad.fallback_reason(0), "") << name;
        bad.poison_outputs(nullptr);
        bad.run_all(LaunchContext{});
        REPLAY_CUDA(cudaDeviceSynchronize());
        EXPECT_FALSE(check_value(g, p.dw, bad.download(p.dw, nullptr), ref.at(p.dw), ref,
                                 output_bounds(g, bad_plan, bounds, p.dw))
                         .pass())
            << name << " " << variant << ": dw with dy in place of the saved xhat passed";
        g_edit = nullptr;
      }
    }
    if (!g.golden) continue;
    auto golden = read_safetensors(g.golden->path);
    std::map<int, HostTensor> in;
    for (int v : g.inputs) in[v] = golden.at(g.values[v].name);
    auto gref = run_reference(g, in);
    for (const char* variant : {"baseline", "optimized"}) {
      GpuProgram prog(g, plan, variant, in, nullptr);
      prog.poison_outputs(nullptr);
      prog.run_all(LaunchContext{});
      REPLAY_CUDA(cudaDeviceSynchronize());
      for (int v : g.outputs) {
        auto res = check_value(g, v, prog.download(v, nullptr), golden.at(g.values[v].name), gref,
                               output_bounds(g, plan, bounds, v));
        EXPECT_TRUE(res.pass()) << name << " " << variant << " vs PyTorch: " << res.failure();
      }
    }
  }
}
