// matmul_epilogue pointwise epilogue kernel (see kernels.hpp).
//
// Napkin math (H200, ~4.8 TB/s): Llama's SwiGLU at [8192, 14336] bf16 reads gate and up (2 x 235
// MB) and writes the product (235 MB): ~0.15 ms beside ~2.8 ms of the two GEMMs (2 x 1.9 TFLOP at
// ~700 TFLOP/s); the unfused chain (eager: upcast, neg, exp, add, div, downcast, mul) moves ~10x
// that. GELU after nanoGPT's c_fc at [8192, 6400]: 105 MB read + 105 MB written, ~0.05 ms.
// Memory-bound, so every access is 16 bytes wide where the layout allows it (N and every row
// stride multiples of 8 elements, 16-byte aligned bases: the vector kernel, 8 elements per thread
// iteration; a float32 operand moves as two 16-byte accesses); otherwise one element per thread
// iteration (the scalar kernel). Both grid-stride over enough blocks to fill the GPU and compute
// the same float32 steps in the same order, so they give bit-identical results.
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

// The element chain of kernels.hpp for one value v at column n, shared by both kernels.
struct Chain {
  const EpilogueArgs& a;
  __device__ __forceinline__ float bias_step(float v, float b) const {
    return round_to(a.bias_round, v + b);
  }
  __device__ __forceinline__ float act_step(float v) const {
    return round_to(a.act_round, act_f(a.act, v));
  }
};

constexpr int kV = 8;  // elements per vector

// 8 consecutive elements of a float32/bfloat16/float16 matrix at element offset `i` (a multiple of
// 8; the base 16-byte aligned), widened to float exactly as load_elem does.
__device__ __forceinline__ void load8(const void* base, int64_t i, DType t, float (&v)[kV]) {
  if (t == DType::kFloat32) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(base) + i);
    const float4 x = p[0], y = p[1];
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w, v[4] = y.x, v[5] = y.y, v[6] = y.z, v[7] = y.w;
    return;
  }
  const uint4 r = *reinterpret_cast<const uint4*>(static_cast<const char*>(base) + i * 2);
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const auto lo = static_cast<unsigned short>(w[k] & 0xffffu);
    const auto hi = static_cast<unsigned short>(w[k] >> 16);
    if (t == DType::kBFloat16) {
      v[2 * k] = __bfloat162float(__ushort_as_bfloat16(lo));
      v[2 * k + 1] = __bfloat162float(__ushort_as_bfloat16(hi));
    } else {
      v[2 * k] = __half2float(__ushort_as_half(lo));
      v[2 * k + 1] = __half2float(__ushort_as_half(hi));
    }
  }
}

// Rounds 8 floats to t (nearest even, as store_elem) and stores them at element offset `i`.
__device__ __forceinline__ void store8(void* base, int64_t i, DType t, const float (&v)[kV]) {
  if (t == DType::kFloat32) {
    float4* p = reinterpret_cast<float4*>(static_cast<float*>(base) + i);
    p[0] = make_float4(v[0], v[1], v[2], v[3]);
    p[1] = make_float4(v[4], v[5], v[6], v[7]);
    return;
  }
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    unsigned short lo, hi;
    if (t == DType::kBFloat16) {
      lo = __bfloat16_as_ushort(__float2bfloat16_rn(v[2 * k]));
      hi = __bfloat16_as_ushort(__float2bfloat16_rn(v[2 * k + 1]));
    } else {
      lo = __half_as_ushort(__float2half_rn(v[2 * k]));
      hi = __half_as_ushort(__float2half_rn(v[2 * k + 1]));
    }
    w[k] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
  *reinterpret_cast<uint4*>(static_cast<char*>(base) + i * 2) = make_uint4(w[0], w[1], w[2], w[3]);
}

