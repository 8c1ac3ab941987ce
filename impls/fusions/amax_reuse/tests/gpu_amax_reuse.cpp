// amax_reuse on the GPU: both variants bit-identical to the float64 reference (NaN counted equal
// to NaN) on every small bundled trace they match and on synthetic forms that take each kernel
// path (rows, tiles, tiles_packed; packed |bf16| and |fp16| max, both extremes, scalar loads for
// odd widths; NaN, ±inf and -0.0 in the input), every graph output also passing the harness's own
// verdict; and mutants the bitwise check catches: the abs dropped, min computed for max, the
// rowwise amax reduced over the wrong dim (the columns of a square x).
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>

#include "impls/fusions/amax_reuse/params.hpp"
#include "impls/fusions/amax_reuse/tests/synthetic.hpp"
#include "impls/fusions/binding.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/loader/trace_loader.hpp"

namespace replay::fusions {
extern const FusionSpec amax_reuse;
}

using namespace replay;
using namespace replay::test;

namespace {

// Values of `got` and `want` (dtype values held as float64) identical bit for bit, NaN equal to
// NaN; the first difference, or "".
std::string bitwise_diff(const HostTensor& got, const HostTensor& want) {
  if (got.data.size() != want.data.size()) return "sizes differ";
  for (size_t i = 0; i < got.data.size(); ++i) {
    const double a = got.data[i], b = want.data[i];
    if (std::isnan(a) && std::isnan(b)) continue;
    if (std::memcmp(&a, &b, sizeof a) != 0)
      return "element " + std::to_string(i) + ": got " + std::to_string(a) + " (sign " +
             std::to_string(std::signbit(a)) + "), reference " + std::to_string(b) + " (sign " +
             std::to_string(std::signbit(b)) + ")";
  }
  return "";
}

// Puts NaN, ±inf and -0.0 into the first rows of input `x` ([M, N] as stored, M >= 4).
void inject_special_values(const Graph& g, std::map<int, HostTensor>& in, const std::string& x) {
  HostTensor& t = in.at(g.find_value(x));
  const int64_t n = t.meta.shape.back();
  t.data[3] = std::nan("");                                      // row 0: NaN propagates
  t.data[n + 5] = std::numeric_limits<double>::infinity();       // row 1: +inf
  t.data[2 * n + 1] = -std::numeric_limits<double>::infinity();  // row 2: -inf
  for (int64_t c = 0; c < n; ++c) t.data[3 * n + c] = -0.0;      // row 3: all -0.0
  t.data[n - 1] = std::nan("");  // the last column (a partial strip of the packed kernel)
  t.data[2 * n + n - 2] = std::numeric_limits<double>::infinity();
}

int amax_regions(const Plan& plan) {
  int n = 0;
  for (const Region& r : plan.regions) n += r.fusion == &fusions::amax_reuse;
  return n;
}

// Runs `variant` of g (plan given) on inputs from `seed` (special values injected into `special`
// when set) and checks every amax_reuse region output bit for bit and every graph output with the
// harness's verdict.
void run_and_check(const Graph& g, const Plan& plan, const std::string& variant, uint64_t seed,
                   const std::string& special) {
  auto inputs = generate_inputs(g, seed);
  if (!special.empty()) inject_special_values(g, inputs, special);
  auto ref = run_reference(g, std::move(inputs));
  GpuProgram prog(g, plan, variant, ref, nullptr);
  expect_fused_where_available(plan, prog, variant, g.name);
  prog.poison_outputs(nullptr);
  prog.run_all(LaunchContext{});
  REPLAY_CUDA(cudaDeviceSynchronize());
  for (const Region& r : plan.regions) {
    if (r.fusion->name != fusions::amax_reuse.name) continue;
    for (int v : r.outputs)
      EXPECT_EQ(bitwise_diff(prog.download(v, nullptr), ref.at(v)), "")
          << g.name << " " << variant << " seed " << seed << " " << g.values[v].name;
  }
  const auto bounds = default_value_bounds(g);
  for (int v : g.outputs) {
    const auto res = check_value(g, v, prog.download(v, nullptr), ref.at(v), ref,
                                 output_bounds(g, plan, bounds, v));
    EXPECT_TRUE(res.pass()) << g.name << " " << variant << " seed " << seed << " "
                            << g.values[v].name << ": " << res.failure();
  }
}

struct GpuCase {
  std::string name;
  AmaxForm form;
  std::string special;  ///< input to put NaN / inf / -0.0 into ("" none)
};

std::vector<GpuCase> cases() {
  const AmaxRed rows{"aten.amax.default", {-1}, true}, cols{"aten.amax.default", {0}, true},
      all{"aten.amax.default", {}, false, false}, max_all{"aten.max.default", {}, false, false},
      amin_rows{"aten.amin.default", {-1}, true}, min_all{"aten.min.default", {}, false, false};
  auto form = [](std::vector<int64_t> shape, std::string dtype, std::string prologue,
                 std::vector<AmaxRed> reds) {
    AmaxForm f;
    f.shape = std::move(shape);
    f.dtype = std::move(dtype);
    f.prologue = std::move(prologue);
    f.reds = std::move(reds);
    return f;
  };
  return {
      {"bf16_rows_all_16x64", form({16, 64}, "bfloat16", "abs_f32_abs", {rows, all}), ""},
      {"bf16_rows_max_2048x8192", form({2048, 8192}, "bfloat16", "abs_f32_abs", {rows, max_all}),
       ""},
      {"bf16_rows_cols_all_2x8x64",
       form({2, 8, 64}, "bfloat16", "abs_f32_abs",
            {rows, {"aten.amax.default", {0, 1}, true}, max_all}),
       ""},
      {"f32_rows_cols_all_48x136", form({48, 136}, "float32", "abs", {rows, cols, all}), ""},
      {"bf16_rows_cols_1024x4096", form({1024, 4096}, "bfloat16", "abs", {rows, cols}), ""},
      {"f16_rows_all_odd_600x67", form({600, 67}, "float16", "abs", {rows, all}), ""},
      {"bf16_amin_amax_640x256",
       form({640, 256}, "bfloat16", "none", {amin_rows, rows, min_all, max_all}), ""},
      {"bf16_cols_max_1000x72", form({1000, 72}, "bfloat16", "abs", {cols, max_all}), ""},
      {"bf16_special_values_16x64", form({16, 64}, "bfloat16", "abs_f32_abs", {rows, cols, all}),
       "x"},
      {"f32_special_values_none_600x64",
       form({600, 64}, "float32", "none", {rows, amin_rows, max_all, min_all}), "x"},
      {"bf16_special_values_rows_600x64", form({600, 64}, "bfloat16", "abs", {rows, all}), "x"},
      // The packed tiles kernel: two strips (the second partial), rows not a multiple of a step.
      {"f16_rows_cols_all_40x1096", form({40, 1096}, "float16", "abs", {rows, cols, max_all}), ""},
      {"bf16_special_values_cols_1000x1096",
       form({1000, 1096}, "bfloat16", "abs_f32_abs", {rows, cols, all}), "x"},
      {"f16_special_values_cols_40x1096", form({40, 1096}, "float16", "abs", {rows, cols, max_all}),
       "x"},
  };
}

class AmaxReuseGpu : public ::testing::TestWithParam<std::tuple<size_t, std::string>> {};

}  // namespace

