// matmul_epilogue: a GEMM (aten.mm / aten.addmm, 2-D operands in any row- or column-major layout:
// nn.Linear's `t`/`permute` of a [out, in] weight, GPT-2 Conv1D's [in, out] weight, activations
// flattened by a `view`) and the pointwise epilogue model code writes after it: a bias (addmm's
// self, or an aten.add of a [N] vector), an activation (GELU in its erf and tanh forms, SiLU, as
// decomposed pointwise chains, recognized by value), gating by a second GEMM of the same shape
// (Llama/Gemma MLPs: act(x W_gate) * (x W_up)) and the casts around them (issue 26). This header
// holds the fusion's typed params and entry points; the FusionSpec row is in spec.cpp.
//
//   params.hpp  this file       match.cpp  structural matcher     cost.cpp  bytes, FLOPs, describe
//   kernels.*   the fused pointwise epilogue kernel   bind.cpp  params -> cuBLASLt + kernel args
//   TUNING.md   method and measurements   tests/  matcher tests (unit_*.cpp), GPU tests (gpu_*.cpp)
#pragma once

#include <cstdint>
#include <vector>

#include "impls/fusions/matmul_epilogue/kernels.hpp"
#include "workloads/plan/fusion_spec.hpp"

namespace replay::matmul_epilogue {

/// One GEMM of the region: out [M, N] = a [M, K] @ b [K, N] (+ bias [N] for addmm).
struct Gemm {
  /// Node index of the aten.mm / aten.addmm in the canonical graph the matcher saw (-1: none);
  /// on the captured graph (cost, describe, bind) it is the producer of `out`.
  int node = -1;
  int a = -1;     ///< value index of the [M, K] operand as the GEMM reads it (a view, any layout)
  int b = -1;     ///< value index of the [K, N] operand (a `t`/`permute` view of [N, K], or [K, N])
  int bias = -1;  ///< addmm's self, a [N] vector (beta = alpha = 1), -1 for mm
  int out = -1;   ///< value index of the GEMM's output [M, N] (the graph rounds it to its dtype)
  bool exported = false;  ///< `out` is read outside the region (saved for the backward)
};

/// The backward epilogue of a GEMM (match.cpp, "backward"): g = dY @ W^T, the gradient of an
/// activation's output, times the activation's derivative at the tensors the forward saved; all
/// [M, N] elementwise, in float32 with the graph's roundings (each `round` a cast to that dtype):
///   plain:  dx  = round(dx_round, g * act'(x))                 x: the saved pre-activation
///   gated:  a   = round(act_round, act(x))  (or act_saved)      x: the saved gate projection
///           dup = round(dup_round, g * a)                       up: the saved up projection
///           h   = round(h_round, g * up)
///           dx  = round(dx_round, h * act'(x))                  (d_gate)
/// and, plain only, the bias gradient dbias = round(dbias dtype, sum over rows of dx), a float32
/// column sum of the rounded dx (nn.Linear's `sum(dx, [0])`, the bias of the GEMM producing x).
struct Backward {
  bool on = false;
  bool gated = false;
  Act act = Act::kNone;
  int x = -1;   ///< value index: the saved pre-activation (plain) or gate projection (gated)
  int up = -1;  ///< gated: the saved up projection
  /// gated: act(gate) as the forward saved it (the default partitioner), read in place of
  /// computing round(act_round, act(x)); -1: computed
  int act_saved = -1;
  int dx = -1;   ///< output: d(pre-activation) (plain) or d(gate) (gated)
  int dup = -1;  ///< gated output: d(up)
  DType dx_round = DType::kBFloat16, dup_round = DType::kBFloat16;
  DType act_round = DType::kFloat32, h_round = DType::kFloat32;  ///< float32: not rounded
  int dbias = -1;  ///< the bias gradient's value ([N] or [1, N]); -1: none
  DType dbias_dtype = DType::kFloat32;
  std::vector<int> chain;  ///< the pointwise nodes of the chain (for describe)
};

/// The bias gradient of a weight-gradient GEMM (match.cpp, "bias gradient on the dW GEMM"): the
/// GEMM sums over K = tokens, and the graph sums the same tangent T [tokens, F] over its rows,
///   nn.Linear:    dW [F, in]  = mm(T^T, X)   db[F] = sum(T, rows)  T^T is the GEMM's a
///   GPT-2 Conv1D: dW [in, F]  = mm(X^T, T)   db[F] = sum(T, rows)  T   is the GEMM's b
/// so the column sum rides on the GEMM (cuBLASLt's BGRADB / BGRADA) instead of reading T again.
struct WeightGradBias {
  bool on = false;
  bool of_a = true;  ///< T^T is the GEMM's a (db over M, BGRADB); false: T is its b (BGRADA)
  int summed = -1;   ///< value index: what the graph's sum reads (T, or a flat reshape of it)
  int dbias = -1;    ///< value index: the sum's result ([F] or [1, F]), the GEMM's dtype
};

/// A matched region. Value indices, not names. What the epilogue computes per element, in float32
/// with the graph's roundings (each `round` is a cast to that dtype):
///   v = gemm.out                                       (addmm: round(acc + bias), one rounding)
///   v = round(add_round, v + add_bias[n])              when add_bias >= 0 (mm + add)
///   v = round(act_round, act(v))                       when act != kNone (or the cast alone)
///   v = round(gate_round, v * up.out)                  when up.node >= 0 (gating)
///   v = round(dtype, v + residual)                     when residual >= 0
///   out = v
struct Params {
  Gemm gemm;  ///< the GEMM (the gate projection when gated)
  int64_t M = 0, N = 0, K = 0;
  DType gemm_dtype = DType::kBFloat16;  ///< operands' and output's dtype (bf16, f16 or f32)
  int add_bias = -1;                    ///< bias added by an aten.add after an mm, [N]; -1: none
  DType add_round = DType::kBFloat16;
  Act act = Act::kNone;       ///< the activation (kNone: only casts, or nothing after the bias)
  bool has_act_step = false;  ///< a pointwise chain (activation or cast) follows
  DType act_round = DType::kBFloat16;
  /// The value the chain starts from (the GEMM output, its reshape, the bias step's result or a
  /// split half); with kTable its 16-bit dtype indexes the table (bind.cpp builds it by running
  /// the chain's nodes, act_values' producers, over every bit pattern).
  int act_src = -1;
  /// A residual added last by an aten.add (alpha 1): [.., N] of the GEMM's shape and dtype, the
  /// sum in that dtype (the residual stream: o_proj / down_proj + hidden_states); -1: none. No
  /// activation or gating with it, and only after an mm: an addmm (bias) followed by a residual
  /// add (GPT-2's c_proj + residual) is fused as the addmm alone, the add running eagerly.
  int residual = -1;
  Gemm up;  ///< the up projection multiplied in (node and out -1: no gating)
  /// Gating within one GEMM over fused gate/up weights (Phi-3's gate_up_proj): the GEMM's
  /// [M, N] output is split in two [M, N/2] halves along N, act(half gate_half) * the other half;
  /// the result is [M, N/2].
  bool split_halves = false;
  int gate_half = 0;
  DType gate_round = DType::kBFloat16;
  bool shared_input = false;    ///< gate and up read the same activations (x W_gate, x W_up)
  int out = -1;                 ///< the region's final value, [.., N] (M * N elements, contiguous)
  std::vector<int> act_values;  ///< outputs of the activation chain's nodes (for describe)
  /// Gated (or split halves): the activation's rounded result act(gate), written too because it
  /// is read outside the region (the default partitioner saves it for the backward); -1: private.
  int act_out = -1;
  Backward bwd;          ///< a backward epilogue (then only gemm, M, N, K, out are set)
  WeightGradBias wgrad;  ///< a dW GEMM with its bias gradient (then only gemm, M, N, K, out)
};

void match(const Graph& g, Matches& out);
Cost cost(const Graph& g, const Region& r);
nlohmann::json describe(const Graph& g, const Region& r);
Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx);

/// Evaluates x -> act(x) in double: GELU erf 0.5 x (1 + erf(x / sqrt 2)), GELU tanh
/// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), SiLU x / (1 + exp(-x)), identity for kNone;
/// NaN for kTable (the graph's own chain defines it).
double act_reference(Act act, double x);

/// The derivative act'(x) in double (the backward epilogue's reference): GELU erf
/// Phi(x) + x phi(x); GELU tanh 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
/// with t the tanh above; SiLU s (1 + x (1 - s)), s = sigmoid(x); 1 for kNone; NaN for kTable.
double act_grad_reference(Act act, double x);

}  // namespace replay::matmul_epilogue
