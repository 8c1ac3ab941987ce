// scaled_mm: a float8 GEMM, aten._scaled_mm.default, as float8 training writes it (issue 27;
// torchao's Float8Linear: traces/capture/models.py Float8LinearTensorwise / Float8LinearRowwise):
//
//   [view]  self [B, T, K] -> [M, K]                     the activations flattened (claimed when
//                                                        the view reads them only here)
//   scale_a = reciprocal([view/permute] s_a)             the quantization scale inverted, [M, 1]
//   scale_b = reciprocal([view/permute] s_b)             or one element; s_b [N, 1] behind a
//                                                        permute to [1, N] (rowwise)
//   out = _scaled_mm(self, mat2, scale_a, scale_b, bias, None, out_dtype, use_fast_accum)
//   [view]  out [M, N] -> [B, T, N]
//
// mat2 is a `t`/`permute` of a row-major [N, K] float8 weight (forward) or the permute -> clone ->
// permute column-major copy the backward saves: cuBLASLt's TN layout, read in place. A scale the
// graph reads without a reciprocal in front (the saved reciprocals of a backward) is read as it
// is. This header holds the typed params and entry points; the FusionSpec row is in spec.cpp.
//
//   params.hpp  this file       match.cpp  structural matcher     cost.cpp  bytes, FLOPs, describe
//   kernels.*   the scale reciprocal kernel   bind.cpp  params -> cuBLASLt (impls/eager/gemm.hpp)
//   TUNING.md   method and measurements   tests/  matcher tests (unit_*.cpp), GPU tests (gpu_*.cpp)
#pragma once

#include <cstdint>
#include <vector>

#include "workloads/plan/fusion_spec.hpp"

namespace replay::scaled_mm {

/// One scale operand of the GEMM (float32, one element or a vector of M / N).
struct Scale {
  int value = -1;  ///< the value _scaled_mm reads as scale_a / scale_b
  /// The value the fused step reads: `value` itself, or the operand of the reciprocal that
  /// computes `value` (through the views in `nodes`), as stored: a vector with one stride ([M, 1],
  /// [1, N], or a permute of one), or one element (broadcast to the vector after the reciprocal).
  int source = -1;
  bool reciprocal = false;  ///< value = 1 / source, computed by the region (a reciprocal node)
  bool exported = false;    ///< value is read outside the region: the region writes it
  std::vector<int> nodes;   ///< the claimed nodes computing `value` (views, the reciprocal)
  /// exported is possible only where `value` is the reciprocal's own output (no views after it).
  /// value is the reciprocal of a quantization scale (one that also multiplies the tensor it
  /// quantizes): left to the quantization's fusion (fp8_quantize), read as it is.
  bool quantization = false;
};

/// A matched region. Value indices, not names.
///   out[m, n] = round(out_dtype, acc[m, n] * scale_a[m] * scale_b[n] (+ bias[n])),
///   acc = sum_k self[m, k] * mat2[k, n] (float8 products, float32 accumulation)
/// with scale_a[m] = scale_a[0] and scale_b[n] = scale_b[0] when tensorwise.
struct Params {
  /// Node index of the _scaled_mm in the canonical graph the matcher saw; on the captured graph
  /// (cost, describe, bind) use the producer of `mm_out`.
  int node = -1;
  int a = -1;  ///< the [M, K] operand the GEMM reads: self, or the source of its view
  int a_view =
      -1;      ///< self when `a` is the source of a claimed view ([B, T, K] -> [M, K]); else -1
  int b = -1;  ///< mat2, [K, N] column-major
  /// self is column-major on the canonical graph: a transposed view whose contiguous clone
  /// (torchao's grad_weight operand `go_fp8.t().contiguous()`) the canonical form folded away. The
  /// region then makes that copy itself, into a row-major buffer, where the captured graph has the
  /// clone (Region::absorbed); where it has none the binder refuses (the copy would be the
  /// fusion's own, not the graph's).
  bool copy_self = false;
  Scale scale_a, scale_b;
  int bias = -1;    ///< [N] bias, -1: none
  int mm_out = -1;  ///< the _scaled_mm output [M, N]
  int out = -1;     ///< the region's result: mm_out, or its claimed view [.., N] (same elements)
  int64_t M = 0, N = 0, K = 0;
  DType a_dtype = DType::kFloat8E4M3, b_dtype = DType::kFloat8E4M3;
  DType out_dtype = DType::kBFloat16;
  DType bias_dtype = DType::kBFloat16;
  bool rowwise = false;     ///< scale_a [M, 1] and scale_b [1, N]; else one element each
  bool fast_accum = false;  ///< use_fast_accum
};

void match(const Graph& g, Matches& out);
Cost cost(const Graph& g, const Region& r);
nlohmann::json describe(const Graph& g, const Region& r);
Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx);

/// Why the optimized variant (cuBLASLt's float8 GEMM in place) cannot run these params, from the
/// graph's metadata alone, or "": e5m2 x e5m2, self neither row-major nor (with copy_self)
/// column-major, mat2 not column-major (the TN layout), K or N not a multiple of 16, scales neither
/// tensorwise nor rowwise, an output or bias dtype outside cuBLASLt's float8 table. The matcher
/// declines with it.
std::string layout_unsupported(const Graph& g, const Params& p);

}  // namespace replay::scaled_mm
