// rope on the GPU: both variants on every bundled rotary trace (traces/byog/rope: Llama with
// cos/sin given and computed, GPT-NeoX's per-head qkv with partial rotary, Phi-3's split qkv,
// Cohere's and GPT-J's interleaved pairs; forward and backward, both partitioners; the small
// shapes and six realistic ones; traces/: litgpt, Meta Llama's real pairs) and on
// synthetic forwards (head dims 72, 80, 96, 66;
// rotary 20, 32; both styles; float16 and float32 tables): every value the region writes
// bit-identical to the eager executor's, and (small shapes) the graph's outputs passing the
// harness's numerics check against the float64 reference.
// GPT-NeoX's and litgpt's backwards write the joint qkv gradient (joint.hpp), dv copied in.
// The bookend variants (segmented, host_alias: impls/fusions/bookend/) run the same cases and
// mutants: they launch the optimized kernel over materialized or host-resolved views.
// Mutants that must fail both: sin's sign flipped, the rotate-half rotation used for an
// interleaved graph (and the interleaved one for a rotate-half graph), the rotary dim two short
// (the last pair passed through unrotated), the pass-through tail dropped (left unwritten).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>

#include "harness/replay/variants.hpp"
#include "impls/fusions/binding.hpp"
#include "impls/fusions/rope/params.hpp"
#include "impls/fusions/rope/tests/synthetic.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/loader/trace_loader.hpp"

namespace replay::fusions {
extern const FusionSpec rope;
}

using namespace replay;
using namespace replay::test;
using rope::Params;
using rope::Style;

namespace {

struct GpuCase {
  std::string name;
  std::function<Graph()> load;
  bool reference = true;  ///< small enough for the float64 reference in a test
};

std::vector<GpuCase> cases() {
  std::vector<GpuCase> out;
  const std::filesystem::path dir = std::filesystem::path(REPLAY_TRACES_DIR) / "byog" / "rope";
  std::vector<std::string> names;
  if (std::filesystem::is_directory(dir))
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  // The realistic shapes (bit-identity only, no float64 reference): one per form the kernels
  // treat differently (rotate-half forward and backward, partial rotary with the backward's
  // scatters, a float32 table with an interleaved partial forward; litgpt's and Meta's below).
  const std::vector<std::string> big = {"llama_rope_table_mincut_train_fwd_1x8192x32x128",
                                        "llama_rope_table_mincut_train_bwd_1x8192x32x128",
                                        "gpt_neox_rope_mincut_train_bwd_2x2048x32x128",
                                        "gptj_rope_mincut_train_fwd_1x2048x16x256"};
  for (const std::string& n : names) {
    const bool small = n.find("_2x8x") != std::string::npos;
    if (!small && std::find(big.begin(), big.end(), n) == big.end()) continue;
    const std::string t = "byog/rope/" + n;
    out.push_back({t, [t] { return load_trace(trace_path(t)); }, small});
  }
  // The hand-captured ones (traces/): litgpt (partial rotary at the small shape, its backward's
  // association) and Meta Llama's real pairs (a table per pair), both phases, the small shape
  // (and the realistic litgpt backward and Meta forward).
  for (const char* t :
       {"litgpt_rope_train_fwd_1x8x4x2x16", "litgpt_rope_train_bwd_1x8x4x2x16",
        "meta_llama_rope_train_fwd_1x8x4x2x16", "meta_llama_rope_train_bwd_1x8x4x2x16",
        "litgpt_rope_train_bwd_2x4096x40x40x128", "meta_llama_rope_train_fwd_2x4096x32x8x128"}) {
    const std::string name = t;
    out.push_back({name, [name] { return load_trace(trace_path(name)); },
                   name.find("1x8x4x2x16") != std::string::npos});
  }
  struct Synth {
    int64_t D, R;
    bool interleaved;
    const char* dtype;
    const char* table;
  };
  const Synth synth[] = {
      {72, 72, false, "bfloat16", "bfloat16"}, {80, 80, false, "bfloat16", "float32"},
      {96, 32, false, "bfloat16", "bfloat16"}, {96, 20, false, "float16", "float16"},
      {72, 20, true, "bfloat16", "bfloat16"},  {80, 32, true, "float32", "float32"},
      {128, 128, true, "bfloat16", "float32"}, {66, 66, false, "bfloat16", "bfloat16"},
  };
  for (const Synth& s : synth) {
    RopeForm f;
    f.D = s.D;
    f.R = s.R;
    f.interleaved = s.interleaved;
    f.dtype = s.dtype;
    f.table_dtype = s.table;
    f.T = 33;  // rows not a multiple of a block
    const std::string name = std::string("synthetic_") + (s.interleaved ? "interleaved" : "half") +
                             "_D" + std::to_string(s.D) + "_R" + std::to_string(s.R) + "_" +
                             s.dtype + "_" + s.table;
    out.push_back({name, [f, name] { return parse_trace(rope_trace_json(f, name), name); }, true});
  }
  return out;
}

// Values the rope regions write.
std::vector<int> region_outputs(const Plan& plan) {
  return fusion_region_outputs(plan, "rope");
}

// The first value of `vals` whose bits differ between the two programs ("" when none).
std::string first_difference(const Graph& g, const GpuProgram& a, const GpuProgram& b,
                             const std::vector<int>& vals) {
  return first_bit_difference(g, a, b, vals);
}

class RopeGpu : public ::testing::TestWithParam<std::tuple<size_t, std::string>> {};

}  // namespace

