// rope kernels: both variants of the rotary embedding forward (kernels.hpp).
//
// Napkin math, Llama-3-8B q and k ([1, 8192, 32 + 8, 128] bf16, cos / sin [1, 8192, 128] bf16):
// q + k read 83.9 MB, written 83.9 MB, tables 4.2 MB: 172 MB, SOL ~36 µs at 4.8 TB/s. The
// optimized kernel reads each element of x once (a thread's chunk and its rotate-half partner
// chunk are read by two threads of the same row, from the same cache lines) and the tables once
// per head (L2 hits after the first head of a position). The baseline's four passes per tensor
// (x * cos, neg + cat, rot * sin, add) move about 3.5x the bytes.
#include "impls/fusions/rope/kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <stdexcept>

#include "impls/cuda/cuda_check.hpp"

namespace replay::rope {
namespace {

// --- element access by runtime dtype ---------------------------------------------------------

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

template <typename T>
struct Bits;
template <>
struct Bits<__nv_bfloat16> {
  using type = unsigned short;
  __device__ static float to_float(type b) { return __bfloat162float(__ushort_as_bfloat16(b)); }
  __device__ static type from_float(float f) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
  }
};
template <>
struct Bits<__half> {
  using type = unsigned short;
  __device__ static float to_float(type b) { return __half2float(__ushort_as_half(b)); }
  __device__ static type from_float(float f) { return __half_as_ushort(__float2half_rn(f)); }
};
template <>
struct Bits<float> {
  using type = unsigned int;
  __device__ static float to_float(type b) { return __uint_as_float(b); }
  __device__ static type from_float(float f) { return __float_as_uint(f); }
};

template <int B>
struct Raw;
template <>
struct Raw<16> {
  using type = uint4;
};
template <>
struct Raw<8> {
  using type = uint2;
};
template <>
struct Raw<4> {
  using type = unsigned int;
};
template <>
struct Raw<2> {
  using type = unsigned short;
};

// V elements at p[0], p[st], ...; one to two 16-byte accesses (or one narrower) when `vec` (the
// caller checked st == 1 and the alignment).
template <typename T, int V>
__device__ __forceinline__ void load_t(const T* p, int64_t st, bool vec, float* f) {
  using B = typename Bits<T>::type;
  constexpr int kBytes = V * static_cast<int>(sizeof(T));
  if constexpr (V > 1 && kBytes >= 2) {
    if (vec) {
      constexpr int kChunk = kBytes >= 16 ? 16 : kBytes;
      constexpr int kN = kBytes / kChunk;
      using R = typename Raw<kChunk>::type;
      union {
        R r[kN];
        B b[V];
      } u;
#pragma unroll
      for (int k = 0; k < kN; ++k) u.r[k] = reinterpret_cast<const R*>(p)[k];
#pragma unroll
      for (int i = 0; i < V; ++i) f[i] = Bits<T>::to_float(u.b[i]);
      return;
    }
  }
  const B* q = reinterpret_cast<const B*>(p);
#pragma unroll
  for (int i = 0; i < V; ++i) f[i] = Bits<T>::to_float(q[i * st]);
}

template <typename T, int V>
__device__ __forceinline__ void store_t(T* p, int64_t st, bool vec, const float* f) {
  using B = typename Bits<T>::type;
  constexpr int kBytes = V * static_cast<int>(sizeof(T));
  if constexpr (V > 1 && kBytes >= 2) {
    if (vec) {
      constexpr int kChunk = kBytes >= 16 ? 16 : kBytes;
      constexpr int kN = kBytes / kChunk;
      using R = typename Raw<kChunk>::type;
      union {
        R r[kN];
        B b[V];
      } u;
#pragma unroll
      for (int i = 0; i < V; ++i) u.b[i] = Bits<T>::from_float(f[i]);
#pragma unroll
      for (int k = 0; k < kN; ++k) reinterpret_cast<R*>(p)[k] = u.r[k];
      return;
    }
  }
  B* q = reinterpret_cast<B*>(p);
#pragma unroll
  for (int i = 0; i < V; ++i) q[i * st] = Bits<T>::from_float(f[i]);
}

// V elements of a tensor of runtime dtype `t` at element offset `off` (a uniform branch).
template <int V>
__device__ __forceinline__ void load(const void* base, DType t, int64_t off, int64_t st, bool vec,
                                     float* f) {
  switch (t) {
    case DType::kBFloat16:
      return load_t<__nv_bfloat16, V>(static_cast<const __nv_bfloat16*>(base) + off, st, vec, f);
    case DType::kFloat16:
      return load_t<__half, V>(static_cast<const __half*>(base) + off, st, vec, f);
    default:
      return load_t<float, V>(static_cast<const float*>(base) + off, st, vec, f);
  }
}

template <int V>
__device__ __forceinline__ void store(void* base, DType t, int64_t off, int64_t st, bool vec,
                                      const float* f) {
  switch (t) {
    case DType::kBFloat16:
      return store_t<__nv_bfloat16, V>(static_cast<__nv_bfloat16*>(base) + off, st, vec, f);
    case DType::kFloat16:
      return store_t<__half, V>(static_cast<__half*>(base) + off, st, vec, f);
    default:
      return store_t<float, V>(static_cast<float*>(base) + off, st, vec, f);
  }
}

struct RowOffsets {
  int64_t x = 0, cos = 0, sin = 0, out = 0;
};

__device__ __forceinline__ RowOffsets row_offsets(const RopeJob& j, int64_t row) {
  RowOffsets o;
  for (int d = j.n_lead - 1; d >= 0; --d) {
    const int64_t n = j.lead[d];
    const int64_t q = row / n;
    const int64_t i = row - q * n;
    row = q;
    o.x += i * j.x.lead_stride[d];
    o.cos += i * j.cos.lead_stride[d];
    o.sin += i * j.sin.lead_stride[d];
    o.out += i * j.out_lead_stride[d];
  }
  return o;
}

// out = round(add, round(mul_cos, x * cos) + round(mul_sin, rot * sin)): separate multiplies and
// an add (no FMA contraction), as the eager kernels compute it.
__device__ __forceinline__ float rope_elem(const RopeJob& j, float x, float c, float rot, float s) {
  const float a = round_to(j.mul_cos_dtype, __fmul_rn(x, c));
  const float b = round_to(j.mul_sin_dtype, __fmul_rn(rot, s));
  return round_to(j.add_dtype, __fadd_rn(a, b));
}

// --- optimized: one kernel, every job (blockIdx.y), V elements per thread --------------------

template <int V>
__global__ void __launch_bounds__(256) rope_fwd_kernel(const RopeArgs a) {
  const RopeJob& j = a.jobs[blockIdx.y];
  const int64_t cpr = j.head_dim / V;  // chunks per row
  const int64_t total = j.rows * cpr;
  const int64_t R = j.rotary_dim, h = R / 2;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / cpr;
    const int64_t c0 = (i - row * cpr) * V;
    const RowOffsets o = row_offsets(j, row);
    float xv[V], out[V];
    load<V>(j.x.ptr, j.x.dtype, o.x + c0 * j.x.last_stride, j.x.last_stride, j.vec_x, xv);
    if (c0 >= R) {  // partial rotary: the pass-through tail
      if (!a.write_tail) continue;
      store<V>(j.out, j.out_dtype, o.out + c0 * j.out_last_stride, j.out_last_stride, j.vec_out,
               xv);
      continue;
    }
    float rot[V], cv[V], sv[V];
    if (a.style == Style::kRotateHalf) {
      const bool first = c0 < h;
      const int64_t pc = first ? c0 + h : c0 - h;
      load<V>(j.x.ptr, j.x.dtype, o.x + pc * j.x.last_stride, j.x.last_stride, j.vec_x, rot);
      if (first)
#pragma unroll
        for (int k = 0; k < V; ++k) rot[k] = -rot[k];
    } else if constexpr (V >= 2) {
#pragma unroll
      for (int k = 0; k < V; k += 2) {
        rot[k] = -xv[k + 1];
        rot[k + 1] = xv[k];
      }
    } else {  // one element: its pair partner from memory
      const int64_t pc = c0 ^ 1;
      load<1>(j.x.ptr, j.x.dtype, o.x + pc * j.x.last_stride, j.x.last_stride, false, rot);
      if ((c0 & 1) == 0) rot[0] = -rot[0];
    }
    load<V>(j.cos.ptr, j.cos.dtype, o.cos + c0 * j.cos.last_stride, j.cos.last_stride, j.vec_cos,
            cv);
    load<V>(j.sin.ptr, j.sin.dtype, o.sin + c0 * j.sin.last_stride, j.sin.last_stride, j.vec_sin,
            sv);
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = rope_elem(j, xv[k], cv[k], rot[k], a.sin_sign * sv[k]);
    store<V>(j.out, j.out_dtype, o.out + c0 * j.out_last_stride, j.out_last_stride, j.vec_out, out);
  }
}

