// fp8_quantize: float8 quantization of one tensor as model code writes it (torchao float8_utils,
// issue 27 "Float8 training"): |x| -> amax -> float64 -> clamp_min(eps) -> reciprocal -> * float8
// max -> float32 [-> log2 -> floor -> exp2: rounded down to a power of two] (the scale);
// x.float() * scale -> clamp(-max, max) -> float8_e4m3fn / e5m2;
// tensorwise, rowwise or columnwise. One region claims every quantization the graph makes of one
// source tensor (the rowwise forward quantizes x rowwise for its GEMM and columnwise for the
// backward's, from the same |x|) and writes every value the graph reads: the float8 tensors
// (row-major, and the column-major copy the graph makes with permute -> clone -> permute), the
// scales, their reciprocals (what _scaled_mm reads), the amaxes.
//
//   params.hpp  this file        match.cpp   structural matcher      cost.cpp   bytes, describe
//   quant_math.hpp  the arithmetic (kernels and CPU tests)   kernels.*  the passes
//   bind.cpp    params -> passes (both variants)    TUNING.md  predictions, measurements
//   tests/      matcher, numerics vs PyTorch's golden tensors (unit_*), GPU cases and mutants
#pragma once

#include <vector>

#include "impls/fusions/binding.hpp"
#include "impls/fusions/fp8_quantize/kernels.hpp"
#include "workloads/plan/fusion_spec.hpp"

namespace replay::fp8_quantize {

/// One quantization of the source tensor. Value indices, not names.
struct Quantization {
  Granularity granularity = Granularity::kTensorwise;
  bool abs = true;  ///< the amax is of |x| (torchao); false: of x itself (its amax reads x)
  DType fp8 = DType::kFloat8E4M3;  ///< float8_e4m3fn or float8_e5m2
  double fp8_max = 448;            ///< the dtype's largest finite value: scale factor, clamp bound
  double eps = 1e-12;              ///< the float64 amax's clamp_min
  /// The float32 scale is rounded down to a power of two: exp2(floor(log2(s))) (torchao's
  /// round_scales_to_power_of_2, the default of its rowwise recipes); `scale` is the rounded one.
  bool pow2 = false;
  int amax = -1;  ///< the amax value (aten.amax or aten.max.default), in its dtype
  /// The amax is given (a region input, e.g. the amax the forward saved), not computed from x:
  /// the region reads it, and x only once (tensorwise only).
  bool given = false;
  int scale = -1;  ///< the float32 scale: [] (or [1, 1]), [.., 1] rowwise, [1, cols] / [cols]
  int q = -1;      ///< the float8 tensor, x's shape (the convert's output)
  /// Float8 values the region writes: q itself, and its 2-D transpose (aten.permute [1, 0]) whose
  /// buffer is the column-major copy when the graph clones it (the clone's layout, Region::tail).
  std::vector<int> q_outs;
  std::vector<int> scale_outs;  ///< the scale, where something outside reads it
  std::vector<int> recip_outs;  ///< reciprocals of the scale (or of a vector view of it)
  std::vector<int> amax_outs;   ///< the amax, where something outside reads it
};

/// A matched region: the quantizations of one source tensor.
struct Params {
  int x = -1;  ///< source [.., cols] (bfloat16, float16 or float32), seen as [rows, cols]
  int64_t rows = 0, cols = 0;
  std::vector<Quantization> quants;  ///< in graph order, at most kMaxQuants
  /// Test hook, 0: the GPU mutant "swapped rowwise scales" sets 1 (row r cast with row r ^ 1's
  /// scale); no matcher sets it.
  int row_scale_xor = 0;
};

std::string_view granularity_name(Granularity g);

void match(const Graph& g, Matches& out);
Cost cost(const Graph& g, const Region& r);
nlohmann::json describe(const Graph& g, const Region& r);
Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx);

}  // namespace replay::fp8_quantize
