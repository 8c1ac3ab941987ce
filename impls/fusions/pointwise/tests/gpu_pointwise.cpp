// pointwise on the GPU: both variants of every chain the bundled small traces and the synthetic
// graphs hold (bfloat16 GELU chains on both kernel paths, float32 SiLU / exp / div over 1M
// elements, a transposed dense layout with a broadcast bias, a sliced input at an offset), every
// value the region writes bit-identical to the eager executor's (the generated kernel computes each
// op with eager's own expression and rounding), the graph's outputs passing the numerics check
// against the float64 reference. Mutants of the generated kernel that must differ from eager: the
// bfloat16 roundings between ops dropped (kept in float32), x ** 3 computed as 3 ** x, a broadcast
// bias read along the wrong dim; the last two must fail the numerics check as well. Mutants of the
// generated text of the bfloat16 pair math (a product's zero sign, the pairs' rounding mode) must
// differ from eager. Column sums taken with a chain (bias gradients): held to the reference and
// to their own bits run to run; a sum of the wrong value must fail the check.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>

#include "harness/replay/variants.hpp"
#include "impls/fusions/pointwise/params.hpp"
#include "impls/fusions/pointwise/tests/synthetic.hpp"
#include "impls/fusions/registry.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/loader/trace_loader.hpp"

using namespace replay;
using namespace replay::test;

namespace {

struct GpuCase {
  std::string name;
  std::function<Graph()> load;
};

// Computed once (the test names ask for it per instance): the synthetic chains, and the small
// bundled traces (PyTorch's golden shapes, "_2x8x") whose plans hold a pointwise region.
const std::vector<GpuCase>& cases() {
  static const std::vector<GpuCase> out = [] {
    std::vector<GpuCase> c;
    c.push_back({"synthetic_gelu_256x1024", [] { return gelu_chain(256, 1024); }});
    c.push_back({"synthetic_gelu_37x100", [] { return gelu_chain(37, 100); }});
    c.push_back({"synthetic_silu_f32_1024x1024", silu_f32});
    c.push_back({"synthetic_transposed_64x96", transposed_chain});
    c.push_back({"synthetic_sliced_64x100", sliced_input});
    c.push_back({"synthetic_bf16_pairs_512x1024", bf16_pairs});
    std::vector<std::string> names;
    for (const char* dir : {"", "byog/linear", "byog/rope", "byog/float8", "byog/decoder"}) {
      const std::filesystem::path d = std::filesystem::path(REPLAY_TRACES_DIR) / dir;
      if (!std::filesystem::is_directory(d)) continue;
      for (const auto& e : std::filesystem::directory_iterator(d)) {
        const std::string stem = e.path().stem().string();
        if (e.path().extension() != ".json" || stem.find("_2x8x") == std::string::npos) continue;
        const Graph g = load_trace(e.path().string(), cut_options());
        if (fusion_region_outputs(make_plan(g, fusion_registry()), "pointwise").empty()) continue;
        names.push_back(std::string(dir).empty() ? stem : std::string(dir) + "/" + stem);
      }
    }
    std::sort(names.begin(), names.end());
    for (const std::string& n : names)
      c.push_back({n, [n] { return load_trace(trace_path(n), cut_options()); }});
    return c;
  }();
  return out;
}

class PointwiseGpu : public ::testing::TestWithParam<std::tuple<size_t, std::string>> {};

// The results of the column sums the pointwise regions of `plan` take (Params::sums).
std::vector<int> column_sum_outputs(const Plan& plan) {
  std::vector<int> out;
  for (const Region& r : plan.regions)
    if (r.fusion->name == "pointwise")
      for (int v : std::any_cast<const pointwise::Params&>(r.params).sums) out.push_back(v);
  return out;
}

}  // namespace

// The optimized variant's column sums add the same rounded values in another order than eager's
// column reduction (row lanes, then row blocks): they are held to the float64 reference (the
// numerics check of every graph output, which they are) and to their own bits run to run, not to
// eager's bits; every other value the region writes is eager's bits.
TEST_P(PointwiseGpu, BitIdenticalToEagerAndPassesNumerics) {
  REQUIRE_GPU();
  const auto& [ci, variant] = GetParam();
  const GpuCase& c = cases()[ci];
  Graph g = c.load();
  const Plan plan = make_plan(g, fusion_registry());
  std::vector<int> outs = fusion_region_outputs(plan, "pointwise");
  ASSERT_FALSE(outs.empty()) << c.name << ": no pointwise region";
  const std::vector<int> sums = column_sum_outputs(plan);
  if (variant == "optimized")
    outs.erase(
        std::remove_if(outs.begin(), outs.end(),
                       [&](int v) { return std::find(sums.begin(), sums.end(), v) != sums.end(); }),
        outs.end());
  for (uint64_t seed : {41u, 42u})
    expect_bit_identical_to_eager(g, plan, variant, outs, seed, true, c.name);
  if (sums.empty() || variant != "optimized") return;
  const auto inputs = generate_inputs(g, 43);
  GpuProgram a(g, plan, variant, inputs, nullptr), b(g, plan, variant, inputs, nullptr);
  b.poison_outputs(nullptr);
  a.run_all(LaunchContext{});
  b.run_all(LaunchContext{});
  b.run_all(LaunchContext{});  // the partials and the final sum's workspace reused
  REPLAY_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(first_bit_difference(g, a, b, sums), "") << c.name << ": column sums run to run";
}