// The 16-byte rule for one operand: unit last stride, base and every lead stride aligned to the
// vector's bytes (a broadcast dim's stride 0 is aligned).
bool vectorizable(const void* ptr, DType t, const int64_t* lead_stride, int n_lead,
                  int64_t last_stride, int v) {
  if (v == 1 || last_stride != 1) return false;
  const int64_t bytes = static_cast<int64_t>(v) * static_cast<int64_t>(dtype_size(t));
  const int64_t align = std::min<int64_t>(bytes, 16);
  if (reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(align) != 0) return false;
  for (int d = 0; d < n_lead; ++d)
    if ((lead_stride[d] * static_cast<int64_t>(dtype_size(t))) % align != 0) return false;
  return true;
}

int blocks_for(int64_t work, int threads) {
  const int64_t b = (work + threads - 1) / threads;
  return static_cast<int>(std::clamp<int64_t>(b, 1, 132 * 32));
}

// --- baseline: the eager sequence, one pass per op --------------------------------------------

enum class Stage : int {
  kMulCos,  ///< a = x * cos                      -> ws_a [rows, R] in mul_cos dtype
  kRotate,  ///< rot = cat(-x2, x1) (or pairs)    -> ws_rot [rows, R] in x's dtype
  kMulSin,  ///< b = rot * sin                    -> ws_b [rows, R] in mul_sin dtype
  kAdd,     ///< out[:R] = a + b; out[R:] = x[R:] (the cat of partial rotary)
};

