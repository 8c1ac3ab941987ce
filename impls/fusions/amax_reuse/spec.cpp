// The amax_reuse row of the fusion registry.
#include "impls/fusions/amax_reuse/params.hpp"

namespace replay::fusions {
namespace {

constexpr VariantSpec kVariants[] = {
    {"baseline", Role::kBaseline,
     "the reductions as captured: one kernel per amax/amin, each reading the whole tensor (|x| "
     "and upcasts applied in registers)"},
    {"optimized", Role::kOptimized,
     "one pass over the tensor computing every reduction: rowwise per warp, tensorwise from the "
     "row maxima, columnwise from per-CTA partials (atomicMax on order-preserving keys)"},
};

}  // namespace

extern const FusionSpec amax_reuse = {
    "amax_reuse",
    "every amax/amin/max of one tensor (rowwise, columnwise, tensorwise; |x| and upcasts before "
    "them) in one pass: float8 scales",
    kVariants,
    amax_reuse::match,
    amax_reuse::cost,
    amax_reuse::describe,
    amax_reuse::bind,
};

}  // namespace replay::fusions
