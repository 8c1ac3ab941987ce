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
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "impls/cuda/cuda_check.hpp"
#include "impls/cuda/device_sms.hpp"
#include "impls/cuda/vec16.cuh"
#include "impls/fusions/bookend/vector_width.hpp"
#include "impls/fusions/launch_record.hpp"
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
      using R = typename RawWord<kChunk>::type;
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
      using R = typename RawWord<kChunk>::type;
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

// --- fixed forms: a kernel compiled per (dtypes, style, phase, rounding) the traces use -------
//
// The generic kernel below switches at run time, per element, on every operand's dtype, on each
// product's and sum's rounding dtype, on the style and the phase, and decomposes each chunk's row
// index (ncu, Llama-3-8B forward: ~600 instructions per chunk of 8, issue-bound at 26 % of SOL).
// A fixed form makes all of those template parameters: the per-element work is the loads, the
// same rope_math products and sums (the switches fold on constants: the same __fmul_rn /
// __fadd_rn and conversions, so the same bits) and the store. A row is split into items
// (rotate-half: chunk c and its partner c + R / 2, each x element loaded once; interleaved: one
// chunk; the tail: one chunk); a thread takes about two items of a row (blockDim.x threads per
// row, blockDim.y rows per block) and walks rows; the row's offsets come from one 32-bit pass over
// its lead dims (size-1 dims dropped, contiguous ones merged: [B, T, H] -> [T, H] at B = 1).

// A fixed form's rounding steps as static constants (rope_math's sum / bwd_sum read them as
// j.add_dtype ...). Each product is rounded once to P: where a product's mul dtype and its
// convert's are each float32 or P, rounding to P then to P again (or to float32) is rounding to
// P once.
template <DType P, DType A, DType S, bool Z, int O>
struct Fixed {
  static constexpr DType mul_dtype = P, add_dtype = A, sum_cvt = S;
  static constexpr bool zero_add = Z;
  static constexpr int sum_order = O;
};

constexpr int kFixedV = 8;  ///< elements per chunk: every operand takes 16-byte accesses

/// One job of a fixed-form launch: element offsets (32-bit) and lead dims after simplification.
struct FixedJob {
  const void* x = nullptr;
  const void* cos = nullptr;
  const void* sin = nullptr;
  void* out = nullptr;
  int n_lead = 0;
  FastDiv div_lead[kRopeMaxLead];
  int32_t x_st[kRopeMaxLead] = {}, cos_st[kRopeMaxLead] = {}, sin_st[kRopeMaxLead] = {},
          out_st[kRopeMaxLead] = {};
  int32_t rows = 0;
  int32_t blocks = 0;   ///< the grid's blocks (blockIdx.x below it) that take this job's rows
  int32_t n_rot = 0;    ///< rotation items per row: R / 16 chunk pairs (rotate-half), R / 8 chunks
  int32_t n_items = 0;  ///< n_rot + the tail's (D - R) / 8 chunks
  int32_t rotary_dim = 0, half = 0;
  bool zero_add = false;             ///< the tail's + 0 (a copy job into a joint gradient has none)
  DType tail_cvt = DType::kFloat32;  ///< the tail's convert
};

struct FixedArgs {
  FixedJob jobs[kRopeMaxJobs];
  int n_jobs = 0;
  uint32_t sin_xor = 0;  ///< sin's sign bits flipped in each 32-bit word (the sin_sign hook)
  bool write_tail = true;
};

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return DType::kBFloat16;
  else if constexpr (std::is_same_v<T, __half>)
    return DType::kFloat16;
  else
    return DType::kFloat32;
}

// 8 elements at p (16-byte aligned), each 32-bit word XORed with `flip` first (sign bits).
template <typename T>
__device__ __forceinline__ void load8(const T* p, uint32_t flip, float* f) {
  using B = typename Bits<T>::type;
  constexpr int kN = kFixedV * static_cast<int>(sizeof(T)) / 16;
  union {
    uint4 r[kN];
    B b[kFixedV];
  } u;
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    uint4 v = reinterpret_cast<const uint4*>(p)[k];
    v.x ^= flip;
    v.y ^= flip;
    v.z ^= flip;
    v.w ^= flip;
    u.r[k] = v;
  }
#pragma unroll
  for (int i = 0; i < kFixedV; ++i) f[i] = Bits<T>::to_float(u.b[i]);
}

// A per-pair table's 4 entries at p (aligned to their bytes) for a chunk of 8 elements: element
// k reads entry k / 2, each 32-bit word XORed with `flip` first.
template <typename T>
__device__ __forceinline__ void load4_pairs(const T* p, uint32_t flip, float* f) {
  using B = typename Bits<T>::type;
  constexpr int kWords = 4 * static_cast<int>(sizeof(T)) / 4;
  union {
    uint32_t w[kWords];
    B b[4];
  } u;
  if constexpr (kWords == 4) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    u.w[0] = v.x;
    u.w[1] = v.y;
    u.w[2] = v.z;
    u.w[3] = v.w;
  } else {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    u.w[0] = v.x;
    u.w[1] = v.y;
  }
#pragma unroll
  for (int k = 0; k < kWords; ++k) u.w[k] ^= flip;
#pragma unroll
  for (int i = 0; i < kFixedV; ++i) f[i] = Bits<T>::to_float(u.b[i / 2]);
}

template <typename T>
__device__ __forceinline__ void store8(T* p, const float* f) {
  store_t<T, kFixedV>(p, 1, true, f);
}

template <typename F>
__device__ __forceinline__ float fixed_product(float a, float b) {
  return round_to(F::mul_dtype, mul_rn(a, b));
}

// 8 elements' raw words (one or two 16-byte loads), held while other loads are in flight.
template <typename T>
struct Chunk8 {
  static constexpr int kN = kFixedV * static_cast<int>(sizeof(T)) / 16;
  uint4 r[kN];
};

