// CUPTI activity tracing of one replay: which kernels ran, how often, for how long, and the span
// from the first kernel start to the last kernel end (span - sum = launch gaps); the memory copies
// (cudaMemcpyAsync: device-to-device, peer-to-peer, CUDA IPC copies) ride in the same timeline, so
// the overlap of communication and computation can be read from it (timeline_overlap.hpp).
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
/// One kernel launch of the traced replay, as CUPTI recorded it (CUpti_ActivityKernel10), or
/// one memory copy (CUpti_ActivityMemcpy6, CUpti_ActivityMemcpyPtoP4: kind kMemcpy).
struct KernelEvent {
  enum class Kind : uint8_t { kKernel, kMemcpy };
  Kind kind = Kind::kKernel;
  std::string name;     ///< demangled kernel name; "memcpy <copy_kind>" for a copy
  double start_us = 0;  ///< start, µs after the first kernel of the replay started
  double dur_us = 0;    ///< end - start, µs
  uint32_t stream = 0;  ///< CUPTI stream id (one Perfetto track per stream)
  int grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  int registers = 0;     ///< registers per thread
  int static_smem = 0;   ///< static shared memory per block, bytes
  int dynamic_smem = 0;  ///< dynamic shared memory per block, bytes
  /// Copies only: CUPTI's copy kind ("DtoD": same device, which CUDA IPC copies between processes
  /// sharing a GPU are too; "PtoP": across devices; "HtoD", "DtoH", ...) and the bytes copied.
  std::string copy_kind;
  uint64_t bytes = 0;
};
struct CuptiSummary {
  std::vector<KernelRecord> kernels;
  /// Every kernel and copy of the summarized replay in start order (the spin kernel excluded;
  /// times relative to the first kernel's or copy's start).
  std::vector<KernelEvent> timeline;
  double kernel_sum_us = 0;  ///< sum of kernel durations (copies not included)
  /// The time at least one kernel ran (timeline_kernel_busy_us): kernel_sum_us minus the
  /// overlaps, e.g. of a programmatic dependent launch with the kernel before it.
  double kernel_busy_us = 0;
  /// Whether kernels overlapped (the sum exceeds the busy time by more than the 0.01 µs a
  /// two-decimal print shows): then a report prints the sum beside the busy time.
  bool kernels_overlap() const { return kernel_sum_us > kernel_busy_us + 0.005; }
  double span_us = 0;  ///< first kernel start to last kernel end (launches queued ahead)
  std::string error;   ///< set when CUPTI could not record
};

/// Replay `enqueue` (which enqueues GPU work on the stream it is given) twice with CUPTI
/// concurrent-kernel and memcpy activity recording on, and summarize the second replay's kernel
/// records by demangled name (the copies go to the timeline only). Each replay is queued behind a
/// spin kernel (excluded from the summary), so its kernels run back to back and span - kernel sum
/// measures device-side gaps, not host launch time. CUPTI is attached for this call only: it is
/// detached (cuptiFinalize) before returning, so later timing runs without the profiler. Never
/// throws for CUPTI failures: they are reported in CuptiSummary::error. `align` (a multi-process
/// run: nccl_align_ranks) is enqueued between the spin and the replay, so every rank's replay
/// starts at the same moment; its one kernel, the first after the spin, is left out too.
CuptiSummary trace_kernels(const std::function<void(cudaStream_t)>& enqueue, cudaStream_t s,
                           const std::function<void(cudaStream_t)>& align = {});

}  // namespace replay