struct BaselineJob {
  RopeJob j;
  void* ws_a = nullptr;
  void* ws_rot = nullptr;
  void* ws_b = nullptr;
};

__global__ void __launch_bounds__(256)
    rope_baseline_kernel(const BaselineJob bj, Stage stage, Style style, float sin_sign,
                         bool write_tail) {
  const RopeJob& j = bj.j;
  const int64_t R = j.rotary_dim, h = R / 2;
  const int64_t width = stage == Stage::kAdd ? j.head_dim : R;
  const int64_t total = j.rows * width;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / width;
    const int64_t c = i - row * width;
    const RowOffsets o = row_offsets(j, row);
    const int64_t w = row * R + c;  // workspace element
    float v[1], t[1];
    switch (stage) {
      case Stage::kMulCos:
        load<1>(j.x.ptr, j.x.dtype, o.x + c * j.x.last_stride, 1, false, v);
        load<1>(j.cos.ptr, j.cos.dtype, o.cos + c * j.cos.last_stride, 1, false, t);
        v[0] = round_to(j.mul_cos_dtype, __fmul_rn(v[0], t[0]));
        store<1>(bj.ws_a, j.mul_cos_dtype, w, 1, false, v);
        break;
      case Stage::kRotate: {
        int64_t pc;
        bool neg;
        if (style == Style::kRotateHalf) {
          neg = c < h;
          pc = neg ? c + h : c - h;
        } else {
          neg = (c & 1) == 0;
          pc = c ^ 1;
        }
        load<1>(j.x.ptr, j.x.dtype, o.x + pc * j.x.last_stride, 1, false, v);
        if (neg) v[0] = -v[0];
        store<1>(bj.ws_rot, j.x.dtype, w, 1, false, v);
        break;
      }
      case Stage::kMulSin:
        load<1>(bj.ws_rot, j.x.dtype, w, 1, false, v);
        load<1>(j.sin.ptr, j.sin.dtype, o.sin + c * j.sin.last_stride, 1, false, t);
        v[0] = round_to(j.mul_sin_dtype, __fmul_rn(v[0], sin_sign * t[0]));
        store<1>(bj.ws_b, j.mul_sin_dtype, w, 1, false, v);
        break;
      case Stage::kAdd:
        if (c < R) {
          load<1>(bj.ws_a, j.mul_cos_dtype, w, 1, false, v);
          load<1>(bj.ws_b, j.mul_sin_dtype, w, 1, false, t);
          v[0] = round_to(j.add_dtype, __fadd_rn(v[0], t[0]));
        } else {
          if (!write_tail) continue;
          load<1>(j.x.ptr, j.x.dtype, o.x + c * j.x.last_stride, 1, false, v);
        }
        store<1>(j.out, j.out_dtype, o.out + c * j.out_last_stride, 1, false, v);
        break;
    }
  }
}

