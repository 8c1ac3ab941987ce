// Which GEMM epilogues keep the graph's numerics: each candidate's arithmetic simulated on the CPU
// on a bfloat16 linear + GELU of [1024, 512] x [512, 1024] (nn.Linear with bias, the activation
// upcast to float32 and cast back, as Inductor's decomposition writes it), and checked with the
// harness's own verdict (check_value with the default bounds) against the float64 reference.
// These decide what the optimized variant may use (TUNING.md, "Numerics"):
//  - the fused kernel's arithmetic (the graph's roundings, float32 math): PASS;
//  - cuBLASLt's GELU epilogue (GELU_BIAS / GELU_AUX_BIAS: GELU, tanh form, of the unrounded float32
//    acc + bias): FAIL on the tanh graph too, because the graph rounds the pre-activation to
//    bfloat16 before the GELU;
//  - GELU tanh in place of erf (the mutant the GPU tests launch): FAIL;
//  - mm + add(bias) computed with CUBLASLT_EPILOGUE_BIAS (one rounding where the graph rounds
//    twice): FAIL.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "harness/report/numerics.hpp"
#include "impls/fusions/matmul_epilogue/params.hpp"
#include "impls/fusions/matmul_epilogue/tests/synthetic.hpp"
#include "impls/fusions/registry.hpp"
#include "impls/reference/reference.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/plan/plan.hpp"

using namespace replay;
using namespace replay::test;
using replay::matmul_epilogue::Act;
using replay::matmul_epilogue::act_reference;

namespace {

struct Sim {
  Graph g;
  std::map<int, HostTensor> ref;
  std::vector<double> acc;  // x @ w^T in float64, [M, N]
  int64_t M = 0, N = 0, K = 0;
};

Sim simulate(const std::string& bias, const std::string& act, uint64_t seed) {
  LinearForm f;
  f.B = 4;
  f.T = 256;
  f.C = 512;
  f.N = 1024;
  f.bias = bias;
  f.act = act;
  f.save_pre = true;
  Sim s{parse_trace(linear_trace(f), "<sim>"), {}, {}, f.B * f.T, f.N, f.C};
  s.ref = run_reference(s.g, generate_inputs(s.g, seed));
  const HostTensor& x = s.ref.at(s.g.find_value("x"));
  const HostTensor& w = s.ref.at(s.g.find_value("weight"));  // [N, K]
  s.acc.assign(static_cast<size_t>(s.M * s.N), 0.0);
  for (int64_t m = 0; m < s.M; ++m)
    for (int64_t n = 0; n < s.N; ++n) {
      double a = 0;
      for (int64_t k = 0; k < s.K; ++k) a += x.data[m * s.K + k] * w.data[n * s.K + k];
      s.acc[m * s.N + n] = a;
    }
  return s;
}

// The verdict on value `name` of a result computed per element by `fn(m, n)` (already rounded).
NumericsResult verdict(const Sim& s, const std::string& name,
                       const std::function<double(int64_t, int64_t)>& fn) {
  const int v = s.g.find_value(name);
  HostTensor got = make_host_tensor(s.g.meta(v).shape, s.g.meta(v).dtype);
  for (int64_t m = 0; m < s.M; ++m)
    for (int64_t n = 0; n < s.N; ++n) got.data[m * s.N + n] = fn(m, n);
  const auto bounds = default_value_bounds(s.g);
  return check_value(s.g, v, got, s.ref.at(v), s.ref, bounds[v]);
}

// kernels.cu's act_eval: an activation and its derivative in float32 from shared intermediates,
// every step rounded as written (std::fma where the kernel has __fmaf_rn).
struct ActEval {
  float act, grad;
};

ActEval act_eval(Act a, float x) {
  switch (a) {
    case Act::kGeluErf: {
      const float c = 0.5f * (1.0f + std::erf(x * 0.70710678118654752f));
      const float pdf = std::exp(-0.5f * x * x) * 0.39894228040143268f;
      return {x * c, std::fma(x, pdf, c)};
    }
    case Act::kGeluTanh: {
      const float k = 0.79788456080286536f;
      const float x2 = x * x;
      const float t = std::tanh(k * std::fma(0.044715f * x2, x, x));
      const float h = 0.5f * (1.0f + t);
      const float slope = k * std::fma(0.134145f, x2, 1.0f);
      return {x * h, std::fma(0.5f * x * std::fma(-t, t, 1.0f), slope, h)};
    }
    case Act::kSilu: {
      const float s = 1.0f / (1.0f + std::exp(-x));
      return {x * s, s * std::fma(x, 1.0f - s, 1.0f)};
    }
    default:
      return {x, 1.0f};
  }
}

float act_f(Act a, float x) {  // the fused kernel's float32 formulas (kernels.cu)
  return act_eval(a, x).act;
}

double bf16(double v) {
  return round_to(DType::kBFloat16, v);
}

}  // namespace

