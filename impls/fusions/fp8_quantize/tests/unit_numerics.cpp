// fp8_quantize numerics without a GPU: the kernels' arithmetic (quant_math.hpp, through the host
// model) against PyTorch's golden tensors of the bundled float8 linears and against the float64
// reference executor, bit for bit: amaxes, scales, reciprocals, every float8 tensor (row-major
// and the column-major copies the graph returns); the saturated cast over every bfloat16 value and
// several scales against the reference's own float8 conversion; the scale's float64 steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>

#include "impls/fusions/fp8_quantize/tests/model.hpp"
#include "impls/fusions/fp8_quantize/tests/synthetic.hpp"
#include "impls/fusions/registry.hpp"
#include "impls/reference/reference.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/safetensors.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/ops/op.hpp"

namespace replay::fusions {
extern const FusionSpec fp8_quantize;
}

using namespace replay;
using namespace replay::test;
using namespace replay::fp8_quantize;

namespace {

uint8_t fp8_byte(DType t, double v) {
  uint8_t b = 0;
  store_as(t, v, &b);
  return b;
}

std::vector<float> as_floats(const HostTensor& t) {
  return std::vector<float>(t.data.begin(), t.data.end());
}

// Equal as float8 bits, both NaN counting as equal (a NaN's sign depends on the host).
bool same_fp8(uint8_t a, uint8_t b) {
  return a == b || ((a & 0x7F) == 0x7F && (b & 0x7F) == 0x7F);
}

bool same_f(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
}

// Every region value the model computes equals the reference's, and the outputs PyTorch returned
// (golden) that are float8 tensors or reciprocals of the scales equal the model's. Returns the
// first mismatch.
std::string check_trace(const Graph& g, const std::map<int, HostTensor>& ref,
                        const std::map<std::string, HostTensor>* golden) {
  const Plan plan = make_plan(g, std::span<const FusionSpec* const>(
                                     std::vector<const FusionSpec*>{&fusions::fp8_quantize}));
  if (plan.regions.empty()) return "no fp8_quantize region";
  // value -> (model float8 bits, [rows, cols]) or (model vector)
  std::map<int, std::pair<const QuantModel*, bool>> fp8_of;  // bool: transposed
  std::map<int, std::vector<float>> vec_of;
  std::vector<std::unique_ptr<QuantModel>> models;
  std::map<int, std::pair<int64_t, int64_t>> shape_of;
  for (const Region& r : plan.regions) {
    const auto& p = std::any_cast<const Params&>(r.params);
    const std::vector<float> x = as_floats(ref.at(p.x));
    for (const Quantization& q : p.quants) {
      models.push_back(std::make_unique<QuantModel>(model_quantize(x, p.rows, p.cols, q)));
      const QuantModel& m = *models.back();
      fp8_of[q.q] = {&m, false};
      shape_of[q.q] = {p.rows, p.cols};
      for (int v : q.q_outs) {
        fp8_of[v] = {&m, v != q.q};
        shape_of[v] = {p.rows, p.cols};
      }
      vec_of[q.amax] = m.amax;
      vec_of[q.scale] = m.scale;
      std::vector<float> rcp;
      for (float s : m.scale) rcp.push_back(1.0f / s);
      for (int v : q.recip_outs) vec_of[v] = rcp;
    }
  }
  auto compare = [&](int v, const HostTensor& want, const std::string& what) -> std::string {
    const std::string name = g.values[v].name + " (" + what + ")";
    if (auto it = fp8_of.find(v); it != fp8_of.end()) {
      const auto [rows, cols] = shape_of.at(v);
      const DType t = g.meta(v).dtype;
      const bool tr = it->second.second;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const uint8_t got = it->second.first->q[r * cols + c];
          const double w = tr ? want.data[c * rows + r] : want.data[r * cols + c];
          if (!same_fp8(got, fp8_byte(t, w)))
            return name + " [" + std::to_string(r) + ", " + std::to_string(c) + "]: model " +
                   std::to_string(load_as(t, &got)) + ", want " + std::to_string(w);
        }
      return "";
    }
    const auto& m = vec_of.at(v);
    if (static_cast<int64_t>(m.size()) != want.meta.numel()) return name + ": size";
    for (size_t i = 0; i < m.size(); ++i)
      if (!same_f(m[i], want.data[i]))
        return name + " [" + std::to_string(i) + "]: model " + std::to_string(m[i]) + ", want " +
               std::to_string(want.data[i]);
    return "";
  };
  for (const auto& [v, _] : fp8_of)
    if (auto e = compare(v, ref.at(v), "reference"); !e.empty()) return e;
  for (const auto& [v, _] : vec_of)
    if (auto e = compare(v, ref.at(v), "reference"); !e.empty()) return e;
  if (!golden) return "";
  int checked = 0;
  for (int o : g.outputs) {
    // Back through the views and clones to the region value it is (odd permutes: transposed).
    int v = o, permutes = 0;
    while (!fp8_of.count(v) && !vec_of.count(v) && g.values[v].producer >= 0) {
      const Node& n = g.nodes[g.values[v].producer];
      if (n.op != Op::kPermute && n.op != Op::kClone && n.op != Op::kAlias) break;
      permutes += n.op == Op::kPermute;
      v = n.operands[0].value;
    }
    if (!fp8_of.count(v) && !vec_of.count(v)) continue;
    HostTensor want = golden->at(g.values[o].name);
    if (permutes % 2 == 1) {  // o is the transpose of v: back to v's shape
      const int64_t a = want.meta.shape.at(0), b = want.meta.shape.at(1);
      HostTensor t = want;
      for (int64_t i = 0; i < a; ++i)
        for (int64_t j = 0; j < b; ++j) t.data[j * a + i] = want.data[i * b + j];
      want = t;
    }
    if (auto e = compare(v, want, "PyTorch, as " + g.values[o].name); !e.empty()) return e;
    ++checked;
  }
  return checked ? "" : "no golden output of a region";
}

