// The fp8_quantize row of the fusion registry.
#include "impls/fusions/fp8_quantize/params.hpp"

namespace replay::fusions {
namespace {

constexpr VariantSpec kVariants[] = {
    {"baseline", Role::kBaseline,
     "per quantization: amax pass, scale kernel, cast pass (row-major), separate transpose copy "
     "for a column-major float8 copy: x read twice per quantization"},
    {"optimized", Role::kOptimized,
     "every quantization of the tensor together: one amax pass (row, column and global amaxes), "
     "one scale kernel, one cast pass writing every float8 tensor, column-major copies through "
     "shared memory: x read twice in all"},
};

}  // namespace

extern const FusionSpec fp8_quantize = {
    "fp8_quantize",
    "float8 quantization: amax -> scale -> saturated cast, tensorwise / rowwise / columnwise, "
    "every quantization of one tensor in one region (torchao float8 training)",
    kVariants,
    fp8_quantize::match,
    fp8_quantize::cost,
    fp8_quantize::describe,
    fp8_quantize::bind,
};

}  // namespace replay::fusions
