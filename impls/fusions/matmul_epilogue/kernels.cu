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
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include "impls/cuda/cp_async.cuh"
#include "impls/cuda/cuda_check.hpp"
#include "impls/cuda/device_sms.hpp"
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
    case Act::kTable:
      return "pointwise chain (tabulated)";
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

// An activation and its derivative at x in float32, from shared intermediates (one exp for SiLU
// and SiLU', one tanh for GELU tanh and its derivative, one erf for GELU erf's). Every step is an
// explicitly rounded intrinsic (__fmul_rn, __fadd_rn, __fmaf_rn: never contracted or reordered by
// the compiler), so a kernel that uses only `act` (the forward epilogue, the baseline's act(gate)
// step), only `grad` (the baseline's act'(x) step) or both (the fused backward) computes the same
// bits for each. `grad` is what the backward graph computes (Inductor's decompositions of
// gelu_backward and silu_backward) in one expression:
//   GELU erf:  c = 0.5 (1 + erf(x / sqrt 2));  act = x c;  grad = c + x exp(-x^2 / 2) / sqrt(2 pi)
//   GELU tanh: t = tanh(k (x + 0.044715 x^3)), k = sqrt(2 / pi);  h = 0.5 (1 + t);  act = x h;
//              grad = h + 0.5 x (1 - t^2) k (1 + 0.134145 x^2)
//   SiLU:      s = 1 / (1 + exp(-x)) (__frcp_rn: the correctly rounded reciprocal, as 1.0f / d);
//              act = x s;  grad = s (1 + x (1 - s))
struct ActEval {
  float act, grad;
};

__device__ __forceinline__ ActEval act_eval(Act a, float x) {
  switch (a) {
    case Act::kGeluErf: {
      const float c = __fmul_rn(0.5f, __fadd_rn(1.0f, erff(__fmul_rn(x, 0.70710678118654752f))));
      const float pdf = __fmul_rn(expf(__fmul_rn(__fmul_rn(-0.5f, x), x)), 0.39894228040143268f);
      return {__fmul_rn(x, c), __fmaf_rn(x, pdf, c)};
    }
    case Act::kGeluTanh: {
      const float k = 0.79788456080286536f;
      const float x2 = __fmul_rn(x, x);
      const float t = tanhf(__fmul_rn(k, __fmaf_rn(__fmul_rn(0.044715f, x2), x, x)));
      const float h = __fmul_rn(0.5f, __fadd_rn(1.0f, t));
      const float slope = __fmul_rn(k, __fmaf_rn(0.134145f, x2, 1.0f));
      return {__fmul_rn(x, h),
              __fmaf_rn(__fmul_rn(__fmul_rn(0.5f, x), __fmaf_rn(-t, t, 1.0f)), slope, h)};
    }
    case Act::kSilu: {
      const float s = __frcp_rn(__fadd_rn(1.0f, expf(-x)));
      return {__fmul_rn(x, s), __fmul_rn(s, __fmaf_rn(x, __fsub_rn(1.0f, s), 1.0f))};
    }
    default:
      return {x, 1.0f};
  }
}

__device__ __forceinline__ float act_f(Act a, float x) {
  return act_eval(a, x).act;
}

// A 16-bit value's bits (v holds a value of dtype t exactly) and back.
__device__ __forceinline__ unsigned short bits16(DType t, float v) {
  return t == DType::kBFloat16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v))
                               : __half_as_ushort(__float2half_rn(v));
}
__device__ __forceinline__ float from_bits16(DType t, unsigned short b) {
  return t == DType::kBFloat16 ? __bfloat162float(__ushort_as_bfloat16(b))
                               : __half2float(__ushort_as_half(b));
}

// A dtype of EpilogueArgs as the kernel sees it: in the all-bfloat16 instances (kBf16, chosen by
// the launcher when every operand and rounding of the chain is bfloat16: all_bf16) a constant, so
// the per-element dtype branches fold away; else the run-time value.
template <bool kBf16>
__device__ __forceinline__ DType dt(DType t) {
  return kBf16 ? DType::kBFloat16 : t;
}

// The element chain of kernels.hpp for one value v at column n, shared by both kernels. `tab`: the
// Act::kTable table as staged in shared memory (nullptr otherwise).
template <bool kBf16 = false>
struct Chain {
  const EpilogueArgs& a;
  const unsigned short* tab = nullptr;
  __device__ __forceinline__ float bias_step(float v, float b) const {
    return round_to(dt<kBf16>(a.bias_round), v + b);
  }
  __device__ __forceinline__ float act_step(float v) const {
    if (tab) return from_bits16(dt<kBf16>(a.act_round), tab[bits16(dt<kBf16>(a.table_in), v)]);
    return round_to(dt<kBf16>(a.act_round), act_f(a.act, v));
  }
};

