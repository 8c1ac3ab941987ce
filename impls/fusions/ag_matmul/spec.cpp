// The ag_matmul row of the fusion registry.
#include "impls/fusions/ag_matmul/params.hpp"

namespace replay::fusions {
namespace {

constexpr VariantSpec kVariants[] = {
    {"baseline", Role::kBaseline,
     "NCCL all-gather of the shards into a workspace, then one cuBLASLt GEMM on the gathered "
     "activation (vanilla tensor parallelism; needs one process per GPU with a communicator)"},
    {"optimized", Role::kOptimized,
     "chunked pipeline: peer copies of the shards on the copy engines (CUDA IPC) with a signal "
     "per chunk, per-chunk GEMMs on a second stream as the rows arrive (not built yet)"},
};

}  // namespace

extern const FusionSpec ag_matmul = {
    "ag_matmul",
    "column-parallel linear of tensor parallelism: all_gather_into_tensor -> wait_tensor -> "
    "[view] -> mm / _scaled_mm, the gather overlapped with the GEMM (matched; no variant runs yet)",
    kVariants,
    ag_matmul::match,
    ag_matmul::cost,
    ag_matmul::describe,
    ag_matmul::bind,
    nullptr,
    2,
};

}  // namespace replay::fusions
