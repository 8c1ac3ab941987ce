// scaled_mm kernels (see kernels.hpp).
//
// Napkin math: the reciprocals read and write M + N floats (rowwise at 8192 x 4096: 48 KiB), a
// few microseconds of launch latency beside the float8 GEMM's ~0.5 ms at 8192 x 4096 x 4096;
// eager runs them as two aten.reciprocal launches (and a permute view). One grid-stride kernel
// over both vectors.
#include "impls/fusions/scaled_mm/kernels.hpp"

#include <algorithm>

#include "impls/cuda/cuda_check.hpp"

namespace replay::scaled_mm {
namespace {

__global__ void reciprocals_kernel(RecipArgs a) {
  const int64_t total = a.v[0].n + (a.count > 1 ? a.v[1].n : 0);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const bool second = i >= a.v[0].n;
    const RecipVec& v = second ? a.v[1] : a.v[0];
    const int64_t j = second ? i - a.v[0].n : i;
    const float x = v.src[j * v.src_stride];
    v.dst[j * v.dst_stride] = v.invert ? __frcp_rn(x) : x;
  }
}

}  // namespace

void launch_reciprocals(const RecipArgs& a, cudaStream_t stream) {
  if (a.count == 0) return;
  const int64_t total = a.v[0].n + (a.count > 1 ? a.v[1].n : 0);
  if (total == 0) return;
  constexpr int kThreads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((total + kThreads - 1) / kThreads, 1024));
  reciprocals_kernel<<<blocks, kThreads, 0, stream>>>(a);
  REPLAY_CUDA_LAUNCH("scaled_mm::reciprocals_kernel");
}

}  // namespace replay::scaled_mm