template <typename T>
__device__ __forceinline__ void load_raw8(const T* p, Chunk8<T>& c) {
#pragma unroll
  for (int k = 0; k < Chunk8<T>::kN; ++k) c.r[k] = reinterpret_cast<const uint4*>(p)[k];
}

template <typename T>
__device__ __forceinline__ void unpack8(const Chunk8<T>& c, float* f) {
  using B = typename Bits<T>::type;
  union {
    uint4 r[Chunk8<T>::kN];
    B b[kFixedV];
  } u;
#pragma unroll
  for (int k = 0; k < Chunk8<T>::kN; ++k) u.r[k] = c.r[k];
#pragma unroll
  for (int i = 0; i < kFixedV; ++i) f[i] = Bits<T>::to_float(u.b[i]);
}

// The x words of one item: `a` the item's chunk (the rotation chunk c0, the interleaved chunk or
// the tail's), `b` rotate-half's partner chunk c0 + R / 2.
template <typename TX>
struct ItemX {
  Chunk8<TX> a, b;
};

// The first column of item `item` of a row.
__device__ __forceinline__ int item_col(const FixedJob& j, int item) {
  return item >= j.n_rot ? j.rotary_dim + (item - j.n_rot) * kFixedV : item * kFixedV;
}

// Issues the x loads of one item (nothing for a tail the launch does not write). A thread loads
// the x of all its items before it computes the first (fixed_item), so its DRAM reads are in
// flight together: at 50 % occupancy (64 registers) one item's 32 bytes per thread left the H200
// latency-bound (ncu: DRAM 54 %, stalls on the L1TEX scoreboard).
template <typename TX, bool kInter>
__device__ __forceinline__ void load_item_x(const FixedArgs& a, const FixedJob& j, int item,
                                            const TX* x, ItemX<TX>& w) {
  const bool is_tail = item >= j.n_rot;
  if (is_tail && !a.write_tail) return;
  const int c0 = item_col(j, item);
  load_raw8(x + c0, w.a);
  if constexpr (!kInter)
    if (!is_tail) load_raw8(x + c0 + j.half, w.b);
}

// --- packed bf16 math for the all-bf16 rotate-half forms ----------------------------------
//
// Where x, the tables and the output are bf16 and every product and the sum round to bf16
// (half_fwd_bf16ops, half_bwd_bf16ops, half_bwd_bf16ops_zero: Llama, Phi-3, GPT-NeoX), each step
// is one bf16x2 instruction on two elements (mul.rn / add.rn / sub.rn.bf16x2, inline asm in
// cuda_bf16.hpp, so never contracted into an FMA) instead of unpacking to float32, a float32
// op and a rounding per element (ncu, H200: the float32 path left the fixed kernel issue- and
// register-limited at 64 registers, 50 % occupancy). The bits are the eager sequence's: the
// product of two bf16 values is exact in float32 (8 x 8 significand bits) outside float32's
// subnormal range, so float32-then-bf16 is bf16 rounded once; a sum of two bf16 values rounded
// in float32 then in bf16 is the sum rounded once to bf16 (24 >= 2 x 8 + 2 bits: double rounding
// is innocuous, Figueroa 1995); a - b is a + (-b) in IEEE arithmetic, and x + 0 turns -0 into +0
// in both. That holds in float32's subnormal range too: a product's 16 significant bits, rounded
// to float32's 2^-149 grid, land no nearer than 2^-149 to a bf16 rounding midpoint they are not
// on, so the second rounding never meets a tie the first one made (PTX keeps bf16 subnormals).
// Unit test RopePackedBf16; the GPU test RopeGpuFixedForms compares the bits with the float32
// path on every trace.
template <typename TX, typename TT, typename TO, typename F>
// (clang-format reads this variable template's `&&` as rvalue references)
// clang-format off
constexpr bool kPackedBf16 =
    std::is_same_v<TX, __nv_bfloat16> && std::is_same_v<TT, __nv_bfloat16> &&
    std::is_same_v<TO, __nv_bfloat16> && F::mul_dtype == DType::kBFloat16 &&
    F::add_dtype == DType::kBFloat16 &&
    (F::sum_cvt == DType::kBFloat16 || F::sum_cvt == DType::kFloat32) && F::sum_order == 0;
// clang-format on

// 8 bf16 elements as 4 bf16x2 words; a word viewed as bf16x2 and back.
struct Bf16x8 {
  uint32_t w[4];
};

__device__ __forceinline__ __nv_bfloat162 as_bf162(uint32_t w) {
  __nv_bfloat162 h;
  memcpy(&h, &w, sizeof(w));
  return h;
}
__device__ __forceinline__ uint32_t as_word(__nv_bfloat162 h) {
  uint32_t w;
  memcpy(&w, &h, sizeof(w));
  return w;
}

__device__ __forceinline__ Bf16x8 words(uint4 r, uint32_t flip) {
  return Bf16x8{{r.x ^ flip, r.y ^ flip, r.z ^ flip, r.w ^ flip}};
}

