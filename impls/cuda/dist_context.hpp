// What a multi-process run (issue 31: one process per rank, started by torchrun / mpirun / srun or
// `replay launch`) gives a fusion's binder: its rank, the NCCL communicator when there is one, and
// a blocking exchange of bytes between the ranks through the rendezvous (harness/dist), which is
// how CUDA IPC handles travel.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "impls/cuda/launch_context.hpp"

namespace replay {

/// The distributed context of one rank's GPU program. Every rank builds its program and binds its
/// regions in the same order, so the collective calls below (all_gather, barrier) match up.
struct DistContext {
  int rank = 0;        ///< this process's rank, 0 <= rank < world_size
  int world_size = 1;  ///< ranks in the run (== the trace's world_size)
  int local_rank = 0;  ///< rank on this host (chooses the CUDA device)
  int device = 0;      ///< the CUDA device this rank uses
  /// True when two or more ranks of the run use the same CUDA device (the single-GPU machine):
  /// NCCL refuses a communicator with two ranks on one device, so `comm` is null then, and
  /// timings of ranks sharing a device mean nothing (correctness only, said in every report).
  bool shared_device = false;
  ncclComm_t comm = nullptr;  ///< NCCL communicator over all ranks, or null (see shared_device)
  std::string no_nccl_why;    ///< why `comm` is null, when it is
  double timeout_s = 30;      ///< limit for every wait on a peer (rendezvous steps, signals)
  /// Collective: every rank passes its blob and gets every rank's, indexed by rank. Throws
  /// std::runtime_error naming the rank(s) that failed or timed out.
  std::function<std::vector<std::string>(const std::string&)> all_gather;
  /// Collective: returns once every rank has entered. Throws like all_gather.
  std::function<void()> barrier;
  /// Called after every NCCL call this rank enqueues on `stream` (impls/eager/collective.hpp
  /// nccl_check): the owner of `comm` watches its completion, and when it has not completed within
  /// timeout_s (a peer rank hung or died), aborts the communicator and ends the process with an
  /// error naming this rank and `what` ("ncclAllGather of node 'ag'"). Empty: not watched (tests).
  std::function<void(cudaStream_t stream, const std::string& what)> watch;
};

}  // namespace replay
