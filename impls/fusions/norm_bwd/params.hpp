// norm_bwd: LayerNorm / RMSNorm backward with mix-order reduction (issue 8): the row reductions
// that produce dx and the column reductions that produce dw/db read the same x and dy, so one
// kernel can do both. This header holds the fusion's typed params and its entry points; the
// FusionSpec row is in spec.cpp, listed in impls/fusions/registry.cpp.
//
//   params.hpp  this file          match.cpp   structural matcher (polynomial normal form)
//   cost.cpp    bytes/FLOPs, describe           kernels.*   baseline and optimized side by side
//   bind.cpp    params -> kernel args           TUNING.md   split-size heuristic, sweep, history
//   tests/      matcher tests on every bundled backward trace and synthetic forms (unit_*.cpp), a
//               CPU model of the kernels against the reference, GPU tests (gpu_*.cpp)
#pragma once

#include <vector>

#include "impls/fusions/norm_bwd/kernels.hpp"
#include "workloads/plan/fusion_spec.hpp"

namespace replay::norm_bwd {

/// A matched region. Value indices, not names. Roundings: DType::kFloat32 means none (the
/// kernels compute in fp32), bfloat16/float16 a rounding the graph materializes.
struct Params {
  bool layernorm = true;  ///< LayerNorm (dx has the mean term), else RMSNorm
  NormBwdStats stats = NormBwdStats::kSaved;
  int x = -1;  ///< [.., C] activations as the region reads them (or xhat for kNormalized)
  /// [.., C] saved normalized value read by the dw term (dw = sum(rnd_dwt(dy * rnd_xhat(xs))))
  /// instead of the xhat of x: aot_autograd's default partitioner saves `x * rstd` (bf16 in
  /// Llama-style RMSNorms, fp32 in Gemma's) beside the fp32 x that dx reads; -1: dw uses xhat.
  int xs = -1;
  int dy = -1;  ///< [.., C] gradient of the norm's output
  int w = -1;   ///< [C] weight; -1: none (a norm without affine parameters: w = 1, dx only)
  int mean = -1, rstd = -1;            ///< saved [.., 1] statistics (-1 when not read)
  int eps_value = -1;                  ///< kRecompute: a 0-dim eps tensor, or -1
  double eps = 0;                      ///< kRecompute: eps as a number (added to eps_value's)
  double correction = 0;               ///< kRecompute LayerNorm: variance divisor cols - correction
  double w_offset = 0;                 ///< g = dy * (w + w_offset): 1 for x * (1 + w)
  DType w_round = DType::kFloat32;     ///< w + w_offset rounded to
  DType g_round = DType::kFloat32;     ///< dy * w rounded to
  DType xhat_round = DType::kFloat32;  ///< xhat rounded to, in the dw term only
  DType dwt_round = DType::kFloat32;   ///< the dw term dy * xhat rounded to
  int dx = -1, dw = -1, db = -1;       ///< outputs (db -1: no bias; dw, db -1: dx only)
  /// LayerNorm: dx's xhat term recentered, rstd/C * S2 * (xhat - sum(xhat)/C) (a two-pass
  /// LayerNorm's backward written term by term, Cohere's: the saved mean makes sum(xhat) no exact
  /// zero, and the graph's value is kept).
  bool recenter = false;
  /// dx's two terms rstd * g and the rest each rounded to this dtype before their sum (T5LayerNorm
  /// casts to the weight's dtype before the weight): dx = rnd_dx(rnd_p(rstd * g) + rnd_p(rest)).
  DType dx_part_round = DType::kFloat32;
  /// dx epilogue add (issue 24: the backward of a fused add-norm): the gradient of the residual
  /// stream h from its other readers, [.., C] in dx's dtype; the region then exports
  /// dx = rnd(rnd_dx(dx_norm) + dx_add) (the norm's dx rounded to its dtype first, the add in fp32
  /// rounded again, as the graph's add of two bf16 tensors does) as `dx`; -1: no add.
  int dx_add = -1;
  DType dx_round = DType::kFloat32, dw_round = DType::kFloat32, db_round = DType::kFloat32;
  int64_t rows = 0, cols = 0;
  /// Rows per block of the optimized kernel; 0: the heuristic (kernels.hpp). The split-size
  /// sweep (tests/bench/bench_norm_bwd.cpp) sets it.
  int64_t split_size = 0;
};

/// Row maps (kernels.hpp, NormBwdRowMap) of tensors `ts` read or written as [rows, cols] (the
/// binder's): plain rows when each is [rows, cols] with a contiguous last dim; else the others
/// must share one shape [.., cols] (contiguous last dim) whose leading dims, merged where every
/// one of them allows it, come down to at most 3 (n0, n1, n2) covering `rows`, and a plain tensor
/// with row stride s gets (n1 * n2 * s, n2 * s, s). Sets *n1, *n2 and maps[i]; false: no map.
bool row_maps(const std::vector<const TensorMeta*>& ts, int64_t rows, int64_t cols, int64_t* n1,
              int64_t* n2, const std::vector<NormBwdRowMap*>& maps);

void match(const Graph& g, Matches& out);
Cost cost(const Graph& g, const Region& r);
nlohmann::json describe(const Graph& g, const Region& r);
Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx);

}  // namespace replay::norm_bwd