TEST_P(RopeGpu, BitIdenticalToEagerAndPassesNumerics) {
  REQUIRE_GPU();
  const auto& [ci, variant] = GetParam();
  const GpuCase c = cases()[ci];
  Graph g = c.load();
  const Plan plan = make_plan(g, fusion_registry());
  const std::vector<int> outs = region_outputs(plan);
  ASSERT_FALSE(outs.empty()) << c.name << ": no rope region";
  const std::vector<uint64_t> seeds =
      c.reference ? std::vector<uint64_t>{41, 42, 43} : std::vector<uint64_t>{41};
  for (uint64_t seed : seeds) {
    expect_bit_identical_to_eager(g, plan, variant, outs, seed, c.reference, c.name);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Traces, RopeGpu,
    ::testing::Combine(::testing::Range<size_t>(0, cases().size()),
                       ::testing::Values("baseline", "optimized", "segmented", "host_alias")),
    [](const auto& info) {
      return test_name(cases()[std::get<0>(info.param)].name + "_" + std::get<1>(info.param));
    });

// --- mutants ----------------------------------------------------------------------------------

namespace {

struct Mutant {
  const char* name;
  bool (*applies)(const Params&);
  void (*mutate)(Params&);
  /// Wrong only on inputs where it shows: some seed must fail, not every one. Rotary dim two
  /// short on interleaved pairs leaves only the lowest-frequency pair unrotated, which at a short
  /// sequence turns by < 1e-3 rad: on Cohere's T = 8 traces the inputs of seed 41 change no
  /// output bit, those of seed 42 change 168 (unit test RopeNumerics.RotaryDimTwoShort...).
  bool some_seed = false;
};

bool has_tail(const Params& p) {  // partial rotary, or a copy into the joint gradient
  for (const auto& r : p.rotations)
    if (r.rotary_dim < r.head_dim) return true;
  return false;
}

const Mutant kMutants[] = {
    {"sin_sign_flipped", [](const Params&) { return true; }, [](Params& p) { p.sin_sign = -1; }},
    {"other_rotation_style",
     [](const Params& p) {  // a table per pair exists only for the interleaved pairs
       for (const auto& r : p.rotations)
         if (r.pair_table) return false;
       return true;
     },
     [](Params& p) {
       p.style = p.style == Style::kRotateHalf ? Style::kInterleaved : Style::kRotateHalf;
     }},
    {"rotary_dim_two_short",
     [](const Params& p) {
       for (const auto& r : p.rotations)
         if (r.cos >= 0 && r.rotary_dim < 4) return false;
       return true;
     },
     [](Params& p) {
       for (auto& r : p.rotations)
         if (r.cos >= 0) r.rotary_dim -= 2;  // not the copies into a joint gradient
     },
     true},
    {"tail_dropped", has_tail, [](Params& p) { p.write_tail = false; }},
};

const Mutant* g_mutant = nullptr;

Binding mutant_bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  Region m = r;
  auto p = std::any_cast<Params>(r.params);
  g_mutant->mutate(p);
  m.params = p;
  return rope::bind(g, m, v, ctx);
}

class RopeMutant : public ::testing::TestWithParam<std::tuple<size_t, size_t, std::string>> {};

}  // namespace

