// The norm_bwd row of the fusion registry.
#include "impls/fusions/norm_bwd/params.hpp"

namespace replay::fusions {
namespace {

constexpr VariantSpec kVariants[] = {
    {"baseline", Role::kBaseline,
     "persistent row kernel for dx, then a column-reduction kernel for dw/db (x and dy read "
     "twice) and the fixed-order final sum"},
    {"optimized", Role::kOptimized,
     "mix-order reduction: one persistent kernel computes dx and per-block fp32 partial dw/db "
     "(x and dy read once), then a small fixed-order final sum and cast"},
};

}  // namespace

extern const FusionSpec norm_bwd = {
    "norm_bwd",
    "LayerNorm / RMSNorm backward: dx row reduction + dw/db column reductions over the same x, "
    "dy (mix-order reduction)",
    kVariants,
    norm_bwd::match,
    norm_bwd::cost,
    norm_bwd::describe,
    norm_bwd::bind,
};

}  // namespace replay::fusions