// Act::kTable: the block copies the table into dynamic shared memory (16-byte words) before its
// first element; nullptr for the other activations (no shared memory asked for).
template <bool kTab>
__device__ __forceinline__ const unsigned short* stage_table(const EpilogueArgs& a) {
  if constexpr (!kTab) {
    return nullptr;
  } else {
    extern __shared__ uint4 s_table[];
    const uint4* src = reinterpret_cast<const uint4*>(a.table);
    constexpr int kWords = static_cast<int>(kTableEntries * 2 / sizeof(uint4));
    for (int i = threadIdx.x; i < kWords; i += blockDim.x) s_table[i] = src[i];
    __syncthreads();
    return reinterpret_cast<const unsigned short*>(s_table);
  }
}

constexpr int kV = 8;  // elements per vector

// 8 consecutive elements of a float32/bfloat16/float16 matrix as loaded: one 16-byte word
// (16-bit dtypes; w[1] unused) or two (float32). Loading and widening are separate steps so that a
// kernel can have the next row's loads in flight while it computes this one's.
struct Raw8 {
  uint4 w[2];
};

// The 8 elements at element offset `i` (a multiple of 8; the base 16-byte aligned).
__device__ __forceinline__ Raw8 load_raw8(const void* base, int64_t i, DType t) {
  Raw8 r;
  if (t == DType::kFloat32) {
    const uint4* p = reinterpret_cast<const uint4*>(static_cast<const float*>(base) + i);
    r.w[0] = p[0];
    r.w[1] = p[1];
  } else {
    r.w[0] = *reinterpret_cast<const uint4*>(static_cast<const char*>(base) + i * 2);
    r.w[1] = make_uint4(0, 0, 0, 0);
  }
  return r;
}

// Raw8 widened to float exactly as load_elem does.
__device__ __forceinline__ void unpack8(const Raw8& r, DType t, float (&v)[kV]) {
  if (t == DType::kFloat32) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      v[4 * h] = __uint_as_float(r.w[h].x), v[4 * h + 1] = __uint_as_float(r.w[h].y);
      v[4 * h + 2] = __uint_as_float(r.w[h].z), v[4 * h + 3] = __uint_as_float(r.w[h].w);
    }
    return;
  }
  const uint32_t w[4] = {r.w[0].x, r.w[0].y, r.w[0].z, r.w[0].w};
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

// Element k (0..7, a constant after unrolling) of a Raw8, widened as unpack8 does.
__device__ __forceinline__ float elem8(const Raw8& r, DType t, int k) {
  if (t == DType::kFloat32) {
    const uint4& w = r.w[k / 4];
    const uint32_t u[4] = {w.x, w.y, w.z, w.w};
    return __uint_as_float(u[k % 4]);
  }
  const uint32_t u[4] = {r.w[0].x, r.w[0].y, r.w[0].z, r.w[0].w};
  const auto h = static_cast<unsigned short>(k % 2 ? u[k / 2] >> 16 : u[k / 2] & 0xffffu);
  return t == DType::kBFloat16 ? __bfloat162float(__ushort_as_bfloat16(h))
                               : __half2float(__ushort_as_half(h));
}