TEST_P(RopeMutant, Fails) {
  REQUIRE_GPU();
  const auto& [mi, ci, variant] = GetParam();
  g_mutant = &kMutants[mi];
  const GpuCase c = cases()[ci];
  Graph g = c.load();
  FusionSpec spec = fusions::rope;
  spec.bind = mutant_bind;
  const FusionSpec* fusions[] = {&spec};
  const Plan plan = make_plan(g, fusions);
  ASSERT_FALSE(plan.regions.empty());
  bool applies = false;
  for (const Region& r : plan.regions)
    applies |= g_mutant->applies(std::any_cast<const Params&>(r.params));
  if (!applies) GTEST_SKIP() << g_mutant->name << " does not apply to " << c.name;
  const auto bounds = default_value_bounds(g);
  bool caught_bits = false, caught_numerics = false;  // some_seed mutants: over the seeds
  for (uint64_t seed : {41u, 42u}) {
    const auto inputs = generate_inputs(g, seed);
    GpuProgram eager(g, plan, std::string(kEagerVariant), inputs, nullptr);
    eager.run_all(LaunchContext{});
    GpuProgram prog(g, plan, variant, inputs, nullptr);
    for (size_t r = 0; r < plan.regions.size(); ++r)
      ASSERT_EQ(prog.fallback_reason(static_cast<int>(r)), "") << "the mutant must run fused";
    prog.poison_outputs(nullptr);
    prog.run_all(LaunchContext{});
    REPLAY_CUDA(cudaDeviceSynchronize());
    const bool identical = first_difference(g, prog, eager, region_outputs(plan)).empty();
    const auto ref = run_reference(g, inputs);
    bool all_pass = true;
    for (int v : g.outputs)
      all_pass &= check_value(g, v, prog.download(v, nullptr), ref.at(v), ref,
                              output_bounds(g, plan, bounds, v))
                      .pass();
    if (g_mutant->some_seed) {
      caught_bits |= !identical;
      caught_numerics |= !all_pass;
      continue;
    }
    EXPECT_FALSE(identical) << c.name << " " << variant << " " << g_mutant->name << " seed " << seed
                            << ": bit-identical to eager";
    EXPECT_FALSE(all_pass) << c.name << " " << variant << " " << g_mutant->name << " seed " << seed
                           << ": passed the numerics check";
  }
  if (g_mutant->some_seed) {
    EXPECT_TRUE(caught_bits) << c.name << " " << variant << " " << g_mutant->name
                             << ": bit-identical to eager on every seed";
    EXPECT_TRUE(caught_numerics) << c.name << " " << variant << " " << g_mutant->name
                                 << ": passed the numerics check on every seed";
  }
}

namespace {
// The small bundled traces (forward and backward, both partitioners: every family) and three
// synthetic forms (the reference checks them all).
std::vector<size_t> mutant_cases() {
  std::vector<size_t> out;
  const auto cs = cases();
  for (size_t i = 0; i < cs.size(); ++i) {
    const std::string& n = cs[i].name;
    if (((n.rfind("byog/rope/", 0) == 0 || n.find("_rope_train_") != std::string::npos) &&
         cs[i].reference) ||
        n == "synthetic_half_D96_R20_float16_float16" ||
        n == "synthetic_interleaved_D72_R20_bfloat16_bfloat16" ||
        n == "synthetic_half_D66_R66_bfloat16_bfloat16")
      out.push_back(i);
  }
  return out;
}
}  // namespace

INSTANTIATE_TEST_SUITE_P(Kernels, RopeMutant,
                         ::testing::Combine(::testing::Range<size_t>(0, std::size(kMutants)),
                                            ::testing::ValuesIn(mutant_cases()),
                                            ::testing::Values("baseline", "optimized", "segmented",
                                                              "host_alias")),
                         [](const auto& info) {
                           return test_name(std::string(kMutants[std::get<0>(info.param)].name) +
                                            "_" + cases()[std::get<1>(info.param)].name + "_" +
                                            std::get<2>(info.param));
                         });

// The optimized kernel's 64-bit index path (taken beyond 2^31 chunks per job; forced here) gives
// the eager executor's bits too.
namespace {
Binding index64_bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  Region m = r;
  auto p = std::any_cast<Params>(r.params);
  p.force_index64 = true;
  m.params = p;
  return rope::bind(g, m, v, ctx);
}
}  // namespace

TEST(RopeGpuIndex64, BitIdenticalToEager) {
  REQUIRE_GPU();
  for (const char* t :
       {"byog/rope/gpt_neox_rope_mincut_train_fwd_2x8x4x64",
        "byog/rope/gptj_rope_mincut_train_bwd_2x8x2x256", "meta_llama_rope_train_fwd_1x8x4x2x16"}) {
    Graph g = load_trace(trace_path(t));
    FusionSpec spec = fusions::rope;
    spec.bind = index64_bind;
    const FusionSpec* fusions[] = {&spec};
    const Plan plan = make_plan(g, fusions);
    ASSERT_FALSE(plan.regions.empty()) << t;
    const auto inputs = generate_inputs(g, 5);
    GpuProgram eager(g, plan, std::string(kEagerVariant), inputs, nullptr);
    eager.run_all(LaunchContext{});
    GpuProgram prog(g, plan, "optimized", inputs, nullptr);
    expect_fused_where_available(plan, prog, "optimized", t);
    prog.poison_outputs(nullptr);
    prog.run_all(LaunchContext{});
    REPLAY_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ(first_difference(g, prog, eager, region_outputs(plan)), "") << t;
  }
}