TEST(MatmulEpilogueNumerics, FusedKernelArithmeticPasses) {
  for (auto [act, a] :
       {std::pair{"gelu_erf", Act::kGeluErf}, std::pair{"gelu_tanh", Act::kGeluTanh}}) {
    Sim s = simulate("addmm", act, 7);
    const HostTensor& pre = s.ref.at(s.g.find_value("gemm"));
    const auto r = verdict(s, "y", [&](int64_t m, int64_t n) {
      return bf16(act_f(a, static_cast<float>(pre.data[m * s.N + n])));
    });
    EXPECT_TRUE(r.pass()) << act << ": " << r.failure();
  }
}

TEST(MatmulEpilogueNumerics, CublasLtGeluEpilogueOnTheUnroundedPreActivationFails) {
  Sim s = simulate("addmm", "gelu_tanh", 7);
  const HostTensor& b = s.ref.at(s.g.find_value("bias"));
  const auto r = verdict(s, "y", [&](int64_t m, int64_t n) {
    const float z = static_cast<float>(s.acc[m * s.N + n] + b.data[n]);
    return bf16(act_f(Act::kGeluTanh, z));
  });
  EXPECT_FALSE(r.pass()) << "cuBLASLt's GELU epilogue would keep the graph's numerics: "
                            "use CUBLASLT_EPILOGUE_GELU_AUX_BIAS for the tanh form";
}

TEST(MatmulEpilogueNumerics, GeluTanhForErfFails) {
  Sim s = simulate("addmm", "gelu_erf", 7);
  const HostTensor& pre = s.ref.at(s.g.find_value("gemm"));
  const auto r = verdict(s, "y", [&](int64_t m, int64_t n) {
    return bf16(act_f(Act::kGeluTanh, static_cast<float>(pre.data[m * s.N + n])));
  });
  EXPECT_FALSE(r.pass()) << "the tanh GELU passes the bounds of the erf graph";
}

TEST(MatmulEpilogueNumerics, BiasEpilogueForMmPlusAdd) {
  // The graph: round(round(acc) + bias); CUBLASLT_EPILOGUE_BIAS: round(acc + bias).
  Sim s = simulate("add", "none", 7);
  const HostTensor& b = s.ref.at(s.g.find_value("bias"));
  const auto single = verdict(s, "add_bias", [&](int64_t m, int64_t n) {
    return bf16(static_cast<float>(s.acc[m * s.N + n] + b.data[n]));
  });
  const auto twice = verdict(s, "add_bias", [&](int64_t m, int64_t n) {
    return bf16(static_cast<float>(bf16(s.acc[m * s.N + n]) + b.data[n]));
  });
  EXPECT_TRUE(twice.pass()) << twice.failure();
  // One rounding is off by one ulp wherever the graph's two roundings land elsewhere (about a
  // third of the elements: rel_l2 2.8e-3 against a bound of 6.2e-4, seed 7), so the optimized
  // variant adds the bias of mm + add in its pointwise kernel, after the GEMM's rounding.
  EXPECT_FALSE(single.pass()) << "CUBLASLT_EPILOGUE_BIAS keeps the numerics of mm + add";
}

// --- backward epilogues
// --------------------------------------------------------------------------- The backward kernel's
// arithmetic (kernels.cu: float32, the graph's roundings, the bias gradient summed in float32 from
// the rounded d_pre) on the bundled backward graphs rescaled to shapes that make a verdict evidence
// ([1024, 512] rows x columns after a K = 512 GEMM), against the float64 reference with the
// harness's verdict; and the mutants the GPU tests launch, which must fail.

