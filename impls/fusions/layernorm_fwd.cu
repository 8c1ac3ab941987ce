// layernorm_fwd: baseline and optimized variants side by side (see layernorm_fwd.hpp).
//
// Napkin math, nanoGPT [16, 1024, 1600] bf16: x 52.4 MB read + y 52.4 MB written + w, b 6.4 KB
// = 104.9 MB; at ~4.3 TB/s (H200 copy) SOL is ~24.7 µs. The baseline moves x twice (~157 MB)
// plus launch two kernels, so it can reach at most ~2/3 of SOL.
#include "impls/fusions/layernorm_fwd.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "harness/cuda_check.hpp"
#include "impls/dtype_device.cuh"

namespace replay {
namespace {

__device__ __forceinline__ float apply_epilogue(const NormFwdArgs& a, float v, float w0, float w1) {
#pragma unroll
  for (int s = 0; s < kNormMaxEpilogue; ++s) {
    if (s >= a.n_epilogue) break;
    const NormEpilogueStep st = a.epilogue[s];
    if (st.op != EpilogueOp::kRound) {
      float w = st.weight == 0 ? w0 : w1;
      v = st.op == EpilogueOp::kMul ? v * w : v + w;
    }
    v = round_float(st.dtype, v);
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// baseline: kernel 1, one warp per row: mean and rstd (shifted single pass, fp32).
__global__ void norm_stats_kernel(NormFwdArgs a, float* mean, float* rstd) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  if (row >= a.rows) return;
  const int64_t base = row * a.x_row_stride;
  const bool ln = a.kind == NormKind::kLayerNorm;
  // Shift by the row's first element: sum((x-s)^2) does not cancel catastrophically.
  const float shift = ln ? load_elem<float>(a.x, base, a.x_dtype) : 0.f;
  float s1 = 0.f, s2 = 0.f;
  for (int64_t c = lane; c < a.cols; c += 32) {
    float d = load_elem<float>(a.x, base + c, a.x_dtype) - shift;
    s1 += d;
    s2 += d * d;
  }
  for (int o = 16; o > 0; o >>= 1) {
    s1 += __shfl_xor_sync(0xffffffffu, s1, o);
    s2 += __shfl_xor_sync(0xffffffffu, s2, o);
  }
  if (lane == 0) {
    const float n = float(a.cols);
    const float m1 = s1 / n;
    const float var = ln ? fmaxf(s2 / n - m1 * m1, 0.f) : s2 / n;
    mean[row] = ln ? shift + m1 : 0.f;
    rstd[row] = rsqrtf(var + a.eps);
  }
}

// baseline: kernel 2, one thread per element: normalize + epilogue.
__global__ void norm_apply_kernel(NormFwdArgs a, const float* mean, const float* rstd) {
  const int64_t n = a.rows * a.cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / a.cols, c = i % a.cols;
    float v = (load_elem<float>(a.x, row * a.x_row_stride + c, a.x_dtype) - mean[row]) * rstd[row];
    float w0 = a.n_weights > 0 ? load_elem<float>(a.w[0], c, a.w_dtype[0]) : 0.f;
    float w1 = a.n_weights > 1 ? load_elem<float>(a.w[1], c, a.w_dtype[1]) : 0.f;
    store_elem<float>(a.out, row * a.out_row_stride + c, a.out_dtype, apply_epilogue(a, v, w0, w1));
  }
}

// ---------------------------------------------------------------------------------------------
// optimized: one persistent kernel. A group of 32*WARPS threads owns a row; each thread holds VPT
// 16-byte vectors of the row (elements v*EPV .. v*EPV+EPV-1 for v = tid + k*32*WARPS) in
// registers. Block = 128 threads = 4 warps = 4/WARPS rows per iteration; the grid strides over
// rows. Weights are loaded once per thread and kept packed in registers across rows.
constexpr int kOptThreads = 128;

template <typename T>
struct Vec {
  static constexpr int kElems = 16 / sizeof(T);
  __device__ static void unpack(const uint4& raw, float* f) {
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kElems; ++i) f[i] = to_float(e[i]);
  }
  __device__ static uint4 pack(const float* f) {
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < kElems; ++i) e[i] = from_float(f[i]);
    return raw;
  }
  __device__ static float to_float(T v);
  __device__ static T from_float(float v);
};
template <>
__device__ float Vec<__nv_bfloat16>::to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
__device__ __nv_bfloat16 Vec<__nv_bfloat16>::from_float(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ float Vec<__half>::to_float(__half v) { return __half2float(v); }
template <>
__device__ __half Vec<__half>::from_float(float v) { return __float2half_rn(v); }
template <>
__device__ float Vec<float>::to_float(float v) { return v; }
template <>
__device__ float Vec<float>::from_float(float v) { return v; }

template <int WARPS>
__device__ __forceinline__ float group_sum(float v, float (*smem)[4]) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if constexpr (WARPS == 1) {
    return v;
  } else {
    const int warp = threadIdx.x / 32, grp = warp / WARPS, wig = warp % WARPS;
    if (threadIdx.x % 32 == 0) smem[grp][wig] = v;
    __syncthreads();
    float t = 0.f;
#pragma unroll
    for (int i = 0; i < WARPS; ++i) t += smem[grp][i];
    __syncthreads();  // smem is reused by the next call
    return t;
  }
}