class Fp8QuantizeGolden : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(Fp8QuantizeGolden, ModelMatchesReferenceAndPyTorch) {
  Graph g = load_trace(trace_path(GetParam()));
  ReplayInputs in = make_inputs(g, 0);
  auto ref = run_reference(g, in.values);
  // Where the graph returns float8 tensors (the min-cut forwards save them for the backward),
  // PyTorch's must equal the model's; the others return only GEMM results and high-precision x.
  bool fp8_out = false;
  for (int v : g.outputs)
    fp8_out |= g.meta(v).dtype == DType::kFloat8E4M3 || g.meta(v).dtype == DType::kFloat8E5M2;
  EXPECT_EQ(check_trace(g, ref, fp8_out ? &in.golden : nullptr), "") << GetParam();
}

// The byog float8 captures with PyTorch's tensors (torchao's recipes through the backend: the
// torch.max form, rowwise_with_gw_hp, 2-D and reshape forms).
std::vector<std::string> byog_float8_golden() {
  std::vector<std::string> out;
  const std::filesystem::path dir = std::filesystem::path(REPLAY_TRACES_DIR) / "byog" / "float8";
  if (!std::filesystem::is_directory(dir)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string stem = e.path().stem().string();
    if (e.path().extension() == ".safetensors" && stem.rfind("float8_", 0) == 0)
      out.push_back("byog/float8/" + stem);
  }
  std::sort(out.begin(), out.end());
  return out;
}

INSTANTIATE_TEST_SUITE_P(Byog, Fp8QuantizeGolden, ::testing::ValuesIn(byog_float8_golden()),
                         [](const auto& info) { return test_name(info.param); });

INSTANTIATE_TEST_SUITE_P(Traces, Fp8QuantizeGolden,
                         ::testing::Values("float8_linear_tensorwise_train_fwd_2x8x64x32",
                                           "float8_linear_rowwise_train_fwd_2x8x64x32",
                                           "float8_linear_tensorwise_train_bwd_2x8x64x32",
                                           "float8_linear_rowwise_train_bwd_2x8x64x32"),
                         [](const auto& info) { return test_name(info.param); });

