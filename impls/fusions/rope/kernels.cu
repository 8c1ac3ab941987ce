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
#include "impls/fusions/rope/rope_math.hpp"

namespace replay::rope {
namespace {

// --- element access by runtime dtype ---------------------------------------------------------

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

// The same with 32-bit indices and the job's FastDivs (rows * chunks < 2^31).
__device__ __forceinline__ RowOffsets row_offsets32(const RopeJob& j, uint32_t row) {
  RowOffsets o;
#pragma unroll
  for (int d = kRopeMaxLead - 1; d >= 0; --d) {
    if (d >= j.n_lead) continue;
    const uint32_t q = j.div_lead[d].div(row);
    const int64_t i = row - q * j.div_lead[d].divisor;
    row = q;
    o.x += i * j.x.lead_stride[d];
    o.cos += i * j.cos.lead_stride[d];
    o.sin += i * j.sin.lead_stride[d];
    o.out += i * j.out_lead_stride[d];
  }
  return o;
}

// V table entries for elements c0 .. c0 + V - 1: entries c0 .. (or c0 / 2 .. each twice for a
// per-pair table; V is even then, or 1).
template <int V>
__device__ __forceinline__ void load_table(const RopeOperand& t, int64_t off, int64_t c0, bool pair,
                                           bool vec, float* f) {
  if constexpr (V >= 2) {
    if (pair) {
      float h[V / 2];
      load<V / 2>(t.ptr, t.dtype, off + (c0 / 2) * t.last_stride, t.last_stride, vec, h);
#pragma unroll
      for (int k = 0; k < V; ++k) f[k] = h[k / 2];
      return;
    }
  } else {
    if (pair) return load<1>(t.ptr, t.dtype, off + (c0 / 2) * t.last_stride, 1, false, f);
  }
  load<V>(t.ptr, t.dtype, off + c0 * t.last_stride, t.last_stride, vec, f);
}

// --- optimized: one kernel, every job (blockIdx.y), V elements per thread --------------------

template <int V, bool kIdx32>
__global__ void __launch_bounds__(256) rope_kernel(const __grid_constant__ RopeArgs a) {
  const RopeJob& j = a.jobs[blockIdx.y];
  const int64_t cpr = j.head_dim / V;  // chunks per row
  const int64_t total = j.rows * cpr;
  const int64_t R = j.rotary_dim, h = R / 2;
  const int64_t xs = j.x.last_stride;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t row, c0;
    RowOffsets o;
    if constexpr (kIdx32) {
      const uint32_t r32 = j.div_chunks.div(static_cast<uint32_t>(i));
      row = r32;
      c0 = (i - row * cpr) * V;
      o = row_offsets32(j, r32);
    } else {
      row = i / cpr;
      c0 = (i - row * cpr) * V;
      o = row_offsets(j, row);
    }
    float xv[V], out[V];
    load<V>(j.x.ptr, j.x.dtype, o.x + c0 * xs, xs, j.vec_x, xv);
    if (c0 >= R) {  // partial rotary: the pass-through tail
      if (!a.write_tail) continue;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        out[k] = tail(j, xv[k]);
      }
      store<V>(j.out, j.out_dtype, o.out + c0 * j.out_last_stride, j.out_last_stride, j.vec_out,
               out);
      continue;
    }
    float cv[V], sv[V], pv[V];
    load_table<V>(j.cos, o.cos, c0, j.pair_table, j.vec_cos, cv);
    // The partner: rotate-half's other half (its own chunk), or the pair's other element (in
    // this chunk when V >= 2). sign: forward rot = sign * x[p]; backward rotT = -sign * y[p].
    int64_t pc = c0;
    float sign = 1;
    if (a.style == Style::kRotateHalf) {
      pc = c0 < h ? c0 + h : c0 - h;
      sign = c0 < h ? -1.f : 1.f;
    } else if (V == 1) {
      pc = c0 ^ 1;
      sign = (c0 & 1) == 0 ? -1.f : 1.f;
    }
    const bool paired = a.style == Style::kInterleaved && V >= 2;
    if (!paired) load<V>(j.x.ptr, j.x.dtype, o.x + pc * xs, xs, j.vec_x, pv);
    if (!a.backward) {
      load_table<V>(j.sin, o.sin, c0, j.pair_table, j.vec_sin, sv);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float rot = !paired ? sign * pv[k] : (k & 1) ? xv[(k + V - 1) % V] : -xv[(k + 1) % V];
        out[k] = sum(j, product(j.mul_cos_dtype, j.mul_cos_cvt, xv[k], cv[k]),
                     product(j.mul_sin_dtype, j.mul_sin_cvt, rot, a.sin_sign * sv[k]));
      }
    } else {
      // rotT(g * sin)[c] = -sign * (g * sin)[p]: sin at the partner too.
      load_table<V>(j.sin, o.sin, paired ? c0 : pc, j.pair_table, j.vec_sin, sv);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        float y;
        bool negated;
        if (paired) {
          const int p = (k ^ 1) % V;
          y = product(j.mul_sin_dtype, j.mul_sin_cvt, xv[p], a.sin_sign * sv[p]);
          negated = (k & 1) != 0;
        } else {
          y = product(j.mul_sin_dtype, j.mul_sin_cvt, pv[k], a.sin_sign * sv[k]);
          negated = sign > 0;  // t = -sign * y
        }
        out[k] = bwd_sum(j, negated ? -y : y, negated,
                         product(j.mul_cos_dtype, j.mul_cos_cvt, xv[k], cv[k]));
      }
    }
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
  kMulCos,  ///< a = x * cos                                -> ws_a [rows, R]
  kRotate,  ///< forward: rot = rot(x); backward: rotT(b) + 0 -> ws_rot [rows, R]
  kMulSin,  ///< forward: b = rot * sin; backward: b = g * sin -> ws_b [rows, R]
  kAdd,     ///< out[:R] = a + b (forward) or rotT + a (backward); out[R:] = the tail
};