template <typename T, int VPT, int WARPS>
__global__ void __launch_bounds__(kOptThreads) norm_fwd_persistent_kernel(NormFwdArgs a) {
  using V = Vec<T>;
  constexpr int E = V::kElems;
  constexpr int G = 32 * WARPS;           // threads per row
  constexpr int RPB = kOptThreads / G;    // rows per block iteration
  __shared__ float smem[RPB][4];
  const int tid = threadIdx.x % G, grp = threadIdx.x / G;
  const int nvec = static_cast<int>(a.cols / E);
  const bool ln = a.kind == NormKind::kLayerNorm;

  uint4 w0[VPT], w1[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int v = tid + k * G;
    w0[k] = w1[k] = make_uint4(0, 0, 0, 0);
    if (v < nvec) {
      if (a.n_weights > 0) w0[k] = __ldg(static_cast<const uint4*>(a.w[0]) + v);
      if (a.n_weights > 1) w1[k] = __ldg(static_cast<const uint4*>(a.w[1]) + v);
    }
  }

  for (int64_t row0 = int64_t(blockIdx.x) * RPB; row0 < a.rows; row0 += int64_t(gridDim.x) * RPB) {
    const int64_t row = row0 + grp;
    const bool valid = row < a.rows;
    const uint4* xr = reinterpret_cast<const uint4*>(static_cast<const T*>(a.x) + row * a.x_row_stride);
    float x[VPT][E];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int v = tid + k * G;
      uint4 raw = make_uint4(0, 0, 0, 0);
      if (valid && v < nvec) raw = __ldcs(xr + v);  // read once: stream past L2
      V::unpack(raw, x[k]);
    }
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < VPT; ++k)
#pragma unroll
      for (int e = 0; e < E; ++e) s += x[k][e];  // out-of-range slots hold 0
    const float mean = ln ? group_sum<WARPS>(s, smem) / float(a.cols) : 0.f;
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const bool in = tid + k * G < nvec;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float d = x[k][e] - mean;
        ss += in ? d * d : 0.f;
      }
    }
    const float rstd = rsqrtf(group_sum<WARPS>(ss, smem) / float(a.cols) + a.eps);
    uint4* yr = reinterpret_cast<uint4*>(static_cast<T*>(a.out) + row * a.out_row_stride);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int v = tid + k * G;
      if (!valid || v >= nvec) continue;
      float wf0[E], wf1[E], y[E];
      V::unpack(w0[k], wf0);
      V::unpack(w1[k], wf1);
#pragma unroll
      for (int e = 0; e < E; ++e) y[e] = apply_epilogue(a, (x[k][e] - mean) * rstd, wf0[e], wf1[e]);
      __stcs(yr + v, V::pack(y));
    }
  }
}

template <typename T, int VPT, int WARPS>
void launch_persistent(const NormFwdArgs& a, cudaStream_t stream) {
  auto kernel = norm_fwd_persistent_kernel<T, VPT, WARPS>;
  static int blocks_per_sm = -1, sms = 0;  // per instantiation, computed once
  if (blocks_per_sm < 0) {
    int dev = 0;
    REPLAY_CUDA(cudaGetDevice(&dev));
    REPLAY_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    REPLAY_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, kOptThreads, 0));
  }
  constexpr int RPB = kOptThreads / (32 * WARPS);
  const int64_t needed = (a.rows + RPB - 1) / RPB;
  const int grid = static_cast<int>(std::min<int64_t>(needed, int64_t(sms) * std::max(blocks_per_sm, 1)));
  if (grid == 0) return;
  kernel<<<grid, kOptThreads, 0, stream>>>(a);
  REPLAY_CUDA_LAUNCH("norm_fwd_persistent_kernel");
}