__global__ void epilogue_vec_kernel(EpilogueArgs a) {
  const int64_t nv = a.N / kV, total = a.M * nv;
  const Chain c{a};
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = i / nv, n = (i - m * nv) * kV;
    float v[kV], t[kV];
    load8(a.z.ptr, m * a.z.ld + n, a.z.dtype, v);
    if (a.bias) {
      load8(a.bias, n, a.bias_dtype, t);
#pragma unroll
      for (int k = 0; k < kV; ++k) v[k] = c.bias_step(v[k], t[k]);
      if (a.pre.ptr) store8(a.pre.ptr, m * a.pre.ld + n, a.pre.dtype, v);
    }
    if (a.act_step) {
#pragma unroll
      for (int k = 0; k < kV; ++k) v[k] = c.act_step(v[k]);
      if (a.mid.ptr) store8(a.mid.ptr, m * a.mid.ld + n, a.mid.dtype, v);
    }
    if (a.up.ptr) {
      load8(a.up.ptr, m * a.up.ld + n, a.up.dtype, t);
#pragma unroll
      for (int k = 0; k < kV; ++k) v[k] = v[k] * t[k];
    }
    if (a.res.ptr) {
      load8(a.res.ptr, m * a.res.ld + n, a.res.dtype, t);
#pragma unroll
      for (int k = 0; k < kV; ++k) v[k] = v[k] + t[k];
    }
    store8(a.y.ptr, m * a.y.ld + n, a.y.dtype, v);
  }
}

__global__ void epilogue_kernel(EpilogueArgs a) {
  const int64_t total = a.M * a.N;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = i / a.N, n = i - m * a.N;
    float v = load_elem<float>(a.z.ptr, m * a.z.ld + n, a.z.dtype);
    const Chain c{a};
    if (a.bias) {
      v = c.bias_step(v, load_elem<float>(a.bias, n, a.bias_dtype));
      if (a.pre.ptr) store_elem<float>(a.pre.ptr, m * a.pre.ld + n, a.pre.dtype, v);
    }
    if (a.act_step) {
      v = c.act_step(v);
      if (a.mid.ptr) store_elem<float>(a.mid.ptr, m * a.mid.ld + n, a.mid.dtype, v);
    }
    if (a.up.ptr) v = v * load_elem<float>(a.up.ptr, m * a.up.ld + n, a.up.dtype);
    if (a.res.ptr) v = v + load_elem<float>(a.res.ptr, m * a.res.ld + n, a.res.dtype);
    store_elem<float>(a.y.ptr, m * a.y.ld + n, a.y.dtype, v);
  }
}

// act'(x) in float32: the derivative the backward graph computes (Inductor's decompositions of
// gelu_backward and silu_backward), in one expression.
__device__ __forceinline__ float act_grad_f(Act a, float x) {
  switch (a) {
    case Act::kGeluErf: {
      const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
      const float pdf = expf(-0.5f * x * x) * 0.39894228040143268f;
      return cdf + x * pdf;
    }
    case Act::kGeluTanh: {
      const float k = 0.79788456080286536f;
      const float t = tanhf(k * (x + 0.044715f * x * x * x));
      return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * (k * (1.0f + 0.134145f * x * x));
    }
    case Act::kSilu: {
      const float s = 1.0f / (1.0f + expf(-x));
      return s * (1.0f + x * (1.0f - s));
    }
    default:
      return 1.0f;
  }
}

// The backward kernels' tiling: a block is 32 column vectors (8 columns each, 256 columns) by 8
// row lanes; it walks rows [y * rows, (y + 1) * rows) of its columns, each thread every 8th row, so
// a thread's column sums take its rows in order and the 8 lanes are added in order after.
constexpr int kColVecs = 32, kRowLanes = 8;

struct Tile {
  int64_t n = 0;  // first column of this thread's vector (N: none)
  int64_t m0 = 0, m1 = 0;
};

__device__ __forceinline__ Tile tile(int64_t M, int64_t N) {
  Tile t;
  const int64_t rows = (M + gridDim.y - 1) / gridDim.y;
  t.n = (static_cast<int64_t>(blockIdx.x) * kColVecs + threadIdx.x % kColVecs) * kV;
  t.m0 = static_cast<int64_t>(blockIdx.y) * rows + threadIdx.x / kColVecs;
  t.m1 = min(M, (static_cast<int64_t>(blockIdx.y) + 1) * rows);
  return t;
}

