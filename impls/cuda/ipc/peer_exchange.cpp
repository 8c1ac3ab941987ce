// PeerExchange: CUDA IPC buffers, signal words and the watchdog (the protocol is in the header).
#include "impls/cuda/ipc/peer_exchange.hpp"

#include <cuda.h>  // the driver's types and flags only: the functions come from the runtime

#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "impls/cuda/cuda_check.hpp"

namespace replay::ipc {
namespace {

using Clock = std::chrono::steady_clock;
using StreamValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using ErrorNameFn = CUresult (*)(CUresult, const char**);

struct MemOps {
  StreamValueFn write = nullptr, wait = nullptr;
  ErrorNameFn error_name = nullptr;
};

void* driver_entry(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  REPLAY_CUDA(cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &q));
  if (q != cudaDriverEntryPointSuccess || !fn)
    throw RuntimeFailure(std::string("the CUDA driver has no entry point ") + symbol +
                         " (stream memory operations need a CUDA 12 driver or newer)");
  return fn;
}

// The driver's stream memory operations, resolved once per process.
const MemOps& mem_ops() {
  static const MemOps ops = [] {
    MemOps o;
    o.write = reinterpret_cast<StreamValueFn>(driver_entry("cuStreamWriteValue32"));
    o.wait = reinterpret_cast<StreamValueFn>(driver_entry("cuStreamWaitValue32"));
    o.error_name = reinterpret_cast<ErrorNameFn>(driver_entry("cuGetErrorName"));
    return o;
  }();
  return ops;
}

void check_cu(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  if (mem_ops().error_name(r, &name) != CUDA_SUCCESS || !name) name = "unknown";
  throw RuntimeFailure(std::string(call) + " failed: " + name + " (" + std::to_string(r) + ")");
}

// (int32_t)(a - b) >= 0: a is epoch b or later, across a wrap (CU_STREAM_WAIT_VALUE_GEQ's test).
bool epoch_reached(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) >= 0;
}

constexpr uint32_t kReleaseAhead = 1u << 30;  // the watchdog's release: this far past any epoch

}  // namespace

void stream_write_u32(cudaStream_t s, uint32_t* addr, uint32_t value) {
  check_cu(mem_ops().write(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(addr),
                           value, CU_STREAM_WRITE_VALUE_DEFAULT),
           "cuStreamWriteValue32");
}

void stream_wait_u32_geq(cudaStream_t s, const uint32_t* addr, uint32_t value) {
  check_cu(mem_ops().wait(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(addr), value,
                          CU_STREAM_WAIT_VALUE_GEQ),
           "cuStreamWaitValue32");
}

