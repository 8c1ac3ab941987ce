// pointwise on the GPU: both variants of every chain the bundled small traces and the synthetic
// graphs hold (bfloat16 GELU chains on both kernel paths, float32 SiLU / exp / div over 1M
// elements, a transposed dense layout with a broadcast bias, a sliced input at an offset), every
// value the region writes bit-identical to the eager executor's (the generated kernel computes each
// op with eager's own expression and rounding), the graph's outputs passing the numerics check
// against the float64 reference. Mutants of the generated kernel that must differ from eager: the
// bfloat16 roundings between ops dropped (kept in float32), x ** 3 computed as 3 ** x, a broadcast
// bias read along the wrong dim; the last two must fail the numerics check as well.
#include <algorithm>
#include <filesystem>
#include <functional>

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

}  // namespace

TEST_P(PointwiseGpu, BitIdenticalToEagerAndPassesNumerics) {
  REQUIRE_GPU();
  const auto& [ci, variant] = GetParam();
  const GpuCase& c = cases()[ci];
  Graph g = c.load();
  const Plan plan = make_plan(g, fusion_registry());
  const std::vector<int> outs = fusion_region_outputs(plan, "pointwise");
  ASSERT_FALSE(outs.empty()) << c.name << ": no pointwise region";
  for (uint64_t seed : {41u, 42u})
    expect_bit_identical_to_eager(g, plan, variant, outs, seed, true, c.name);
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

}  // namespace

TEST_P(PointwiseMutant, DiffersFromEagerAndFailsTheCheck) {
  REQUIRE_GPU();
  const Mutant& m = kMutants[GetParam()];
  Graph g = gelu_chain(256, 1024);
  const Plan plan = make_plan(g, fusion_registry());
  const std::vector<int> outs = fusion_region_outputs(plan, "pointwise");
  ASSERT_FALSE(outs.empty());
  struct Hook {  // restores the production binder however the test ends
    explicit Hook(pointwise::SpecMutator f) { pointwise::set_spec_mutator(f); }
    ~Hook() { pointwise::set_spec_mutator(nullptr); }
  } hook(m.mutate);
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
  const auto ref = run_reference(g, inputs);
  const auto bounds = default_value_bounds(g);
  bool all_pass = true;
  for (int v : g.outputs)
    all_pass &= check_value(g, v, prog.download(v, nullptr), ref.at(v), ref,
                            output_bounds(g, plan, bounds, v))
                    .pass();
  if (m.numerics_fail) {
    EXPECT_FALSE(all_pass) << m.name << ": passed the numerics check";
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, PointwiseMutant, ::testing::Range<size_t>(0, std::size(kMutants)),
                         [](const auto& info) { return std::string(kMutants[info.param].name); });