TEST_P(AmaxReuseGpu, BitIdenticalToReference) {
  REQUIRE_GPU();
  const auto& [ci, variant] = GetParam();
  const GpuCase c = cases()[ci];
  AmaxForm f = c.form;
  f.name = c.name;
  Graph g = parse_trace(amax_trace(f), c.name);
  const Plan plan = make_plan(g, fusion_registry());
  ASSERT_EQ(amax_regions(plan), 1) << c.name;
  for (uint64_t seed : {41u, 42u}) run_and_check(g, plan, variant, seed, c.special);
}

INSTANTIATE_TEST_SUITE_P(Synthetic, AmaxReuseGpu,
                         ::testing::Combine(::testing::Range<size_t>(0, cases().size()),
                                            ::testing::Values("baseline", "optimized")),
                         [](const auto& info) {
                           return test_name(cases()[std::get<0>(info.param)].name + "_" +
                                            std::get<1>(info.param));
                         });

// Every small bundled trace with an amax_reuse region under the full registry (x of at most 2^22
// elements: the seed captures traces/byog/float8/amax_*_64x96, the float8 rowwise linears, unless
// a quantization fusion earlier in the registry claims their amaxes).
TEST(AmaxReuseGpuTraces, BitIdenticalOnBundledTraces) {
  REQUIRE_GPU();
  int traces = 0;
  for (const std::string& t : bundled_trace_names()) {
    Graph g = load_trace(trace_path(t), cut_options());  // the decoder layers cut attention
    const Plan plan = make_plan(g, fusion_registry());
    bool small = amax_regions(plan) > 0;
    for (const Region& r : plan.regions)
      if (r.fusion == &fusions::amax_reuse)
        small &= g.meta(std::any_cast<const amax_reuse::Params&>(r.params).x).numel() <= (1 << 22);
    if (!small) continue;
    ++traces;
    for (const char* variant : {"baseline", "optimized"})
      for (uint64_t seed : {41u, 42u}) run_and_check(g, plan, variant, seed, "");
  }
  EXPECT_GE(traces, 2);  // at least the two seed captures
  std::cout << "amax_reuse regions in " << traces << " small bundled traces\n";
}

// --- mutants ----------------------------------------------------------------------------------