// 8 consecutive elements at element offset `i`, widened to float.
__device__ __forceinline__ void load8(const void* base, int64_t i, DType t, float (&v)[kV]) {
  unpack8(load_raw8(base, i, t), t, v);
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

// One vector of 8 elements at (m, n): the steps of kernels.hpp from z's words as loaded (and the
// gating operand's, `ur`, when a.up is set; the residual's, `rr`, when a.res is set), stored.
// Shared by the vector kernels.
template <bool kBf16>
__device__ __forceinline__ void vec_elements(const EpilogueArgs& a, const Chain<kBf16>& c,
                                             int64_t m, int64_t n, const Raw8& zr, const Raw8& ur,
                                             const Raw8& rr) {
  float v[kV], t[kV];
  unpack8(zr, dt<kBf16>(a.z.dtype), v);
  if (a.bias) {
    load8(a.bias, n, dt<kBf16>(a.bias_dtype), t);
#pragma unroll
    for (int k = 0; k < kV; ++k) v[k] = c.bias_step(v[k], t[k]);
    if (a.pre.ptr) store8(a.pre.ptr, m * a.pre.ld + n, dt<kBf16>(a.pre.dtype), v);
  }
  if (a.act_step) {
#pragma unroll
    for (int k = 0; k < kV; ++k) v[k] = c.act_step(v[k]);
    if (a.mid.ptr) store8(a.mid.ptr, m * a.mid.ld + n, dt<kBf16>(a.mid.dtype), v);
  }
  if (a.up.ptr) {
    unpack8(ur, dt<kBf16>(a.up.dtype), t);
#pragma unroll
    for (int k = 0; k < kV; ++k) v[k] = v[k] * t[k];
  }
  if (a.res.ptr) {
    unpack8(rr, dt<kBf16>(a.res.dtype), t);
#pragma unroll
    for (int k = 0; k < kV; ++k) v[k] = v[k] + t[k];
  }
  store8(a.y.ptr, m * a.y.ld + n, dt<kBf16>(a.y.dtype), v);
}

// An operand's 8 elements at (m, n), or nothing (zeros) when the operand is absent.
template <bool kBf16>
__device__ __forceinline__ Raw8 load_op8(const EpiMat& o, int64_t m, int64_t n) {
  return o.ptr ? load_raw8(o.ptr, m * o.ld + n, dt<kBf16>(o.dtype)) : Raw8{};
}

// (row, column) of a grid-stride walk over a [M, cols] grid of items, advanced by a constant
// stride without a 64-bit division per step (one per thread, at the start): the division cost
// more than the lookups and bytes of an element (both epilogue kernels ran at ~1.8 TB/s with it,
// H200).
struct Cursor {
  int64_t m, c, dm, dc, cols;
  __device__ __forceinline__ Cursor(int64_t i, int64_t stride, int64_t cols_) : cols(cols_) {
    m = i / cols;
    c = i - m * cols;
    dm = stride / cols;
    dc = stride - dm * cols;
  }
  __device__ __forceinline__ void advance() {
    m += dm;
    c += dc;
    if (c >= cols) {
      c -= cols;
      ++m;
    }
  }
};

// kU vectors per thread and iteration (grid-stride: vector i, i + stride, ...), every operand's
// loads of the kU issued before the first is computed: kU x 16 bytes of z (and up, res) in flight
// per thread instead of 16. Swept on the H200 (TUNING.md, "Bytes in flight"): no gain on the
// baseline's steps (its float32-to-bfloat16 bias steps already run at 3.3-3.9 TB/s, its GELU and
// SiLU steps are bound by their arithmetic), so the default stays at 1.
// kZOnly: the instance for chains without up and res (bias, activation, casts), whose registers
// hold z's words alone.
template <bool kBf16, int kU, bool kZOnly>
__global__ void __launch_bounds__(256, kU == 1  ? 1
                                       : kZOnly ? 4
                                                : 3) epilogue_vec_kernel(EpilogueArgs a) {
  const int64_t nv = a.N / kV, total = a.M * nv;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const Chain<kBf16> c{a};
  Cursor at(first, stride, nv);
  for (int64_t i = first; i < total; i += kU * stride) {
    int m[kU], n[kU];  // launch_epilogue: M and N below 2^31
    Raw8 zr[kU], ur[kU], rr[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      m[u] = static_cast<int>(at.m), n[u] = static_cast<int>(at.c * kV);
      at.advance();
      if (u == 0 || i + u * stride < total) {
        zr[u] = load_op8<kBf16>(a.z, m[u], n[u]);
        if constexpr (!kZOnly) {
          ur[u] = load_op8<kBf16>(a.up, m[u], n[u]);
          rr[u] = load_op8<kBf16>(a.res, m[u], n[u]);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (u > 0 && i + u * stride >= total) break;
      if constexpr (kZOnly) {
        // up and res are absent (the launcher's choice): vec_elements reads neither
        vec_elements(a, c, m[u], n[u], zr[u], zr[u], zr[u]);
      } else {
        vec_elements(a, c, m[u], n[u], zr[u], ur[u], rr[u]);
      }
    }
  }
}

// The table kernel (EpilogueArgs::table, 16-bit z and up): one block of kThreads per SM, whose
// shared memory holds the table (128 KiB) and a ring of kStages 16-byte slots per thread and
// operand (z; up when kUp), filled by cp.async: each thread has its next kStages - 1 vectors'
// loads in flight while it looks the current one up. Measured (H200, TUNING.md "Bytes in
// flight"): one vector at a time in registers, 62 us for GPT-2's 2 x 64 MiB (the bytes take
// ~31 us); four loaded, then four looked up, 146-182 us on nanoGPT's and BERT's 210-256 MB (the
// lookups and the loads took turns); a 5-stage ring of 512 threads, 89 us on nanoGPT's 210 MB;
// 10 stages for z alone, 75 us, then latency-bound (ncu: 4 warps a scheduler, 0.46 issued per
// cycle), hence 1024 threads.
// kRaw (all-bfloat16 chains of z and the table alone: no bias, up or residual): the lookups take
// z's 16-bit words as they are and store the table's words as they are, no widening or rounding
// (the same bits: the chain's float steps are exact there).
constexpr int kTableWords = static_cast<int>(kTableEntries * 2 / sizeof(uint4));
// Dynamic shared memory of the table kernel: the table and ops x stages slots per thread.
constexpr size_t table_smem(int threads, int ops, int stages) {
  return (kTableWords + static_cast<size_t>(ops) * stages * threads) * sizeof(uint4);
}

template <bool kBf16, bool kUp, bool kRaw, int kThreads, int kStages>
__global__ void __launch_bounds__(kThreads, 1) epilogue_table_vec_kernel(EpilogueArgs a) {
  constexpr int kOps = kUp ? 2 : 1;
  static_assert(table_smem(kThreads, kOps, kStages) <= 227 * 1024,
                "the ring and table exceed an SM's shared memory");
  static_assert(!kRaw || (kBf16 && !kUp), "raw lookups take bfloat16 z alone");
  extern __shared__ uint4 smem[];
  const Chain<kBf16> c{a, stage_table<true>(a)};
  uint4* ring = smem + kTableWords;  // [stage][operand: z, up][thread]
  auto slot = [&](int st, int op) { return ring + (st * kOps + op) * kThreads + threadIdx.x; };
  const int64_t nv = a.N / kV, total = a.M * nv;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  Cursor ahead(first, stride, nv), at = ahead;
  // Vector i (at `ahead`)'s z (and up) into stage st, as one group; zeros past the end.
  auto issue = [&](int64_t i, int st) {
    const bool ok = i < total;
    const int64_t m = ok ? ahead.m : 0, n = ok ? ahead.c * kV : 0;
    cp_async16(slot(st, 0), static_cast<const char*>(a.z.ptr) + (m * a.z.ld + n) * 2, ok);
    if constexpr (kUp)
      cp_async16(slot(st, 1), static_cast<const char*>(a.up.ptr) + (m * a.up.ld + n) * 2, ok);
    cp_async_commit();
    ahead.advance();
  };
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) issue(first + st * stride, st);
  int st = 0;
  for (int64_t i = first; i < total; i += stride, at.advance()) {
    issue(i + (kStages - 1) * stride, st == 0 ? kStages - 1 : st - 1);
    cp_async_wait<kStages - 1>();  // this thread's group for vector i has landed
    const int64_t m = at.m, n = at.c * kV;
    if constexpr (kRaw) {
      const uint4 w = *slot(st, 0);
      const uint32_t in[4] = {w.x, w.y, w.z, w.w};
      uint32_t out[4];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        out[k] = static_cast<uint32_t>(c.tab[in[k] & 0xffffu]) |
                 (static_cast<uint32_t>(c.tab[in[k] >> 16]) << 16);
      const uint4 y = make_uint4(out[0], out[1], out[2], out[3]);
      if (a.mid.ptr)
        *reinterpret_cast<uint4*>(static_cast<char*>(a.mid.ptr) + (m * a.mid.ld + n) * 2) = y;
      *reinterpret_cast<uint4*>(static_cast<char*>(a.y.ptr) + (m * a.y.ld + n) * 2) = y;
    } else {
      Raw8 zr{}, ur{};
      zr.w[0] = *slot(st, 0);
      if constexpr (kUp) ur.w[0] = *slot(st, 1);
      vec_elements(a, c, m, n, zr, ur, load_op8<kBf16>(a.res, m, n));
    }
    st = st + 1 == kStages ? 0 : st + 1;
  }
  cp_async_wait<0>();
}

template <bool kTab>
__global__ void epilogue_kernel(EpilogueArgs a) {
  const int64_t total = a.M * a.N;
  const Chain<> c{a, stage_table<kTab>(a)};
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  Cursor at(first, stride, a.N);
  for (int64_t i = first; i < total; i += stride, at.advance()) {
    const int64_t m = at.m, n = at.c;
    float v = load_elem<float>(a.z.ptr, m * a.z.ld + n, a.z.dtype);
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

// The backward kernels' tiling: a block is 32 column vectors (8 columns each, 256 columns) by 8
// row lanes; it walks rows [y * rows, (y + 1) * rows) of its columns, each thread every 8th row, so
// a thread's column sums take its rows in order and the 8 lanes are added in order after.
constexpr int kColVecs = 32, kRowLanes = 8, kBwdThreads = kColVecs * kRowLanes;
// Resident blocks per SM the backward kernels are compiled for (__launch_bounds__: at most 64
// registers a thread; 8 KB of shared memory a block) and their grid is sized to: one wave of
// blocks that each stream their rows to the end, with no second, partly filled wave.
constexpr int kBwdBlocksPerSm = 4;

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

// The backward epilogue. The activation, gating and dtypes are template parameters where the
// dispatcher knows them (kAct, kGated != kDynamic; kBf16: g present, every operand bfloat16 and,
// gated, act(gate) (unless read as saved) and g * up rounded to bfloat16, as the Llama / Gemma /
// Phi-3 graphs round them), so the per-element switches of act_eval / elem8 / store8 / round_to
// fold away; the generic instance reads them from `a`. In the bfloat16 instances a thread takes
// kRows of its rows per step and has the next step's loads in flight while it computes this step
// (rows past its last are clamped to a valid row: loaded, unused); the generic instance takes one
// row at a time. Every instance computes the same float32 steps (act_eval's, every product
// __fmul_rn) in the same order, as the baseline's per-step kernels: the same bits.
constexpr int kDynamic = -1;

template <int kAct, bool kBf16, int kGated, int kRows>
__global__ void __launch_bounds__(kBwdThreads, kBwdBlocksPerSm) backward_kernel(BackwardArgs a) {
  const Act act = kAct == kDynamic ? a.act : static_cast<Act>(kAct);
  const bool gated = kGated == kDynamic ? a.gated : kGated != 0;
  auto dt = [](DType t) { return kBf16 ? DType::kBFloat16 : t; };
  const bool has_g = kBf16 || a.g.ptr;  // the bfloat16 instances always read g
  // The gated instances compute no bias gradient (launch_backward sends a gated epilogue with one
  // to the generic instance), so their loop keeps no column sums.
  const bool dbias = a.dbias && kGated != 1;
  const Tile t = tile(a.M, a.N);
  float sum[kV] = {};
  struct In {  // one row's operands as loaded
    Raw8 g, x, up, act;
  };
  auto fetch = [&](int64_t m, In& in) {
    if (has_g) in.g = load_raw8(a.g.ptr, m * a.g.ld + t.n, dt(a.g.dtype));
    in.x = load_raw8(a.x.ptr, m * a.x.ld + t.n, dt(a.x.dtype));
    if (gated) {
      in.up = load_raw8(a.up.ptr, m * a.up.ld + t.n, dt(a.up.dtype));
      if (a.act_in.ptr) in.act = load_raw8(a.act_in.ptr, m * a.act_in.ld + t.n, dt(a.act_in.dtype));
    }
  };
  // The elements are widened one at a time from the loaded words (not all 8 of every operand at
  // once), which keeps two rows of loaded words within the register budget.
  auto step = [&](int64_t m, const In& in) {
    float dx[kV];
    if (gated) {
      float du[kV];
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        const float gv = has_g ? elem8(in.g, dt(a.g.dtype), k) : 1.0f;
        const float xv = elem8(in.x, dt(a.x.dtype), k);
        const ActEval e = act_eval(act, xv);
        const float at =
            a.act_in.ptr ? elem8(in.act, dt(a.act_in.dtype), k) : round_to(dt(a.act_round), e.act);
        du[k] = __fmul_rn(gv, at);
        const float h = round_to(dt(a.h_round), __fmul_rn(gv, elem8(in.up, dt(a.up.dtype), k)));
        dx[k] = __fmul_rn(h, e.grad);
      }
      store8(a.dup.ptr, m * a.dup.ld + t.n, dt(a.dup.dtype), du);
    } else {
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        const float gv = has_g ? elem8(in.g, dt(a.g.dtype), k) : 1.0f;
        dx[k] = __fmul_rn(gv, act_eval(act, elem8(in.x, dt(a.x.dtype), k)).grad);
      }
    }
    store8(a.dx.ptr, m * a.dx.ld + t.n, dt(a.dx.dtype), dx);
    if (dbias) {
#pragma unroll
      for (int k = 0; k < kV; ++k) sum[k] += round_to(dt(a.dx.dtype), dx[k]);
    }
  };
  if (t.n < a.N && t.m0 < t.m1) {
    if constexpr (kBf16) {
      constexpr int64_t kStride = static_cast<int64_t>(kRows) * kRowLanes;
      In cur[kRows], next[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) fetch(min(t.m0 + r * kRowLanes, t.m1 - 1), cur[r]);
      for (int64_t m = t.m0; m < t.m1; m += kStride) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) fetch(min(m + kStride + r * kRowLanes, t.m1 - 1), next[r]);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
          if (m + r * kRowLanes < t.m1) step(m + r * kRowLanes, cur[r]);
#pragma unroll
        for (int r = 0; r < kRows; ++r) cur[r] = next[r];
      }
    } else {  // any dtypes (float32: two words an operand): one row at a time, no prefetch
      for (int64_t m = t.m0; m < t.m1; m += kRowLanes) {
        In in;
        fetch(m, in);
        step(m, in);
      }
    }
  }
  if (dbias) block_column_partials(sum, t.n, a.N, a.partial);
}

