// CUPTI activity tracing of one replay: which kernels ran, how often, for how long, and the span
// from the first kernel start to the last kernel end (span - sum = launch gaps).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace replay {

/// Kernels CUPTI saw in one untimed replay of a region (no L2 flush in between).
struct KernelRecord {
  std::string name;  ///< demangled kernel name
  int count = 0;
  double total_us = 0;
};
/// One kernel launch of the traced replay, as CUPTI recorded it (CUpti_ActivityKernel10).
struct KernelEvent {
  std::string name;     ///< demangled kernel name
  double start_us = 0;  ///< start, µs after the first kernel of the replay started
  double dur_us = 0;    ///< end - start, µs
  uint32_t stream = 0;  ///< CUPTI stream id (one Perfetto track per stream)
  int grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  int registers = 0;     ///< registers per thread
  int static_smem = 0;   ///< static shared memory per block, bytes
  int dynamic_smem = 0;  ///< dynamic shared memory per block, bytes
};
struct CuptiSummary {
  std::vector<KernelRecord> kernels;
  /// Every kernel of the summarized replay in start order (the spin kernel excluded).
  std::vector<KernelEvent> timeline;
  double kernel_sum_us = 0;  ///< sum of kernel durations
  double span_us = 0;        ///< first kernel start to last kernel end (launches queued ahead)
  std::string error;         ///< set when CUPTI could not record
};

/// Replay `enqueue` (which enqueues GPU work on the stream it is given) twice with CUPTI
/// concurrent-kernel activity recording on, and summarize the second replay's kernel records by
/// demangled name. Each replay is queued behind a spin kernel (excluded from the summary), so its
/// kernels run back to back and span - kernel sum measures device-side gaps, not host launch
/// time. CUPTI is attached for this call only: it is detached (cuptiFinalize) before returning, so
/// later timing runs without the profiler. Never throws for CUPTI failures: they are reported in
/// CuptiSummary::error.
CuptiSummary trace_kernels(const std::function<void(cudaStream_t)>& enqueue, cudaStream_t s);

}  // namespace replay