template <typename T, int WARPS>
void dispatch_vpt(int vpt, const NormFwdArgs& a, cudaStream_t s) {
  switch (vpt) {
    case 1: return launch_persistent<T, 1, WARPS>(a, s);
    case 2: return launch_persistent<T, 2, WARPS>(a, s);
    case 3: return launch_persistent<T, 3, WARPS>(a, s);
    case 4: return launch_persistent<T, 4, WARPS>(a, s);
    case 5: return launch_persistent<T, 5, WARPS>(a, s);
    case 6: return launch_persistent<T, 6, WARPS>(a, s);
    case 7: return launch_persistent<T, 7, WARPS>(a, s);
    case 8: return launch_persistent<T, 8, WARPS>(a, s);
    default: throw std::invalid_argument("layernorm_fwd optimized: vectors per thread out of range");
  }
}

constexpr int kMaxVpt = 8;

// (warps per row, vectors per thread) for a row of nvec 16-byte vectors.
std::pair<int, int> geometry(int64_t nvec) {
  if (nvec <= kMaxVpt * 32) return {1, static_cast<int>((nvec + 31) / 32)};
  return {4, static_cast<int>((nvec + 127) / 128)};
}

template <typename T>
void dispatch(const NormFwdArgs& a, cudaStream_t s) {
  auto [warps, vpt] = geometry(a.cols / Vec<T>::kElems);
  if (warps == 1)
    dispatch_vpt<T, 1>(vpt, a, s);
  else
    dispatch_vpt<T, 4>(vpt, a, s);
}

}  // namespace

std::string layernorm_fwd_supports(const NormFwdArgs& a, const std::string& variant) {
  if (a.n_weights > kNormMaxWeights) return "more than 2 weight operands in the epilogue";
  if (a.rows <= 0 || a.cols <= 0) return "empty rows";
  if (variant == "baseline") return "";
  if (variant != "optimized") return "unknown variant " + variant;
  const DType t = a.x_dtype;
  if (t != DType::kBFloat16 && t != DType::kFloat16 && t != DType::kFloat32)
    return "x dtype " + std::string(dtype_name(t)) + " (needs bfloat16, float16 or float32)";
  if (a.out_dtype != t) return "output dtype differs from the input dtype";
  for (int i = 0; i < a.n_weights; ++i)
    if (a.w_dtype[i] != t) return "a weight's dtype differs from the input dtype";
  const int64_t elems = 16 / static_cast<int64_t>(dtype_size(t));
  if (a.cols % elems || a.x_row_stride % elems || a.out_row_stride % elems)
    return "row length or stride not a multiple of a 16-byte vector";
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!aligned(a.x) || !aligned(a.out) || (a.n_weights > 0 && !aligned(a.w[0])) ||
      (a.n_weights > 1 && !aligned(a.w[1])))
    return "a pointer is not 16-byte aligned";
  if (geometry(a.cols / elems).second > kMaxVpt)
    return "row of " + std::to_string(a.cols) + " elements is longer than the register-resident "
           "kernel holds (" + std::to_string(kMaxVpt * 128 * elems) + ")";
  return "";
}

void layernorm_fwd_baseline(const NormFwdArgs& a, float* mean, float* rstd, cudaStream_t stream) {
  constexpr int kStatsThreads = 256;  // 8 rows per block
  const int64_t stats_blocks = (a.rows + kStatsThreads / 32 - 1) / (kStatsThreads / 32);
  norm_stats_kernel<<<static_cast<unsigned>(stats_blocks), kStatsThreads, 0, stream>>>(a, mean, rstd);
  REPLAY_CUDA_LAUNCH("norm_stats_kernel");
  constexpr int kApplyThreads = 256;
  const int64_t n = a.rows * a.cols;
  const int64_t blocks = std::min<int64_t>((n + kApplyThreads - 1) / kApplyThreads, 65535 * 16);
  norm_apply_kernel<<<static_cast<unsigned>(blocks), kApplyThreads, 0, stream>>>(a, mean, rstd);
  REPLAY_CUDA_LAUNCH("norm_apply_kernel");
}

void layernorm_fwd_optimized(const NormFwdArgs& a, cudaStream_t stream) {
  std::string why = layernorm_fwd_supports(a, "optimized");
  if (!why.empty()) throw std::invalid_argument("layernorm_fwd optimized: " + why);
  switch (a.x_dtype) {
    case DType::kBFloat16: return dispatch<__nv_bfloat16>(a, stream);
    case DType::kFloat16: return dispatch<__half>(a, stream);
    default: return dispatch<float>(a, stream);
  }
}

}  // namespace replay