// One rotate-half item (chunk c0 and its partner c0 + R / 2) in packed bf16 math: forward
// (x0 c0 - x1 s0, x1 c1 + x0 s1); backward ((x1 s1 + 0) + x0 c0, (0 - x0 s0) + x1 c1), each
// plus 0 where the graph scatters into zeros (F::zero_add).
template <bool kBwd, typename F>
__device__ __forceinline__ void half_item_bf16x2(const FixedArgs& a, const FixedJob& j, int c0,
                                                 const ItemX<__nv_bfloat16>& w,
                                                 const __nv_bfloat16* cs, const __nv_bfloat16* sn,
                                                 __nv_bfloat16* out) {
  const int c1 = c0 + j.half;
  auto ld = [](const __nv_bfloat16* p) { return *reinterpret_cast<const uint4*>(p); };
  const Bf16x8 cv0 = words(ld(cs + c0), 0), cv1 = words(ld(cs + c1), 0);
  const Bf16x8 sv0 = words(ld(sn + c0), a.sin_xor), sv1 = words(ld(sn + c1), a.sin_xor);
  const Bf16x8 x0 = words(w.a.r[0], 0), x1 = words(w.b.r[0], 0);
  const __nv_bfloat162 z = __float2bfloat162_rn(0.0f);
  Bf16x8 o0, o1;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const __nv_bfloat162 a0 = as_bf162(x0.w[k]), a1 = as_bf162(x1.w[k]);
    __nv_bfloat162 r0, r1;
    if constexpr (!kBwd) {
      r0 = __hsub2_rn(__hmul2_rn(a0, as_bf162(cv0.w[k])), __hmul2_rn(a1, as_bf162(sv0.w[k])));
      r1 = __hadd2_rn(__hmul2_rn(a1, as_bf162(cv1.w[k])), __hmul2_rn(a0, as_bf162(sv1.w[k])));
    } else {
      r0 = __hadd2_rn(__hadd2_rn(__hmul2_rn(a1, as_bf162(sv1.w[k])), z),
                      __hmul2_rn(a0, as_bf162(cv0.w[k])));
      r1 = __hadd2_rn(__hsub2_rn(z, __hmul2_rn(a0, as_bf162(sv0.w[k]))),
                      __hmul2_rn(a1, as_bf162(cv1.w[k])));
    }
    if constexpr (F::zero_add) {  // rope_math's sum: the scatter into zeros after the sum
      r0 = __hadd2_rn(r0, z);
      r1 = __hadd2_rn(r1, z);
    }
    o0.w[k] = as_word(r0);
    o1.w[k] = as_word(r1);
  }
  *reinterpret_cast<uint4*>(out + c0) = make_uint4(o0.w[0], o0.w[1], o0.w[2], o0.w[3]);
  *reinterpret_cast<uint4*>(out + c1) = make_uint4(o1.w[0], o1.w[1], o1.w[2], o1.w[3]);
}

// Item `item` of one row from its x words (load_item_x; cs, sn, out: the row's bases). kPair: the
// tables hold one entry per pair (Meta Llama's real pairs; interleaved only), entry c / 2 for
// element c.
template <typename TX, typename TT, typename TO, bool kInter, bool kBwd, bool kPair, typename F,
          bool kBf16x2>
__device__ __forceinline__ void fixed_item(const FixedArgs& a, const FixedJob& j, int item,
                                           const ItemX<TX>& w, const TT* cs, const TT* sn,
                                           TO* out) {
  const bool is_tail = item >= j.n_rot;
  if (is_tail && !a.write_tail) return;
  const F f{};
  const int c0 = item_col(j, item);
  if (is_tail) {  // partial rotary's pass-through: tail() with its convert hoisted
    float v[kFixedV];
    unpack8(w.a, v);
    if (j.tail_cvt == DType::kBFloat16) {
#pragma unroll
      for (int k = 0; k < kFixedV; ++k) v[k] = round_to(DType::kBFloat16, v[k]);
    } else if (j.tail_cvt == DType::kFloat16) {
#pragma unroll
      for (int k = 0; k < kFixedV; ++k) v[k] = round_to(DType::kFloat16, v[k]);
    }
    if (j.zero_add) {
#pragma unroll
      for (int k = 0; k < kFixedV; ++k) v[k] = add_rn(v[k], 0.0f);
    }
    store8(out + c0, v);
    return;
  }
  if constexpr (!kInter && kBf16x2) {
    half_item_bf16x2<kBwd, F>(a, j, c0, w, cs, sn, out);
  } else if constexpr (!kInter) {
    // the pair of chunks c0 < R / 2 and c1 = c0 + R / 2: rot(x) = (-x1, x0), rotT(y) = (y1, -y0)
    const int c1 = c0 + j.half;
    float x0[kFixedV], x1[kFixedV], cv0[kFixedV], cv1[kFixedV], sv0[kFixedV], sv1[kFixedV];
    unpack8(w.a, x0);
    unpack8(w.b, x1);
    load8(cs + c0, 0, cv0);
    load8(cs + c1, 0, cv1);
    load8(sn + c0, a.sin_xor, sv0);
    load8(sn + c1, a.sin_xor, sv1);
    float o0[kFixedV], o1[kFixedV];
#pragma unroll
    for (int k = 0; k < kFixedV; ++k) {
      if constexpr (!kBwd) {
        o0[k] = sum(f, fixed_product<F>(x0[k], cv0[k]), fixed_product<F>(-x1[k], sv0[k]));
        o1[k] = sum(f, fixed_product<F>(x1[k], cv1[k]), fixed_product<F>(x0[k], sv1[k]));
      } else {
        o0[k] = bwd_sum(f, fixed_product<F>(x1[k], sv1[k]), false, fixed_product<F>(x0[k], cv0[k]));
        o1[k] = bwd_sum(f, -fixed_product<F>(x0[k], sv0[k]), true, fixed_product<F>(x1[k], cv1[k]));
      }
    }
    store8(out + c0, o0);
    store8(out + c1, o1);
  } else {
    // the pairs (2i, 2i + 1) in the chunk: rot(x) = (-x[2i+1], x[2i]), rotT(y) = (y[2i+1],
    // -y[2i])
    float xv[kFixedV], cv[kFixedV], sv[kFixedV], o[kFixedV];
    unpack8(w.a, xv);
    if constexpr (kPair) {
      load4_pairs(cs + c0 / 2, 0, cv);
      load4_pairs(sn + c0 / 2, a.sin_xor, sv);
    } else {
      load8(cs + c0, 0, cv);
      load8(sn + c0, a.sin_xor, sv);
    }
#pragma unroll
    for (int k = 0; k < kFixedV; ++k) {
      if constexpr (!kBwd) {
        const float rot = (k & 1) ? xv[k - 1] : -xv[k + 1];
        o[k] = sum(f, fixed_product<F>(xv[k], cv[k]), fixed_product<F>(rot, sv[k]));
      } else {
        const int p = k ^ 1;
        const float y = fixed_product<F>(xv[p], sv[p]);
        const bool negated = (k & 1) != 0;
        o[k] = bwd_sum(f, negated ? -y : y, negated, fixed_product<F>(xv[k], cv[k]));
      }
    }
    store8(out + c0, o);
  }
}