__global__ void __launch_bounds__(kBwdThreads, kBwdBlocksPerSm)
    column_sum_kernel(EpiMat src, int64_t M, int64_t N, float* partial) {
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

// The backward grid: column blocks of 256 columns, and as many row blocks as fill one wave of
// kBwdBlocksPerSm blocks per SM (at least 1; a block keeps at least 8 rows). The grid is a function
// of M, N and the SM count alone: the fused kernel and the baseline's column sum split the rows
// alike, so their bias gradients are summed in the same order.
dim3 backward_grid(int64_t M, int64_t N) {
  const int64_t gx = (N + kColVecs * kV - 1) / (kColVecs * kV);
  const int64_t fit = static_cast<int64_t>(device_sms()) * kBwdBlocksPerSm / gx;
  const int64_t gy = std::max<int64_t>(1, std::min<int64_t>(fit, (M + kRowLanes - 1) / kRowLanes));
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
  const unsigned threads = kBwdThreads;
  auto bf16 = [](const EpiMat& m) { return !m.ptr || m.dtype == DType::kBFloat16; };
  const bool all_bf16 = a.g.ptr && bf16(a.g) && bf16(a.x) && bf16(a.up) && bf16(a.dx) &&
                        bf16(a.dup) && bf16(a.act_in) &&
                        (!a.gated || ((a.act_in.ptr || a.act_round == DType::kBFloat16) &&
                                      a.h_round == DType::kBFloat16));
  // Rows per step: 1 gated (3-4 loads of 16 bytes in flight a thread), 2 plain (2 loads a row).
  constexpr int kGatedRows = 1, kPlainRows = 2;
  auto run = [&](auto kernel) { kernel<<<grid, threads, 0, stream>>>(a); };
  switch (all_bf16 && !(a.gated && a.dbias) ? a.act : static_cast<Act>(kDynamic)) {
    case Act::kGeluErf:
      if (a.gated)
        run(backward_kernel<static_cast<int>(Act::kGeluErf), true, 1, kGatedRows>);
      else
        run(backward_kernel<static_cast<int>(Act::kGeluErf), true, 0, kPlainRows>);
      break;
    case Act::kGeluTanh:
      if (a.gated)
        run(backward_kernel<static_cast<int>(Act::kGeluTanh), true, 1, kGatedRows>);
      else
        run(backward_kernel<static_cast<int>(Act::kGeluTanh), true, 0, kPlainRows>);
      break;
    case Act::kSilu:
      if (a.gated)
        run(backward_kernel<static_cast<int>(Act::kSilu), true, 1, kGatedRows>);
      else
        run(backward_kernel<static_cast<int>(Act::kSilu), true, 0, kPlainRows>);
      break;
    default:
      run(backward_kernel<kDynamic, false, kDynamic, 1>);
      break;
  }
  REPLAY_CUDA_LAUNCH("matmul_epilogue::backward_kernel");
  if (a.dbias)
    reduce_partials(a.partial, static_cast<int>(grid.y), a.N, a.dbias, a.dbias_dtype, stream);
}

bool column_sum_vectorized(const EpiMat& src, int64_t N) {
  return N % kV == 0 && src.ptr && vec_ok(src);
}

void launch_column_sum(const EpiMat& src, int64_t M, int64_t N, void* dbias, DType dbias_dtype,
                       float* partial, cudaStream_t stream) {
  if (M == 0 || N == 0) return;
  if (!column_sum_vectorized(src, N) || reinterpret_cast<uintptr_t>(partial) % 16 != 0)
    throw RuntimeFailure("matmul_epilogue: the column sum's layout is not vectorizable");
  const dim3 grid = backward_grid(M, N);
  column_sum_kernel<<<grid, kBwdThreads, 0, stream>>>(src, M, N, partial);
  REPLAY_CUDA_LAUNCH("matmul_epilogue::column_sum_kernel");
  reduce_partials(partial, static_cast<int>(grid.y), N, dbias, dbias_dtype, stream);
}

namespace {
// table[b] = round(out, act(the value of `in` with bits b)): the fused kernel's own act_step over
// every 16-bit pattern, so a lookup gives the bits computing it gives.
__global__ void act_table_kernel(Act act, DType in, DType out, unsigned short* table) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= kTableEntries) return;
  const float x = from_bits16(in, static_cast<unsigned short>(b));
  table[b] = bits16(out, round_to(out, act_f(act, x)));
}
}  // namespace

