// The layernorm_fwd row of the fusion registry.
#include "impls/fusions/bookend/variants.hpp"
#include "impls/fusions/layernorm_fwd/params.hpp"

namespace replay::fusions {
namespace {

constexpr VariantSpec kVariants[] = {
    {"baseline", Role::kBaseline,
     "statistics kernel (mean, rstd to memory) + normalize/epilogue kernel: x read twice"},
    {"optimized", Role::kOptimized,
     "one persistent row kernel: x read once into registers, next row prefetched, weights in "
     "shared memory"},
    bookend::kSegmentedVariant,
    bookend::kHostAliasVariant,
};

}  // namespace

extern const FusionSpec layernorm_fwd = {
    "layernorm_fwd",
    "LayerNorm / RMSNorm forward: row statistics + normalize + affine + casts (nanoGPT, Llama)",
    kVariants,
    layernorm_fwd::match,
    layernorm_fwd::cost,
    layernorm_fwd::describe,
    layernorm_fwd::bind,
};

}  // namespace replay::fusions