// The kernel's modes (FixedGeometry): float32 math, one pass over the rows (the grid covers them);
// packed bf16 math (kPackedBf16 forms only), one pass; packed bf16 math on a persistent grid whose
// threads load the next row's x before they compute the current one.
enum FixedMode : int { kFloatMath = 0, kPacked = 1, kPackedPipelined = 2 };

// Row `row`'s element offsets into x, the tables and out: one 32-bit pass over its lead dims.
struct RowOff {
  int32_t x = 0, c = 0, s = 0, o = 0;
};
__device__ __forceinline__ RowOff row_offsets(const FixedJob& j, int32_t row) {
  RowOff off;
  uint32_t r = static_cast<uint32_t>(row);
#pragma unroll
  for (int d = kRopeMaxLead - 1; d >= 0; --d) {
    if (d >= j.n_lead) continue;
    const uint32_t q = j.div_lead[d].div(r);
    const int32_t i = static_cast<int32_t>(r - q * j.div_lead[d].divisor);
    r = q;
    off.x += i * j.x_st[d];
    off.c += i * j.cos_st[d];
    off.s += i * j.sin_st[d];
    off.o += i * j.out_st[d];
  }
  return off;
}

template <typename TX, typename TT, typename TO, bool kInter, bool kBwd, bool kPair, typename F,
          int kMode>
