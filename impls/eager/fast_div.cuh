// Division by a run-time invariant 32-bit divisor through a multiply-high and a shift, for the
// index arithmetic of the eager kernels (impls/eager/kernels.cu). Host and device: a unit test
// (tests/unit/test_eager_host.cpp) checks it on the host against plain division.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace replay {

/// n / d for 0 <= n < 2^31 and 1 <= d <= 2^31, as q = (umulhi(n, magic) + n) >> shift with
/// shift = ceil(log2 d) and magic = floor(2^32 (2^shift - d) / d) + 1 (Granlund & Montgomery,
/// "Division by invariant integers using multiplication", PLDI 1994, section 4; the same scheme as
/// PyTorch's IntDivider in ATen/cuda/detail/IntegerDivider.cuh). n < 2^31 keeps t + n below 2^32.
struct FastDiv {
  uint32_t divisor = 1;
  uint32_t magic = 1;
  uint32_t shift = 0;

  FastDiv() = default;
  __host__ __device__ explicit FastDiv(uint32_t d) : divisor(d) {
    shift = 0;
    while (shift < 32 && (uint64_t(1) << shift) < d) ++shift;
    magic = static_cast<uint32_t>(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - d)) / d + 1);
  }
  __host__ __device__ __forceinline__ uint32_t div(uint32_t n) const {
#ifdef __CUDA_ARCH__
    const uint32_t t = __umulhi(n, magic);
#else
    const uint32_t t = static_cast<uint32_t>((uint64_t(n) * magic) >> 32);
#endif
    return (t + n) >> shift;
  }
};

}  // namespace replay