size_t align256(size_t b) {
  return (b + 255) / 256 * 256;
}

}  // namespace

int rope_vector_width(const RopeArgs& a) {
  for (int v : {8, 4, 2}) {
    bool ok = true;
    for (int k = 0; k < a.n_jobs; ++k) {
      const RopeJob& j = a.jobs[k];
      ok &= j.head_dim % v == 0 && j.rotary_dim % v == 0;
      if (a.style == Style::kRotateHalf) ok &= (j.rotary_dim / 2) % v == 0;
    }
    if (ok) return v;
  }
  return 1;
}

void rope_fwd_optimized(const RopeArgs& in, cudaStream_t stream) {
  if (in.n_jobs <= 0) return;
  RopeArgs a = in;
  const int v = rope_vector_width(a);
  int64_t max_work = 0;
  for (int k = 0; k < a.n_jobs; ++k) {
    RopeJob& j = a.jobs[k];
    j.vec_x = vectorizable(j.x.ptr, j.x.dtype, j.x.lead_stride, j.n_lead, j.x.last_stride, v);
    j.vec_cos =
        vectorizable(j.cos.ptr, j.cos.dtype, j.cos.lead_stride, j.n_lead, j.cos.last_stride, v);
    j.vec_sin =
        vectorizable(j.sin.ptr, j.sin.dtype, j.sin.lead_stride, j.n_lead, j.sin.last_stride, v);
    j.vec_out = vectorizable(j.out, j.out_dtype, j.out_lead_stride, j.n_lead, j.out_last_stride, v);
    max_work = std::max(max_work, j.rows * (j.head_dim / v));
  }
  constexpr int kThreads = 256;
  const dim3 grid(blocks_for(max_work, kThreads), a.n_jobs);
  switch (v) {
    case 8:
      rope_fwd_kernel<8><<<grid, kThreads, 0, stream>>>(a);
      break;
    case 4:
      rope_fwd_kernel<4><<<grid, kThreads, 0, stream>>>(a);
      break;
    case 2:
      rope_fwd_kernel<2><<<grid, kThreads, 0, stream>>>(a);
      break;
    default:
      rope_fwd_kernel<1><<<grid, kThreads, 0, stream>>>(a);
      break;
  }
  REPLAY_CUDA_LAUNCH("rope_fwd_kernel");
}

size_t rope_baseline_workspace(const RopeArgs& a) {
  size_t b = 0;
  for (int k = 0; k < a.n_jobs; ++k) {
    const RopeJob& j = a.jobs[k];
    const size_t n = static_cast<size_t>(j.rows * j.rotary_dim);
    b += align256(n * dtype_size(j.mul_cos_dtype)) + align256(n * dtype_size(j.x.dtype)) +
         align256(n * dtype_size(j.mul_sin_dtype));
  }
  return b;
}

void rope_fwd_baseline(const RopeArgs& a, void* workspace, cudaStream_t stream) {
  char* ws = static_cast<char*>(workspace);
  constexpr int kThreads = 256;
  for (int k = 0; k < a.n_jobs; ++k) {
    BaselineJob bj;
    bj.j = a.jobs[k];
    const RopeJob& j = bj.j;
    const size_t n = static_cast<size_t>(j.rows * j.rotary_dim);
    bj.ws_a = ws;
    ws += align256(n * dtype_size(j.mul_cos_dtype));
    bj.ws_rot = ws;
    ws += align256(n * dtype_size(j.x.dtype));
    bj.ws_b = ws;
    ws += align256(n * dtype_size(j.mul_sin_dtype));
    for (Stage s : {Stage::kMulCos, Stage::kRotate, Stage::kMulSin, Stage::kAdd}) {
      const int64_t work = j.rows * (s == Stage::kAdd ? j.head_dim : j.rotary_dim);
      rope_baseline_kernel<<<blocks_for(work, kThreads), kThreads, 0, stream>>>(
          bj, s, a.style, a.sin_sign, a.write_tail);
      REPLAY_CUDA_LAUNCH("rope_baseline_kernel");
    }
  }
}

}  // namespace replay::rope
