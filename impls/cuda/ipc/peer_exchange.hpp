// The peer layer of the chunked tensor-parallel pipelines (issue 31: ag_matmul and matmul_rs,
// variant "optimized"): one device buffer per rank shared with every other rank through CUDA IPC,
// signal words in that buffer written and waited on by stream memory operations, a copy stream for
// the copy engines, and a watchdog that turns a wait that never completes into an error naming
// the rank, the peer and the chunk.
//
// Protocol. Launch number e (the epoch, 1, 2, ... on every rank: all ranks launch the same
// pipeline the same number of times) of rank r, in one of two directions:
//   pull (matmul_rs): every rank copies what it needs out of its peers' buffers
//     producer r, once its chunk for peer p is in its own buffer:   ready_p[r] := e  (in p's
//     memory) consumer r, before copying peer p's chunk:                    wait ready_r[p] >= e
//     consumer r, once that copy has completed:                     done_p[r] := e   (in p's
//     memory) producer r, before overwriting the chunk peer p reads:        wait done_r[p] >= e - 1
//   push (ag_matmul): every rank copies its chunk straight into its peers' buffers (the copy
//   engines read the source where it is: no local staging copy, which would wait for SMs that a
//   running GEMM holds)
//     producer r, before writing its chunk into p's buffer:         wait done_r[p] >= e - 1
//     producer r, once that copy has completed:                     ready_p[r] := e  (in p's
//     memory) consumer r, before reading peer p's chunk in its own buffer:  wait ready_r[p] >= e
//     consumer r, once its kernels have read it:                    done_p[r] := e   (in p's
//     memory)
// A chunk may go in pieces, each announced as it lands (ready_steps; the ready word then counts
// (e - 1) * ready_steps + piece + 1). Data travels between ranks only by copies; signals are the
// only other remote writes.
// ready_r / done_r are words of rank r's own buffer, so every wait polls local memory. A write is
// cuStreamWriteValue32 (with its default memory fence: the chunk's bytes, written before it on
// the same stream, are visible before the flag); a wait is cuStreamWaitValue32 with
// CU_STREAM_WAIT_VALUE_GEQ, which compares (int32_t)(*addr - value) >= 0, so epochs may wrap.
// Epochs only grow, so a flag left from launch e - 1 never satisfies launch e's wait (the stale
// flag of a producer that has not reached launch e yet), and the done wait keeps a producer from
// overwriting what a slow consumer still reads. Both sides wait before they write, so no launch
// can run ahead of its peers by more than one epoch.
//
// Timeouts: every wait is followed by an event on its stream; the watchdog thread polls the
// pending events. When none of them has completed for DistContext::timeout_s, the first one
// pending names the stuck wait: the watchdog prints "rank R: <what> did not arrive within T s"
// to stderr, keeps it as the error, and releases every wait of this rank (it writes an epoch far
// ahead into its own signal words) so the streams drain and no host thread stays blocked. The
// results of that launch are garbage; synchronize() and every later begin() throw the error.
// Timeouts count from the later of the oldest pending wait's enqueue and the last progress seen,
// so a launch queued behind other work is not timed out early.
//
// Stream memory operations are called through the driver entry points the runtime hands out
// (cudaGetDriverEntryPointByVersion), so no binary links libcuda. Ranks sharing one GPU (the
// single-GPU machine) work: IPC between processes on one device is supported, and the waits are
// done by the GPU's front end, not by a spinning kernel. Not capturable into a CUDA graph: the
// epoch is a host counter baked into each enqueued operation (begin() refuses a capturing stream).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "impls/cuda/dist_context.hpp"

