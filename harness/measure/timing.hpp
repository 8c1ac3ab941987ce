// GPU timing: CUDA events around each sample, the L2 flushed before every sample (cold), warm-up
// first, batches of samples until the stopping rule (stats.hpp) is met. nvbench's cold measurement
// is the model.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <vector>

#include "harness/measure/stats.hpp"
#include "impls/cuda/cuda_check.hpp"

namespace replay {

/// Evicts the L2 by reading a zeroed buffer of twice its size (l2_flush.cu), leaving only clean
/// lines. Owns the buffer; not copyable.
class L2Flush {
 public:
  L2Flush();
  L2Flush(const L2Flush&) = delete;
  L2Flush& operator=(const L2Flush&) = delete;
  void flush(cudaStream_t s);
  /// Bytes read per flush (twice the device's L2).
  size_t bytes() const { return buf_.bytes(); }

 private:
  DeviceBuffer buf_;
  DeviceBuffer sink_;
};

/// Enqueue a read of `bytes` at `buf` (a multiple of 16) through the L2; `sink` is a device word.
void l2_flush_read(const void* buf, size_t bytes, unsigned* sink, cudaStream_t s);

/// `n` samples of `fn`, enqueued back to back and synchronized once: per sample the L2 is flushed
/// when `l2` is non-null (cold; null: hot, the previous replay's data left in L2), then `fn` runs
/// between two events. Returns GPU µs per sample; if `host_us` is given, it receives the host time
/// of each enqueue of `fn`; if `sm_mhz` is given, a one-thread probe kernel after each sample's
/// stop event measures the SM clock (clock64 cycles over >= 4 µs of %globaltimer) and its MHz are
/// appended, one per sample. `align`, when given, is enqueued after the flush and before the start
/// event of every sample (untimed): a multi-process run aligns its ranks there. No warm-up: the
/// caller warms up.
using SampleAlign = std::function<void(cudaStream_t)>;
std::vector<double> sample_batch(const std::function<void(cudaStream_t)>& fn, cudaStream_t s,
                                 L2Flush* l2, size_t n, std::vector<double>* host_us = nullptr,
                                 std::vector<double>* sm_mhz = nullptr,
                                 const SampleAlign& align = {});

/// sample_batch with the L2 flushed before every sample: the sample primitive of time_cold and of
/// the Google Benchmark runners (tests/bench).
inline std::vector<double> cold_samples(const std::function<void(cudaStream_t)>& fn, cudaStream_t s,
                                        L2Flush& l2, size_t n,
                                        std::vector<double>* host_us = nullptr,
                                        std::vector<double>* sm_mhz = nullptr) {
  return sample_batch(fn, s, &l2, n, host_us, sm_mhz);
}

/// How time_host_enqueue measures, as results.json's run.host_enqueue_method says. A run without
/// the field timed host enqueue back to back inside the cold loop (before 2026-11-25); compare
/// does not set host times of the two methods against each other.
inline constexpr const char* kHostEnqueueMethod = "blocking_kernel";

/// Host µs of enqueues of one replay, and how many more waited for the GPU.
struct HostEnqueue {
  std::vector<double> us;  ///< the enqueues that did not wait
  size_t waited = 0;       ///< enqueues during which the blocking kernel timed out (left out)
};

/// Host µs of `n` enqueues of `fn`, each behind a StreamBlocker on an otherwise empty stream (`s`
/// synchronized first; released after the clock stops): nothing runs or drains meanwhile, as
/// nvbench measures CPU time. What one replay costs the CPU. Timed back to back instead, a
/// replay of long kernels fills the device's launch queue and later enqueues wait for the GPU,
/// which is not launch overhead (float8 rowwise forward on an H100: 501 µs back to back for 63
/// nodes); timed into an idle GPU, each launch also pays the submission to a device with nothing
/// running (nanoGPT LayerNorm backward [576000, 384]: 8.9 µs per launch against 3.8 back to back).
/// An enqueue that cannot finish until the GPU progresses waits for the blocker's 100 ms timeout;
/// it is counted in `waited` and left out of `us`: a synchronizing call inside `fn`, a replay of
/// more launches than the driver's launch queue holds (about a thousand: the host then waits for
/// queue space), or an enqueue slower than 100 ms. Throws CudaError.
HostEnqueue time_host_enqueue(const std::function<void(cudaStream_t)>& fn, cudaStream_t s,
                              size_t n);

/// What one measurement kept and why it stopped.
struct Timing {
  std::vector<double> samples_us;   ///< kept samples, GPU µs (events)
  std::vector<double> host_us;      ///< host µs of each kept sample's enqueue (with queue waits)
  std::vector<double> sm_mhz;       ///< SM clock probed after each kept sample, MHz
  size_t discarded_slow_clock = 0;  ///< samples dropped: probe below clock_floor_mhz
  double clock_floor_mhz = 0;       ///< min_clock_ratio x the device's max SM clock (0: no check)
  StopReason stop = StopReason::kNone;
  double wall_s = 0;  ///< wall time of the sampling loop
};
using ColdTiming = Timing;

/// The stop decision of several processes timing in lockstep (a multi-process replay, whose every
/// sample enqueues collectives that all ranks must match): given this process's reason after a
/// batch, returns the reason all agree on (kNone: take another batch). Empty: decide alone.
using StopAgreement = std::function<StopReason(StopReason mine)>;

/// Time `fn` (which enqueues work on the stream it is given): `warmup` untimed runs, then batches
/// of 10 samples (sample_batch with the clock probe; L2 flushed before each when `l2` is
/// non-null) until `rule` stops the kept samples (or, with `agree`, until the processes agree to
/// stop: every process then runs the same number of batches). Samples whose probe reads below
/// rule.min_clock_ratio x the maximum SM clock (NVML's, else the fastest probe seen) are discarded
/// and counted, not kept. `align`: see sample_batch.
Timing time_samples(const std::function<void(cudaStream_t)>& fn, cudaStream_t s, L2Flush* l2,
                    const StopRule& rule, int warmup = 3, const StopAgreement& agree = {},
                    const SampleAlign& align = {});

/// Cold timing (nvbench's cold measurement): time_samples with the L2 flushed before each sample.
inline Timing time_cold(const std::function<void(cudaStream_t)>& fn, cudaStream_t s, L2Flush& l2,
                        const StopRule& rule, int warmup = 3, const StopAgreement& agree = {},
                        const SampleAlign& align = {}) {
  return time_samples(fn, s, &l2, rule, warmup, agree, align);
}

/// Hot timing: time_samples without a flush, replays back to back (what a kernel costs when its
/// inputs are still in L2 from the previous step, the best case of a training loop).
inline Timing time_hot(const std::function<void(cudaStream_t)>& fn, cudaStream_t s,
                       const StopRule& rule, int warmup = 3, const StopAgreement& agree = {},
                       const SampleAlign& align = {}) {
  return time_samples(fn, s, nullptr, rule, warmup, agree, align);
}

/// A replay captured once into an executable CUDA graph (stream capture in global mode on
/// `capture_on`, a stream other than the legacy default stream, on which the replay already ran
/// once, so that one-time setup such as cuBLASLt's algorithm choice is done); launch() enqueues
/// it. The graph writes the replay's own buffers (outputs, the split reductions' workspaces), so
/// it must not run concurrently with another launch of the same replay, nor outlive the program
/// (GpuProgram) whose buffers it captured. Every kernel is
/// then launched by the device back to back, free of the host's launch gaps. Throws
/// std::runtime_error naming the CUDA error when the replay cannot be captured (e.g. it
/// synchronizes or allocates while it enqueues); the stream is usable again afterwards.
class CapturedGraph {
 public:
  CapturedGraph(const std::function<void(cudaStream_t)>& fn, cudaStream_t capture_on);
  ~CapturedGraph();
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  void launch(cudaStream_t s) const;

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

/// Maximum SM clock of the current device in MHz (NVML), 0 when NVML cannot say.
double max_sm_clock_mhz();

/// Enqueue the clock probe alone: one thread counts clock64 cycles over >= `ns` of %globaltimer
/// and writes the SM clock in MHz to `out_mhz` (a device float).
void enqueue_clock_probe(float* out_mhz, cudaStream_t s, long long ns = 4000);

/// nvbench's blocking kernel: block() enqueues a one-thread kernel that holds the stream until
/// release() (a flag in pinned host memory the kernel polls) or until `timeout_us` pass, so that
/// what the host enqueues meanwhile neither starts nor waits. timed_out(), after the stream is
/// synchronized: the kernel gave up before release(), i.e. some enqueue waited for the GPU (it
/// would otherwise have deadlocked). Throws CudaError.
class StreamBlocker {
 public:
  StreamBlocker();
  ~StreamBlocker();
  StreamBlocker(const StreamBlocker&) = delete;
  StreamBlocker& operator=(const StreamBlocker&) = delete;
  void block(cudaStream_t s, double timeout_us);
  void release();
  bool timed_out() const;

 private:
  int* flags_ = nullptr;         // [0] release, [1] timed out (host view)
  int* device_flags_ = nullptr;  // the same words, device view
  cudaStream_t stream_ = nullptr;
  bool blocked_ = false;  // a blocking kernel was enqueued on stream_ (the destructor waits for it)
};

/// Enqueue a kernel that keeps the GPU busy for about `us` microseconds, so that launches queued
/// behind it start back to back: the CUPTI timeline then shows device gaps, not host ones.
void enqueue_spin(cudaStream_t s, double us);

/// Device-to-device copy bandwidth in GB/s, bytes read + written (cudaMemcpyAsync of `bytes`,
/// median of 20). This is the SOL denominator.
double measure_copy_bandwidth_gbps(cudaStream_t s, size_t bytes = size_t(1) << 30);

}  // namespace replay
