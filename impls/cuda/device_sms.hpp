// The multiprocessor count of the current CUDA device, asked once per device: the kernels that
// size a grid by it (persistent or one-wave grids) call it on every launch, and a launch must
// stay a launch (no driver query in the host enqueue time).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>

#include "impls/cuda/cuda_check.hpp"

namespace replay {

/// SMs of the current device (cudaDevAttrMultiProcessorCount), cached per device ordinal (the
/// first 64; a higher ordinal is asked every time). At least 1. Throws what REPLAY_CUDA throws
/// when there is no device.
inline int device_sms() {
  static std::array<std::atomic<int>, 64> cache{};
  int dev = 0;
  REPLAY_CUDA(cudaGetDevice(&dev));
  const bool cached = dev >= 0 && dev < static_cast<int>(cache.size());
  int n = cached ? cache[dev].load(std::memory_order_relaxed) : 0;
  if (n == 0) {
    REPLAY_CUDA(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    n = std::max(n, 1);
    if (cached) cache[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

}  // namespace replay