PeerExchange::PeerExchange(const DistContext& dist, size_t data_bytes, std::string what,
                           PipelineFault fault, int ready_steps)
    : rank_(dist.rank),
      world_size_(dist.world_size),
      device_(dist.device),
      timeout_s_(dist.timeout_s),
      what_(std::move(what)),
      fault_(fault),
      ready_steps_(ready_steps) {
  if (ready_steps < 1 || ready_steps > 1024)
    throw std::invalid_argument(what_ + ": ready_steps " + std::to_string(ready_steps) +
                                " outside 1..1024");
  if (!dist.all_gather) throw std::invalid_argument(what_ + ": the DistContext has no all_gather");
  if (world_size_ < 2)
    throw std::invalid_argument(what_ + ": a peer exchange needs 2 ranks or more");
  mem_ops();  // resolve the driver entry points now: a missing one fails the bind, not a launch
  signal_bytes_ = (2 * world_size_ * sizeof(uint32_t) + 255) / 256 * 256;
  const size_t total = signal_bytes_ + data_bytes;
  REPLAY_CUDA(cudaMalloc(&local_, total));
  REPLAY_CUDA(cudaMemset(local_, 0, total));
  REPLAY_CUDA(cudaDeviceSynchronize());  // zeroed before any peer can read or signal
  cudaIpcMemHandle_t handle;
  REPLAY_CUDA(cudaIpcGetMemHandle(&handle, local_));
  std::string blob(reinterpret_cast<const char*>(&handle), sizeof handle);
  const uint64_t total64 = total;
  blob.append(reinterpret_cast<const char*>(&total64), sizeof total64);
  const std::vector<std::string> all = dist.all_gather(blob);
  if (static_cast<int>(all.size()) != world_size_)
    throw std::runtime_error(what_ + ": the exchange of CUDA IPC handles returned " +
                             std::to_string(all.size()) + " entries for " +
                             std::to_string(world_size_) + " ranks");
  base_.assign(world_size_, nullptr);
  for (int r = 0; r < world_size_; ++r) {
    if (all[r].size() != blob.size() ||
        std::memcmp(all[r].data() + sizeof handle, &total64, sizeof total64) != 0)
      throw std::runtime_error(what_ + ": rank " + std::to_string(r) +
                               "'s CUDA IPC handle is malformed or its buffer is not " +
                               std::to_string(total) +
                               " bytes (do all ranks bind the same region?)");
    if (r == rank_) {
      base_[r] = local_;
      continue;
    }
    cudaIpcMemHandle_t h;
    std::memcpy(&h, all[r].data(), sizeof h);
    const cudaError_t e = cudaIpcOpenMemHandle(&base_[r], h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw RuntimeFailure(what_ + ": rank " + std::to_string(rank_) + " cannot open rank " +
                           std::to_string(r) + "'s CUDA IPC handle: " + cudaGetErrorName(e) + " (" +
                           cudaGetErrorString(e) + ")");
    }
  }
  for (void* b : base_) data_.push_back(static_cast<char*>(b) + signal_bytes_);
  REPLAY_CUDA(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  REPLAY_CUDA(cudaStreamCreateWithFlags(&release_stream_, cudaStreamNonBlocking));
  watchdog_ = std::thread([this] { watchdog_loop(); });
}

PeerExchange::~PeerExchange() {
  // Every peer must have copied this rank's chunks of the last epoch before the buffer goes.
  const uint32_t last = epoch_;
  if (last > 0 && error().empty()) {
    std::vector<uint32_t> done(world_size_);
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
    for (;;) {
      if (cudaMemcpy(done.data(), done_word(rank_, 0), world_size_ * sizeof(uint32_t),
                     cudaMemcpyDeviceToHost) != cudaSuccess) {
        (void)cudaGetLastError();
        break;
      }
      bool all = true;
      for (int p = 0; p < world_size_; ++p)
        if (p != rank_ && !epoch_reached(done[p], last)) all = false;
      if (all) break;
      if (Clock::now() > deadline) {
        std::fprintf(stderr,
                     "replay: rank %d: %s: freeing its peer buffer although not every peer "
                     "acknowledged epoch %u within %g s\n",
                     rank_, what_.c_str(), last, timeout_s_);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  for (auto& p : pending_) cudaEventDestroy(p.event);
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  if (copy_stream_) cudaStreamDestroy(copy_stream_);
  if (release_stream_) cudaStreamDestroy(release_stream_);
  for (int r = 0; r < static_cast<int>(base_.size()); ++r)
    if (r != rank_ && base_[r]) cudaIpcCloseMemHandle(base_[r]);
  if (local_) cudaFree(local_);
}

uint32_t* PeerExchange::ready_word(int owner, int from) const {
  return static_cast<uint32_t*>(base_[owner]) + from;
}

uint32_t* PeerExchange::done_word(int owner, int from) const {
  return static_cast<uint32_t*>(base_[owner]) + world_size_ + from;
}

std::string PeerExchange::error() const {
  std::lock_guard<std::mutex> lk(mu_);
  return error_;
}

uint32_t PeerExchange::begin(cudaStream_t stream) {
  if (const std::string e = error(); !e.empty()) throw RuntimeFailure(e);
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  REPLAY_CUDA(cudaStreamIsCapturing(stream, &cap));
  if (cap != cudaStreamCaptureStatusNone)
    throw RuntimeFailure(what_ +
                         ": the chunked pipeline cannot be captured into a CUDA graph (its signal "
                         "epochs are host counters baked into each launch)");
  epoch_ = fault_ == PipelineFault::kStaleEpoch ? 1 : epoch_ + 1;
  return epoch_;
}

uint32_t PeerExchange::ready_value(int step) const {
  if (step < 0 || step >= ready_steps_)
    throw std::invalid_argument(what_ + ": ready step " + std::to_string(step) + " outside 0.." +
                                std::to_string(ready_steps_ - 1));
  return (epoch_ - 1) * static_cast<uint32_t>(ready_steps_) + static_cast<uint32_t>(step) + 1;
}

void PeerExchange::signal_ready(cudaStream_t s, int peer, int step) {
  stream_write_u32(s, ready_word(peer, rank_), ready_value(step));
}

void PeerExchange::wait_ready(cudaStream_t s, int peer, const std::string& chunk, int step) {
  stream_wait_u32_geq(s, ready_word(rank_, peer), ready_value(step));
  watch(s, chunk + " from rank " + std::to_string(peer), epoch_);
}

void PeerExchange::signal_done(cudaStream_t s, int peer) {
  stream_write_u32(s, done_word(peer, rank_), epoch_);
}

void PeerExchange::wait_done_previous(cudaStream_t s, int peer, const std::string& chunk) {
  if (epoch_ <= 1) return;  // nothing was read before the first launch
  stream_wait_u32_geq(s, done_word(rank_, peer), epoch_ - 1);
  watch(s, "rank " + std::to_string(peer) + "'s acknowledgement of " + chunk, epoch_ - 1);
}

void PeerExchange::watch(cudaStream_t s, std::string what, uint32_t epoch) {
  std::unique_lock<std::mutex> lk(mu_);
  cudaEvent_t ev;
  if (free_events_.empty()) {
    REPLAY_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  } else {
    ev = free_events_.back();
    free_events_.pop_back();
  }
  REPLAY_CUDA(cudaEventRecord(ev, s));
  const bool was_empty = pending_.empty();
  pending_.push_back({ev, std::move(what), epoch});
  lk.unlock();
  if (was_empty) cv_.notify_all();
}

void PeerExchange::watchdog_loop() {
  (void)cudaSetDevice(device_);
  const auto limit = std::chrono::duration<double>(timeout_s_);
  std::unique_lock<std::mutex> lk(mu_);
  auto last_progress = Clock::now();
  while (!stop_) {
    if (pending_.empty()) {
      cv_.wait(lk, [&] { return stop_ || !pending_.empty(); });
      last_progress = Clock::now();
      continue;
    }
    for (auto it = pending_.begin(); it != pending_.end();) {
      const cudaError_t q = cudaEventQuery(it->event);
      if (q == cudaErrorNotReady) {
        ++it;
        continue;
      }
      if (q != cudaSuccess) (void)cudaGetLastError();  // the launch's own calls report it
      free_events_.push_back(it->event);
      it = pending_.erase(it);
      last_progress = Clock::now();
    }
    if (!pending_.empty() && Clock::now() - last_progress > limit) {
      const Pending& stuck = pending_.front();
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", timeout_s_);
      error_ = "rank " + std::to_string(rank_) + ": " + what_ + ": " + stuck.what + " (epoch " +
               std::to_string(stuck.epoch) + ") did not arrive within " + secs +
               " s (is that rank alive and running the same program?)";
      std::fprintf(stderr, "replay: %s\n", error_.c_str());
      // Release every wait of this rank: an epoch far past any enqueued one in every signal word.
      // ready words count epoch * ready_steps, done words epochs
      std::vector<uint32_t> release(2 * world_size_, epoch_ + kReleaseAhead);
      for (int r = 0; r < world_size_; ++r)
        release[r] = epoch_ * static_cast<uint32_t>(ready_steps_) + kReleaseAhead;
      for (auto& p : pending_) cudaEventDestroy(p.event);  // freed once they complete
      pending_.clear();
      lk.unlock();
      if (cudaMemcpyAsync(local_, release.data(), release.size() * sizeof(uint32_t),
                          cudaMemcpyHostToDevice, release_stream_) != cudaSuccess ||
          cudaStreamSynchronize(release_stream_) != cudaSuccess)
        (void)cudaGetLastError();
      lk.lock();
      continue;
    }
    cv_.wait_for(lk, std::chrono::milliseconds(1), [&] { return stop_; });
  }
}

void PeerExchange::synchronize(cudaStream_t s) {
  for (;;) {
    if (const std::string e = error(); !e.empty()) throw RuntimeFailure(e);
    bool idle = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      idle = pending_.empty();
    }
    if (idle) {
      const cudaError_t a = cudaStreamQuery(s), b = cudaStreamQuery(copy_stream_);
      if (a != cudaErrorNotReady && b != cudaErrorNotReady) {
        REPLAY_CUDA(a);
        REPLAY_CUDA(b);
        if (const std::string e = error(); !e.empty()) throw RuntimeFailure(e);
        return;
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace replay::ipc