namespace {

float act_grad_f(Act a, float x) {  // kernels.cu's act_eval(a, x).grad
  return act_eval(a, x).grad;
}

float silu_f(float x) {  // kernels.cu's act_eval(kSilu, x).act
  return act_eval(Act::kSilu, x).act;
}

struct BwdSim {
  Graph g;
  std::map<int, HostTensor> ref;
  std::vector<double> d_pre;  // the simulated result, rounded
  int64_t M = 0, N = 0;
  const HostTensor& at(const std::string& v) const { return ref.at(g.find_value(v)); }
  NumericsResult check(const std::string& name, const std::vector<double>& got_data) const {
    const int v = g.find_value(name);
    HostTensor got = make_host_tensor(g.meta(v).shape, g.meta(v).dtype);
    for (size_t i = 0; i < got_data.size(); ++i) got.data[i] = got_data[i];
    const auto bounds = default_value_bounds(g);
    return check_value(g, v, got, ref.at(v), ref, bounds[v]);
  }
};

// nanoGPT's MLP backward (GELU erf or tanh) at [B, T] = [2, 512] (M = 1024), C = 512, N = 512,
// d_pre computed with `kernel_act`'s derivative.
BwdSim nanogpt_bwd(const std::string& trace, Act kernel_act, double pre_std = 0) {
  nlohmann::json t = rescaled_trace(trace, {{8, 512}, {16, 1024}, {64, 512}, {256, 512}});
  for (auto& in : t["inputs"])
    if (in["id"] == "addmm" && pre_std > 0)
      in["stats"] = {{"mean", 0.0}, {"std", pre_std}, {"min", -6 * pre_std}, {"max", 6 * pre_std}};
  BwdSim s{parse_trace(t, "<bwd>"), {}, {}, 1024, 512};
  s.ref = run_reference(s.g, generate_inputs(s.g, 7));
  const HostTensor &g = s.at("mm"), &x = s.at("addmm");
  for (int64_t i = 0; i < s.M * s.N; ++i)
    s.d_pre.push_back(bf16(static_cast<float>(g.data[i]) *
                           act_grad_f(kernel_act, static_cast<float>(x.data[i]))));
  return s;
}

// dbias[n] = round(sum over rows of d_pre[m, n], float32, rows in order).
std::vector<double> column_sums(const BwdSim& s) {
  std::vector<double> out(static_cast<size_t>(s.N));
  for (int64_t n = 0; n < s.N; ++n) {
    float acc = 0;
    for (int64_t m = 0; m < s.M; ++m) acc += static_cast<float>(s.d_pre[m * s.N + n]);
    out[n] = bf16(acc);
  }
  return out;
}

}  // namespace

TEST(MatmulEpilogueNumerics, BackwardKernelArithmeticPasses) {
  for (auto [trace, act] : {std::pair{"nanogpt_mlp_train_bwd_2x8x64", Act::kGeluErf},
                            std::pair{"nanogpt_mlp_gelu_tanh_train_bwd_2x8x64", Act::kGeluTanh}}) {
    for (double pre_std : {0.0, 1.0}) {  // the capture's statistics; a pre-activation of std 1
      BwdSim s = nanogpt_bwd(trace, act, pre_std);
      const auto r = s.check("view_7", s.d_pre);
      EXPECT_TRUE(r.pass()) << trace << " std " << pre_std << ": " << r.failure();
      const auto b = s.check("view_8", column_sums(s));  // the bias gradient
      EXPECT_TRUE(b.pass()) << trace << " std " << pre_std << " bias gradient: " << b.failure();
    }
  }
}