struct BaselineJob {
  RopeJob j;
  void* ws_a = nullptr;  ///< in mul_cos_cvt (float32 when mul_cos_dtype is float32) ...
  void* ws_rot = nullptr;
  void* ws_b = nullptr;
  DType a_dtype, rot_dtype, b_dtype;  ///< ... the dtypes the graph holds them in
};

__global__ void __launch_bounds__(256)
    rope_baseline_kernel(const __grid_constant__ BaselineJob bj, Stage stage, Style style,
                         bool backward, float sin_sign, bool write_tail) {
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
        load_table<1>(j.cos, o.cos, c, j.pair_table, false, t);
        v[0] = product(j.mul_cos_dtype, j.mul_cos_cvt, v[0], t[0]);
        store<1>(bj.ws_a, bj.a_dtype, w, 1, false, v);
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
        if (!backward) {
          load<1>(j.x.ptr, j.x.dtype, o.x + pc * j.x.last_stride, 1, false, v);
          if (neg) v[0] = -v[0];
        } else {
          load<1>(bj.ws_b, bj.b_dtype, row * R + pc, 1, false, v);
          if (!neg) v[0] = -v[0];  // the scatters' + 0 is in bwd_sum
        }
        store<1>(bj.ws_rot, bj.rot_dtype, w, 1, false, v);
        break;
      }
      case Stage::kMulSin:
        if (!backward)
          load<1>(bj.ws_rot, bj.rot_dtype, w, 1, false, v);
        else
          load<1>(j.x.ptr, j.x.dtype, o.x + c * j.x.last_stride, 1, false, v);
        load_table<1>(j.sin, o.sin, c, j.pair_table, false, t);
        v[0] = product(j.mul_sin_dtype, j.mul_sin_cvt, v[0], sin_sign * t[0]);
        store<1>(bj.ws_b, bj.b_dtype, w, 1, false, v);
        break;
      case Stage::kAdd:
        if (c < R) {
          load<1>(bj.ws_a, bj.a_dtype, w, 1, false, v);
          if (!backward) {
            load<1>(bj.ws_b, bj.b_dtype, w, 1, false, t);
            v[0] = sum(j, t[0], v[0]);
          } else {
            load<1>(bj.ws_rot, bj.rot_dtype, w, 1, false, t);
            const bool negated = style == Style::kRotateHalf ? c >= h : (c & 1) != 0;
            v[0] = bwd_sum(j, t[0], negated, v[0]);
          }
        } else {
          if (!write_tail) continue;
          load<1>(j.x.ptr, j.x.dtype, o.x + c * j.x.last_stride, 1, false, v);
          v[0] = tail(j, v[0]);
        }
        store<1>(j.out, j.out_dtype, o.out + c * j.out_last_stride, 1, false, v);
        break;
    }
  }
}