bool act_tabulable(Act act, DType in, DType out) {
  return act != Act::kNone && act != Act::kTable && is_16bit_float(in) && is_16bit_float(out);
}

void build_act_table(Act act, DType in, DType out, uint16_t* table, cudaStream_t stream) {
  if (!act_tabulable(act, in, out))
    throw RuntimeFailure("matmul_epilogue: " + std::string(act_name(act)) + " from " +
                         std::string(dtype_name(in)) + " to " + std::string(dtype_name(out)) +
                         " is not tabulated (16-bit to 16-bit activations only)");
  constexpr int kThreads = 256;
  act_table_kernel<<<static_cast<int>(kTableEntries / kThreads), kThreads, 0, stream>>>(
      act, in, out, reinterpret_cast<unsigned short*>(table));
  REPLAY_CUDA_LAUNCH("matmul_epilogue::act_table_kernel");
}

namespace {
// Every operand and rounding the chain uses is bfloat16: the kernels' kBf16 instances apply.
bool all_bf16(const EpilogueArgs& a) {
  constexpr DType b = DType::kBFloat16;
  auto op_ok = [&](const auto& o) { return !o.ptr || o.dtype == b; };
  return a.z.dtype == b && a.y.dtype == b && op_ok(a.pre) && op_ok(a.mid) && op_ok(a.up) &&
         op_ok(a.res) && (!a.bias || (a.bias_dtype == b && a.bias_round == b)) &&
         (!a.act_step || (a.act_round == b && (!a.table || a.table_in == b)));
}
}  // namespace