// Adds the block's 8 row lanes in order and writes its column partials partial[blockIdx.y, n].
__device__ __forceinline__ void block_column_partials(const float (&sum)[kV], int64_t n, int64_t N,
                                                      float* partial) {
  __shared__ float lanes[kRowLanes][kColVecs][kV];
  const int cv = threadIdx.x % kColVecs, lane = threadIdx.x / kColVecs;
#pragma unroll
  for (int k = 0; k < kV; ++k) lanes[lane][cv][k] = sum[k];
  __syncthreads();
  if (lane == 0 && n < N) {
    float s[kV];
#pragma unroll
    for (int k = 0; k < kV; ++k) s[k] = lanes[0][cv][k];
    for (int l = 1; l < kRowLanes; ++l)
#pragma unroll
      for (int k = 0; k < kV; ++k) s[k] += lanes[l][cv][k];
    float* out = partial + static_cast<int64_t>(blockIdx.y) * N + n;
    reinterpret_cast<float4*>(out)[0] = make_float4(s[0], s[1], s[2], s[3]);
    reinterpret_cast<float4*>(out)[1] = make_float4(s[4], s[5], s[6], s[7]);
  }
}

__global__ void backward_kernel(BackwardArgs a) {
  const Tile t = tile(a.M, a.N);
  float sum[kV] = {};
  if (t.n < a.N) {
    for (int64_t m = t.m0; m < t.m1; m += kRowLanes) {
      float gv[kV], xv[kV], dx[kV];
      if (a.g.ptr) {
        load8(a.g.ptr, m * a.g.ld + t.n, a.g.dtype, gv);
      } else {
#pragma unroll
        for (int k = 0; k < kV; ++k) gv[k] = 1.0f;
      }
      load8(a.x.ptr, m * a.x.ld + t.n, a.x.dtype, xv);
      if (a.gated) {
        float uv[kV], du[kV], av[kV];
        load8(a.up.ptr, m * a.up.ld + t.n, a.up.dtype, uv);
        if (a.act_in.ptr) load8(a.act_in.ptr, m * a.act_in.ld + t.n, a.act_in.dtype, av);
#pragma unroll
        for (int k = 0; k < kV; ++k) {
          const float act = a.act_in.ptr ? av[k] : round_to(a.act_round, act_f(a.act, xv[k]));
          du[k] = gv[k] * act;
          const float h = round_to(a.h_round, gv[k] * uv[k]);
          dx[k] = h * act_grad_f(a.act, xv[k]);
        }
        store8(a.dup.ptr, m * a.dup.ld + t.n, a.dup.dtype, du);
      } else {
#pragma unroll
        for (int k = 0; k < kV; ++k) dx[k] = gv[k] * act_grad_f(a.act, xv[k]);
      }
      store8(a.dx.ptr, m * a.dx.ld + t.n, a.dx.dtype, dx);
      if (a.dbias) {
#pragma unroll
        for (int k = 0; k < kV; ++k) sum[k] += round_to(a.dx.dtype, dx[k]);
      }
    }
  }
  if (a.dbias) block_column_partials(sum, t.n, a.N, a.partial);
}

__global__ void column_sum_kernel(EpiMat src, int64_t M, int64_t N, float* partial) {
  const Tile t = tile(M, N);
  float sum[kV] = {};
  if (t.n < N)
    for (int64_t m = t.m0; m < t.m1; m += kRowLanes) {
      float v[kV];
      load8(src.ptr, m * src.ld + t.n, src.dtype, v);
#pragma unroll
      for (int k = 0; k < kV; ++k) sum[k] += v[k];
    }
  block_column_partials(sum, t.n, N, partial);
}

// dbias[n] = round(sum of partial[0..blocks, n] in order).
__global__ void column_partials_kernel(const float* partial, int blocks, int64_t N, void* dbias,
                                       DType dt) {
  const int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  float s = partial[n];
  for (int b = 1; b < blocks; ++b) s += partial[static_cast<int64_t>(b) * N + n];
  store_elem<float>(dbias, n, dt, s);
}

bool vec_dtype(DType t) {
  return t == DType::kFloat32 || t == DType::kBFloat16 || t == DType::kFloat16;
}

bool vec_ok(const EpiMat& x) {
  return !x.ptr ||
         (vec_dtype(x.dtype) && x.ld % kV == 0 && reinterpret_cast<uintptr_t>(x.ptr) % 16 == 0);
}

