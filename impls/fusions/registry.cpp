#include "impls/fusions/registry.hpp"

// One line per fusion: impls/fusions/<name>/ defines `const FusionSpec replay::fusions::<name>`.
// The tensor-parallel ones come first: their regions hold the GEMM that matmul_epilogue and
// scaled_mm would otherwise claim alone (on a single-rank trace they match nothing). pointwise
// comes last: it takes the elementwise chains the others leave (FusionSpec::match_rest).
#define REPLAY_FUSIONS(X)                                                                    \
  X(ag_matmul)                                                                               \
  X(matmul_rs)                                                                               \
  X(layernorm_fwd) X(norm_bwd) X(fp8_quantize) X(matmul_epilogue) X(scaled_mm) X(amax_reuse) \
      X(rope) X(pointwise)

namespace replay {
namespace fusions {
#define REPLAY_DECLARE_FUSION(name) extern const FusionSpec name;
REPLAY_FUSIONS(REPLAY_DECLARE_FUSION)
}  // namespace fusions

std::span<const FusionSpec* const> fusion_registry() {
#define REPLAY_LIST_FUSION(name) &fusions::name,
  static const FusionSpec* const kRegistry[] = {REPLAY_FUSIONS(REPLAY_LIST_FUSION)};
  return kRegistry;
}

}  // namespace replay