namespace replay::ipc {

/// Deliberately wrong pipelines for the tests (each must fail their checks): kWrongPeer copies a
/// chunk from the wrong rank (or the wrong chunk of the right rank, as each pipeline documents),
/// kDropChunk skips the copy of one peer's chunk, kStaleEpoch uses epoch 1 at every launch.
enum class PipelineFault { kNone, kWrongPeer, kDropChunk, kStaleEpoch };

/// The chunked pipelines' transport: CUDA IPC and the copy engines ("optimized"), or NCCL
/// send/recv per chunk ("nccl_chunked", works across hosts; needs DistContext::comm).
enum class Transport { kIpc, kNccl };

/// cuStreamWriteValue32: `*addr := value` after the prior work of `s`, with a memory fence
/// (addr: a device word, local or a peer's mapped through IPC). Throws RuntimeFailure.
void stream_write_u32(cudaStream_t s, uint32_t* addr, uint32_t value);
/// cuStreamWaitValue32 with CU_STREAM_WAIT_VALUE_GEQ: `s` waits until (int32_t)(*addr - value)
/// >= 0. Throws RuntimeFailure.
void stream_wait_u32_geq(cudaStream_t s, const uint32_t* addr, uint32_t value);

/// A device buffer of every rank, shared through CUDA IPC, with the protocol's signal words
/// (see the file comment). Construction and destruction are per rank; construction is collective
/// (DistContext::all_gather of the IPC handles): every rank constructs its exchange in the same
/// order. Move-only by pointer (hold it in a unique_ptr / shared_ptr).
class PeerExchange {
 public:
  /// `data_bytes`: the shared data area of each rank (every rank the same); `what` names the
  /// pipeline in errors ("ag_matmul"). Allocates (cudaMalloc, zeroed), exports, exchanges and
  /// opens the peers' buffers, creates the copy stream and starts the watchdog, on the current
  /// device (DistContext::device must be current). Throws RuntimeFailure on a CUDA error,
  /// std::runtime_error when the exchange of handles fails (from DistContext::all_gather), and
  /// std::invalid_argument when dist has no all_gather or world_size < 2.
  /// `ready_steps`: how many ready signals a producer gives each peer per launch (a chunk sent
  /// in that many pieces, each announced as soon as it is in place); the ready word then counts
  /// (epoch - 1) * ready_steps + step + 1, so a piece of launch e - 1 never satisfies launch e.
  PeerExchange(const DistContext& dist, size_t data_bytes, std::string what,
               PipelineFault fault = PipelineFault::kNone, int ready_steps = 1);
  /// Waits (host, at most timeout_s) until every peer has acknowledged this rank's last epoch
  /// (so none still reads this buffer), stops the watchdog, closes the peers' mappings and frees.
  ~PeerExchange();
  PeerExchange(const PeerExchange&) = delete;
  PeerExchange& operator=(const PeerExchange&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  /// Rank `r`'s data area as mapped in this process (this rank's own for r == rank()).
  void* data(int r) const { return data_[r]; }
  /// The stream of the peer copies (non-blocking, owned).
  cudaStream_t copy_stream() const { return copy_stream_; }

  /// Starts a launch and returns its epoch. Throws RuntimeFailure with the watchdog's error when
  /// a wait timed out before, and when `stream` is being captured into a CUDA graph.
  uint32_t begin(cudaStream_t stream);
  /// On `s`: tells `peer` that piece `step` (0 .. ready_steps - 1) of this rank's chunk for it is
  /// in place (ready): in this rank's buffer (pull), or in the peer's (push).
  void signal_ready(cudaStream_t s, int peer, int step = 0);
  /// On `s`: waits until piece `step` of `peer`'s chunk for this rank is ready (this epoch).
  /// `chunk` names it in a timeout ("chunk 2 (rows 64..95)").
  void wait_ready(cudaStream_t s, int peer, const std::string& chunk, int step = 0);
  /// On `s`: tells `peer` that this rank has finished reading its chunk (done).
  void signal_done(cudaStream_t s, int peer);
  /// On `s`: waits until `peer` has finished reading this rank's chunk of the previous epoch.
  void wait_done_previous(cudaStream_t s, int peer, const std::string& chunk);

  /// Host: blocks until every wait enqueued so far has completed and `s` is idle; throws
  /// RuntimeFailure with the watchdog's error when one timed out.
  void synchronize(cudaStream_t s);
  /// The watchdog's error ("" while none).
  std::string error() const;

 private:
  struct Pending {
    cudaEvent_t event;
    std::string what;
    uint32_t epoch;
  };
  void watch(cudaStream_t s, std::string what, uint32_t epoch);
  void watchdog_loop();
  uint32_t* ready_word(int owner, int from) const;
  uint32_t* done_word(int owner, int from) const;

  uint32_t ready_value(int step) const;
  int rank_ = 0, world_size_ = 0, device_ = 0;
  double timeout_s_ = 30;
  std::string what_;
  PipelineFault fault_ = PipelineFault::kNone;
  int ready_steps_ = 1;      // ready signals per peer per launch
  void* local_ = nullptr;    // this rank's allocation: signal words, then data
  std::vector<void*> base_;  // every rank's allocation as mapped here
  std::vector<void*> data_;  // every rank's data area as mapped here
  size_t signal_bytes_ = 0;  // the signal words' area, 256-byte aligned
  cudaStream_t copy_stream_ = nullptr;
  cudaStream_t release_stream_ = nullptr;  // the watchdog's (releases the waits)
  std::atomic<uint32_t> epoch_{0};         // the watchdog reads it

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
  std::string error_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace replay::ipc