TEST(MatmulEpilogueNumerics, BackwardMutantsFail) {
  // GELU tanh's derivative for erf's.
  // At the capture's pre-activation spread (std 0.16, where the two derivatives differ by far less
  // than a bfloat16 ulp) it passes the bounds; at std 1 (rel_l2 1.2e-3 against 4.3e-4) it fails.
  BwdSim s = nanogpt_bwd("nanogpt_mlp_train_bwd_2x8x64", Act::kGeluTanh, 1.0);
  EXPECT_FALSE(s.check("view_7", s.d_pre).pass()) << "tanh's derivative passes the erf graph";
  // The bias gradient over the wrong dim: row sums (of the first N rows) for column sums.
  BwdSim t = nanogpt_bwd("nanogpt_mlp_train_bwd_2x8x64", Act::kGeluErf);
  std::vector<double> rows(static_cast<size_t>(t.N));
  for (int64_t n = 0; n < t.N; ++n) {
    float acc = 0;
    for (int64_t c = 0; c < t.N; ++c) acc += static_cast<float>(t.d_pre[n * t.N + c]);
    rows[n] = bf16(acc);
  }
  EXPECT_FALSE(t.check("view_8", rows).pass()) << "row sums pass as the bias gradient";
  // The bias gradient of the GEMM output g (dY @ W) instead of d_pre.
  const HostTensor& g = t.at("mm");
  std::vector<double> of_g(static_cast<size_t>(t.N));
  for (int64_t n = 0; n < t.N; ++n) {
    float acc = 0;
    for (int64_t m = 0; m < t.M; ++m) acc += static_cast<float>(g.data[m * t.N + n]);
    of_g[n] = bf16(acc);
  }
  EXPECT_FALSE(t.check("view_8", of_g).pass()) << "sum(g) passes as the bias gradient";
}

TEST(MatmulEpilogueNumerics, GatedBackwardKernelArithmetic) {
  // Llama's SwiGLU backward at M = 1024, N = 512 (K = 512): d_up = round(g * round(silu(gate))),
  // d_gate = round(round(g * up) * silu'(gate)), as the kernel computes them; swapped, they fail.
  Graph gr = parse_trace(rescaled_trace("llama_swiglu_mlp_train_bwd_2x8x64x176",
                                        {{8, 512}, {16, 1024}, {64, 512}, {176, 512}}),
                         "<gated>");
  BwdSim s{std::move(gr), {}, {}, 1024, 512};
  s.ref = run_reference(s.g, generate_inputs(s.g, 7));
  const HostTensor &g = s.at("mm_4"), &gate = s.at("mm"), &up = s.at("mm_1");
  std::vector<double> d_up, d_gate;
  for (int64_t i = 0; i < s.M * s.N; ++i) {
    const float gv = static_cast<float>(g.data[i]), x = static_cast<float>(gate.data[i]);
    const float a = static_cast<float>(bf16(silu_f(x)));
    d_up.push_back(bf16(gv * a));
    const float h = static_cast<float>(bf16(gv * static_cast<float>(up.data[i])));
    d_gate.push_back(bf16(h * act_grad_f(Act::kSilu, x)));
  }
  const auto ru = s.check("view_8", d_up), rg = s.check("view_10", d_gate);
  EXPECT_TRUE(ru.pass()) << ru.failure();
  EXPECT_TRUE(rg.pass()) << rg.failure();
  EXPECT_FALSE(s.check("view_8", d_gate).pass()) << "d_gate passes as d_up";
  EXPECT_FALSE(s.check("view_10", d_up).pass()) << "d_up passes as d_gate";
}

TEST(MatmulEpilogueNumerics, CublasLtDgeluEpilogueOnTheUnroundedProductFails) {
  // CUBLASLT_EPILOGUE_DGELU multiplies the float32 accumulator of dY @ W (before any rounding) by
  // GELU tanh's derivative at the saved pre-activation and rounds once; the graph rounds the
  // product to bfloat16 first. On the tanh graph (where cuBLASLt's GELU is the graph's), at the
  // pre-activation spread of std 1: rel_l2 2.8e-3 against a bound of 4.7e-4 (seed 7).
  BwdSim s = nanogpt_bwd("nanogpt_mlp_gelu_tanh_train_bwd_2x8x64", Act::kGeluTanh, 1.0);
  const HostTensor &dy = s.at("view_4"), &w = s.at("permute_2"), &x = s.at("addmm");
  const int64_t K = s.g.meta(s.g.find_value("view_4")).shape[1];
  std::vector<double> dgelu(static_cast<size_t>(s.M * s.N));
  for (int64_t m = 0; m < s.M; ++m)
    for (int64_t n = 0; n < s.N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += dy.data[m * K + k] * w.data[k * s.N + n];
      dgelu[m * s.N + n] =
          bf16(static_cast<float>(acc) *
               act_grad_f(Act::kGeluTanh, static_cast<float>(x.data[m * s.N + n])));
    }
  const auto r = s.check("view_7", dgelu);
  EXPECT_FALSE(r.pass()) << "cuBLASLt's DGELU keeps the graph's numerics: use it on tanh graphs";
}