__global__ void __launch_bounds__(256, kMode == kPackedPipelined ? 3 : 0)
    rope_fixed_kernel(const __grid_constant__ FixedArgs a) {
  static_assert(kBwd || F::sum_order == 0, "the forward has no association to choose");
  static_assert(kInter || !kPair, "a table per pair is the interleaved style's");
  static_assert(kMode == kFloatMath || (kPackedBf16<TX, TT, TO, F> && !kInter),
                "packed bf16 math is the all-bf16 rotate-half forms'");
  constexpr bool kBf16x2 = kMode != kFloatMath;
  const FixedJob& j = a.jobs[blockIdx.y];
  // blockDim.x threads share a row's items (about two each: the row's offsets once per two)
  if (static_cast<int>(threadIdx.x) >= j.n_items) return;
  int32_t row = static_cast<int32_t>(blockIdx.x * blockDim.y + threadIdx.y);
  // The launcher gives a thread at most two items of a row (launch_fixed): both items' x loads
  // are issued before either is computed; a third and later item (never, at that launch) one at
  // a time.
  if constexpr (kMode == kPackedPipelined) {
    // Software pipeline over the rows: the next row's x words are in flight while this row's
    // tables load and its results are stored (a region's outputs never alias its inputs).
    // j.blocks of the grid's blocks take this job's rows (the persistent grid shares its blocks
    // among the jobs by their rows: launch_fixed)
    if (static_cast<int>(blockIdx.x) >= j.blocks || row >= j.rows) return;
    const int32_t row_step = j.blocks * static_cast<int32_t>(blockDim.y);
    const TX* x_base = static_cast<const TX*>(j.x);
    TO* out_base = static_cast<TO*>(j.out);
    const TT* cos_base = static_cast<const TT*>(j.cos);
    const TT* sin_base = static_cast<const TT*>(j.sin);
    const int i0 = static_cast<int>(threadIdx.x), i1 = i0 + static_cast<int>(blockDim.x);
    const bool two = i1 < j.n_items;
    RowOff o = row_offsets(j, row);
    ItemX<TX> w0, w1;
    load_item_x<TX, kInter>(a, j, i0, x_base + o.x, w0);
    if (two) load_item_x<TX, kInter>(a, j, i1, x_base + o.x, w1);
    for (;;) {
      const int32_t next = row + row_step;
      const bool more = next < j.rows;
      RowOff on;
      ItemX<TX> n0, n1;
      if (more) {
        on = row_offsets(j, next);
        load_item_x<TX, kInter>(a, j, i0, x_base + on.x, n0);
        if (two) load_item_x<TX, kInter>(a, j, i1, x_base + on.x, n1);
      }
      fixed_item<TX, TT, TO, kInter, kBwd, kPair, F, true>(a, j, i0, w0, cos_base + o.c,
                                                           sin_base + o.s, out_base + o.o);
      if (two)
        fixed_item<TX, TT, TO, kInter, kBwd, kPair, F, true>(a, j, i1, w1, cos_base + o.c,
                                                             sin_base + o.s, out_base + o.o);
      for (int item = i1 + static_cast<int>(blockDim.x); item < j.n_items;
           item += static_cast<int>(blockDim.x)) {
        load_item_x<TX, kInter>(a, j, item, x_base + o.x, w0);
        fixed_item<TX, TT, TO, kInter, kBwd, kPair, F, true>(a, j, item, w0, cos_base + o.c,
                                                             sin_base + o.s, out_base + o.o);
      }
      if (!more) break;
      row = next;
      o = on;
      w0 = n0;
      w1 = n1;
    }
  } else {
    // (The one-pass loop keeps the shape it was measured in: hoisting the item indices or the
    // base pointers out of it took the float32-math forms from 58-64 to 74-90 registers, ptxas.)
    const int32_t row_step = static_cast<int32_t>(gridDim.x * blockDim.y);
    for (; row < j.rows; row += row_step) {
      const RowOff o = row_offsets(j, row);
      const TX* x = static_cast<const TX*>(j.x) + o.x;
      TO* out = static_cast<TO*>(j.out) + o.o;
      const TT* cs = static_cast<const TT*>(j.cos) + o.c;
      const TT* sn = static_cast<const TT*>(j.sin) + o.s;
      // Float32 tables: the second item's x words take the forms past 64 registers (72: 3 blocks
      // per SM), measured slower (litgpt's forward 112.5 -> 117.1 µs, H200): those forms load and
      // compute one item at a time.
      if constexpr (sizeof(TT) <= 2) {
        const int k0 = static_cast<int>(threadIdx.x), k1 = k0 + static_cast<int>(blockDim.x);
        const bool two_items = k1 < j.n_items;
        ItemX<TX> w0, w1;
        load_item_x<TX, kInter>(a, j, k0, x, w0);
        if (two_items) load_item_x<TX, kInter>(a, j, k1, x, w1);
        fixed_item<TX, TT, TO, kInter, kBwd, kPair, F, kBf16x2>(a, j, k0, w0, cs, sn, out);
        if (two_items)
          fixed_item<TX, TT, TO, kInter, kBwd, kPair, F, kBf16x2>(a, j, k1, w1, cs, sn, out);
        for (int item = k1 + static_cast<int>(blockDim.x); item < j.n_items;
             item += static_cast<int>(blockDim.x)) {
          load_item_x<TX, kInter>(a, j, item, x, w0);
          fixed_item<TX, TT, TO, kInter, kBwd, kPair, F, kBf16x2>(a, j, item, w0, cs, sn, out);
        }
      } else {
        for (int item = static_cast<int>(threadIdx.x); item < j.n_items;
             item += static_cast<int>(blockDim.x)) {
          ItemX<TX> w;
          load_item_x<TX, kInter>(a, j, item, x, w);
          fixed_item<TX, TT, TO, kInter, kBwd, kPair, F, false>(a, j, item, w, cs, sn, out);
        }
      }
    }
  }
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

// The 16-byte rule for one operand (bookend's chooser, impls/fusions/bookend/vector_width.hpp):
// unit last stride, base and every lead stride aligned to the vector's bytes (a broadcast dim's
// stride 0 is aligned). The vector of v elements is the unit along the last dim (rope_vector_width
// makes D a multiple of v).
int access_bytes(int v, DType t) {
  return std::min(v * static_cast<int>(dtype_size(t)), 16);
}
bool vectorizable(const void* ptr, DType t, const int64_t* lead_stride, int n_lead,
                  int64_t last_stride, int v) {
  if (v == 1) return false;
  const int want = access_bytes(v, t);
  return bookend::vector_bytes(reinterpret_cast<uintptr_t>(ptr), static_cast<int>(dtype_size(t)),
                               lead_stride, n_lead, last_stride, v, want) == want;
}

int blocks_for(int64_t work, int threads) {
  const int64_t b = (work + threads - 1) / threads;
  return static_cast<int>(std::clamp<int64_t>(b, 1, 132 * 32));
}

// --- fixed forms: the table and the launcher's choice -----------------------------------------

using FixedKernel = void (*)(FixedArgs);

struct FixedForm {
  const char* name;
  DType x, table, out;
  bool interleaved, backward;
  bool pair_table;          ///< one table entry per pair (RopeJob::pair_table)
  DType mul, add, sum_cvt;  ///< mul: each product's single rounding (Fixed)
  bool zero_add;
  int sum_order;           ///< the backward's association (the forward has none: 0)
  FixedKernel kernels[3];  ///< by FixedMode; nullptr where the form has no such mode
};

// The kernel of mode M (FixedMode) for a form, or nullptr where the form has no such mode.
template <typename TX, typename TT, typename TO, bool I, bool B, bool P, typename F, int M>
constexpr FixedKernel fixed_kernel() {
  if constexpr (M == kFloatMath || (kPackedBf16<TX, TT, TO, F> && !I))
    return &rope_fixed_kernel<TX, TT, TO, I, B, P, F, M>;
  else
    return nullptr;
}

#define REPLAY_ROPE_FIXED_PT(NAME, TX, TT, TO, INTER, BWD, PAIR, P, A, S, Z, O)                 \
  FixedForm {                                                                                   \
    NAME, dtype_of<TX>(), dtype_of<TT>(), dtype_of<TO>(), INTER, BWD, PAIR, DType::P, DType::A, \
        DType::S, Z, O, {                                                                       \
      fixed_kernel<TX, TT, TO, INTER, BWD, PAIR, Fixed<DType::P, DType::A, DType::S, Z, O>,     \
                   kFloatMath>(),                                                               \
          fixed_kernel<TX, TT, TO, INTER, BWD, PAIR, Fixed<DType::P, DType::A, DType::S, Z, O>, \
                       kPacked>(),                                                              \
          fixed_kernel<TX, TT, TO, INTER, BWD, PAIR, Fixed<DType::P, DType::A, DType::S, Z, O>, \
                       kPackedPipelined>()                                                      \
    }                                                                                           \
  }
#define REPLAY_ROPE_FIXED(NAME, TX, TT, TO, INTER, BWD, P, A, S, Z, O) \
  REPLAY_ROPE_FIXED_PT(NAME, TX, TT, TO, INTER, BWD, false, P, A, S, Z, O)

using bf16 = __nv_bfloat16;

// The forms the bundled traces take (`replay plan TRACE` prints each rotation's dtypes; the unit
// test RopeFixedForms lists which trace takes which, and fails on a form no trace takes):
//   half_fwd_bf16ops           Llama, Phi-3, GPT-NeoX forward: every product and the sum in bf16
//   half_fwd_fp32math_f32table litgpt forward: float32 products and sum, the sum converted to bf16
//   half_fwd_fp32out_f32table  a bf16 x with a float32 table, no convert (a synthetic form)
//   half_bwd_bf16ops           Llama backward
//   half_bwd_bf16ops_zero      Phi-3's and GPT-NeoX's backward (the scatters' + 0)
//   half_bwd_bf16ops_zero_order1_f32table  litgpt's backward (float32 products converted to bf16:
//                              the same single rounding; its association, sum_order 1)
//   inter_fwd_fp32math         Cohere forward (float32 math, the sum converted)
//   inter_fwd_fp32out_f32table GPT-J forward (float32 throughout, a float32 output)
//   inter_bwd_fp32math         Cohere backward
//   inter_bwd_bf16ops_zero_f32x_f32table  GPT-J backward (its float32 incoming gradient)
//   inter_fwd_fp32math_f32pairs, inter_bwd_fp32math_f32pairs  Meta Llama's real pairs (float32
//                              math, a float32 table per pair, the sum converted to bf16)
// Anything else (float16 or float32 x but GPT-J's, other rounding steps, vector width below 8)
// takes the generic kernel.
const FixedForm kFixedForms[] = {
    REPLAY_ROPE_FIXED("half_fwd_bf16ops", bf16, bf16, bf16, false, false, kBFloat16, kBFloat16,
                      kFloat32, false, 0),
    REPLAY_ROPE_FIXED("half_fwd_fp32math_f32table", bf16, float, bf16, false, false, kFloat32,
                      kFloat32, kBFloat16, false, 0),
    REPLAY_ROPE_FIXED("half_fwd_fp32out_f32table", bf16, float, float, false, false, kFloat32,
                      kFloat32, kFloat32, false, 0),
    REPLAY_ROPE_FIXED("half_bwd_bf16ops", bf16, bf16, bf16, false, true, kBFloat16, kBFloat16,
                      kFloat32, false, 0),
    REPLAY_ROPE_FIXED("half_bwd_bf16ops_zero", bf16, bf16, bf16, false, true, kBFloat16, kBFloat16,
                      kFloat32, true, 0),
    REPLAY_ROPE_FIXED("half_bwd_bf16ops_zero_order1_f32table", bf16, float, bf16, false, true,
                      kBFloat16, kBFloat16, kFloat32, true, 1),
    REPLAY_ROPE_FIXED("inter_fwd_fp32math", bf16, bf16, bf16, true, false, kFloat32, kFloat32,
                      kBFloat16, false, 0),
    REPLAY_ROPE_FIXED("inter_fwd_fp32out_f32table", bf16, float, float, true, false, kFloat32,
                      kFloat32, kFloat32, false, 0),
    REPLAY_ROPE_FIXED("inter_bwd_fp32math", bf16, bf16, bf16, true, true, kFloat32, kFloat32,
                      kBFloat16, false, 0),
    REPLAY_ROPE_FIXED("inter_bwd_bf16ops_zero_f32x_f32table", float, float, bf16, true, true,
                      kBFloat16, kBFloat16, kFloat32, true, 0),
    REPLAY_ROPE_FIXED_PT("inter_fwd_fp32math_f32pairs", bf16, float, bf16, true, false, true,
                         kFloat32, kFloat32, kBFloat16, false, 0),
    REPLAY_ROPE_FIXED_PT("inter_bwd_fp32math_f32pairs", bf16, float, bf16, true, true, true,
                         kFloat32, kFloat32, kBFloat16, false, 0),
};

#undef REPLAY_ROPE_FIXED
#undef REPLAY_ROPE_FIXED_PT

// A product's rounding as one step: mul then cvt, each float32 or the same narrower dtype.
std::optional<DType> single_rounding(DType mul, DType cvt) {
  if (mul == DType::kFloat32) return cvt;
  if (cvt == DType::kFloat32 || cvt == mul) return mul;
  return std::nullopt;
}

// Element offsets below 2^31 with non-negative strides: the largest reached, or -1.
int64_t max_offset(const int64_t* lead_stride, const int64_t* lead, int n_lead, int64_t last) {
  int64_t m = last;
  for (int d = 0; d < n_lead; ++d) {
    if (lead_stride[d] < 0) return -1;
    m += (lead[d] - 1) * lead_stride[d];
  }
  return m;
}

// The form these jobs match and their operands allow, or nullptr.
const FixedForm* find_fixed_form(const RopeArgs& a) {
  if (a.force_generic || a.force_index64 || a.n_jobs <= 0) return nullptr;
  if (rope_vector_width(a) != kFixedV) return nullptr;
  const RopeJob* r0 = nullptr;
  for (int k = 0; k < a.n_jobs && !r0; ++k)
    if (a.jobs[k].rotary_dim > 0) r0 = &a.jobs[k];
  if (!r0) return nullptr;
  const auto mul = single_rounding(r0->mul_cos_dtype, r0->mul_cos_cvt);
  if (!mul || single_rounding(r0->mul_sin_dtype, r0->mul_sin_cvt) != mul) return nullptr;
  const FixedForm* form = nullptr;
  for (const FixedForm& f : kFixedForms)
    if (f.x == r0->x.dtype && f.table == r0->cos.dtype && f.out == r0->out_dtype &&
        f.interleaved == (a.style == Style::kInterleaved) && f.backward == a.backward &&
        f.pair_table == r0->pair_table && f.mul == *mul && f.add == r0->add_dtype &&
        f.sum_cvt == r0->sum_cvt && f.zero_add == r0->zero_add &&
        (!a.backward || f.sum_order == r0->sum_order))
      form = &f;
  if (!form) return nullptr;
  for (int k = 0; k < a.n_jobs; ++k) {
    const RopeJob& j = a.jobs[k];
    if (j.x.dtype != form->x || j.out_dtype != form->out) return nullptr;
    if (j.head_dim / kFixedV - j.rotary_dim / (form->interleaved ? kFixedV : 2 * kFixedV) > 256)
      return nullptr;                                  // one block row holds a row's items
    if (j.rows >= (int64_t(1) << 30)) return nullptr;  // row + the grid's step stays in 31 bits
    const int64_t last = j.head_dim - 1;
    auto fits = [&](const int64_t* st, int64_t m) {
      const int64_t o = max_offset(st, j.lead, j.n_lead, m);
      return o >= 0 && o < (int64_t(1) << 31);
    };
    if (!vectorizable(j.x.ptr, j.x.dtype, j.x.lead_stride, j.n_lead, j.x.last_stride, kFixedV) ||
        !vectorizable(j.out, j.out_dtype, j.out_lead_stride, j.n_lead, j.out_last_stride,
                      kFixedV) ||
        !fits(j.x.lead_stride, last) || !fits(j.out_lead_stride, last))
      return nullptr;
    if (j.rotary_dim == 0) continue;  // a copy job: the tail alone
    const auto m = single_rounding(j.mul_cos_dtype, j.mul_cos_cvt);
    if (j.cos.dtype != form->table || j.sin.dtype != form->table ||
        j.pair_table != form->pair_table || m != mul ||
        single_rounding(j.mul_sin_dtype, j.mul_sin_cvt) != mul || j.add_dtype != form->add ||
        j.sum_cvt != form->sum_cvt || j.zero_add != form->zero_add ||
        (a.backward && j.sum_order != form->sum_order))
      return nullptr;
    const int table_v = j.pair_table ? kFixedV / 2 : kFixedV;  // entries per chunk of 8
    const int64_t table_last = (j.pair_table ? j.rotary_dim / 2 : j.rotary_dim) - 1;
    for (const RopeOperand* t : {&j.cos, &j.sin})
      if (!vectorizable(t->ptr, t->dtype, t->lead_stride, j.n_lead, t->last_stride, table_v) ||
          !fits(t->lead_stride, table_last))
        return nullptr;
  }
  return form;
}

// Job j's lead dims for the fixed kernel: size-1 dims dropped, a dim merged into the next inner
// one where every operand's stride steps over it exactly (stride[d] = stride[d+1] * lead[d+1]).
FixedJob fixed_job(const RopeJob& j, bool interleaved) {
  FixedJob f;
  f.x = j.x.ptr;
  f.cos = j.cos.ptr;
  f.sin = j.sin.ptr;
  f.out = j.out;
  struct Dim {
    int64_t n;
    int64_t st[4];
  };
  std::vector<Dim> dims;
  for (int d = 0; d < j.n_lead; ++d) {
    if (j.lead[d] == 1) continue;
    const Dim cur{
        j.lead[d],
        {j.x.lead_stride[d], j.cos.lead_stride[d], j.sin.lead_stride[d], j.out_lead_stride[d]}};
    bool merge = !dims.empty();
    for (int k = 0; k < 4 && merge; ++k) merge = dims.back().st[k] == cur.st[k] * cur.n;
    if (merge) {
      dims.back().n *= cur.n;
      for (int k = 0; k < 4; ++k) dims.back().st[k] = cur.st[k];
    } else {
      dims.push_back(cur);
    }
  }
  f.n_lead = static_cast<int>(dims.size());
  for (int d = 0; d < f.n_lead; ++d) {
    f.div_lead[d] = FastDiv(static_cast<uint32_t>(dims[d].n));
    f.x_st[d] = static_cast<int32_t>(dims[d].st[0]);
    f.cos_st[d] = static_cast<int32_t>(dims[d].st[1]);
    f.sin_st[d] = static_cast<int32_t>(dims[d].st[2]);
    f.out_st[d] = static_cast<int32_t>(dims[d].st[3]);
  }
  f.rows = static_cast<int32_t>(j.rows);
  f.rotary_dim = static_cast<int32_t>(j.rotary_dim);
  f.half = static_cast<int32_t>(j.rotary_dim / 2);
  f.n_rot = static_cast<int32_t>(j.rotary_dim / (interleaved ? kFixedV : 2 * kFixedV));
  f.n_items = f.n_rot + static_cast<int32_t>((j.head_dim - j.rotary_dim) / kFixedV);
  f.zero_add = j.zero_add;
  f.tail_cvt = j.tail_cvt;
  return f;
}

std::atomic<uint64_t> g_fixed_launches{0};

std::mutex g_geometry_mu;
std::optional<FixedGeometry> g_geometry;

// blocks_per_sm up to the pipelined kernel's launch bound (3 blocks of 256 per SM resident): more
// would launch a second wave, not a persistent grid.
bool valid(const FixedGeometry& g) {
  return g.blocks_per_sm >= 0 && g.blocks_per_sm <= 3 && (g.packed || g.blocks_per_sm == 0);
}

// Launches the fixed form's kernel for these jobs.
void launch_fixed(const FixedForm& form, const RopeArgs& a, cudaStream_t stream) {
  const FixedGeometry geo = fixed_geometry();
  int mode = kFloatMath;
  if (geo.packed && form.kernels[kPacked])
    mode = geo.blocks_per_sm > 0 && form.kernels[kPackedPipelined] ? kPackedPipelined : kPacked;
  FixedArgs fa;
  fa.n_jobs = a.n_jobs;
  fa.write_tail = a.write_tail;
  if (a.sin_sign < 0) fa.sin_xor = form.table == DType::kFloat32 ? 0x80000000u : 0x80008000u;
  int items = 1;
  int64_t rows = 1, total_rows = 0;
  for (int k = 0; k < a.n_jobs; ++k) {
    fa.jobs[k] = fixed_job(a.jobs[k], form.interleaved);
    items = std::max(items, static_cast<int>(fa.jobs[k].n_items));
    rows = std::max(rows, a.jobs[k].rows);
    total_rows += a.jobs[k].rows;
  }
  const int threads_x = items >= 4 ? (items + 1) / 2 : items;  // two items per thread
  const int rows_per_block = std::max(1, 256 / threads_x);
  auto blocks_for = [&](int64_t r) { return (r + rows_per_block - 1) / rows_per_block; };
  int64_t grid_x = std::clamp<int64_t>(blocks_for(rows), 1, 132 * 32);
  if (mode == kPackedPipelined) {
    // The persistent grid: blocks_per_sm x SMs blocks in all, each job's share by its rows (the
    // jobs' blocks then walk about as many rows each), at least one, at most one per block row.
    const int64_t budget = static_cast<int64_t>(geo.blocks_per_sm) * device_sms();
    grid_x = 1;
    for (int k = 0; k < a.n_jobs; ++k) {
      const int64_t share =
          std::clamp<int64_t>(budget * a.jobs[k].rows / std::max<int64_t>(total_rows, 1), 1,
                              std::max<int64_t>(blocks_for(a.jobs[k].rows), 1));
      fa.jobs[k].blocks = static_cast<int32_t>(share);
      grid_x = std::max(grid_x, share);
    }
  } else {
    for (int k = 0; k < a.n_jobs; ++k) fa.jobs[k].blocks = static_cast<int32_t>(grid_x);
  }
  const dim3 grid(static_cast<unsigned>(grid_x), a.n_jobs);
  form.kernels[mode]<<<grid, dim3(threads_x, rows_per_block), 0, stream>>>(fa);
  REPLAY_CUDA_LAUNCH("rope_fixed_kernel");
  if (launch_widths_recording())  // a fixed form takes 16-byte accesses on every operand
    for (int k = 0; k < a.n_jobs; ++k)
      for (const char* op : {"x", "cos", "sin", "out"})
        if (a.jobs[k].rotary_dim > 0 || op[0] == 'x' || op[0] == 'o')
          record_launch_width("rope_fixed_kernel", std::string(op) + "[" + std::to_string(k) + "]",
                              16);
  g_fixed_launches.fetch_add(1, std::memory_order_relaxed);
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

const char* rope_fixed_form(const RopeArgs& a) {
  const FixedForm* f = find_fixed_form(a);
  return f ? f->name : nullptr;
}

FixedGeometry parse_fixed_geometry(const std::string& text) {
  // exactly `D,D`: one digit each (no signs, spaces or overflow for sscanf to be lenient about)
  const bool parsed = text.size() == 3 && text[0] >= '0' && text[0] <= '1' && text[1] == ',' &&
                      text[2] >= '0' && text[2] <= '9';
  FixedGeometry g;
  if (parsed) {
    g.packed = text[0] == '1';
    g.blocks_per_sm = text[2] - '0';
  }
  if (!parsed || !valid(g))
    throw std::invalid_argument("rope geometry '" + text +
                                "': expected PACKED,BLOCKS_PER_SM with PACKED 0 or 1 and "
                                "BLOCKS_PER_SM 0..3 (0 unless PACKED is 1)");
  return g;
}

FixedGeometry fixed_geometry() {
  const std::lock_guard<std::mutex> lock(g_geometry_mu);
  if (g_geometry) return *g_geometry;
  const char* env = std::getenv("REPLAY_ROPE_GEOMETRY");
  FixedGeometry g;
  if (env && *env) {
    try {
      g = parse_fixed_geometry(env);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("REPLAY_ROPE_GEOMETRY: ") + e.what());
    }
  }
  g_geometry = g;
  return g;
}

void set_fixed_geometry(const FixedGeometry& g) {
  if (!valid(g))
    throw std::invalid_argument("rope: geometry packed=" + std::to_string(g.packed) +
                                " blocks_per_sm=" + std::to_string(g.blocks_per_sm) +
                                ": expected blocks_per_sm 0..3, and 0 without packed math");
  const std::lock_guard<std::mutex> lock(g_geometry_mu);
  g_geometry = g;
}

std::vector<const char*> rope_fixed_form_names() {
  std::vector<const char*> out;
  for (const FixedForm& f : kFixedForms) out.push_back(f.name);
  return out;
}

uint64_t rope_fixed_form_launches() {
  return g_fixed_launches.load(std::memory_order_relaxed);
}

static void zero_parts(const RopeArgs& a, cudaStream_t stream) {
  for (int k = 0; k < a.n_zeros; ++k) {
    const RopeArgs::Zero& z = a.zeros[k];
    REPLAY_CUDA(cudaMemset2DAsync(z.ptr, z.pitch, 0, z.width, z.height, stream));
  }
}

void rope_optimized(const RopeArgs& in, cudaStream_t stream) {
  zero_parts(in, stream);
  if (in.n_jobs <= 0) return;
  if (in.fixed_forms)
    if (const FixedForm* f = find_fixed_form(in)) return launch_fixed(*f, in, stream);
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
  if (launch_widths_recording()) {
    const std::string name = "rope_kernel<" + std::to_string(v) + ">";
    for (int k = 0; k < a.n_jobs; ++k) {
      const RopeJob& j = a.jobs[k];
      const int tv = j.pair_table ? v / 2 : v;
      const std::string at = "[" + std::to_string(k) + "]";
      auto bytes = [](bool vec, int n, DType t) {
        return vec ? access_bytes(n, t) : static_cast<int>(dtype_size(t));
      };
      record_launch_width(name.c_str(), "x" + at, bytes(j.vec_x, v, j.x.dtype));
      if (j.rotary_dim > 0) {
        record_launch_width(name.c_str(), "cos" + at, bytes(j.vec_cos, tv, j.cos.dtype));
        record_launch_width(name.c_str(), "sin" + at, bytes(j.vec_sin, tv, j.sin.dtype));
      }
      record_launch_width(name.c_str(), "out" + at, bytes(j.vec_out, v, j.out_dtype));
    }
  }
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
  zero_parts(a, stream);
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