INSTANTIATE_TEST_SUITE_P(Cases, PointwiseGpu,
                         ::testing::Combine(::testing::Range<size_t>(0, cases().size()),
                                            ::testing::Values("baseline", "optimized")),
                         [](const auto& info) {
                           return test_name(cases()[std::get<0>(info.param)].name + "_" +
                                            std::get<1>(info.param));
                         });

namespace {

struct Mutant {
  const char* name;
  pointwise::SpecMutator mutate;
  /// The numerics check must fail too. Not for the dropped roundings: a chain kept in float32 is
  /// closer to the float64 reference than the graph's bfloat16 steps, so only the bits show it.
  bool numerics_fail = true;
};

const Mutant kMutants[] = {
    {"bf16_rounding_dropped",
     [](pointwise::KernelSpec& s) {
       for (size_t k = 0; k + 1 < s.steps.size(); ++k)  // the intermediates, not the result
         if (s.steps[k].dtype == DType::kBFloat16) s.steps[k].dtype = DType::kFloat32;
     },
     false},
    {"pow_operands_swapped",  // x ** 3 -> 3 ** x
     [](pointwise::KernelSpec& s) {
       for (auto& st : s.steps)
         if (st.fn == PointwiseFn::kPow && st.args.size() == 2) {
           std::swap(st.args[0], st.args[1]);
           return;
         }
     }},
    {"broadcast_ignored",  // the bias read along the rows instead of the columns
     [](pointwise::KernelSpec& s) {
       for (auto& l : s.loads)
         for (size_t k = 0; k + 1 < l.geo.stride.size(); ++k)
           if (l.geo.stride[k] == 0 && l.geo.stride[k + 1] == 1) {
             l.geo.stride[k] = 1;
             l.geo.stride[k + 1] = 0;
             return;
           }
     }},
};

class PointwiseMutant : public ::testing::TestWithParam<size_t> {};

struct MutatorHook {  // restores the production binder however the test ends
  explicit MutatorHook(pointwise::SpecMutator f) { pointwise::set_spec_mutator(f); }
  ~MutatorHook() { pointwise::set_spec_mutator(nullptr); }
};

// Whether every graph output of `prog` passes the numerics check against the float64 reference
// of `inputs`, with the run's bounds.
bool all_outputs_pass(const Graph& g, const Plan& plan, GpuProgram& prog,
                      const std::map<int, HostTensor>& inputs) {
  const auto ref = run_reference(g, inputs);
  const auto bounds = default_value_bounds(g);
  bool all_pass = true;
  for (int v : g.outputs)
    all_pass &= check_value(g, v, prog.download(v, nullptr), ref.at(v), ref,
                            output_bounds(g, plan, bounds, v))
                    .pass();
  return all_pass;
}

}  // namespace