bool epilogue_vectorized(const EpilogueArgs& a) {
  return a.N % kV == 0 && vec_ok(a.z) && vec_ok(a.pre) && vec_ok(a.mid) && vec_ok(a.up) &&
         vec_ok(a.res) && vec_ok(a.y) &&
         (!a.bias || (vec_dtype(a.bias_dtype) && reinterpret_cast<uintptr_t>(a.bias) % 16 == 0));
}

namespace {
// One of the compiled geometries (kernels.hpp, FwdGeometry).
bool compiled(const FwdGeometry& g) {
  return (g.vpt == 1 || g.vpt == 2 || g.vpt == 4) &&
         (g.table_threads == 512 || g.table_threads == 1024);
}

std::mutex g_geometry_mu;
std::optional<FwdGeometry> g_geometry;  // set: by set_forward_geometry, or read from the env

// Lets `fn` take `bytes` of dynamic shared memory, once per device and kernel.
void allow_smem(const void* fn, size_t bytes) {
  static std::mutex mu;
  static std::set<std::pair<int, const void*>> done;
  int dev = 0;
  REPLAY_CUDA(cudaGetDevice(&dev));
  const std::lock_guard<std::mutex> lock(mu);
  if (done.count({dev, fn})) return;
  REPLAY_CUDA(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(bytes)));
  done.insert({dev, fn});  // only once it took
}

