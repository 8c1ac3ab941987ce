// Collectives of a per-rank graph through NCCL (issue 31): PyTorch's functional collectives
// (workloads/ops/collective.cpp) as one NCCL call each on the rank's communicator, as
// ProcessGroupNCCL runs them:
//   all_gather_into_tensor(x [n, ..]) -> [world * n, ..]   ncclAllGather (bytes: every dtype)
//   reduce_scatter_tensor(x [world * n, ..], op) -> [n, ..] ncclReduceScatter (ncclSum / ncclAvg)
//   all_reduce(x, op) -> x's shape                           ncclAllReduce (ncclSum / ncclAvg)
//   wait_tensor(x) -> x                                      nothing: the collective was enqueued
//                                                            on the same stream (GpuProgram
//                                                            aliases its output)
// Reductions take float32, float64, bfloat16 and float16 (NCCL's float8 types reduce only from
// NCCL 2.24 on and PyTorch's process group never does: refused, naming the node). An operand or
// output that is not contiguous goes through a contiguous temporary (a strided copy).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "impls/cuda/dist_context.hpp"
#include "impls/eager/kernels.hpp"

namespace replay {

/// Thrown when a collective needs an NCCL communicator and the run has none (ranks sharing a
/// GPU): the variant cannot run, which the runner reports as a skip with this message; any other
/// std::invalid_argument stays an error.
struct NoCommunicator : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/// Checks the result of an NCCL call of rank `d.rank` enqueued on `stream`, and hands it to
/// d.watch. ncclInProgress (a non-blocking communicator still enqueueing) is polled through
/// ncclCommGetAsyncError until it settles, for at most d.timeout_s. Throws RuntimeFailure naming
/// the rank and `what` ("rank 1: ncclAllGather of node 'ag' failed: unhandled system error
/// (...)", "... did not complete within 30 s").
void nccl_check(const DistContext& d, int result, cudaStream_t stream, const std::string& what);

/// Whether the eager collectives of run `d` go over CUDA IPC (collective_ipc.cu): no NCCL
/// communicator because the ranks share a GPU, a rendezvous to exchange IPC handles, 2..16 ranks.
bool ipc_collectives(const DistContext& d);

/// The launch of collective node `n` over CUDA IPC, for ranks sharing a GPU (ipc_collectives):
/// x, y contiguous (lower_collective stages them). Collective: every rank lowers its collectives
/// in the same order (the IPC handles are exchanged now). Reductions (sum, avg, max, min) run in
/// float32 (float64 for float64) in rank order, rounded once. Throws std::invalid_argument naming
/// the node for a reduction of another dtype, RuntimeFailure on a CUDA error; a launch whose
/// wait for a peer times out throws RuntimeFailure naming the rank and the node at the next
/// launch (the peer exchange's watchdog).
EagerLaunch lower_collective_ipc(const Node& n, const DeviceTensor& x, const DeviceTensor& y,
                                 const DistContext& d);

/// The launch of collective node `n` (its op row's lowering is EagerLowering::kCollective, not
/// wait_tensor) on `d.comm`, or over CUDA IPC where the ranks share a GPU (ipc_collectives).
/// `in`/`out` as lower_node takes them. Throws NoCommunicator naming the node when d.comm is
/// null and IPC cannot stand in (with d.no_nccl_why); std::invalid_argument naming the node when
/// its group is not the communicator's size, or for a reduction of a dtype NCCL does not reduce.
EagerLaunch lower_collective(const Node& n, const std::vector<DeviceTensor>& in,
                             const std::vector<DeviceTensor>& out, const DistContext& d);

/// Raw NCCL all-gather of `bytes` bytes per rank from `send` into `recv` (world_size * bytes),
/// checked by nccl_check with `what` (for fusion baselines).
void nccl_all_gather_bytes(const DistContext& d, const void* send, void* recv, size_t bytes,
                           cudaStream_t stream, const std::string& what);

/// NCCL reduce-scatter of `count` elements per rank (recv) from send (world_size * count) of
/// `dtype` with reduce op `op` ("sum" or "avg"). Throws std::invalid_argument for a dtype or op
/// NCCL does not reduce (checked by nccl_reduce_unsupported first at bind time).
void nccl_reduce_scatter(const DistContext& d, const void* send, void* recv, size_t count,
                         DType dtype, const std::string& op, cudaStream_t stream,
                         const std::string& what);

/// A one-float ncclAllReduce (sum) of the device word `word` on `stream`, checked and watched as
/// the other calls: every rank's stream leaves it at nearly the same moment (NCCL's small-message
/// latency, a few µs), so the work enqueued after it starts aligned across the ranks. The timing
/// layer enqueues it before each sample of a multi-process run (harness/measure/TIMING.md).
/// Throws RuntimeFailure (as nccl_check).
void nccl_align_ranks(const DistContext& d, float* word, cudaStream_t stream);

/// Why NCCL cannot reduce `dtype` with `op` here, or "" when it can.
std::string nccl_reduce_unsupported(DType dtype, const std::string& op);

}  // namespace replay
