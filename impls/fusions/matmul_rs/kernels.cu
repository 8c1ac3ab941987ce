// matmul_rs's reduction kernel (kernels.hpp). Napkin math: the owner reads n partial chunks of
// m N elements and writes one: (n + 1) m N x 2 bytes for bf16 (8192 x 14336 at n = 2: 705 MB,
// ~180 us at 3.9 TB/s); it runs once after the own chunk's GEMM and the last piece landed (the
// pipeline's tail). The first version (one element per thread per step, the dtype switched per
// element) moved 1.3 TB/s on an H200 (544 us for those 705 MB, 2026-11-28): the vector path reads
// 16 bytes per partial per step, the dtype a template parameter.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <type_traits>

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

// 16-byte vectors (8 bf16 / f16, 4 float32), the same float32 sum in rank order per element as
// the scalar kernel (bit-identical to it).
template <typename T>
struct Vec16 {
  static constexpr int kN = 16 / sizeof(T);
  __device__ static void to_float(const uint4& v, float* f) {
    const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      if constexpr (std::is_same_v<T, float>)
        f[k] = e[k];
      else if constexpr (std::is_same_v<T, __nv_bfloat16>)
        f[k] = __bfloat162float(e[k]);
      else
        f[k] = __half2float(e[k]);
    }
  }
  __device__ static uint4 from_float(const float* f) {
    uint4 v;
    T* e = reinterpret_cast<T*>(&v);
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      if constexpr (std::is_same_v<T, float>)
        e[k] = f[k];
      else if constexpr (std::is_same_v<T, __nv_bfloat16>)
        e[k] = __float2bfloat16_rn(f[k]);
      else
        e[k] = __float2half_rn(f[k]);
    }
    return v;
  }
};

template <typename T>
__global__ void __launch_bounds__(256) sum_partials_vec_kernel(SumPartials a) {
  using V = Vec16<T>;
  const int64_t vectors = a.count / V::kN;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors;
       i += stride) {
    uint4 v[kMaxRanks];
#pragma unroll
    for (int p = 0; p < kMaxRanks; ++p)  // every load in flight before the sum
      if (p < a.n) v[p] = __ldcs(static_cast<const uint4*>(a.src[p]) + i);
    float acc[V::kN] = {};
#pragma unroll
    for (int p = 0; p < kMaxRanks; ++p) {
      if (p >= a.n) break;
      float f[V::kN];
      V::to_float(v[p], f);
#pragma unroll
      for (int k = 0; k < V::kN; ++k) acc[k] += f[k];
    }
    if (a.avg)
#pragma unroll
      for (int k = 0; k < V::kN; ++k) acc[k] /= static_cast<float>(a.n);
    __stcs(static_cast<uint4*>(a.out) + i, V::from_float(acc));
  }
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

}  // namespace

void launch_sum_partials(const SumPartials& a, cudaStream_t stream) {
  if (a.n < 1 || a.n > kMaxRanks)
    throw std::invalid_argument("sum_partials: " + std::to_string(a.n) + " partials, expected 1.." +
                                std::to_string(kMaxRanks));
  if (a.count == 0) return;
  constexpr int kThreads = 256;
  const int per_vec = static_cast<int>(16 / dtype_size(a.dtype));
  bool vec =
      a.count % per_vec == 0 && aligned16(a.out) &&
      (a.dtype == DType::kBFloat16 || a.dtype == DType::kFloat16 || a.dtype == DType::kFloat32);
  for (int p = 0; p < a.n; ++p) vec = vec && aligned16(a.src[p]);
  if (vec) {
    const int64_t vectors = a.count / per_vec;
    const int64_t blocks = std::min<int64_t>((vectors + kThreads - 1) / kThreads, 132 * 8);
    const unsigned g = static_cast<unsigned>(blocks);
    if (a.dtype == DType::kBFloat16)
      sum_partials_vec_kernel<__nv_bfloat16><<<g, kThreads, 0, stream>>>(a);
    else if (a.dtype == DType::kFloat16)
      sum_partials_vec_kernel<__half><<<g, kThreads, 0, stream>>>(a);
    else
      sum_partials_vec_kernel<float><<<g, kThreads, 0, stream>>>(a);
    REPLAY_CUDA_LAUNCH("sum_partials_vec_kernel");
    return;
  }
  const int64_t blocks = std::min<int64_t>((a.count + kThreads - 1) / kThreads, 132 * 16);
  sum_partials_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a);
  REPLAY_CUDA_LAUNCH("sum_partials_kernel");
}

}  // namespace replay::matmul_rs
