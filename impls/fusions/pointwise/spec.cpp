// The pointwise row of the fusion registry: the last one (it takes what the others leave).
#include "impls/fusions/pointwise/params.hpp"

namespace replay::fusions {
namespace {

constexpr VariantSpec kVariants[] = {
    {"baseline", Role::kBaseline,
     "the chain's ops one eager launch each, every intermediate written and read back"},
    {"optimized", Role::kOptimized,
     "one generated kernel (NVRTC at bind time): the inputs read once (16-byte accesses where "
     "rows have unit stride), every op in registers with the eager kernel's expression and "
     "rounding, the outputs written once"},
};

}  // namespace

extern const FusionSpec pointwise = {
    "pointwise",
    "a chain of elementwise ops no other fusion claims (activations, their gradients, residual "
    "adds, casts) in one generated kernel, bit-identical to eager; bias-gradient column sums "
    "of its values taken with it (deterministic, not eager's summation order)",
    kVariants,
    nullptr,
    pointwise::cost,
    pointwise::describe,
    pointwise::bind,
    nullptr,
    1,
    pointwise::match_rest,
};

}  // namespace replay::fusions
