// matmul_rs's reduction kernel (kernels.hpp). Napkin math: the owner reads n partial chunks of
// m N elements and writes one: (n + 1) m N x 2 bytes for bf16, 4096 x 4096 rows x cols at n = 4:
// 168 MB, ~50 us at 3.3 TB/s; it runs once after the last chunk landed (the pipeline's tail).
#include <stdexcept>

#include "impls/cuda/cuda_check.hpp"
#include "impls/cuda/dtype_device.cuh"
#include "impls/fusions/matmul_rs/kernels.hpp"

namespace replay::matmul_rs {
namespace {

__global__ void sum_partials_kernel(SumPartials a) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.count;
       i += stride) {
    float acc = 0;
    for (int p = 0; p < a.n; ++p) acc += load_elem<float>(a.src[p], i, a.dtype);
    if (a.avg) acc /= static_cast<float>(a.n);
    store_elem<float>(a.out, i, a.dtype, acc);
  }
}

}  // namespace

void launch_sum_partials(const SumPartials& a, cudaStream_t stream) {
  if (a.n < 1 || a.n > kMaxRanks)
    throw std::invalid_argument("sum_partials: " + std::to_string(a.n) + " partials, expected 1.." +
                                std::to_string(kMaxRanks));
  if (a.count == 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((a.count + kThreads - 1) / kThreads, 132 * 16);
  sum_partials_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a);
  REPLAY_CUDA_LAUNCH("sum_partials_kernel");
}

}  // namespace replay::matmul_rs