// The dtype a value rounded to `mul` then `cvt` is held in (the narrower of the two).
DType held_in(DType mul, DType cvt) {
  return cvt == DType::kFloat32 ? mul : cvt;
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

void rope_optimized(const RopeArgs& in, cudaStream_t stream) {
  if (in.n_jobs <= 0) return;
  RopeArgs a = in;
  const int v = rope_vector_width(a);
  int64_t max_work = 0;
  for (int k = 0; k < a.n_jobs; ++k) {
    RopeJob& j = a.jobs[k];
    j.vec_x = vectorizable(j.x.ptr, j.x.dtype, j.x.lead_stride, j.n_lead, j.x.last_stride, v);
    const int tv = j.pair_table ? v / 2 : v;  // table entries per vector
    j.vec_cos =
        vectorizable(j.cos.ptr, j.cos.dtype, j.cos.lead_stride, j.n_lead, j.cos.last_stride, tv);
    j.vec_sin =
        vectorizable(j.sin.ptr, j.sin.dtype, j.sin.lead_stride, j.n_lead, j.sin.last_stride, tv);
    j.vec_out = vectorizable(j.out, j.out_dtype, j.out_lead_stride, j.n_lead, j.out_last_stride, v);
    max_work = std::max(max_work, j.rows * (j.head_dim / v));
  }
  // 32-bit indices when every job's chunks (and so its rows and lead sizes) fit 31 bits
  bool idx32 = !a.force_index64;
  for (int k = 0; k < a.n_jobs; ++k) {
    RopeJob& j = a.jobs[k];
    idx32 &= j.rows * (j.head_dim / v) < (int64_t(1) << 31);
    if (!idx32) break;
    j.div_chunks = FastDiv(static_cast<uint32_t>(j.head_dim / v));
    for (int d = 0; d < j.n_lead; ++d) j.div_lead[d] = FastDiv(static_cast<uint32_t>(j.lead[d]));
  }
  constexpr int kThreads = 256;
  const dim3 grid(blocks_for(max_work, kThreads), a.n_jobs);
  auto launch = [&](auto kernel) { kernel<<<grid, kThreads, 0, stream>>>(a); };
  switch (v * 2 + idx32) {
    case 17:
      launch(rope_kernel<8, true>);
      break;
    case 16:
      launch(rope_kernel<8, false>);
      break;
    case 9:
      launch(rope_kernel<4, true>);
      break;
    case 8:
      launch(rope_kernel<4, false>);
      break;
    case 5:
      launch(rope_kernel<2, true>);
      break;
    case 4:
      launch(rope_kernel<2, false>);
      break;
    case 3:
      launch(rope_kernel<1, true>);
      break;
    default:
      launch(rope_kernel<1, false>);
      break;
  }
  REPLAY_CUDA_LAUNCH("rope_kernel");
}

namespace {

// Job k's workspace at `base` + `off` (advanced past it).
BaselineJob baseline_job(const RopeArgs& a, int k, uintptr_t base, size_t& off) {
  BaselineJob bj;
  bj.j = a.jobs[k];
  const RopeJob& j = bj.j;
  bj.a_dtype = held_in(j.mul_cos_dtype, j.mul_cos_cvt);
  bj.b_dtype = held_in(j.mul_sin_dtype, j.mul_sin_cvt);
  bj.rot_dtype = a.backward ? bj.b_dtype : j.x.dtype;
  const size_t n = static_cast<size_t>(j.rows * j.rotary_dim);
  for (auto [ptr, t] : {std::pair{&bj.ws_a, bj.a_dtype}, std::pair{&bj.ws_rot, bj.rot_dtype},
                        std::pair{&bj.ws_b, bj.b_dtype}}) {
    *ptr = reinterpret_cast<void*>(base + off);
    off += align256(n * dtype_size(t));
  }
  return bj;
}

}  // namespace

size_t rope_baseline_workspace(const RopeArgs& a) {
  size_t off = 0;
  for (int k = 0; k < a.n_jobs; ++k) baseline_job(a, k, 0, off);
  return off;
}

void rope_baseline(const RopeArgs& a, void* workspace, cudaStream_t stream) {
  size_t off = 0;
  constexpr int kThreads = 256;
  // The eager order: forward x * cos, rot, rot * sin, sum; backward g * cos, g * sin, rotT, sum.
  const Stage fwd[] = {Stage::kMulCos, Stage::kRotate, Stage::kMulSin, Stage::kAdd};
  const Stage bwd[] = {Stage::kMulCos, Stage::kMulSin, Stage::kRotate, Stage::kAdd};
  for (int k = 0; k < a.n_jobs; ++k) {
    const BaselineJob bj = baseline_job(a, k, reinterpret_cast<uintptr_t>(workspace), off);
    for (Stage s : a.backward ? bwd : fwd) {
      const int64_t work = bj.j.rows * (s == Stage::kAdd ? bj.j.head_dim : bj.j.rotary_dim);
      rope_baseline_kernel<<<blocks_for(work, kThreads), kThreads, 0, stream>>>(
          bj, s, a.style, a.backward, a.sin_sign, a.write_tail);
      REPLAY_CUDA_LAUNCH("rope_baseline_kernel");
    }
  }
}

}  // namespace replay::rope
