// The ag_matmul row of the fusion registry.
#include "impls/fusions/ag_matmul/params.hpp"

namespace replay::fusions {
namespace {

constexpr VariantSpec kVariants[] = {
    {"baseline", Role::kBaseline,
     "NCCL all-gather of the shards into a workspace (its blocks reordered for a gather along dim "
     "1), then the graph's cuBLASLt GEMMs on the gathered activation (vanilla tensor parallelism; "
     "needs one process per GPU with a communicator)"},
    {"optimized", Role::kOptimized,
     "chunked pipeline, one chunk per rank's shard: peer copies on the copy engines through CUDA "
     "IPC, a signal per chunk (stream memory operations, epochs, a watchdog timeout), per-chunk "
     "GEMMs (bf16, float8 tensorwise/rowwise) on the main stream as the rows arrive; needs a "
     "multi-process run"},
    {"nccl_chunked", Role::kAlternative,
     "the same chunks and GEMMs with NCCL send/recv per chunk in place of the IPC copies (works "
     "across hosts); needs an NCCL communicator (none when ranks share a GPU)"},
};

}  // namespace

extern const FusionSpec ag_matmul = {
    "ag_matmul",
    "column-parallel linear of tensor parallelism: all_gather_into_tensor -> wait_tensor -> "
    "[split/cat: a gather along dim 1] -> [view] -> one or more mm / _scaled_mm, the gather "
    "overlapped with the GEMMs",
    kVariants,
    ag_matmul::match,
    ag_matmul::cost,
    ag_matmul::describe,
    ag_matmul::bind,
    nullptr,
    2,
};

}  // namespace replay::fusions
