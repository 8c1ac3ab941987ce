// layernorm_fwd: LayerNorm / RMSNorm forward over the last dim (row statistics + normalize +
// epilogue of casts, [C] weight multiply, [C] bias add), as nanoGPT, Hugging Face Llama and
// torchtitan write them. This header holds the fusion's typed params and its entry points; the
// FusionSpec row is in spec.cpp, listed in impls/fusions/registry.cpp.
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
};

/// A matched region. Value indices, not names.
struct Params {
  NormKind kind = NormKind::kLayerNorm;
  int x = -1;    ///< [.., C] activations as the region reads them (before an absorbed upcast)
  int out = -1;  ///< [.., C] result, same shape as x
  int64_t rows = 0, cols = 0;  ///< x seen as [rows, cols]
  double eps = 0;
  double correction = 0;  ///< LayerNorm: variance divisor is cols - correction (var_mean's)
  std::vector<EpilogueStep> epilogue;  ///< in graph order, at most kNormMaxEpilogue
};

void match(const Graph& g, std::vector<Region>& out);
Cost cost(const Graph& g, const Region& r);
nlohmann::json describe(const Graph& g, const Region& r);
Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx);

}  // namespace replay::layernorm_fwd
