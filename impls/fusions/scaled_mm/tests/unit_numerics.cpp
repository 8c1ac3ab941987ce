// Which baseline keeps the graph's numerics: each candidate's arithmetic simulated on the CPU on a
// rowwise float8 linear (x [2, 256, 1024] float8_e4m3fn, w [512, 1024], _scaled_mm with the
// reciprocals of scales in [1.1, 2.5], bfloat16 output), checked with the harness's own verdict
// (check_value with the default bounds, which carry the float8 GEMM's error model) against the
// float64 reference. This decides how the baseline dequantizes (TUNING.md, "Baseline"):
//  - the float8 values cast to bfloat16 exactly, the GEMM accumulated in float32, the scales
//    applied to the float32 accumulator, one rounding: PASS (what the baseline runs);
//  - each operand dequantized with its scales into bfloat16 (x.to(bf16) * scale: a rounding per
//    element), then a bfloat16 GEMM: FAIL.
#include <gtest/gtest.h>

#include <functional>

#include "harness/report/numerics.hpp"
#include "impls/fusions/scaled_mm/tests/synthetic.hpp"
#include "impls/reference/reference.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/trace_loader.hpp"

using namespace replay;
using namespace replay::test;

namespace {

struct Sim {
  Graph g;
  std::map<int, HostTensor> ref;
  int64_t M = 0, N = 0, K = 0;
  const HostTensor& at(const char* v) const { return ref.at(g.find_value(v)); }
};

Sim simulate(uint64_t seed) {
  Float8Form f;
  f.B = 2;
  f.T = 256;
  f.K = 1024;
  f.N = 512;
  Sim s{parse_trace(float8_linear_trace(f), "<sim>"), {}, f.B * f.T, f.N, f.K};
  s.ref = run_reference(s.g, generate_inputs(s.g, seed));
  return s;
}

// The verdict on the result view_1 computed per element by `fn(m, n)` (already rounded).
NumericsResult verdict(const Sim& s, const std::function<double(int64_t, int64_t)>& fn) {
  const int v = s.g.find_value("view_1");
  HostTensor got = make_host_tensor(s.g.meta(v).shape, s.g.meta(v).dtype);
  for (int64_t m = 0; m < s.M; ++m)
    for (int64_t n = 0; n < s.N; ++n) got.data[m * s.N + n] = fn(m, n);
  const auto bounds = default_value_bounds(s.g);
  return check_value(s.g, v, got, s.ref.at(v), s.ref, bounds[v]);
}

double bf16(double v) {
  return round_to(DType::kBFloat16, v);
}

// sum_k a'[m, k] b'[n, k] over transformed operands, accumulated in float32 in k order.
std::vector<float> gemm_f32(const Sim& s, const std::function<double(int64_t, int64_t)>& a,
                            const std::function<double(int64_t, int64_t)>& b) {
  std::vector<float> out(static_cast<size_t>(s.M * s.N));
  std::vector<double> bt(static_cast<size_t>(s.N * s.K));
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t k = 0; k < s.K; ++k) bt[n * s.K + k] = b(n, k);
  std::vector<double> row(static_cast<size_t>(s.K));
  for (int64_t m = 0; m < s.M; ++m) {
    for (int64_t k = 0; k < s.K; ++k) row[k] = a(m, k);
    for (int64_t n = 0; n < s.N; ++n) {
      float acc = 0;
      for (int64_t k = 0; k < s.K; ++k)
        acc += static_cast<float>(row[k] * bt[n * s.K + k]);  // a product of bf16 values: exact
      out[m * s.N + n] = acc;
    }
  }
  return out;
}

}  // namespace

TEST(ScaledMmNumerics, ExactDequantizeThenScaleTheAccumulatorPasses) {
  const Sim s = simulate(7);
  const HostTensor &x = s.at("x"), &w = s.at("weight");  // [M, K], [N, K] float8 values
  const HostTensor &ra = s.at("reciprocal"), &rb = s.at("reciprocal_1");  // float32 1 / s
  const auto acc = gemm_f32(
      s, [&](int64_t m, int64_t k) { return x.data[m * s.K + k]; },
      [&](int64_t n, int64_t k) { return w.data[n * s.K + k]; });
  const auto r = verdict(s, [&](int64_t m, int64_t n) {
    const float scale = static_cast<float>(ra.data[m]) * static_cast<float>(rb.data[n]);
    return bf16(acc[m * s.N + n] * scale);
  });
  EXPECT_TRUE(r.pass()) << r.failure();
}

TEST(ScaledMmNumerics, DequantizeWithScalesToBf16Fails) {
  const Sim s = simulate(7);
  const HostTensor &x = s.at("x"), &w = s.at("weight");
  const HostTensor &ra = s.at("reciprocal"), &rb = s.at("reciprocal_1");
  const auto acc = gemm_f32(
      s,
      [&](int64_t m, int64_t k) {
        return bf16(static_cast<float>(x.data[m * s.K + k]) * static_cast<float>(ra.data[m]));
      },
      [&](int64_t n, int64_t k) {
        return bf16(static_cast<float>(w.data[n * s.K + k]) * static_cast<float>(rb.data[n]));
      });
  const auto r = verdict(s, [&](int64_t m, int64_t n) { return bf16(acc[m * s.N + n]); });
  EXPECT_FALSE(r.pass()) << "dequantizing with the scales into bfloat16 keeps the _scaled_mm "
                            "bounds: the baseline could run x.to(bf16) * scale";
  std::printf("dequantize with scales to bfloat16: %s\n", r.failure().c_str());
}