// Blocks of `threads` (no dynamic shared memory) that fit the device at once: a grid-stride
// kernel's grid, one wave with no second, partly filled one.
int resident_grid(const void* fn, int threads) {
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, int> known;
  int dev = 0;
  REPLAY_CUDA(cudaGetDevice(&dev));
  const std::lock_guard<std::mutex> lock(mu);
  if (auto it = known.find({dev, fn}); it != known.end()) return it->second;
  int per_sm = 0;
  REPLAY_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, threads, 0));
  return known[{dev, fn}] = std::max(1, per_sm) * device_sms();  // only once the queries took
}

template <bool kBf16, bool kUp, bool kRaw, int kThreads, int kStages>
void launch_table(const EpilogueArgs& a, cudaStream_t stream) {
  constexpr size_t smem = table_smem(kThreads, kUp ? 2 : 1, kStages);
  const auto fn = epilogue_table_vec_kernel<kBf16, kUp, kRaw, kThreads, kStages>;
  allow_smem(reinterpret_cast<const void*>(fn), smem);
  const int64_t vectors = a.M * (a.N / kV);
  const int blocks = static_cast<int>(
      std::min<int64_t>((vectors + kThreads - 1) / kThreads, static_cast<int64_t>(device_sms())));
  fn<<<blocks, kThreads, smem, stream>>>(a);
}

template <bool kBf16, bool kUp, bool kRaw>
void dispatch_table_threads(const EpilogueArgs& a, const FwdGeometry& g, cudaStream_t s) {
  if (g.table_threads == 512)
    launch_table<kBf16, kUp, kRaw, 512, kUp ? 5 : 10>(a, s);
  else
    launch_table<kBf16, kUp, kRaw, 1024, kUp ? 3 : 6>(a, s);
}

template <bool kBf16>
void dispatch_table(const EpilogueArgs& a, const FwdGeometry& g, cudaStream_t s) {
  if (a.up.ptr) {
    dispatch_table_threads<kBf16, true, false>(a, g, s);
    return;
  }
  if constexpr (kBf16) {
    if (g.raw && !a.bias && !a.res.ptr) {
      dispatch_table_threads<true, false, true>(a, g, s);
      return;
    }
  }
  dispatch_table_threads<kBf16, false, false>(a, g, s);
}

template <typename Kernel>
void launch_grid_stride(Kernel fn, const EpilogueArgs& a, int64_t work, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int fit = resident_grid(reinterpret_cast<const void*>(fn), kThreads);
  const int blocks = static_cast<int>(std::min<int64_t>((work + kThreads - 1) / kThreads, fit));
  fn<<<blocks, kThreads, 0, stream>>>(a);
}

