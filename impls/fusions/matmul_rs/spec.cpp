// The matmul_rs row of the fusion registry.
#include "impls/fusions/matmul_rs/params.hpp"

namespace replay::fusions {
namespace {

constexpr VariantSpec kVariants[] = {
    {"baseline", Role::kBaseline,
     "one cuBLASLt GEMM into the partial product (a workspace), then NCCL reduce-scatter of its "
     "rows (vanilla tensor parallelism; needs one process per GPU with a communicator)"},
    {"optimized", Role::kOptimized,
     "chunked pipeline, one chunk per destination rank: per-chunk GEMMs, each partial pulled by "
     "its owner on the copy engines through CUDA IPC with a signal per chunk (stream memory "
     "operations, epochs, a watchdog timeout), the partials summed in fp32 in rank order "
     "(deterministic); needs a multi-process run"},
    {"nccl_chunked", Role::kAlternative,
     "the same chunks, GEMMs and fp32 sum with NCCL send/recv per chunk in place of the IPC copies "
     "(works across hosts); needs an NCCL communicator (none when ranks share a GPU)"},
};

}  // namespace

extern const FusionSpec matmul_rs = {
    "matmul_rs",
    "row-parallel linear of tensor parallelism: [view] -> mm / _scaled_mm -> [view] -> "
    "[split/cat: a scatter along dim 1] -> reduce_scatter_tensor -> wait_tensor, the scatter "
    "overlapped with the GEMM",
    kVariants,
    matmul_rs::match,
    matmul_rs::cost,
    matmul_rs::describe,
    matmul_rs::bind,
    matmul_rs::tolerance,
    2,
};

}  // namespace replay::fusions