namespace {

enum class Mutant { kDropAbs, kMinForMax, kWrongDim };
Mutant g_mutant = Mutant::kDropAbs;

Binding mutant_bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  Region m = r;
  auto p = std::any_cast<amax_reuse::Params>(r.params);
  if (g_mutant == Mutant::kDropAbs) p.abs = false;
  if (g_mutant == Mutant::kMinForMax)
    for (auto& red : p.reductions) red.extreme = amax_reuse::Extreme::kMin;
  if (g_mutant == Mutant::kWrongDim)  // a square x: the rowwise amax over the columns instead
    for (auto& red : p.reductions)
      if (red.kind == amax_reuse::AmaxKind::kRows) red.kind = amax_reuse::AmaxKind::kCols;
  m.params = p;
  return amax_reuse::bind(g, m, v, ctx);
}

// The mutant runs fused (no fallback) and the bitwise check finds a wrong output, both seeds.
void expect_mutant_caught(const Graph& g, Mutant mu, const std::string& variant) {
  g_mutant = mu;
  FusionSpec spec = fusions::amax_reuse;
  spec.bind = mutant_bind;
  const FusionSpec* only[] = {&spec};
  const Plan plan = make_plan(g, only);
  ASSERT_FALSE(plan.regions.empty());
  for (uint64_t seed : {41u, 42u}) {
    auto ref = run_reference(g, generate_inputs(g, seed));
    GpuProgram prog(g, plan, variant, ref, nullptr);
    ASSERT_EQ(prog.fallback_reason(0), "") << "the mutant must run the fused path";
    prog.poison_outputs(nullptr);
    prog.run_all(LaunchContext{});
    REPLAY_CUDA(cudaDeviceSynchronize());
    int wrong = 0;
    for (int v : plan.regions[0].outputs)
      wrong += !bitwise_diff(prog.download(v, nullptr), ref.at(v)).empty();
    EXPECT_GT(wrong, 0) << g.name << " " << variant << " seed " << seed << ": the mutant passed";
  }
}

}  // namespace

TEST(AmaxReuseMutant, DroppedAbsIsCaught) {
  REQUIRE_GPU();
  for (const char* variant : {"baseline", "optimized"}) {
    expect_mutant_caught(parse_trace(amax_trace(AmaxForm{}), "drop_abs"), Mutant::kDropAbs,
                         variant);
    expect_mutant_caught(load_trace(trace_path("float8_linear_rowwise_train_fwd_2x8x64x32")),
                         Mutant::kDropAbs, variant);
  }
}

TEST(AmaxReuseMutant, MinForMaxIsCaught) {
  REQUIRE_GPU();
  for (const char* variant : {"baseline", "optimized"}) {
    expect_mutant_caught(parse_trace(amax_trace(AmaxForm{}), "min_for_max"), Mutant::kMinForMax,
                         variant);
    expect_mutant_caught(load_trace(trace_path("float8_linear_rowwise_train_bwd_2x8x64x32")),
                         Mutant::kMinForMax, variant);
  }
}

TEST(AmaxReuseMutant, WrongDimIsCaught) {
  REQUIRE_GPU();
  AmaxForm f;
  f.shape = {64, 64};
  for (const char* variant : {"baseline", "optimized"})
    expect_mutant_caught(parse_trace(amax_trace(f), "wrong_dim"), Mutant::kWrongDim, variant);
}

// The synthetic cases above take every kernel: rowwise + tensorwise with many rows the rows
// kernel (packed for |bf16|), with a columnwise amax or few rows a tiles kernel: the packed one for
// maxima of |16-bit x| in whole 16-byte vectors, the key-per-element one otherwise.
TEST(AmaxReuseKernel, CasesTakeBothPaths) {
  REQUIRE_GPU();
  amax_reuse::MultiAmaxArgs a;
  a.x_dtype = DType::kBFloat16;
  a.abs = true;
  a.M = 2048;
  a.N = 8192;
  a.ld = a.N;
  a.out[0].kind = amax_reuse::AmaxKind::kRows;
  a.out[1].kind = amax_reuse::AmaxKind::kAll;
  a.n_out = 2;
  EXPECT_STREQ(amax_reuse::multi_amax_path(a), "rows");
  a.M = 16;
  EXPECT_STREQ(amax_reuse::multi_amax_path(a), "tiles_packed");
  a.M = 1024;
  a.out[1].kind = amax_reuse::AmaxKind::kCols;
  EXPECT_STREQ(amax_reuse::multi_amax_path(a), "tiles_packed");
  a.out[1].extreme = amax_reuse::Extreme::kMin;  // an amin: keys per element
  EXPECT_STREQ(amax_reuse::multi_amax_path(a), "tiles");
  a.out[1].extreme = amax_reuse::Extreme::kMax;
  a.abs = false;
  EXPECT_STREQ(amax_reuse::multi_amax_path(a), "tiles");
  a.abs = true;
  a.N = 8190;  // not whole 16-byte vectors
  a.ld = a.N;
  EXPECT_STREQ(amax_reuse::multi_amax_path(a), "tiles");
}
