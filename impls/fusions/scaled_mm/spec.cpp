// The scaled_mm row of the fusion registry.
#include "impls/fusions/scaled_mm/params.hpp"

namespace replay::fusions {
namespace {

constexpr VariantSpec kVariants[] = {
    {"baseline", Role::kBaseline,
     "dequantize: the float8 operands cast to bfloat16, a bfloat16 cuBLASLt GEMM into float32, "
     "then one kernel applying the scales (and bias) in float32 (what runs without float8 "
     "kernels)"},
    {"optimized", Role::kOptimized,
     "one cuBLASLt float8 GEMM in place (TN, tensorwise scale pointers or rowwise OUTER_VEC_32F "
     "scales, bias epilogue, out_dtype direct into the reshaped result), the scales' reciprocals "
     "in one kernel, the algorithm timed once among deterministic candidates"},
};

}  // namespace

extern const FusionSpec scaled_mm = {
    "scaled_mm",
    "float8 GEMM (aten._scaled_mm: torchao float8 training, tensorwise and rowwise scales) with "
    "the reshapes around it and its scales' reciprocals, through cuBLASLt",
    kVariants,
    scaled_mm::match,
    scaled_mm::cost,
    scaled_mm::describe,
    scaled_mm::bind,
};

}  // namespace replay::fusions