// The vector kernel at min(vpt, kMaxU) vectors per thread iteration.
template <bool kBf16, bool kZOnly, int kMaxU>
void dispatch_vec(int vpt, const EpilogueArgs& a, int64_t work, cudaStream_t stream) {
  if (vpt == 1)
    launch_grid_stride(epilogue_vec_kernel<kBf16, 1, kZOnly>, a, work, stream);
  else if (vpt == 2 || kMaxU == 2)
    launch_grid_stride(epilogue_vec_kernel<kBf16, 2, kZOnly>, a, work, stream);
  else
    launch_grid_stride(epilogue_vec_kernel<kBf16, kMaxU, kZOnly>, a, work, stream);
}
}  // namespace

FwdGeometry forward_geometry() {
  const std::lock_guard<std::mutex> lock(g_geometry_mu);
  if (g_geometry) return *g_geometry;
  FwdGeometry g;
  const char* env = std::getenv("REPLAY_EPILOGUE_GEOMETRY");
  if (env && *env) {
    int used = 0, raw = 0;
    const bool parsed =
        std::sscanf(env, "%d,%d,%d%n", &g.vpt, &g.table_threads, &raw, &used) == 3 &&
        env[used] == '\0' && (raw == 0 || raw == 1);
    g.raw = raw != 0;
    if (!parsed || !compiled(g))
      throw std::invalid_argument(std::string("REPLAY_EPILOGUE_GEOMETRY='") + env +
                                  "': expected VPT,TABLE_THREADS,RAW with VPT 1, 2 or 4, "
                                  "TABLE_THREADS 512 or 1024, RAW 0 or 1 (the compiled ones)");
  }
  g_geometry = g;
  return g;
}

void set_forward_geometry(const FwdGeometry& g) {
  if (!compiled(g))
    throw std::invalid_argument("matmul_epilogue: geometry " + std::to_string(g.vpt) + "," +
                                std::to_string(g.table_threads) +
                                " is not compiled (VPT 1, 2 or 4; TABLE_THREADS 512 or 1024)");
  const std::lock_guard<std::mutex> lock(g_geometry_mu);
  g_geometry = g;
}

void launch_epilogue(const EpilogueArgs& a, cudaStream_t stream, bool allow_vector) {
  const int64_t total = a.M * a.N;
  if (total == 0) return;
  if (a.M >= (int64_t{1} << 31) || a.N >= (int64_t{1} << 31))
    throw RuntimeFailure("matmul_epilogue: [" + std::to_string(a.M) + ", " + std::to_string(a.N) +
                         "] has a dimension of 2^31 or more (the kernels index rows and columns "
                         "in 32 bits)");
  const bool vec = allow_vector && epilogue_vectorized(a);
  const int64_t work = vec ? total / kV : total;
  const FwdGeometry g = forward_geometry();
  if (a.act_step && a.act == Act::kTable && !a.table)
    throw RuntimeFailure("matmul_epilogue: a tabulated activation without its table");
  if (a.act_step && a.table) {
    if (!is_16bit_float(a.table_in) || !is_16bit_float(a.act_round))
      throw RuntimeFailure(
          "matmul_epilogue: a tabulated activation needs a table from and to bfloat16 / float16");
    // One block per SM: the table takes 128 KiB of its shared memory (the ring kernel's ring up
    // to 96 KiB more; it takes 16-bit z and up).
    const bool ring = vec && is_16bit_float(a.z.dtype) && (!a.up.ptr || is_16bit_float(a.up.dtype));
    if (ring && all_bf16(a)) {
      dispatch_table<true>(a, g, stream);
    } else if (ring) {
      dispatch_table<false>(a, g, stream);
    } else {
      constexpr int kThreads = 1024;
      const int blocks = static_cast<int>(
          std::min<int64_t>((work + kThreads - 1) / kThreads, static_cast<int64_t>(device_sms())));
      allow_smem(reinterpret_cast<const void*>(epilogue_kernel<true>), kTableEntries * 2);
      epilogue_kernel<true><<<blocks, kThreads, kTableEntries * 2, stream>>>(a);
    }
    REPLAY_CUDA_LAUNCH("matmul_epilogue::epilogue_kernel (table)");
    return;
  }
  const bool z_only = !a.up.ptr && !a.res.ptr;
  if (vec && all_bf16(a)) {
    if (z_only)
      dispatch_vec<true, true, 4>(g.vpt, a, work, stream);
    else
      dispatch_vec<true, false, 4>(g.vpt, a, work, stream);
  } else if (vec) {
    if (z_only)
      dispatch_vec<false, true, 2>(g.vpt, a, work, stream);
    else
      dispatch_vec<false, false, 2>(g.vpt, a, work, stream);
  } else {
    launch_grid_stride(epilogue_kernel<false>, a, work, stream);
  }
  REPLAY_CUDA_LAUNCH(vec ? "matmul_epilogue::epilogue_vec_kernel"
                         : "matmul_epilogue::epilogue_kernel");
}

}  // namespace replay::matmul_epilogue
