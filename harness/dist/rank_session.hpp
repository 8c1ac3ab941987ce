// One rank of a multi-process GPU replay (harness/dist/README.md): joins the rendezvous, picks its
// GPU (local rank modulo the device count), tells the other ranks which physical GPU it is (UUID
// and host) and, when every rank has its own, builds the NCCL communicator over all ranks from an
// ncclUniqueId all-gathered from rank 0 (a non-blocking communicator, so a rank that never joins
// ends the init after the timeout instead of hanging). When ranks share a GPU there is no
// communicator (NCCL cannot place two ranks on one device) and the context says why.
//
// A watchdog thread watches every NCCL call (DistContext::watch): when one has not completed
// within the timeout, it prints "error: rank 1: ncclAllGather of node 'ag' did not complete within
// 30 s (...)", aborts the communicator (ncclCommAbort: the kernels waiting for the peer exit) and
// ends the process with exit code 4 (runtime): a hung collective never hangs the run, and a
// partial run never passes. Rank 0's results.json keeps the traces finished before.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "harness/dist/launch_env.hpp"
#include "harness/dist/rank_results.hpp"
#include "harness/dist/rendezvous.hpp"
#include "impls/cuda/dist_context.hpp"

namespace replay::dist {

/// Watches the completion of NCCL calls on this rank's device (see the file comment).
class CollectiveWatchdog {
 public:
  /// `comm` may be set later (set_comm); `device` is the rank's CUDA device.
  CollectiveWatchdog(int rank, int device, double timeout_s);
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;
  void set_comm(ncclComm_t comm) { comm_ = comm; }
  /// Records an event on `stream` after the call `what` (not while the stream is being captured
  /// into a CUDA graph: the graph's launches are not watched).
  void watch(cudaStream_t stream, const std::string& what);

 private:
  struct Pending {
    cudaEvent_t event;
    std::string what;
    std::chrono::steady_clock::time_point enqueued;
  };
  void loop();
  int rank_, device_;
  double timeout_s_;
  std::atomic<ncclComm_t> comm_{nullptr};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> free_;
  bool stop_ = false;
  std::thread thread_;
};

class RankSession {
 public:
  /// Joins the rendezvous at env.master_addr:master_port (every step limited to timeout_s),
  /// selects the device, all-gathers the devices and builds the communicator (or says why not).
  /// Throws RendezvousError (a rank missing or dead), RuntimeFailure (no CUDA device, an NCCL
  /// init failure or timeout, naming this rank).
  RankSession(const LaunchEnv& env, double timeout_s);
  ~RankSession();  ///< stops the watchdog, aborts the communicator
  RankSession(const RankSession&) = delete;
  RankSession& operator=(const RankSession&) = delete;

  const DistContext& context() const { return ctx_; }
  const std::vector<RankDevice>& devices() const { return devices_; }
  Rendezvous& rendezvous() { return *rdzv_; }
  const LaunchEnv& env() const { return env_; }

 private:
  LaunchEnv env_;
  std::unique_ptr<Rendezvous> rdzv_;
  std::vector<RankDevice> devices_;
  std::unique_ptr<CollectiveWatchdog> watchdog_;
  DistContext ctx_;
};

/// This process's GPU as RankDevice (the current device's UUID, the host name).
RankDevice this_rank_device(int rank, int device);

/// An NCCL communicator of `world_size` ranks from `id` (non-blocking init, polled for at most
/// timeout_s, then aborted). Throws RuntimeFailure naming the rank on failure or timeout.
ncclComm_t init_nccl_comm(const std::string& id_bytes, int world_size, int rank, double timeout_s);

/// A fresh ncclUniqueId as bytes (rank 0 makes it; the others receive it at the rendezvous).
std::string new_nccl_unique_id();

}  // namespace replay::dist
