// amax_reuse: every max-like reduction (aten.amax, aten.amin, aten.max.default, aten.min.default)
// of one tensor, with the |x| and exact upcasts before them, in one pass over the tensor (issue
// 27, float8 training). Float8 recipes take a rowwise and a tensorwise amax of the same |x|
// (torchao: axiswise scales, and the columnwise ones of the backward's transposed operand), each
// reading the whole tensor; a reduction over dims B ⊃ A equals the reduction over B \ A of the
// reduction over A, bit for bit for max and min (amax_keys.hpp; not for sum, which rounds
// differently when regrouped: sums are never reused). This header holds the fusion's typed params
// and entry points; the FusionSpec row is in spec.cpp.
//
//   params.hpp  this file       match.cpp  structural matcher     cost.cpp  bytes, describe
//   amax_keys.hpp  the reduction order (host and device)   multi_amax.cuh  the one-pass kernels
//   kernels.*   launchers     bind.cpp  params -> kernel args     TUNING.md  method, predictions
//   tests/      matcher and reuse proofs (unit_*.cpp), GPU cases and mutants (gpu_*.cpp)
#pragma once

#include <cstdint>
#include <vector>

#include "impls/fusions/amax_reuse/kernels.hpp"
#include "workloads/plan/fusion_spec.hpp"

namespace replay::amax_reuse {

/// One reduction of the region, in graph order.
struct Reduction {
  int out = -1;  ///< value index of its result (the graph's dtype: the reduced tensor's)
  Extreme extreme = Extreme::kMax;
  AmaxKind kind = AmaxKind::kAll;  ///< what it reduces of x seen as [M, N]
  std::vector<int64_t> dims;       ///< the dims of x it reduces, as the node wrote them
  /// The reduction over fewer dims (same extreme) this one is computed from in the one-pass
  /// kernel (B ⊃ A: a tensorwise amax from the row maxima), an index into Params::reductions;
  /// -1: from x itself.
  int from = -1;
};

/// A matched region. Value indices, not names.
struct Params {
  int x = -1;        ///< the tensor read: the region's one input, [.., ..] (float32/bf16/fp16)
  bool abs = false;  ///< the reductions are of |x| (an aten.abs on the way, claimed or below x)
  /// x seen as [M, N]: its dims [0, split) are the rows, [split, rank) the columns (dims of size 1
  /// anywhere); every reduction is over the columns (kRows), the rows (kCols) or everything.
  int split = 0;
  int64_t M = 0, N = 0;
  std::vector<Reduction> reductions;  ///< at least 2
  std::vector<int> prologue;          ///< outputs of the claimed abs / upcast nodes (describe)
};

void match(const Graph& g, Matches& out);
Cost cost(const Graph& g, const Region& r);
nlohmann::json describe(const Graph& g, const Region& r);
Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx);

}  // namespace replay::amax_reuse
