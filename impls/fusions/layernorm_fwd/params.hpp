// layernorm_fwd: LayerNorm / RMSNorm forward over the last dim (row statistics + normalize +
// epilogue of casts, [C] weight multiply, [C] bias add), as nanoGPT, Hugging Face Llama, Meta
// Llama, litgpt and torchtitan write them; in training forwards the region also exports what the
// backward saves (mean, rstd, the upcast x). This header holds the fusion's typed params and its
// entry points; the FusionSpec row is in spec.cpp, listed in impls/fusions/registry.cpp.
//
//   params.hpp  this file        match.cpp   structural matcher      cost.cpp   bytes/FLOPs,
//   describe kernels.*   both variants    bind.cpp    params -> kernel args   TUNING.md  measured
//   history tests/      matcher tests (unit_*.cpp) and GPU tests over shapes, dtypes, epilogues
//   (gpu_*.cpp)
#pragma once

#include <vector>

#include "impls/fusions/layernorm_fwd/kernels.hpp"
#include "workloads/plan/fusion_spec.hpp"

namespace replay::layernorm_fwd {

struct EpilogueStep {
  EpilogueOp op = EpilogueOp::kRound;
  DType dtype = DType::kFloat32;  ///< the step's result is rounded to this dtype
  int weight = -1;  ///< kMul/kAdd: value index of the [C] operand (before any absorbed upcast)
  /// kMul/kAdd: the operand is round(offset_dtype, weight + offset) (litgpt add_unit_offset,
  /// Gemma: x * (1 + w)); 0: the weight as it is. Exact upcasts around the add are absorbed.
  double offset = 0;
  DType offset_dtype = DType::kFloat32;
};

/// An intermediate of the row chain that something outside the region reads (the default
/// partitioner saves them for the backward), written by the kernels in its own dtype.
struct RowExport {
  int value = -1;  ///< [.., C] like x
  /// Where in the chain: kStageCentered (x - mean, LayerNorm), kStageNormalized (before the
  /// epilogue), or k >= 0: the result of epilogue step k.
  int stage = kStageNormalized;
};

/// A value of an epilogue weight's chain (its exact upcasts, its offset add) that something
/// outside the region reads, e.g. Gemma's float32 `1 + w` saved for the backward: [C], written once
/// by the kernels in its own dtype.
struct WeightExport {
  int value = -1;
  int step = -1;        ///< the epilogue step whose weight it is
  bool offset = false;  ///< after the weight's offset add (true) or before it (an exact upcast)
};

/// A matched region. Value indices, not names.
struct Params {
  NormKind kind = NormKind::kLayerNorm;
  int x = -1;  ///< [.., C] activations as the region reads them (before an absorbed upcast)
  /// Residual add prologue (fused add-norm: Apex, Liger-Kernel, vLLM): the region reads
  /// h = round(h_round, x + residual) through one aten.add.Tensor it claims, -1: none. residual is
  /// [.., C] of x's shape and dtype.
  int residual = -1;
  /// The sum h ([.., C], x's dtype) when something outside the region reads it (the next residual
  /// stream): the kernels write it in the same pass; -1 when only the region reads it.
  int h = -1;
  /// The dtype the add rounds h to before the statistics (the add's output dtype, as PyTorch's
  /// bf16 add: fp32 math, one rounding); kFloat32: not rounded.
  DType h_round = DType::kFloat32;
  int out = -1;                ///< [.., C] result, same shape as x
  int64_t rows = 0, cols = 0;  ///< x seen as [rows, cols]
  double eps = 0;
  int eps_value = -1;     ///< eps as a tensor (numel 1, e.g. a 0-dim float32 input), else -1
  double correction = 0;  ///< LayerNorm: variance divisor is cols - correction (var_mean's)
  std::vector<EpilogueStep> epilogue;  ///< in graph order, at most kNormMaxEpilogue
  // What the region exports besides `out` (training forwards save them for the backward), -1 when
  // nothing outside the region reads it:
  int mean = -1;  ///< LayerNorm: the row means, [.., 1] float32 (var_mean's second output)
  int rstd = -1;  ///< rsqrt(var + eps) or rsqrt(mean(x^2) + eps), [.., 1] float32
  int x32 = -1;   ///< the upcast x, [.., C] float32 (its convert is in the region)
  std::vector<RowExport> row_exports;        ///< at most kNormMaxExports, in chain order
  std::vector<WeightExport> weight_exports;  ///< at most kNormMaxWeights
};

void match(const Graph& g, Matches& out);
Cost cost(const Graph& g, const Region& r);
nlohmann::json describe(const Graph& g, const Region& r);
Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx);

}  // namespace replay::layernorm_fwd
