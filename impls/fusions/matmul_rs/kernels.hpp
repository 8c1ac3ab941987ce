// matmul_rs's reduction kernel: the owner of a chunk of rows sums the world_size partial products
// of that chunk (issue 31's "fp32 accumulation of reduce-scatter partials").
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "workloads/ir/dtype.hpp"

namespace replay::matmul_rs {

inline constexpr int kMaxRanks = 16;  ///< partials one launch sums

/// out[i] = round(sum_{p = 0 .. n-1} src[p][i]) (avg: the sum / n), i < count. The sum runs in
/// float32 in rank order 0, 1, ..., n - 1, so the result is the same bits at every launch and on
/// every rank that sums the same partials. src[p] and out: `dtype` (bfloat16, float16, float32),
/// contiguous. Throws RuntimeFailure on a launch failure, std::invalid_argument when n is outside
/// 1..kMaxRanks.
struct SumPartials {
  const void* src[kMaxRanks] = {};
  int n = 0;
  void* out = nullptr;
  int64_t count = 0;
  DType dtype = DType::kBFloat16;
  bool avg = false;
};
void launch_sum_partials(const SumPartials& a, cudaStream_t stream);

}  // namespace replay::matmul_rs
