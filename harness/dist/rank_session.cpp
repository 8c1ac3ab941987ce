#include "harness/dist/rank_session.hpp"

#include <nccl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "harness/cli/exit_codes.hpp"
#include "impls/cuda/cuda_check.hpp"

namespace replay::dist {
namespace {

std::string uuid_text(const cudaUUID_t& u) {
  // nvidia-smi's form: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
  std::string s = "GPU-";
  char b[3];
  for (int i = 0; i < 16; ++i) {
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(u.bytes[i]));
    s += b;
    if (i == 3 || i == 5 || i == 7 || i == 9) s += '-';
  }
  return s;
}

std::string host_name() {
  char buf[256] = {};
  return gethostname(buf, sizeof buf - 1) == 0 ? buf : "unknown";
}

std::string nccl_error(ncclResult_t r, ncclComm_t comm) {
  const char* last = ncclGetLastError(comm);
  return std::string(ncclGetErrorString(r)) +
         (last && *last ? std::string(" (") + last + ")" : std::string());
}

}  // namespace

CollectiveWatchdog::CollectiveWatchdog(int rank, int device, double timeout_s)
    : rank_(rank), device_(device), timeout_s_(timeout_s), thread_([this] { loop(); }) {}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (auto& p : pending_) cudaEventDestroy(p.event);
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

void CollectiveWatchdog::watch(cudaStream_t stream, const std::string& what) {
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone)
    return;
  cudaEvent_t e = nullptr;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!free_.empty()) {
      e = free_.back();
      free_.pop_back();
    }
  }
  if (!e) REPLAY_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  REPLAY_CUDA(cudaEventRecord(e, stream));
  std::lock_guard<std::mutex> lk(mu_);
  pending_.push_back({e, what, std::chrono::steady_clock::now()});
}

void CollectiveWatchdog::loop() {
  cudaSetDevice(device_);
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::milliseconds(20));
    const auto now = std::chrono::steady_clock::now();
    for (auto it = pending_.begin(); it != pending_.end();) {
      const cudaError_t q = cudaEventQuery(it->event);
      if (q == cudaErrorNotReady) {
        if (std::chrono::duration<double>(now - it->enqueued).count() > timeout_s_) {
          // One write, then the communicator aborted (its kernels waiting for the peer exit) and
          // the process ended: the main thread is stuck in a synchronize and cannot go on.
          std::cerr << ("error: " + collective_timeout_message(rank_, it->what, timeout_s_) + "\n")
                    << std::flush;
          if (ncclComm_t c = comm_.load()) ncclCommAbort(c);
          std::_Exit(kExitRuntime);
        }
        ++it;
        continue;
      }
      // Done (or failed: the main thread sees the error at its next synchronization).
      if (q != cudaSuccess) (void)cudaGetLastError();
      free_.push_back(it->event);
      it = pending_.erase(it);
    }
  }
}

RankDevice this_rank_device(int rank, int device) {
  cudaDeviceProp p{};
  REPLAY_CUDA(cudaGetDeviceProperties(&p, device));
  return {rank, host_name(), uuid_text(p.uuid), device};
}

std::string new_nccl_unique_id() {
  ncclUniqueId id;
  if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
    throw RuntimeFailure("rank 0: ncclGetUniqueId failed: " + nccl_error(r, nullptr));
  return std::string(reinterpret_cast<const char*>(&id), sizeof id);
}

