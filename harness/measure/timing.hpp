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

/// `n` cold samples of `fn`, enqueued back to back and synchronized once: per sample the L2 is
/// flushed, then `fn` runs between two events. Returns GPU µs per sample; if `host_us` is given,
/// it receives the host time of each enqueue of `fn`; if `sm_mhz` is given, a one-thread probe
/// kernel after each sample's stop event measures the SM clock (clock64 cycles over >= 4 µs of
/// %globaltimer) and its MHz are appended, one per sample. No warm-up: the caller warms up. The
/// sample primitive of time_cold and of the Google Benchmark runner (tests/bench).
std::vector<double> cold_samples(const std::function<void(cudaStream_t)>& fn, cudaStream_t s,
                                 L2Flush& l2, size_t n, std::vector<double>* host_us = nullptr,
                                 std::vector<double>* sm_mhz = nullptr);

/// What one cold measurement kept and why it stopped.
struct ColdTiming {
  std::vector<double> samples_us;   ///< kept samples, GPU µs (events)
  std::vector<double> host_us;      ///< host enqueue µs of each kept sample
  std::vector<double> sm_mhz;       ///< SM clock probed after each kept sample, MHz
  size_t discarded_slow_clock = 0;  ///< samples dropped: probe below clock_floor_mhz
  double clock_floor_mhz = 0;       ///< min_clock_ratio x the device's max SM clock (0: no check)
  StopReason stop = StopReason::kNone;
  double wall_s = 0;  ///< wall time of the sampling loop
};

/// Time `fn` (which enqueues work on the stream it is given): `warmup` untimed runs, then batches
/// of 10 cold samples (cold_samples, with the clock probe) until `rule` stops the kept samples.
/// Samples whose probe reads below rule.min_clock_ratio x the maximum SM clock (NVML's, else the
/// fastest probe seen) are discarded and counted, not kept.
ColdTiming time_cold(const std::function<void(cudaStream_t)>& fn, cudaStream_t s, L2Flush& l2,
                     const StopRule& rule, int warmup = 3);

/// Maximum SM clock of the current device in MHz (NVML), 0 when NVML cannot say.
double max_sm_clock_mhz();

/// Enqueue the clock probe alone: one thread counts clock64 cycles over >= `ns` of %globaltimer
/// and writes the SM clock in MHz to `out_mhz` (a device float).
void enqueue_clock_probe(float* out_mhz, cudaStream_t s, long long ns = 4000);

/// Enqueue a kernel that keeps the GPU busy for about `us` microseconds, so that launches queued
/// behind it start back to back: the CUPTI timeline then shows device gaps, not host ones.
void enqueue_spin(cudaStream_t s, double us);

/// Device-to-device copy bandwidth in GB/s, bytes read + written (cudaMemcpyAsync of `bytes`,
/// median of 20). This is the SOL denominator.
double measure_copy_bandwidth_gbps(cudaStream_t s, size_t bytes = size_t(1) << 30);

}  // namespace replay
