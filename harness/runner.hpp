// The run pipeline for one trace: load, plan, inputs (golden or seeded), reference, then per GPU
// variant: poisoned run + numerics, cold timing, CUPTI kernel summary. Produces plain results.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "harness/results.hpp"
#include "harness/stats.hpp"

namespace replay {

inline const std::vector<std::string> kAllVariants = {"reference", "eager", "baseline",
                                                      "optimized"};

struct RunOptions {
  std::vector<std::string> variants = kAllVariants;
  uint64_t seed = 0;
  StopRule rule;
  bool cupti = true;
};

class L2Flush;

/// GPU state shared by all traces of a run. Construct only when a CUDA device is present.
class GpuSession {
 public:
  GpuSession();
  ~GpuSession();
  GpuSession(const GpuSession&) = delete;
  GpuSession& operator=(const GpuSession&) = delete;
  cudaStream_t stream() const { return stream_; }
  L2Flush& l2() { return *l2_; }
  double bandwidth_gbps() const { return bandwidth_gbps_; }
  /// Device name, SMs, memory, L2, driver and runtime versions.
  nlohmann::json environment() const;
  /// Median µs of a cold device-to-device copy moving `sol_bytes` (half read, half written),
  /// timed like the variants; cached per size.
  double copy_us(double sol_bytes, const StopRule& rule);

 private:
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<L2Flush> l2_;
  double bandwidth_gbps_ = 0;
  std::map<size_t, double> copy_cache_;
};

/// Replay one trace file. Trace errors (TraceError) are caught and reported in
/// TraceResult::error with `bad_input` set; CUDA failures (RuntimeFailure) propagate.
/// `gpu` is null on a machine without a CUDA device: GPU variants are then marked skipped.
TraceResult run_trace(const std::string& path, const RunOptions& opt, GpuSession* gpu,
                      bool* bad_input);

}  // namespace replay