// The optimized kernel's fixed forms (kernels.cu, kFixedForms) against its generic kernel (forced
// by the force_generic hook): the same bits on the realistic shapes and small ones of every form,
// the fixed form launched where rope_fixed_form says so and never under the hook. The fixed forms
// are on by default, so the other tests here run them too; this one compares them with the
// generic kernel.
namespace {
Binding fixed_bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  Region m = r;
  auto p = std::any_cast<Params>(r.params);
  p.fixed_forms = true;
  m.params = p;
  return rope::bind(g, m, v, ctx);
}
Binding generic_bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  Region m = r;
  auto p = std::any_cast<Params>(r.params);
  p.force_generic = true;
  m.params = p;
  return rope::bind(g, m, v, ctx);
}
}  // namespace

TEST(RopeGpuFixedForms, BitIdenticalToTheGenericKernel) {
  REQUIRE_GPU();
  const std::pair<const char*, bool> traces[] = {
      {"byog/rope/llama_rope_table_mincut_train_fwd_1x8192x32x128", true},
      {"byog/rope/llama_rope_table_mincut_train_bwd_1x8192x32x128", true},
      {"byog/rope/phi3_rope_mincut_train_bwd_1x4096x40x128", true},
      {"byog/rope/gpt_neox_rope_mincut_train_fwd_2x2048x32x128", true},
      {"byog/rope/gpt_neox_rope_mincut_train_bwd_2x2048x32x128", true},
      {"byog/rope/cohere_rope_mincut_train_fwd_2x8x4x64", true},
      {"byog/rope/cohere_rope_mincut_train_bwd_2x8x4x64", true},
      {"byog/rope/gptj_rope_mincut_train_fwd_1x2048x16x256", true},
      {"byog/rope/gptj_rope_mincut_train_bwd_2x8x2x256", true},
      {"litgpt_rope_train_fwd_2x4096x40x40x128", true},
      {"litgpt_rope_train_bwd_2x4096x40x40x128", true},
      {"litgpt_rope_train_bwd_1x8x4x2x16", false},  // rotary dim 4: vector width 2
      // a table per pair (Meta Llama's real pairs)
      {"meta_llama_rope_train_fwd_1x8x4x2x16", true},
      {"meta_llama_rope_train_bwd_1x8x4x2x16", true},
      {"meta_llama_rope_train_fwd_2x4096x32x8x128", true},
      {"meta_llama_rope_train_bwd_2x4096x32x8x128", true},
  };
  // Every geometry (float32 or packed bf16 math, one pass or the persistent pipelined grid) gives
  // the generic kernel's bits.
  struct Restore {  // the geometry this binary ran with (REPLAY_ROPE_GEOMETRY's or the default)
    rope::FixedGeometry before = rope::fixed_geometry();
    ~Restore() { rope::set_fixed_geometry(before); }
  } restore;
  const rope::FixedGeometry geometries[] = {{false, 0}, {true, 0}, {true, 1}, {true, 3}};
  for (const rope::FixedGeometry& geo : geometries)
    for (const auto& [t, fixed] : traces) {
      SCOPED_TRACE(std::string("geometry packed=") + (geo.packed ? "1" : "0") +
                   " blocks_per_sm=" + std::to_string(geo.blocks_per_sm));
      rope::set_fixed_geometry(geo);
      Graph g = load_trace(trace_path(t));
      FusionSpec fixed_spec = fusions::rope;
      fixed_spec.bind = fixed_bind;
      const FusionSpec* fixed_fusions[] = {&fixed_spec};
      const Plan plan = make_plan(g, fixed_fusions);
      FusionSpec spec = fusions::rope;
      spec.bind = generic_bind;
      const FusionSpec* fusions[] = {&spec};
      const Plan generic_plan = make_plan(g, fusions);
      ASSERT_FALSE(region_outputs(plan).empty()) << t;
      const auto inputs = generate_inputs(g, 11);
      uint64_t before = rope::rope_fixed_form_launches();
      GpuProgram fast(g, plan, "optimized", inputs, nullptr);
      expect_fused_where_available(plan, fast, "optimized", t);
      fast.poison_outputs(nullptr);
      fast.run_all(LaunchContext{});
      REPLAY_CUDA(cudaDeviceSynchronize());
      EXPECT_EQ(rope::rope_fixed_form_launches() > before, fixed) << t;
      before = rope::rope_fixed_form_launches();
      GpuProgram generic(g, generic_plan, "optimized", inputs, nullptr);
      expect_fused_where_available(generic_plan, generic, "optimized", t);
      generic.poison_outputs(nullptr);
      generic.run_all(LaunchContext{});
      REPLAY_CUDA(cudaDeviceSynchronize());
      EXPECT_EQ(rope::rope_fixed_form_launches(), before) << t << ": the hook must force generic";
      EXPECT_EQ(first_difference(g, fast, generic, region_outputs(plan)), "") << t;
    }
}
