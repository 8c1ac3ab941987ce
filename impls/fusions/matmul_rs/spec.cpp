// The matmul_rs row of the fusion registry.
#include "impls/fusions/matmul_rs/params.hpp"

namespace replay::fusions {
namespace {

constexpr VariantSpec kVariants[] = {
    {"baseline", Role::kBaseline,
     "one cuBLASLt GEMM into the partial product (a workspace), then NCCL reduce-scatter of its "
     "rows (vanilla tensor parallelism; needs one process per GPU with a communicator)"},
    {"optimized", Role::kOptimized,
     "chunked pipeline: per-chunk GEMMs, each chunk's partial sent to its owner on the copy "
     "engines (CUDA IPC) with a signal, fp32 accumulation of the partials (not built yet)"},
};

}  // namespace

extern const FusionSpec matmul_rs = {
    "matmul_rs",
    "row-parallel linear of tensor parallelism: [view] -> mm / _scaled_mm -> [view] -> "
    "reduce_scatter_tensor -> wait_tensor, the scatter overlapped with the GEMM (matched; no "
    "variant runs yet)",
    kVariants,
    matmul_rs::match,
    matmul_rs::cost,
    matmul_rs::describe,
    matmul_rs::bind,
    nullptr,
    2,
};

}  // namespace replay::fusions