ncclComm_t init_nccl_comm(const std::string& id_bytes, int world_size, int rank, double timeout_s) {
  const std::string who = "rank " + std::to_string(rank) + ": ";
  ncclUniqueId id;
  if (id_bytes.size() != sizeof id)
    throw RuntimeFailure(who + "the ncclUniqueId from rank 0 has " +
                         std::to_string(id_bytes.size()) + " bytes, expected " +
                         std::to_string(sizeof id));
  std::memcpy(&id, id_bytes.data(), sizeof id);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;  // init returns at once; polled below with a deadline
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, world_size, id, rank, &cfg);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  while (r == ncclInProgress) {
    if (std::chrono::steady_clock::now() > deadline) {
      ncclCommAbort(comm);
      char t[32];
      std::snprintf(t, sizeof t, "%g", timeout_s);
      throw RuntimeFailure(who + "ncclCommInitRank over " + std::to_string(world_size) +
                           " ranks did not complete within " + t +
                           " s (a peer rank hung or died; the communicator was aborted)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) break;
  }
  if (r != ncclSuccess) {
    const std::string why = nccl_error(r, comm);
    if (comm) ncclCommAbort(comm);
    throw RuntimeFailure(who + "ncclCommInitRank over " + std::to_string(world_size) +
                         " ranks failed: " + why);
  }
  return comm;
}

RankSession::RankSession(const LaunchEnv& env, double timeout_s) : env_(env) {
  RendezvousOptions o;
  o.addr = env.master_addr;
  o.port = env.master_port;
  o.rank = env.rank;
  o.world_size = env.world_size;
  o.timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
  rdzv_ = std::make_unique<Rendezvous>(o);
  const std::string who = "rank " + std::to_string(env.rank) + ": ";
  const int count = cuda_device_count();
  // Every rank takes part in every exchange below, also when it has no device: its blob says so,
  // and every rank throws the same error instead of waiting for it.
  std::string mine;
  if (count > 0) {
    const int device = env.local_rank % count;
    REPLAY_CUDA(cudaSetDevice(device));
    mine = rank_device_blob(this_rank_device(env.rank, device));
  }
  const std::vector<std::string> all = rdzv_->all_gather(mine);
  for (int r = 0; r < env.world_size; ++r) {
    if (all[r].empty())
      throw RuntimeFailure(who + "rank " + std::to_string(r) +
                           " found no CUDA device (GPU replay needs one per rank)");
    devices_.push_back(parse_rank_device(all[r], r));
  }
  ctx_.rank = env.rank;
  ctx_.world_size = env.world_size;
  ctx_.local_rank = env.local_rank;
  ctx_.device = devices_[env.rank].device;
  ctx_.timeout_s = timeout_s;
  ctx_.no_nccl_why = shared_device_why(devices_);
  ctx_.shared_device = !ctx_.no_nccl_why.empty();
  Rendezvous* rz = rdzv_.get();
  ctx_.all_gather = [rz](const std::string& b) { return rz->all_gather(b); };
  ctx_.barrier = [rz] { rz->barrier(); };
  if (ctx_.shared_device) return;
  // The unique id travels from rank 0; then every rank says whether its init succeeded, so a
  // failure on one rank is reported by all instead of leaving the others waiting.
  const std::vector<std::string> ids = rdzv_->all_gather(env.rank == 0 ? new_nccl_unique_id() : "");
  std::string failed;
  try {
    ctx_.comm = init_nccl_comm(ids[0], env.world_size, env.rank, timeout_s);
  } catch (const RuntimeFailure& e) {
    failed = e.what();
  }
  const std::vector<std::string> inits = rdzv_->all_gather(failed);
  for (int r = 0; r < env.world_size; ++r)
    if (!inits[r].empty()) {
      if (ctx_.comm) ncclCommAbort(ctx_.comm);
      ctx_.comm = nullptr;
      throw RuntimeFailure(inits[r]);
    }
  watchdog_ = std::make_unique<CollectiveWatchdog>(env.rank, ctx_.device, timeout_s);
  watchdog_->set_comm(ctx_.comm);
  CollectiveWatchdog* w = watchdog_.get();
  ctx_.watch = [w](cudaStream_t s, const std::string& what) { w->watch(s, what); };
}

RankSession::~RankSession() {
  if (ctx_.comm) cudaDeviceSynchronize();  // nothing of ours still running on the communicator
  watchdog_.reset();
  if (ctx_.comm) ncclCommAbort(ctx_.comm);  // frees it; never blocks on a peer
}

}  // namespace replay::dist