// Power-of-two scales (torchao's round_scales_to_power_of_2) on every granularity: the model's
// float32 log2 / floor / exp2 == the reference's float64 steps rounded where the graph
// materializes them, bit for bit, on generated inputs.
TEST(Fp8QuantizeModel, PowerOfTwoScalesMatchTheReference) {
  QuantForm f;
  f.shape = {48, 72};
  f.quants = {QuantSpec{}, QuantSpec{}, QuantSpec{}};
  f.quants[0].gran = "rowwise";
  f.quants[1].gran = "columnwise";
  f.quants[1].col_major_out = true;
  f.quants[2].fp8 = "float8_e5m2";
  f.quants[2].pow2_pow = true;
  for (auto& q : f.quants) q.pow2 = true;
  Graph g = parse_trace(quant_trace(f), "synthetic_pow2");
  for (uint64_t seed : {1u, 2u, 3u}) {
    auto ref = run_reference(g, generate_inputs(g, seed));
    EXPECT_EQ(check_trace(g, ref, nullptr), "") << "seed " << seed;
  }
}

// round_scale_pow2: exact powers of two stay, other values go down to the power below, specials
// pass through.
TEST(Fp8QuantizeModel, PowerOfTwoRoundingOfAScale) {
  for (int k = -40; k <= 40; ++k) {
    const float p = std::ldexp(1.0f, k);
    EXPECT_EQ(round_scale_pow2(p), p) << k;
    EXPECT_EQ(round_scale_pow2(p * 1.5f), p) << k;
    EXPECT_EQ(round_scale_pow2(p * 1.999f), p) << k;
  }
  EXPECT_EQ(round_scale_pow2(448.0f / 3.5f), 128.0f);
  EXPECT_EQ(round_scale_pow2(448.0f / 5.0f), 64.0f);
  EXPECT_EQ(round_scale_pow2(INFINITY), INFINITY);
  EXPECT_EQ(round_scale_pow2(0.0f), 0.0f);
  EXPECT_TRUE(std::isnan(round_scale_pow2(NAN)));
  EXPECT_EQ(quant_scale_of(5.0f, 1e-12, 448, true), 64.0f);
  EXPECT_EQ(quant_scale_of(5.0f, 1e-12, 448, false), 89.6f);
}

// Synthetic groups on generated inputs (every granularity, both float8 dtypes, float16 and
// float32 sources, x with values beyond the float8 range): model == reference.
TEST(Fp8QuantizeModel, MatchesTheReferenceOnSyntheticGroups) {
  for (const char* dt : {"bfloat16", "float16", "float32"}) {
    QuantForm f;
    f.shape = {48, 72};
    f.dtype = dt;
    f.quants = {QuantSpec{}, QuantSpec{}, QuantSpec{}, QuantSpec{}};
    f.quants[0].gran = "rowwise";
    f.quants[1].gran = "columnwise";
    f.quants[1].col_major_out = true;
    f.quants[2].gran = "tensorwise_max";
    f.quants[2].fp8 = "float8_e5m2";
    f.quants[3].gran = "rowwise";
    f.quants[3].fp8 = "float8_e5m2";
    f.quants[3].f32_abs = true;
    f.quants[0].no_abs = true;  // the amax of x itself
    Graph g = parse_trace(quant_trace(f), std::string("synthetic_") + dt);
    for (uint64_t seed : {1u, 2u}) {
      auto ref = run_reference(g, generate_inputs(g, seed));
      EXPECT_EQ(check_trace(g, ref, nullptr), "") << dt << " seed " << seed;
    }
  }
}

