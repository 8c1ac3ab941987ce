// The rope row of the fusion registry.
#include "impls/fusions/bookend/variants.hpp"
#include "impls/fusions/rope/params.hpp"

namespace replay::fusions {
namespace {

constexpr VariantSpec kVariants[] = {
    {"baseline", Role::kBaseline,
     "the eager op sequence per rotated tensor, one pass each: x * cos, the rotation (neg + cat) "
     "materialized, rot * sin, the sum with the pass-through cat; views read as aliases"},
    {"optimized", Role::kOptimized,
     "one kernel for q and k: each element of x read once (16-byte accesses where the strides "
     "allow), the tables through their broadcast strides, the output written once in its layout"},
    bookend::kSegmentedVariant,
    bookend::kHostAliasVariant,
};

}  // namespace

extern const FusionSpec rope = {
    "rope",
    "rotary position embedding forward: x * cos + rotate(x) * sin, rotate-half or interleaved, "
    "partial rotary, q and k as views of their inputs or a fused qkv (Llama, GPT-NeoX, GPT-J)",
    kVariants,
    rope::match,
    rope::cost,
    rope::describe,
    rope::bind,
};

}  // namespace replay::fusions