TEST_P(PointwiseMutant, DiffersFromEagerAndFailsTheCheck) {
  REQUIRE_GPU();
  const Mutant& m = kMutants[GetParam()];
  Graph g = gelu_chain(256, 1024);
  const Plan plan = make_plan(g, fusion_registry());
  const std::vector<int> outs = fusion_region_outputs(plan, "pointwise");
  ASSERT_FALSE(outs.empty());
  const MutatorHook hook(m.mutate);
  const auto inputs = generate_inputs(g, 41);
  GpuProgram eager(g, plan, std::string(kEagerVariant), inputs, nullptr);
  eager.run_all(LaunchContext{});
  GpuProgram prog(g, plan, "optimized", inputs, nullptr);
  for (size_t r = 0; r < plan.regions.size(); ++r)
    ASSERT_EQ(prog.fallback_reason(static_cast<int>(r)), "") << "the mutant must run fused";
  prog.poison_outputs(nullptr);
  prog.run_all(LaunchContext{});
  REPLAY_CUDA(cudaDeviceSynchronize());
  EXPECT_NE(first_bit_difference(g, prog, eager, outs), "") << m.name << ": bit-identical";
  if (m.numerics_fail) {
    EXPECT_FALSE(all_outputs_pass(g, plan, prog, inputs))
        << m.name << ": passed the numerics check";
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, PointwiseMutant, ::testing::Range<size_t>(0, std::size(kMutants)),
                         [](const auto& info) { return std::string(kMutants[info.param].name); });

namespace {

struct SourceMutant {
  const char* name;
  const char* from;  ///< text of the generated source, replaced everywhere by `to`
  const char* to;
};

// Mutants of the bfloat16 pair math (codegen.cpp, pair_expr) that a bit check must catch:
// a product's addend +0 instead of -0 (x * 0 of a negative x gives +0, eager -0), and the pairs
// rounded toward zero instead of to nearest. Both stay within the numerics check's tolerance, so
// only the bits show them.
const SourceMutant kSourceMutants[] = {
    {"pair_product_addend_plus_zero", "0x80008000u", "0x00000000u"},
    {"pair_rounding_toward_zero", "cvt.rn.bf16x2.f32", "cvt.rz.bf16x2.f32"},
};

class PointwiseSourceMutant : public ::testing::TestWithParam<size_t> {};

struct SourceMutatorHook {
  explicit SourceMutatorHook(pointwise::SourceMutator f) { pointwise::set_source_mutator(f); }
  ~SourceMutatorHook() { pointwise::set_source_mutator(nullptr); }
};

size_t g_source_mutant = 0;

}  // namespace

TEST_P(PointwiseSourceMutant, DiffersFromEager) {
  REQUIRE_GPU();
  g_source_mutant = GetParam();
  const SourceMutant& m = kSourceMutants[g_source_mutant];
  Graph g = bf16_pairs();
  const Plan plan = make_plan(g, fusion_registry());
  const std::vector<int> outs = fusion_region_outputs(plan, "pointwise");
  ASSERT_FALSE(outs.empty());
  const SourceMutatorHook hook([](std::string& src) {
    const SourceMutant& mm = kSourceMutants[g_source_mutant];
    size_t n = 0;
    for (size_t at = src.find(mm.from); at != std::string::npos;
         at = src.find(mm.from, at + std::strlen(mm.to)), ++n)
      src.replace(at, std::strlen(mm.from), mm.to);
    if (n == 0) src = "#error the mutant's text is not in the generated source\n" + src;
  });
  const auto inputs = generate_inputs(g, 41);
  GpuProgram eager(g, plan, std::string(kEagerVariant), inputs, nullptr);
  eager.run_all(LaunchContext{});
  GpuProgram prog(g, plan, "optimized", inputs, nullptr);
  for (size_t r = 0; r < plan.regions.size(); ++r)
    ASSERT_EQ(prog.fallback_reason(static_cast<int>(r)), "") << m.name << " must run fused";
  prog.poison_outputs(nullptr);
  prog.run_all(LaunchContext{});
  REPLAY_CUDA(cudaDeviceSynchronize());
  EXPECT_NE(first_bit_difference(g, prog, eager, outs), "") << m.name << ": bit-identical";
}

INSTANTIATE_TEST_SUITE_P(Kernels, PointwiseSourceMutant,
                         ::testing::Range<size_t>(0, std::size(kSourceMutants)),
                         [](const auto& info) {
                           return std::string(kSourceMutants[info.param].name);
                         });

// A column sum of the wrong value (the chain's first op, the upcast tangent, instead of the
// gradient it writes) on BERT's intermediate backward: the graph's outputs must fail the numerics
// check.
TEST(PointwiseColumnSumMutant, SumOfTheWrongValueFailsTheCheck) {
  REQUIRE_GPU();
  Graph g = load_trace(trace_path("byog/linear/bert_intermediate_default_train_bwd_2x8x128"),
                       cut_options());
  const Plan plan = make_plan(g, fusion_registry());
  const std::vector<int> sums = column_sum_outputs(plan);
  ASSERT_EQ(sums.size(), 1u) << "the bias gradient joins the chain";
  const MutatorHook hook([](pointwise::KernelSpec& s) {
    for (auto& c : s.sums) c.step = 0;
  });
  const auto inputs = generate_inputs(g, 41);
  GpuProgram prog(g, plan, "optimized", inputs, nullptr);
  for (size_t r = 0; r < plan.regions.size(); ++r)
    ASSERT_EQ(prog.fallback_reason(static_cast<int>(r)), "") << "the mutant must run fused";
  prog.poison_outputs(nullptr);
  prog.run_all(LaunchContext{});
  REPLAY_CUDA(cudaDeviceSynchronize());
  EXPECT_FALSE(all_outputs_pass(g, plan, prog, inputs))
      << "a bias gradient summed from the tangent passed the numerics check";
}