int device_sms() {
  static const int sms = [] {
    int dev = 0, n = 0;
    REPLAY_CUDA(cudaGetDevice(&dev));
    REPLAY_CUDA(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
  }();
  return sms;
}

// The backward grid: column blocks of 256 columns, and row blocks enough for ~8 blocks per SM (a
// block keeps at least 8 rows).
dim3 backward_grid(int64_t M, int64_t N) {
  const int64_t gx = (N + kColVecs * kV - 1) / (kColVecs * kV);
  const int64_t want = (static_cast<int64_t>(device_sms()) * 8 + gx - 1) / gx;
  const int64_t gy = std::max<int64_t>(1, std::min<int64_t>(want, (M + kRowLanes - 1) / kRowLanes));
  return dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
}

void reduce_partials(const float* partial, int blocks, int64_t N, void* dbias, DType dt,
                     cudaStream_t stream) {
  constexpr int kThreads = 256;
  column_partials_kernel<<<static_cast<unsigned>((N + kThreads - 1) / kThreads), kThreads, 0,
                           stream>>>(partial, blocks, N, dbias, dt);
  REPLAY_CUDA_LAUNCH("matmul_epilogue::column_partials_kernel");
}

}  // namespace

bool backward_vectorized(const BackwardArgs& a) {
  return a.N % kV == 0 && vec_ok(a.g) && a.x.ptr && vec_ok(a.x) && a.dx.ptr && vec_ok(a.dx) &&
         (!a.gated ||
          (a.up.ptr && a.dup.ptr && vec_ok(a.up) && vec_ok(a.dup) && vec_ok(a.act_in))) &&
         (!a.dbias || (a.partial && reinterpret_cast<uintptr_t>(a.partial) % 16 == 0));
}

int64_t backward_partial_floats(int64_t M, int64_t N) {
  return static_cast<int64_t>(backward_grid(M, N).y) * N;
}

void launch_backward(const BackwardArgs& a, cudaStream_t stream) {
  if (a.M == 0 || a.N == 0) return;
  if (!backward_vectorized(a))
    throw RuntimeFailure("matmul_epilogue: the backward epilogue's layout is not vectorizable");
  const dim3 grid = backward_grid(a.M, a.N);
  backward_kernel<<<grid, kColVecs * kRowLanes, 0, stream>>>(a);
  REPLAY_CUDA_LAUNCH("matmul_epilogue::backward_kernel");
  if (a.dbias)
    reduce_partials(a.partial, static_cast<int>(grid.y), a.N, a.dbias, a.dbias_dtype, stream);
}

void launch_column_sum(const EpiMat& src, int64_t M, int64_t N, void* dbias, DType dbias_dtype,
                       float* partial, cudaStream_t stream) {
  if (M == 0 || N == 0) return;
  if (N % kV != 0 || !vec_ok(src) || !src.ptr || reinterpret_cast<uintptr_t>(partial) % 16 != 0)
    throw RuntimeFailure("matmul_epilogue: the column sum's layout is not vectorizable");
  const dim3 grid = backward_grid(M, N);
  column_sum_kernel<<<grid, kColVecs * kRowLanes, 0, stream>>>(src, M, N, partial);
  REPLAY_CUDA_LAUNCH("matmul_epilogue::column_sum_kernel");
  reduce_partials(partial, static_cast<int>(grid.y), N, dbias, dbias_dtype, stream);
}

bool epilogue_vectorized(const EpilogueArgs& a) {
  return a.N % kV == 0 && vec_ok(a.z) && vec_ok(a.pre) && vec_ok(a.mid) && vec_ok(a.up) &&
         vec_ok(a.res) && vec_ok(a.y) &&
         (!a.bias || (vec_dtype(a.bias_dtype) && reinterpret_cast<uintptr_t>(a.bias) % 16 == 0));
}

void launch_epilogue(const EpilogueArgs& a, cudaStream_t stream, bool allow_vector) {
  const int64_t total = a.M * a.N;
  if (total == 0) return;
  constexpr int kThreads = 256;
  const int64_t cap = static_cast<int64_t>(device_sms()) * 8;  // 8 resident blocks of 256 per SM
  if (allow_vector && epilogue_vectorized(a)) {
    const int64_t work = total / kV;
    epilogue_vec_kernel<<<static_cast<int>(
                              std::min<int64_t>((work + kThreads - 1) / kThreads, cap)),
                          kThreads, 0, stream>>>(a);
    REPLAY_CUDA_LAUNCH("matmul_epilogue::epilogue_vec_kernel");
    return;
  }
  epilogue_kernel<<<static_cast<int>(std::min<int64_t>((total + kThreads - 1) / kThreads, cap)),
                    kThreads, 0, stream>>>(a);
  REPLAY_CUDA_LAUNCH("matmul_epilogue::epilogue_kernel");
}

}  // namespace replay::matmul_epilogue