// The saturated cast over every bfloat16 value (ties, subnormals, zeros, infinities, NaN) and
// scales that push values past the float8 range: the kernels' float8_bits(scaled_clamped(..))
// against the reference's float32 product, clamp and float8 conversion (workloads/ir/dtype.cpp).
TEST(Fp8QuantizeModel, SaturatedCastMatchesTheReferenceOnEveryBfloat16) {
  for (bool e5m2 : {false, true}) {
    const DType t = e5m2 ? DType::kFloat8E5M2 : DType::kFloat8E4M3;
    const double mx = float8_max(e5m2);
    for (float s : {1.0f, 0.5f, 3.0f, 448.0f / 3.5f, 1e4f, 1e-3f}) {
      int mismatches = 0;
      for (uint32_t bits = 0; bits < 0x10000; ++bits) {
        const float x = bf16_bits_to_float(static_cast<uint16_t>(bits));
        const uint8_t got = float8_bits(scaled_clamped(x, s, static_cast<float>(mx)), e5m2);
        const double prod = round_to(DType::kFloat32, static_cast<double>(x) * s);
        const double clamped = std::isnan(prod) ? prod : std::min(std::max(prod, -mx), mx);
        const uint8_t want = fp8_byte(t, clamped);
        if (got != want && !(std::isnan(prod) && (got & 0x7F) == 0x7F && (want & 0x7F) == 0x7F))
          if (++mismatches <= 3)
            ADD_FAILURE() << dtype_name(t) << " x " << x << " scale " << s << ": got " << int(got)
                          << ", reference " << int(want);
      }
      EXPECT_EQ(mismatches, 0) << dtype_name(t) << " scale " << s;
    }
    // saturation: past the range the clamp gives the largest finite value (never NaN or inf)
    EXPECT_EQ(float8_bits(scaled_clamped(INFINITY, 1, mx), e5m2), e5m2 ? 0x7B : 0x7E);
    EXPECT_EQ(float8_bits(scaled_clamped(-1e30f, 1, mx), e5m2), e5m2 ? 0xFB : 0xFE);
    // NaN: 0x7F with the NaN's sign, as ATen writes it
    EXPECT_EQ(float8_bits(-std::nanf(""), e5m2), 0xFF);
    EXPECT_EQ(float8_bits(std::nanf(""), e5m2), 0x7F);
  }
  // round to nearest even at a tie: 1.0625 lies between e4m3's 1 and 1.125 -> 1 (even)
  EXPECT_EQ(float8_bits(1.0625f, false), 0x38);
  EXPECT_EQ(float8_bits(1.1875f, false), 0x3A);  // between 1.125 and 1.25 -> 1.25
}

// The scale: float32(max * (1 / max(float64(amax), eps))), NaN propagating; the amax keys order
// every float, NaN above all.
TEST(Fp8QuantizeModel, ScaleStepsAndAmaxKeys) {
  for (float a : {0.0f, 1e-13f, 1e-12f, 3.5f, 0.1f, 3.3895314e38f, 1e-40f}) {
    const double c = std::max(static_cast<double>(a), 1e-12);
    const double r = 1.0 / c;
    EXPECT_EQ(scale_from_amax(a, 1e-12, 448), static_cast<float>(r * 448)) << a;
  }
  EXPECT_EQ(scale_from_amax(INFINITY, 1e-12, 448), 0.0f);
  EXPECT_TRUE(std::isnan(scale_from_amax(NAN, 1e-12, 448)));
  // 448 / 3.5 in float64 then float32 differs from float32 division only where it rounds twice;
  // the kernels follow the graph: the float64 product, rounded once
  EXPECT_EQ(scale_from_amax(3.5f, 1e-12, 448), 128.0f);
  const float vals[] = {-INFINITY, -2.0f, -0.0f, 0.0f, 1e-40f, 1.0f, 3.0e38f, INFINITY};
  for (size_t i = 0; i + 1 < std::size(vals); ++i)
    EXPECT_LE(max_key(vals[i]), max_key(vals[i + 1])) << vals[i];
  EXPECT_GT(max_key(NAN), max_key(INFINITY));
  EXPECT_GT(max_key(-std::nanf("")), max_key(INFINITY));
  for (float v : {-3.0f, 0.0f, 2.5f, INFINITY, 1e-40f}) EXPECT_EQ(from_max_key(max_key(v)), v);
  EXPECT_TRUE(std::isnan(from_max_key(max_key(NAN))));
}

