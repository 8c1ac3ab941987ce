// matmul_epilogue pointwise epilogue kernel (see kernels.hpp).
//
// Napkin math (H200, ~4.8 TB/s): Llama's SwiGLU at [8192, 14336] bf16 reads gate and up (2 x 235
// MB) and writes the product (235 MB): ~0.15 ms beside ~2.8 ms of the two GEMMs (2 x 1.9 TFLOP at
// ~700 TFLOP/s); the unfused chain (eager: upcast, neg, exp, add, div, downcast, mul) moves ~10x
// that. GELU after nanoGPT's c_fc at [8192, 6400]: 105 MB read + 105 MB written, ~0.05 ms.
// Memory-bound: one element per thread iteration, grid-stride, enough blocks to fill the GPU.
#include "impls/fusions/matmul_epilogue/kernels.hpp"

#include <algorithm>

#include "impls/cuda/cuda_check.hpp"
#include "impls/cuda/dtype_device.cuh"

namespace replay::matmul_epilogue {

const char* act_name(Act a) {
  switch (a) {
    case Act::kNone:
      return "none";
    case Act::kGeluErf:
      return "gelu (erf)";
    case Act::kGeluTanh:
      return "gelu (tanh)";
    case Act::kSilu:
      return "silu";
  }
  return "?";
}

namespace {

// v rounded to dtype t (nearest even) and widened back: the graph's cast to t.
__device__ __forceinline__ float round_to(DType t, float v) {
  switch (t) {
    case DType::kBFloat16:
      return __bfloat162float(__float2bfloat16_rn(v));
    case DType::kFloat16:
      return __half2float(__float2half_rn(v));
    default:
      return v;
  }
}

__device__ __forceinline__ float act_f(Act a, float x) {
  switch (a) {
    case Act::kGeluErf:
      return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case Act::kGeluTanh: {
      const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.0f + tanhf(inner));
    }
    case Act::kSilu:
      return x / (1.0f + expf(-x));
    default:
      return x;
  }
}

__global__ void epilogue_kernel(EpilogueArgs a) {
  const int64_t total = a.M * a.N;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = i / a.N, n = i - m * a.N;
    float v = load_elem<float>(a.z.ptr, m * a.z.ld + n, a.z.dtype);
    if (a.bias) {
      v = round_to(a.bias_round, v + load_elem<float>(a.bias, n, a.bias_dtype));
      if (a.pre.ptr) store_elem<float>(a.pre.ptr, m * a.pre.ld + n, a.pre.dtype, v);
    }
    if (a.act_step) {
      v = round_to(a.act_round, act_f(a.act, v));
      if (a.mid.ptr) store_elem<float>(a.mid.ptr, m * a.mid.ld + n, a.mid.dtype, v);
    }
    if (a.up.ptr) v = v * load_elem<float>(a.up.ptr, m * a.up.ld + n, a.up.dtype);
    if (a.res.ptr) v = v + load_elem<float>(a.res.ptr, m * a.res.ld + n, a.res.dtype);
    store_elem<float>(a.y.ptr, m * a.y.ld + n, a.y.dtype, v);
  }
}

}  // namespace

void launch_epilogue(const EpilogueArgs& a, cudaStream_t stream) {
  const int64_t total = a.M * a.N;
  if (total == 0) return;
  constexpr int kThreads = 256;
  const int blocks =
      static_cast<int>(std::min<int64_t>((total + kThreads - 1) / kThreads, 132 * 16));
  epilogue_kernel<<<blocks, kThreads, 0, stream>>>(a);
  REPLAY_CUDA_LAUNCH("matmul_epilogue::epilogue_kernel");
}

}  // namespace replay::matmul_epilogue