// Which groups the cast pass hands to its specialized kernel (cast_fast_plan, host logic only):
// one or two quantizations with at most one row-major dest (8-byte aligned rows) and one
// column-major dest staged in shared memory each, x in 16-byte vectors, no mutant hook; any other
// group keeps the generic kernel, which the GPU tests also run on every case.
TEST(Fp8QuantizeCastPlan, SpecializesTheLinearsGroupsOnly) {
  alignas(16) static uint8_t x[16 * 16], fp8_a[64 * 64], fp8_b[64 * 64];
  auto args = [&](int64_t rows, int64_t cols) {
    QuantizeArgs a;
    a.x = x;
    a.rows = rows;
    a.cols = cols;
    return a;
  };
  auto row_major = [&](QuantArgs& q, int64_t cols) {
    q.dests[q.n_dests++] = Fp8Dest{fp8_a, cols, 1, -1};
  };
  auto col_major = [&](QuantArgs& q, int64_t rows, int slot) {
    q.dests[q.n_dests++] = Fp8Dest{fp8_b, 1, rows, slot};
  };
  CastFast f;
  {  // tensorwise with both copies (the tensorwise linears' x and dY)
    QuantizeArgs a = args(64, 64);
    a.n_quants = 1;
    row_major(a.q[0], 64);
    col_major(a.q[0], 64, 0);
    ASSERT_TRUE(cast_fast_plan(a, 1u, f));
    EXPECT_EQ(f.nq, 1);
    EXPECT_EQ(f.q[0].rm, fp8_a);
    EXPECT_EQ(f.q[0].rs, 64);
    EXPECT_EQ(f.q[0].slot, 0);
    EXPECT_TRUE(f.col_major);
    EXPECT_EQ(f.quants, 1u);
  }
  {  // rowwise row-major beside columnwise column-major (the rowwise linears)
    QuantizeArgs a = args(64, 64);
    a.n_quants = 2;
    a.q[0].gran = Granularity::kRowwise;
    a.q[1].gran = Granularity::kColumnwise;
    a.q[1].e5m2 = true;
    row_major(a.q[0], 64);
    col_major(a.q[1], 64, 0);
    ASSERT_TRUE(cast_fast_plan(a, 3u, f));
    EXPECT_EQ(f.nq, 2);
    EXPECT_EQ(f.q[0].gran, Granularity::kRowwise);
    EXPECT_EQ(f.q[0].slot, -1);
    EXPECT_EQ(f.q[1].rm, nullptr);
    EXPECT_TRUE(f.q[1].e5m2);
    // Only the quantizations in the mask count: the second one alone.
    ASSERT_TRUE(cast_fast_plan(a, 2u, f));
    EXPECT_EQ(f.nq, 1);
    EXPECT_EQ(f.q[0].qi, 1);
    EXPECT_EQ(f.quants, 2u);
  }
  {  // declines
    QuantizeArgs a = args(64, 64);
    a.n_quants = 3;
    for (int i = 0; i < 3; ++i) row_major(a.q[i], 64);
    EXPECT_FALSE(cast_fast_plan(a, 7u, f)) << "three quantizations";
    EXPECT_TRUE(cast_fast_plan(a, 5u, f)) << "two of them";
    a.n_quants = 1;
    a.row_scale_xor = 1;
    EXPECT_FALSE(cast_fast_plan(a, 1u, f)) << "the mutant hook";
    a.row_scale_xor = 0;
    a.q[0].n_dests = 0;
    row_major(a.q[0], 64);
    row_major(a.q[0], 64);
    EXPECT_FALSE(cast_fast_plan(a, 1u, f)) << "two row-major dests";
    a.q[0].n_dests = 0;
    col_major(a.q[0], 64, -1);
    EXPECT_FALSE(cast_fast_plan(a, 1u, f)) << "a column-major dest written byte by byte";
    a.q[0].n_dests = 0;
    a.q[0].dests[a.q[0].n_dests++] = Fp8Dest{fp8_a, 68, 1, -1};
    EXPECT_FALSE(cast_fast_plan(a, 1u, f)) << "rows not 8-byte aligned";
    a.q[0].n_dests = 0;
    row_major(a.q[0], 64);
    EXPECT_TRUE(cast_fast_plan(a, 1u, f));
    a.cols = 60;
    EXPECT_FALSE(cast_fast_plan(a, 1u, f)) << "columns not a multiple of 8";
    a.cols = 64;
    a.x = x + 2;
    EXPECT_FALSE(cast_fast_plan(a, 1u, f)) << "x not 16-byte aligned";
  }
}
