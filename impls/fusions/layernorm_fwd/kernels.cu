// layernorm_fwd: baseline and optimized variants side by side (see kernels.hpp).
//
// Napkin math, nanoGPT [16, 1024, 1600] bf16: x 52.4 MB read + y 52.4 MB written + w, b 6.4 KB
// = 104.9 MB; at 4.22 TB/s (H200 1 GiB copy) SOL is 24.8 µs, and a copy of the same 104.9 MB
// timed the same way takes 28.9 µs. The baseline moves x twice (~157 MB) and launches two
// kernels, so it can reach at most ~2/3 of SOL (~37 µs). Measured history: TUNING.md (this folder).
// The training forward adds mean and rstd, 2 x 64 KB for 16384 rows (+0.1 %): written by the
// thread that holds the row's statistics, in the same pass. An exported fp32 x (not in the
// bundled captures) adds 4 bytes per element, 105 MB here: it doubles the bytes written.
// A residual add prologue (Llama / GPT-2 `h = x + residual; y = norm(h)`, h returned) adds a read
// of the residual and a write of h, rows*C*sizeof(T) each: Llama [8192, 4096] bf16 134 -> 268 MB,
// SOL 32 -> 64 µs at 4.22 TB/s; eager's separate add moves 3 * 67 MB and the norm then reads h
// again (335 MB). Not yet measured on a GPU (TUNING.md).
// Default-partitioner forwards also return intermediates (x - mean, the fp32 normalized value, an
// epilogue step's result, the [C] weight as used): rows*C*sizeof(dtype) each, written from
// registers in the pass that writes y. Gemma [8192, 4096]: x32 and the normalized value in fp32
// beside the bf16 x and y, 402.7 MB, SOL 95 µs; measured 124.8 µs optimized, 146.2 µs baseline
// (TUNING.md).
#include "impls/fusions/layernorm_fwd/kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "impls/cuda/cuda_check.hpp"
#include "impls/cuda/vec16.cuh"
#include "impls/fusions/launch_record.hpp"

namespace replay {
namespace {

// Round E fp32 values in place to a 16-bit dtype (in pairs: one conversion for two); other dtypes:
// unchanged (fp32 values are fp32 already).
template <int E>
__device__ __forceinline__ void round_to_dtype(float* y, DType dt) {
  if (dt != DType::kBFloat16 && dt != DType::kFloat16) return;
#pragma unroll
  for (int e = 0; e < E; e += 2) {
    float2 t = dt == DType::kBFloat16 ? Bf16Ops::to_float2(Bf16Ops::from_float2(y[e], y[e + 1]))
                                      : F16Ops::to_float2(F16Ops::from_float2(y[e], y[e + 1]));
    y[e] = t.x;
    y[e + 1] = t.y;
  }
}

// E fp32 values to 16-byte aligned memory, E/4 16-byte stores (written once), streaming
// (`st.global.cs`) with CS: the generic body's exports and, in every shape, the exported fp32 x.
// The generic body's choice is its geometry's CS (streaming unless a sweep says otherwise: with
// plain stores the write-heavy default-partitioner forwards measured slower, TUNING.md, issue 25
// step 3); the compiled shapes' x32 stays streaming (not swept).
template <int E, bool CS = true>
__device__ __forceinline__ void store_f32(float* dst, const float* y) {
#pragma unroll
  for (int j = 0; j < E / 4; ++j) {
    const float4 v = make_float4(y[4 * j], y[4 * j + 1], y[4 * j + 2], y[4 * j + 3]);
    if constexpr (CS)
      __stcs(reinterpret_cast<float4*>(dst) + j, v);
    else
      reinterpret_cast<float4*>(dst)[j] = v;
  }
}

template <typename T>
constexpr DType dtype_of() {
  return std::is_same_v<T, __nv_bfloat16> ? DType::kBFloat16
         : std::is_same_v<T, __half>      ? DType::kFloat16
                                          : DType::kFloat32;
}

// Two fp32 values rounded to a 16-bit dtype, as the 32 bits of the pair.
__device__ __forceinline__ uint32_t pack2(float a, float b, DType dt) {
  uint32_t bits;
  if (dt == DType::kBFloat16) {
    const __nv_bfloat162 h = Bf16Ops::from_float2(a, b);
    memcpy(&bits, &h, 4);
  } else {
    const __half2 h = F16Ops::from_float2(a, b);
    memcpy(&bits, &h, 4);
  }
  return bits;
}

// E fp32 values written at element `off` of `base` in dtype `dt` (float32, bfloat16 or float16),
// stores of 16 (E * 2 = 8: 8) bytes, streaming with CS; `base + off` aligned to the bytes written.
template <int E, bool CS = true>
__device__ __forceinline__ void store_as(void* base, DType dt, int64_t off, const float* y) {
  if (dt == DType::kFloat32) return store_f32<E, CS>(static_cast<float*>(base) + off, y);
  uint32_t w[E / 2];
#pragma unroll
  for (int e = 0; e < E; e += 2) w[e / 2] = pack2(y[e], y[e + 1], dt);
  uint16_t* p = static_cast<uint16_t*>(base) + off;
  if constexpr (E == 8) {
    const uint4 v = make_uint4(w[0], w[1], w[2], w[3]);
    if constexpr (CS)
      __stcs(reinterpret_cast<uint4*>(p), v);
    else
      *reinterpret_cast<uint4*>(p) = v;
  } else {
    static_assert(E == 4, "16-byte vectors of 2- or 4-byte elements");
    const uint2 v = make_uint2(w[0], w[1]);
    if constexpr (CS)
      __stcs(reinterpret_cast<uint2*>(p), v);
    else
      *reinterpret_cast<uint2*>(p) = v;
  }
}

// Lane pairs for the fp32 streams of 16-bit rows. A lane's vector v of a 16-bit row is 8
// elements; in fp32 they are 32 bytes, one DRAM sector, which two 16-byte stores of the lane would
// write half by half: each store instruction then touches 32 sectors for 512 bytes, twice the
// sector traffic of the data (the default-partitioner forwards, 1-3 fp32 streams beside 16-bit x
// and y, measured 67-81 % of SOL against 87 % without them: TUNING.md). Paired, lanes 2m and
// 2m + 1 (vectors v and v ^ 1) swap halves with four shuffles, and each store instruction writes
// whole sectors: the first the pair's even vector's 32 bytes, the second the odd one's.
struct PairCtx {
  bool pair = false;  ///< the fp32 streams are paired (uniform over the grid: norm_rows)
  bool in = true;     ///< this lane's vector is inside the row (its own values are stored)
  bool pin = false;   ///< the partner lane's vector (v ^ 1) is
  unsigned mask = 0;  ///< the pair's two lanes (both execute every paired store)
};

template <bool CS>
__device__ __forceinline__ void st_f4(float* p, float4 v) {
  if constexpr (CS)
    __stcs(reinterpret_cast<float4*>(p), v);
  else
    *reinterpret_cast<float4*>(p) = v;
}

// The 8 fp32 values y of vector v, stored at elements [8v, 8v + 8) of `row_base`, with the
// partner lane's (same call, vector v ^ 1): see PairCtx.
template <bool CS>
__device__ __forceinline__ void store_f32x8_paired(float* row_base, int v, const float* y,
                                                   const PairCtx& p) {
  const bool odd = v & 1;
  float r[4];  // the partner's half: its lower four (odd lane) or upper four (even lane)
#pragma unroll
  for (int j = 0; j < 4; ++j) r[j] = __shfl_xor_sync(p.mask, odd ? y[j] : y[4 + j], 1);
  const float4 mine = odd ? make_float4(y[4], y[5], y[6], y[7]) : make_float4(y[0], y[1], y[2], y[3]);
  const float4 theirs = make_float4(r[0], r[1], r[2], r[3]);
  // First store, the even vector's sector: the even lane its lower half at 8v, the odd lane the
  // partner's upper at 8v - 4. Second, the odd vector's: the even lane the partner's lower at
  // 8v + 8, the odd lane its upper at 8v + 4. Selected, not branched: each is one instruction for
  // the whole warp.
  if (odd ? p.pin : p.in) st_f4<CS>(row_base + (odd ? 8 * v - 4 : 8 * v), odd ? theirs : mine);
  if (odd ? p.in : p.pin) st_f4<CS>(row_base + (odd ? 8 * v + 4 : 8 * v + 8), odd ? mine : theirs);
}

// Vector v of a row starting at element `row_off` of `base` (dtype dt): store_as, or with PAIR (the
// caller's lanes paired, E = 8) an fp32 destination written by store_f32x8_paired.
template <int E, bool CS, bool PAIR>
__device__ __forceinline__ void store_vec(void* base, DType dt, int64_t row_off, int v,
                                          const float* y, const PairCtx& p) {
  if constexpr (PAIR && E == 8) {
    if (dt == DType::kFloat32 && p.pair)
      return store_f32x8_paired<CS>(static_cast<float*>(base) + row_off, v, y, p);
  }
  if (p.in) store_as<E, CS>(base, dt, row_off + int64_t(v) * E, y);
}

// The row exports taken at `stage` of vector v of `row`: y written in each one's dtype. The loop
// bound is a kernel argument (uniform), the index a constant after unrolling.
template <int E, bool CS = true, bool PAIR = false>
__device__ __forceinline__ void export_stage(const NormFwdArgs& a, int stage, int64_t row, int v,
                                             const float* y, const PairCtx& p = PairCtx{}) {
#pragma unroll
  for (int i = 0; i < kNormMaxExports; ++i) {
    if (i >= a.n_row_exports) break;
    const NormRowExport& x = a.row_exports[i];
    if (x.stage == stage) store_vec<E, CS, PAIR>(x.ptr, x.dtype, row * x.row_stride, v, y, p);
  }
}

// One value rounded to `dt` (float32: unchanged), back in fp32.
__device__ __forceinline__ float round1(float f, DType dt) {
  if (dt == DType::kBFloat16) return __bfloat162float(__float2bfloat16_rn(f));
  if (dt == DType::kFloat16) return __half2float(__float2half_rn(f));
  return f;
}

// The weight exports, [cols] each, written by the threads of one block (a few KB: once per
// launch, by the first block): w upcast, or round(w_offset_dtype, w + offset) as the epilogue
// uses it, converted to the export's dtype (exactly: the matcher exports only exact upcasts).
template <typename T>
__device__ void write_weight_exports(const NormFwdArgs& a) {
#pragma unroll
  for (int i = 0; i < kNormMaxWeights; ++i) {
    if (i >= a.n_weight_exports) break;
    const NormWeightExport& x = a.weight_exports[i];
    const T* w = static_cast<const T*>(x.weight == 0 ? a.w[0] : a.w[1]);
    const float off = x.offset ? (x.weight == 0 ? a.w_offset[0] : a.w_offset[1]) : 0.f;
    const DType off_dt = x.weight == 0 ? a.w_offset_dtype[0] : a.w_offset_dtype[1];
    for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) {
      float f = static_cast<float>(w[c]);
      if (off != 0.f) f = round1(f + off, off_dt);
      if (x.dtype == DType::kFloat32) {
        static_cast<float*>(x.ptr)[c] = f;
      } else if (x.dtype == DType::kBFloat16) {
        static_cast<__nv_bfloat16*>(x.ptr)[c] = __float2bfloat16_rn(f);
      } else {
        static_cast<__half*>(x.ptr)[c] = __float2half_rn(f);
      }
    }
  }
}

/// Epilogue shapes with a compile-time body; anything else takes the generic run-time path.
/// A last rounding to the output dtype is left to the store in every shape.
enum class EpiKind : int {
  kGeneric,
  kIdentity,    // (round to out dtype)
  kScale,       // * w0, fp32 (+ round)
  kAffine,      // * w0 + w1, fp32 (+ round): nanoGPT LayerNorm
  kRoundScale,  // round to T, * w0 in T: Hugging Face LlamaRMSNorm
};

// Pairwise sum of N values (N a power of two).
template <int N>
__device__ __forceinline__ float tree_sum(float* p) {
#pragma unroll
  for (int w = N / 2; w > 0; w /= 2)
#pragma unroll
    for (int i = 0; i < w; ++i) p[i] += p[i + w];
  return p[0];
}

// The compile-time epilogue shape of `a`'s steps, if it has one. Exported intermediates (row or
// weight exports), or y in another dtype than x, take the generic path: only its body carries the
// code that writes them, so the compiled shapes keep their registers (with that code in every
// body, the 7-vector kernels spilled).
EpiKind classify_epilogue(const NormFwdArgs& a) {
  if (a.out_dtype != a.x_dtype || a.n_row_exports > 0 || a.n_weight_exports > 0)
    return EpiKind::kGeneric;
  int n = a.n_epilogue;
  const NormEpilogueStep* st = a.epilogue;
  if (n > 0 && st[n - 1].op == EpilogueOp::kRound && st[n - 1].dtype == a.out_dtype) --n;
  auto is = [&](int i, EpilogueOp op, DType dt, int w) {
    return st[i].op == op && st[i].dtype == dt && (op == EpilogueOp::kRound || st[i].weight == w);
  };
  const DType f32 = DType::kFloat32;
  if (n == 0) return EpiKind::kIdentity;
  if (n == 1 && is(0, EpilogueOp::kMul, f32, 0)) return EpiKind::kScale;
  if (n == 1 && is(0, EpilogueOp::kMul, a.out_dtype, 0)) return EpiKind::kScale;  // pack rounds
  if (n == 2 && is(0, EpilogueOp::kMul, f32, 0) && is(1, EpilogueOp::kAdd, f32, 1))
    return EpiKind::kAffine;
  if (n == 2 && is(0, EpilogueOp::kRound, a.out_dtype, -1) &&
      is(1, EpilogueOp::kMul, a.out_dtype, 0))
    return EpiKind::kRoundScale;
  return EpiKind::kGeneric;
}

// The E weights of vector v as fp32, from 16-byte vectors of T (global memory in the baseline,
// shared memory in the optimized kernel, where keeping T rather than fp32 halves the traffic and
// measured the same, 30.2 vs 30.4 µs on [16384, 1600], with fewer registers).
template <typename T>
__device__ __forceinline__ void load_w(const void* w, int v, float* out) {
  Vec<T>::unpack(static_cast<const uint4*>(w)[v], out);
}

// Weight i (0 or 1; `w` is its copy in global or shared memory) of vector v as fp32, with its
// offset applied as the graph does: round(w_offset_dtype, w + offset), e.g. x * (1 + w) of litgpt
// add_unit_offset. The branch depends only on kernel arguments; selected, not indexed (see below).
template <typename T>
__device__ __forceinline__ void load_weight(const NormFwdArgs& a, int i, const void* w, int v,
                                            float* out) {
  load_w<T>(w, v, out);
  const float off = i == 0 ? a.w_offset[0] : a.w_offset[1];
  if (off != 0.f) {
#pragma unroll
    for (int e = 0; e < Vec<T>::kElems; ++e) out[e] += off;
    round_to_dtype<Vec<T>::kElems>(out, i == 0 ? a.w_offset_dtype[0] : a.w_offset_dtype[1]);
  }
}

// The epilogue on one vector of normalized values y, shared by both variants. Every branch depends
// only on kernel arguments, so it is uniform across the grid. w0 / w1 are selected, not indexed,
// so that no pointer array goes to local memory. The generic path also writes the row exports
// taken after a step (vector v of `row`), streaming with CS, lanes paired with PAIR (a lane whose
// vector lies past the row still computes, on its partner's weights, for the paired stores).
template <typename T, EpiKind K, bool CS = true, bool PAIR = false>
__device__ __forceinline__ void epilogue(const NormFwdArgs& a, float* y, const void* w0,
                                         const void* w1, int v, int64_t row,
                                         const PairCtx& p = PairCtx{}) {
  constexpr int E = Vec<T>::kElems;
  const int wv = PAIR && !p.in ? v ^ 1 : v;  // weights inside the row
  float wa[E], wb[E];
  if constexpr (K == EpiKind::kScale || K == EpiKind::kRoundScale || K == EpiKind::kAffine)
    load_weight<T>(a, 0, w0, wv, wa);
  if constexpr (K == EpiKind::kAffine) load_weight<T>(a, 1, w1, wv, wb);
  if constexpr (K == EpiKind::kRoundScale) Vec<T>::unpack(Vec<T>::pack(y), y);
#pragma unroll
  for (int e = 0; e < E; ++e) {
    if constexpr (K == EpiKind::kScale || K == EpiKind::kRoundScale) y[e] *= wa[e];
    if constexpr (K == EpiKind::kAffine) y[e] = fmaf(y[e], wa[e], wb[e]);
  }
  if constexpr (K == EpiKind::kGeneric) {
#pragma unroll
    for (int s = 0; s < kNormMaxEpilogue; ++s) {
      if (s >= a.n_epilogue) break;
      const NormEpilogueStep st = a.epilogue[s];
      // y's store rounds to its dtype (no step result is exported after the last step)
      if (s + 1 == a.n_epilogue && st.op == EpilogueOp::kRound && st.dtype == a.out_dtype) break;
      if (st.op != EpilogueOp::kRound) {
        load_weight<T>(a, st.weight, st.weight == 0 ? w0 : w1, wv, wa);
#pragma unroll
        for (int e = 0; e < E; ++e) y[e] = st.op == EpilogueOp::kMul ? y[e] * wa[e] : y[e] + wa[e];
      }
      round_to_dtype<E>(y, st.dtype);
      export_stage<E, CS, PAIR>(a, s, row, v, y, p);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// baseline, kernel 0 (residual prologue only): h = round(x + residual), one thread per 16-byte
// vector, written to `h` (row stride h_stride) for the statistics and normalize kernels to read:
// what an eager add before a norm kernel does (the add's output makes a round trip to memory).
template <typename T>
__global__ void residual_add_kernel(NormFwdArgs a, T* h, int64_t h_stride) {
  constexpr int E = Vec<T>::kElems;
  const uint32_t nvec = static_cast<uint32_t>(a.cols / E);
  const uint64_t total = uint64_t(a.rows) * nvec;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < total;
       i += uint64_t(gridDim.x) * blockDim.x) {
    const int64_t row = static_cast<int64_t>(i / nvec);
    const int v = static_cast<int>(i - uint64_t(row) * nvec);
    float y[E], r[E];
    Vec<T>::unpack(
        reinterpret_cast<const uint4*>(static_cast<const T*>(a.x) + row * a.x_row_stride)[v], y);
    Vec<T>::unpack(reinterpret_cast<const uint4*>(static_cast<const T*>(a.residual) +
                                                  row * a.residual_row_stride)[v],
                   r);
#pragma unroll
    for (int e = 0; e < E; ++e) y[e] += r[e];
    reinterpret_cast<uint4*>(h + row * h_stride)[v] = Vec<T>::pack(y);  // rounds once, to T
  }
}

// ---------------------------------------------------------------------------------------------
// baseline, kernel 1: one warp per row; mean and rstd by a shifted single pass (fp32), written to
// memory (the workspaces, and the exported statistics of a training forward). 16-byte loads.
template <typename T>
__global__ void norm_stats_kernel(NormFwdArgs a, float* mean, float* rstd) {
  constexpr int E = Vec<T>::kElems;
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  if (blockIdx.x == 0 && a.n_weight_exports) write_weight_exports<T>(a);
  if (row >= a.rows) return;
  const T* xr = static_cast<const T*>(a.x) + row * a.x_row_stride;
  const bool ln = a.kind == NormKind::kLayerNorm;
  const float shift = ln ? Vec<T>::first(xr) : 0.f;  // avoids cancellation in s2 - s1^2
  const int nvec = static_cast<int>(a.cols / E);
  float s1 = 0.f, s2 = 0.f;
  for (int v = lane; v < nvec; v += 32) {
    float f[E];
    Vec<T>::unpack(reinterpret_cast<const uint4*>(xr)[v], f);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const float d = f[e] - shift;
      s1 += d;
      s2 += d * d;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    s1 += __shfl_xor_sync(0xffffffffu, s1, o);
    s2 += __shfl_xor_sync(0xffffffffu, s2, o);
  }
  if (lane == 0) {
    const float n = float(a.cols);
    const float m1 = s1 / n;
    const float var = ln ? fmaxf(s2 / n - m1 * m1, 0.f) * a.var_scale : s2 / n;
    const float mu = ln ? shift + m1 : 0.f;
    const float rs = rsqrtf(var + (a.eps_ptr ? __ldg(a.eps_ptr) : a.eps));
    mean[row] = mu;
    rstd[row] = rs;
    if (a.mean_out) a.mean_out[row * a.mean_stride] = mu;
    if (a.rstd_out) a.rstd_out[row * a.rstd_stride] = rs;
  }
}

// baseline, kernel 2: one thread per 16-byte vector: reads x again with the row's mean/rstd,
// applies the epilogue (weights through L1/L2), writes y (and the exported fp32 x, if asked).
template <typename T, EpiKind K>
__global__ void norm_apply_kernel(NormFwdArgs a, const float* mean, const float* rstd) {
  constexpr int E = Vec<T>::kElems;
  const uint32_t nvec = static_cast<uint32_t>(a.cols / E);
  const uint64_t total = uint64_t(a.rows) * nvec;
  const void* w0 = a.w[0];
  const void* w1 = a.w[1];
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < total;
       i += uint64_t(gridDim.x) * blockDim.x) {
    const int64_t row = static_cast<int64_t>(i / nvec);
    const int v = static_cast<int>(i - uint64_t(row) * nvec);
    float y[E];
    Vec<T>::unpack(
        reinterpret_cast<const uint4*>(static_cast<const T*>(a.x) + row * a.x_row_stride)[v], y);
    if (a.x32_out) store_f32<E>(a.x32_out + row * a.x32_row_stride + int64_t(v) * E, y);
    const float m = mean[row], r = rstd[row];
#pragma unroll
    for (int e = 0; e < E; ++e) y[e] -= m;
    if constexpr (K == EpiKind::kGeneric) export_stage<E>(a, kStageCentered, row, v, y);
#pragma unroll
    for (int e = 0; e < E; ++e) y[e] *= r;
    if constexpr (K == EpiKind::kGeneric) export_stage<E>(a, kStageNormalized, row, v, y);
    epilogue<T, K>(a, y, w0, w1, v, row);
    if (K != EpiKind::kGeneric || a.out_dtype == dtype_of<T>())
      reinterpret_cast<uint4*>(static_cast<T*>(a.out) + row * a.out_row_stride)[v] =
          Vec<T>::pack(y);
    else
      store_as<E>(a.out, a.out_dtype, row * a.out_row_stride + int64_t(v) * E, y);
  }
}

// ---------------------------------------------------------------------------------------------
// optimized: one row kernel. A group of TPG threads (16, 32 or 128; 8 and 64 in the sweep only)
// owns a row; thread t
// holds the row's 16-byte vectors t, t+TPG, t+2TPG, ... (VPT of them) in registers as fp32, so x is
// read from memory once. D rows per group are in flight: while a row is computed, the loads of the
// next D - 1 rows of the group (packed, 16-byte) are outstanding, in a ring of D register buffers
// indexed at compile time (the row loop is unrolled D times), and the row after those is issued as
// soon as this one is unpacked. Statistics: one pass over registers, shifted by the row's first
// element, both sums reduced together.
// Block = 128 threads = 128/TPG rows per iteration. Rows of a warp or more: a persistent grid (SMs
// x resident blocks) strides over the rows, the epilogue weights staged once per block in shared
// memory; short rows (16 threads each): one block per 8 rows, a block starting as another ends
// (persistent_grid(): measured faster there), the row kept packed in registers (norm_row_packed)
// for the compiled epilogue shapes. The epilogue shapes the matcher produces for nanoGPT and
// Llama are compiled as straight-line code.
// The geometry below was chosen by the sweep mode (REPLAY_NORM_FWD_GEOMETRY; TUNING.md, issue 25)
// on the [576000, 384], [16384, 1600] and [8192, 4096] forwards on an H200.
constexpr int kOptThreads = 128;
// Resident blocks per SM asked of ptxas. 4 (x 4 warps) caps registers at 128, which holds up to 7
// vectors per thread without spilling (6 with 4 warps per row); more need 3; so do two rows in
// flight of 3-4 vectors (measured: 3 blocks faster than 4 at [8192, 4096]). Short rows (16 threads,
// at most 4 vectors): 8 (64 registers; 6 at 4 vectors). With the residual prologue the next row's
// residual vectors are in flight too (VPT more 16-byte registers): 3 resident blocks (168
// registers) from 4 vectors per thread, 2 from 7 (not tuned). The generic body (exports, run-time
// epilogue) keeps the choices it had before the issue-25 sweep (one row in flight, 4 or 3 blocks,
// streaming hints: plain stores measured slower on its write-heavy forms), except that rows of at
// most 64 vectors take the 16-thread geometry and grid, and the per-head rows of 128 of the default
// partitioner's qk_norm forwards (16 threads x 1 vector) 8 blocks: 64 registers without a spill,
// 121.7 -> 91.0 us on Qwen3's [262144, 128] (H200 generic sweep, TUNING.md; streaming or not: same).
// At C = 4096 (128 x 4) neither plain stores, two rows in flight nor 3 blocks beat the 4 blocks.
constexpr int min_blocks(int vpt, int tpg, bool add, bool generic) {
  if (add) return vpt >= 7 ? 2 : vpt >= 4 ? 3 : 4;
  if (generic && tpg == 16 && vpt == 1) return 8;  // per-head rows of 128 (below)
  if (generic) return vpt >= (tpg > 32 ? 7 : 8) ? 3 : 4;
  if (tpg == 16) return vpt <= 3 ? 8 : 6;
  if (vpt >= 3 && vpt <= 4) return 3;  // rows_in_flight: 2
  return vpt >= (tpg > 32 ? 7 : 8) ? 3 : 4;
}

// Rows in flight per row group: with one row in flight a warp per row left DRAM at 47-56 % of its
// peak (ncu) at 16 warps per SM. Rows of 3-4 vectors per thread (C = 4096 in 16-bit at 4 warps per
// row) keep the next row's loads outstanding beside the row computed; longer ones have no registers
// left for it, short rows (16 threads) run one row per group and block (not persistent). Not
// measured with the residual prologue or the generic body: one row.
constexpr int rows_in_flight(int vpt, int tpg, bool add, bool generic) {
  if (add || generic || tpg == 16) return 1;
  return vpt <= 4 ? 2 : 1;
}

// Persistent grid (false: one block per 128 / TPG rows): persistent for rows of a warp or more,
// where the sweep found the persistent grid faster ([8192, 4096]: 36.9 vs 46.8 µs), not for 16
// threads per row ([576000, 384] RMSNorm: 220.9 vs 227.8 µs).
constexpr bool persistent_grid(int tpg) {
  return tpg > 16;
}

// Rows kept packed in registers (norm_row_packed): 16 threads per row, a compiled epilogue shape,
// no residual (and one row in flight: a sweep's D = 2 runs the ring of norm_row).
constexpr bool packed_rows(int tpg, bool add, EpiKind k) {
  return tpg == 16 && !add && k != EpiKind::kGeneric;
}

// Two sums over the row group at once (independent shuffles interleave). Groups of TPG <= 32
// threads are aligned segments of a warp (xor offsets below TPG stay inside the segment).
template <int TPG>
__device__ __forceinline__ float2 group_sum2(float a, float b) {
  constexpr int kTop = TPG < 32 ? TPG / 2 : 16;
#pragma unroll
  for (int o = kTop; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  if constexpr (TPG <= 32) {
    return make_float2(a, b);
  } else {
    constexpr int WARPS = TPG / 32;
    const int warp = threadIdx.x / 32, grp = warp / WARPS;
    __shared__ float2 part[kOptThreads / 32];
    if (threadIdx.x % 32 == 0) part[warp] = make_float2(a, b);
    __syncthreads();
    float2 t = make_float2(0.f, 0.f);
#pragma unroll
    for (int i = 0; i < WARPS; ++i) {
      t.x += part[grp * WARPS + i].x;
      t.y += part[grp * WARPS + i].y;
    }
    __syncthreads();  // part is reused by the next call
    return t;
  }
}

// The shifted sums of one vector of E values (d = x - c; zeros past the row's end) into P
// independent partial sums per thread (no serial chain of VPT * E dependent adds).
template <int E, int P>
__device__ __forceinline__ void accumulate_shifted(const float* t, float c, bool in, float* p1,
                                                   float* p2) {
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const float d = in ? t[e] - c : 0.f;
    p1[e % P] += d;
    p2[e % P] = fmaf(d, d, p2[e % P]);
  }
}

// mean and rstd of a row from its group's partial sums (both reduced in one shuffle chain):
// s1 = sum(x - c), s2 = sum((x - c)^2), var = s2/n - (s1/n)^2 (LayerNorm, times var_scale);
// RMSNorm (c = 0): mean 0, var = s2/n. Returns {mean, rstd}; p1 and p2 are summed in place.
template <int TPG, int P>
__device__ __forceinline__ float2 row_statistics(const NormFwdArgs& a, float* p1, float* p2,
                                                 float c, bool ln, float eps, float inv_cols) {
  const float2 sums = group_sum2<TPG>(tree_sum<P>(p1), tree_sum<P>(p2));
  const float m1 = sums.x * inv_cols;
  const float mean = ln ? c + m1 : 0.f;
  const float var = ln ? fmaxf(sums.y * inv_cols - m1 * m1, 0.f) * a.var_scale : sums.y * inv_cols;
  return make_float2(mean, rsqrtf(var + eps));
}

// Copy the epilogue weights into shared memory once per block (16-byte loads).
// w_smem holds [n_weights][cols] elements of T.
template <typename T>
__device__ __forceinline__ void stage_weights(const NormFwdArgs& a, void* w_smem) {
  const int nvec = static_cast<int>(a.cols / Vec<T>::kElems);
  for (int i = 0; i < a.n_weights; ++i)
    for (int v = threadIdx.x; v < nvec; v += kOptThreads)
      static_cast<uint4*>(w_smem)[i * nvec + v] = __ldg(static_cast<const uint4*>(a.w[i]) + v);
  __syncthreads();
}

// One row of a group: the row's VPT 16-byte vectors of x (and of the residual) from memory,
// zeros past the last row or the row's end.
template <typename T, int VPT, int TPG, bool ADD, bool CS>
__device__ __forceinline__ void load_row(const NormFwdArgs& a, int64_t row, int tid, uint4* raw,
                                         uint4* rraw) {
  const int nvec = static_cast<int>(a.cols / Vec<T>::kElems);
  const uint4* xr =
      reinterpret_cast<const uint4*>(static_cast<const T*>(a.x) + row * a.x_row_stride);
  const uint4* rr = reinterpret_cast<const uint4*>(static_cast<const T*>(a.residual) +
                                                   row * a.residual_row_stride);
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int v = tid + k * TPG;
    const bool in = row < a.rows && v < nvec;
    raw[k] = in ? (CS ? __ldcs(xr + v) : __ldg(xr + v)) : make_uint4(0, 0, 0, 0);
    if constexpr (ADD)
      rraw[k] = in ? (CS ? __ldcs(rr + v) : __ldg(rr + v)) : make_uint4(0, 0, 0, 0);
  }
}

// One row: unpack its buffers (raw, rraw: loaded by an earlier load_row), refill them with the row
// `refill` (D rows ahead), then statistics, epilogue and stores.
// ADD: the residual prologue; h = round(x + residual) is formed in registers as the row is
// unpacked, written with the 16-byte stores of y (streaming with CS) when exported, and is what the
// statistics and the normalize read.
// eps and inv_cols = 1 / cols come from the caller, read once per kernel (an eps tensor's load
// would otherwise be repeated per row: the row's stores may alias it).
template <typename T, int VPT, int TPG, EpiKind K, bool ADD, bool CS>
__device__ __forceinline__ void norm_row(const NormFwdArgs& a, int64_t row, int64_t refill,
                                         uint4* raw, uint4* rraw, const void* w0, const void* w1,
                                         float (*red)[4], bool two_step, bool pair, float eps,
                                         float inv_cols) {
  using V = Vec<T>;
  constexpr int E = V::kElems;
  const int tid = threadIdx.x % TPG, grp = threadIdx.x / TPG;
  const int nvec = static_cast<int>(a.cols / E);
  const bool ln = a.kind == NormKind::kLayerNorm;
  float x[VPT][E];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    V::unpack(raw[k], x[k]);
    if constexpr (ADD) {  // h = round(x + residual): the graph's add, before anything reads h
      float r[E];
      V::unpack(rraw[k], r);
#pragma unroll
      for (int e = 0; e < E; ++e) x[k][e] += r[e];
      round_to_dtype<E>(x[k], a.h_round);
    }
  }
  load_row<T, VPT, TPG, ADD, CS>(a, refill, tid, raw, rraw);  // D rows ahead, in flight from here
  // One pass, shifted by the row's first element c (broadcast from the group's first thread):
  // s1 = sum(x - c), s2 = sum((x - c)^2), var = s2/n - (s1/n)^2. With c a sample of the row,
  // |mean - c| is of the order of the standard deviation, so the subtraction does not cancel
  // catastrophically even when |mean| >> std; both sums reduce together (one shuffle chain).
  // Independent partial sums per thread avoid a serial chain of VPT*E dependent adds.
  float c = 0.f;
  if (ln) {
    c = __shfl_sync(0xffffffffu, x[0][0], 0, TPG < 32 ? TPG : 32);
    if constexpr (TPG > 32) {  // the group's first thread holds element 0
      if (tid == 0) red[grp][0] = x[0][0];
      __syncthreads();
      c = red[grp][0];
      __syncthreads();
    }
  }
  constexpr int P = 4;  // partial sums per thread (registers are at the 128 cap)
  float p1[P] = {0.f, 0.f, 0.f, 0.f}, p2[P] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int k = 0; k < VPT; ++k) accumulate_shifted<E, P>(x[k], c, tid + k * TPG < nvec, p1, p2);
  const float2 st = row_statistics<TPG, P>(a, p1, p2, c, ln, eps, inv_cols);
  const float mean = st.x, rstd = st.y;
  const float shift = -mean * rstd;
  if (row >= a.rows) return;
  if (tid == 0) {  // the statistics a training forward saves for the backward
    if (a.mean_out) a.mean_out[row * a.mean_stride] = mean;
    if (a.rstd_out) a.rstd_out[row * a.rstd_stride] = rstd;
  }
  uint4* yr = reinterpret_cast<uint4*>(static_cast<T*>(a.out) + row * a.out_row_stride);
  float* x32r = a.x32_out ? a.x32_out + row * a.x32_row_stride : nullptr;
  // The exported x32's hint: the generic body's CS, streaming in the compiled shapes (not swept).
  constexpr bool kCsExport = K == EpiKind::kGeneric ? CS : true;
  uint4* hr = ADD && a.h_out
                  ? reinterpret_cast<uint4*>(static_cast<T*>(a.h_out) + row * a.h_row_stride)
                  : nullptr;
  // 16-bit rows of a warp or more: the fp32 streams (x32, fp32 exports, an fp32 y) are written by
  // lane pairs in whole sectors (PairCtx) where `pair` (norm_rows); a pair runs while either of
  // its vectors is inside the row (the group's lanes pair within it: TPG is even, so v and v ^ 1
  // have the same k).
  constexpr bool kPair = E == 8 && TPG >= 32;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int v = tid + k * TPG;
    PairCtx pc;
    pc.in = v < nvec;
    if constexpr (kPair) {
      pc.pair = pair;
      pc.pin = pair && (v ^ 1) < nvec;
      pc.mask = 3u << (threadIdx.x & 30);
    }
    if (!pc.in && !pc.pin) continue;
    float* y = x[k];
    if constexpr (ADD) {
      if (hr && pc.in) {  // h as the graph rounds it (pack rounds to T)
        if constexpr (CS)
          __stcs(hr + v, V::pack(y));
        else
          hr[v] = V::pack(y);
      }
    }
    if (x32r) store_vec<E, kCsExport, kPair>(x32r, DType::kFloat32, 0, v, y, pc);
    if (K == EpiKind::kGeneric && two_step) {
#pragma unroll
      for (int e = 0; e < E; ++e) y[e] -= mean;
      export_stage<E, CS, kPair>(a, kStageCentered, row, v, y, pc);
#pragma unroll
      for (int e = 0; e < E; ++e) y[e] *= rstd;
      export_stage<E, CS, kPair>(a, kStageNormalized, row, v, y, pc);
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e) y[e] = fmaf(y[e], rstd, shift);
    }
    epilogue<T, K, CS, kPair>(a, y, w0, w1, v, row, pc);
    if (K != EpiKind::kGeneric || a.out_dtype == dtype_of<T>()) {
      if (pc.in) {
        if constexpr (CS)
          __stcs(yr + v, V::pack(y));  // written once: evict-first in L2
        else
          yr[v] = V::pack(y);
      }
    } else {
      store_vec<E, CS, kPair>(a.out, a.out_dtype, row * a.out_row_stride, v, y, pc);
    }
  }
}

// Short rows (16 threads per row, compiled epilogue shapes, no residual): the row stays packed
// in registers (VPT 16-byte vectors) and each vector is unpacked where it is used, once for the
// statistics and once for the normalize, instead of holding VPT * E fp32 values: half the
// registers, so more resident warps (the sweep's lever at [576000, 384]). The same float32 steps
// in the same order as norm_row: the same bits. No prefetch: with one block per 8 rows a group has
// one row.
template <typename T, int VPT, int TPG, EpiKind K, bool CS>
__device__ __forceinline__ void norm_row_packed(const NormFwdArgs& a, int64_t row, const uint4* raw,
                                                const void* w0, const void* w1, float eps,
                                                float inv_cols) {
  using V = Vec<T>;
  constexpr int E = V::kElems;
  const int tid = threadIdx.x % TPG;
  const int nvec = static_cast<int>(a.cols / E);
  const bool ln = a.kind == NormKind::kLayerNorm;
  float c = 0.f;
  if (ln) {
    float t[E];
    V::unpack(raw[0], t);
    c = __shfl_sync(0xffffffffu, t[0], 0, TPG);
  }
  constexpr int P = 4;
  float p1[P] = {0.f, 0.f, 0.f, 0.f}, p2[P] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    float t[E];
    V::unpack(raw[k], t);
    accumulate_shifted<E, P>(t, c, tid + k * TPG < nvec, p1, p2);
  }
  const float2 st = row_statistics<TPG, P>(a, p1, p2, c, ln, eps, inv_cols);
  const float mean = st.x, rstd = st.y;
  const float shift = -mean * rstd;
  if (row >= a.rows) return;
  if (tid == 0) {
    if (a.mean_out) a.mean_out[row * a.mean_stride] = mean;
    if (a.rstd_out) a.rstd_out[row * a.rstd_stride] = rstd;
  }
  uint4* yr = reinterpret_cast<uint4*>(static_cast<T*>(a.out) + row * a.out_row_stride);
  float* x32r = a.x32_out ? a.x32_out + row * a.x32_row_stride : nullptr;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int v = tid + k * TPG;
    if (v >= nvec) continue;
    float y[E];
    V::unpack(raw[k], y);
    if (x32r) store_f32<E>(x32r + int64_t(v) * E, y);
#pragma unroll
    for (int e = 0; e < E; ++e) y[e] = fmaf(y[e], rstd, shift);
    epilogue<T, K>(a, y, w0, w1, v, row);
    if constexpr (CS)
      __stcs(yr + v, V::pack(y));
    else
      yr[v] = V::pack(y);
  }
}

// The rows of a group: D rows' loads issued before the weights are staged, then the ring.
template <typename T, int VPT, int TPG, EpiKind K, bool ADD, int D, bool CS>
__device__ __forceinline__ void norm_rows(const NormFwdArgs& a, void* w0, const void* w1,
                                          float (*red)[4]) {
  constexpr int RPB = kOptThreads / TPG;  // rows per block iteration
  const int tid = threadIdx.x % TPG, grp = threadIdx.x / TPG;
  const int64_t step = int64_t(gridDim.x) * RPB;
  const float inv_cols = 1.f / float(a.cols);
  const float eps = a.eps_ptr ? __ldg(a.eps_ptr) : a.eps;
  if constexpr (packed_rows(TPG, ADD, K) && D == 1) {  // (a sweep's D = 2 takes the ring)
    uint4 raw[VPT], none[1];
    const int64_t first = int64_t(blockIdx.x) * RPB;
    load_row<T, VPT, TPG, false, CS>(a, first + grp, tid, raw, none);
    stage_weights<T>(a, w0);
    for (int64_t row0 = first; row0 < a.rows; row0 += step) {
      if (row0 != first) load_row<T, VPT, TPG, false, CS>(a, row0 + grp, tid, raw, none);
      norm_row_packed<T, VPT, TPG, K, CS>(a, row0 + grp, raw, w0, w1, eps, inv_cols);
    }
    return;
  }
  uint4 raw[D][VPT], rraw[D][ADD ? VPT : 1];
  const int64_t first = int64_t(blockIdx.x) * RPB + grp;
#pragma unroll
  for (int d = 0; d < D; ++d)
    load_row<T, VPT, TPG, ADD, CS>(a, first + d * step, tid, raw[d], rraw[d]);
  stage_weights<T>(a, w0);  // w1 follows w0 in the same buffer
  // Exports are written by the generic body only (classify_epilogue). x - mean and the normalized
  // value as the graph computes them (sub, then mul) where one of them is exported; else one fma
  // per element.
  bool two_step = false;
  // Paired fp32 stores (PairCtx) in the compiled shapes (their x32: OLMo's default-partition
  // LayerNorm forward 78.9 -> 72.9 us on an H200) and in the generic body where an fp32 row export
  // or an fp32 y is written (Gemma's, Cohere's: 126 -> 113, 188 -> 156 us); not for the x32 of a
  // generic body without them (Llama's default partition: x32 beside a bfloat16 export, 99 -> 116
  // us paired, unexplained: TUNING.md, issue 25 step 4), nor for 16-thread rows (kPair).
  bool pair = true;
  if constexpr (K == EpiKind::kGeneric) {
    if (blockIdx.x == 0 && a.n_weight_exports) write_weight_exports<T>(a);
    two_step = a.n_row_exports > 0;
    pair = a.out_dtype == DType::kFloat32;
#pragma unroll
    for (int i = 0; i < kNormMaxExports; ++i)
      if (i < a.n_row_exports && a.row_exports[i].dtype == DType::kFloat32) pair = true;
  }
  // row0 (the block's first row of an iteration) is uniform across the block: the 128-thread
  // groups' __syncthreads are reached by every thread or none.
  for (int64_t row0 = int64_t(blockIdx.x) * RPB; row0 < a.rows; row0 += D * step) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      if (row0 + d * step >= a.rows) break;
      const int64_t row = row0 + d * step + grp;
      norm_row<T, VPT, TPG, K, ADD, CS>(a, row, row + D * step, raw[d], rraw[d], w0, w1, red,
                                        two_step, pair, eps, inv_cols);
    }
  }
}

// One kernel per epilogue shape (its own register allocation: the generic body, which also
// writes the exported intermediates, needs more registers than the compiled shapes and must not
// make them spill).
template <typename T, int VPT, int TPG, bool ADD, EpiKind K, int D, int MINB, bool CS>
__global__ void __launch_bounds__(kOptThreads, MINB) norm_fwd_persistent_kernel(NormFwdArgs a) {
  constexpr int RPB = kOptThreads / TPG;
  __shared__ float red[RPB][4];
  extern __shared__ uint4 w_smem[];  // [n_weights][cols] of T, filled by norm_rows
  void* w0 = w_smem;
  const void* w1 = reinterpret_cast<const T*>(w_smem) + a.cols;
  norm_rows<T, VPT, TPG, K, ADD, D, CS>(a, w0, w1, red);
}

template <typename T, int VPT, int TPG, bool ADD, EpiKind K,
          int D = rows_in_flight(VPT, TPG, ADD, K == EpiKind::kGeneric),
          int MINB = min_blocks(VPT, TPG, ADD, K == EpiKind::kGeneric),
          bool CS = K == EpiKind::kGeneric>
void launch_shape(const NormFwdArgs& a, cudaStream_t stream,
                  bool persistent = persistent_grid(TPG)) {
  auto kernel = norm_fwd_persistent_kernel<T, VPT, TPG, ADD, K, D, MINB, CS>;
  const size_t smem = size_t(a.n_weights) * size_t(a.cols) * sizeof(T);
  // Occupancy is a host query of several µs: computed once per (instantiation, smem size), so that
  // a timed launch costs only the launch.
  static int dev = -1, sms = 0, blocks_per_sm = 0;
  static size_t smem_seen = ~size_t(0);
  int cur = 0;
  REPLAY_CUDA(cudaGetDevice(&cur));
  if (cur != dev || smem != smem_seen) {
    dev = cur;
    smem_seen = smem;
    REPLAY_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    if (smem > 48 * 1024)
      REPLAY_CUDA(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    REPLAY_CUDA(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, kOptThreads, smem));
  }
  constexpr int RPB = kOptThreads / TPG;
  const int64_t needed = (a.rows + RPB - 1) / RPB;
  const int64_t blocks =
      persistent ? std::min<int64_t>(needed, int64_t(sms) * std::max(blocks_per_sm, 1)) : needed;
  if (blocks > int64_t(std::numeric_limits<int>::max()))
    throw std::invalid_argument("layernorm_fwd optimized: " + std::to_string(a.rows) +
                                " rows need more blocks than a grid holds");
  const int grid = static_cast<int>(blocks);
  if (grid == 0) return;
  kernel<<<grid, kOptThreads, smem, stream>>>(a);
  REPLAY_CUDA_LAUNCH("norm_fwd_persistent_kernel");
}

template <typename T, int VPT, int TPG, bool ADD>
void launch_persistent(const NormFwdArgs& a, cudaStream_t stream) {
  switch (classify_epilogue(a)) {
    case EpiKind::kIdentity:
      return launch_shape<T, VPT, TPG, ADD, EpiKind::kIdentity>(a, stream);
    case EpiKind::kScale:
      return launch_shape<T, VPT, TPG, ADD, EpiKind::kScale>(a, stream);
    case EpiKind::kAffine:
      return launch_shape<T, VPT, TPG, ADD, EpiKind::kAffine>(a, stream);
    case EpiKind::kRoundScale:
      return launch_shape<T, VPT, TPG, ADD, EpiKind::kRoundScale>(a, stream);
    default:
      return launch_shape<T, VPT, TPG, ADD, EpiKind::kGeneric>(a, stream);
  }
}

template <typename T, int TPG, bool ADD>
void dispatch_vpt(int vpt, const NormFwdArgs& a, cudaStream_t s) {
  // 16-thread rows hold at most 64 vectors (geometry): 1-4 per thread; the others 1-8.
  constexpr int kMax = TPG == 16 ? 4 : 8;
  switch (vpt) {
    case 1:
      return launch_persistent<T, 1, TPG, ADD>(a, s);
    case 2:
      return launch_persistent<T, 2, TPG, ADD>(a, s);
    case 3:
      return launch_persistent<T, 3, TPG, ADD>(a, s);
    case 4:
      return launch_persistent<T, 4, TPG, ADD>(a, s);
    default:
      break;
  }
  if constexpr (kMax > 4) {
    switch (vpt) {
      case 5:
        return launch_persistent<T, 5, TPG, ADD>(a, s);
      case 6:
        return launch_persistent<T, 6, TPG, ADD>(a, s);
      case 7:
        return launch_persistent<T, 7, TPG, ADD>(a, s);
      case 8:
        return launch_persistent<T, 8, TPG, ADD>(a, s);
      default:
        break;
    }
  }
  throw std::invalid_argument("layernorm_fwd optimized: vectors per thread out of range");
}

constexpr int kMaxVpt = 8;

// (threads per row, vectors per thread) for a row of nvec 16-byte vectors: 16 threads per row up
// to 64 vectors (C <= 512 in 16-bit: 384 columns fill 16 threads x 3 vectors, where a warp left
// half its lanes idle on the second vector), a warp up to 256, else four warps (H200, [576000,
// 384], streaming hints: a warp x 2 vectors 269 µs, 16 threads x 3 241.6 µs, 8 x 6 245.6 µs).
std::pair<int, int> geometry(int64_t nvec) {
  if (nvec <= 4 * 16) return {16, static_cast<int>((nvec + 15) / 16)};
  if (nvec <= kMaxVpt * 32) return {32, static_cast<int>((nvec + 31) / 32)};
  return {128, static_cast<int>((nvec + 127) / 128)};
}

// Sweep mode (TUNING.md): REPLAY_NORM_FWD_GEOMETRY=TPG,VPT,D,MINB,CS,P replaces the heuristic's
// (threads per row, vectors per thread, rows in flight, resident blocks asked of ptxas, streaming
// cache hints on x and y, a persistent grid: 0 = one block per 128 / TPG rows) for
// bfloat16 regions without a residual whose epilogue is a compiled shape (scale, affine,
// round-then-scale), from the configurations compiled here: how the heuristic was chosen.
#define REPLAY_NORM_FWD_SWEEP(X)                                                              \
  X(8, 6, 1, 4, 1)                                                                            \
  X(16, 3, 2, 4, 1)                                                                           \
  X(16, 3, 2, 4, 0)                                                                           \
  X(16, 3, 1, 8, 1)                                                                           \
  X(16, 3, 1, 8, 0)                                                                           \
  X(32, 2, 1, 8, 1) X(32, 7, 1, 4, 1) X(32, 7, 1, 4, 0) X(128, 4, 2, 4, 1) X(128, 4, 2, 4, 0) \
      X(128, 4, 2, 3, 1) X(128, 4, 2, 3, 0) X(128, 4, 1, 4, 1) X(64, 8, 1, 3, 0)

// The generic body's (row or weight exports, run-time epilogue: the default partitioner's forwards)
// configurations: the heuristic's at C = 4096 (128,4,1,4,1) and at per-head rows of 128
// (16,1,1,4,1), against plain stores, rows in flight and more resident blocks.
#define REPLAY_NORM_FWD_SWEEP_GENERIC(X)                                                        \
  X(128, 4, 1, 4, 1)                                                                            \
  X(128, 4, 1, 4, 0) X(128, 4, 2, 3, 1) X(128, 4, 2, 3, 0) X(128, 4, 1, 5, 1) X(128, 4, 1, 6, 1) \
      X(128, 4, 1, 6, 0) X(16, 1, 1, 4, 1) X(16, 1, 1, 4, 0) X(16, 1, 1, 8, 0) X(16, 1, 2, 6, 0)

template <int VPT, int TPG, int D, int MINB, bool CS>
void launch_sweep_generic(const NormFwdArgs& a, cudaStream_t s, bool persistent) {
  launch_shape<__nv_bfloat16, VPT, TPG, false, EpiKind::kGeneric, D, MINB, CS>(a, s, persistent);
}

template <int VPT, int TPG, int D, int MINB, bool CS>
void launch_sweep_shape(const NormFwdArgs& a, cudaStream_t s, bool persistent) {
  using T = __nv_bfloat16;
  switch (classify_epilogue(a)) {
    case EpiKind::kScale:
      return launch_shape<T, VPT, TPG, false, EpiKind::kScale, D, MINB, CS>(a, s, persistent);
    case EpiKind::kAffine:
      return launch_shape<T, VPT, TPG, false, EpiKind::kAffine, D, MINB, CS>(a, s, persistent);
    case EpiKind::kRoundScale:
      return launch_shape<T, VPT, TPG, false, EpiKind::kRoundScale, D, MINB, CS>(a, s, persistent);
    default:
      throw std::invalid_argument(
          "REPLAY_NORM_FWD_GEOMETRY: the compiled-shape sweep covers the scale, affine and "
          "round-then-scale epilogues (the generic body has its own configurations)");
  }
}

// True when REPLAY_NORM_FWD_GEOMETRY is set and the launch took it; throws when it names a
// configuration not compiled, too short for the row, or the region is not one the sweep covers.
bool launch_sweep(const NormFwdArgs& a, cudaStream_t s) {
  static const char* env = std::getenv("REPLAY_NORM_FWD_GEOMETRY");
  if (!env || !*env) return false;
  int tpg = 0, vpt = 0, d = 0, mb = 0, cs = 1, persistent = 1, used = 0;
  if (std::sscanf(env, "%d,%d,%d,%d,%d,%d%n", &tpg, &vpt, &d, &mb, &cs, &persistent, &used) != 6 ||
      env[used] != '\0')
    throw std::invalid_argument(std::string("REPLAY_NORM_FWD_GEOMETRY='") + env +
                                "': expected TPG,VPT,D,MINB,CS,P");
  if (a.x_dtype != DType::kBFloat16 || a.residual)
    throw std::invalid_argument(
        "REPLAY_NORM_FWD_GEOMETRY: the sweep covers bfloat16 rows without a residual");
  if (int64_t(tpg) * vpt * 8 < a.cols)
    throw std::invalid_argument(std::string("REPLAY_NORM_FWD_GEOMETRY='") + env + "' holds " +
                                std::to_string(tpg * vpt * 8) + " of the row's " +
                                std::to_string(a.cols) + " columns");
  const bool generic = classify_epilogue(a) == EpiKind::kGeneric;
#define REPLAY_SWEEP_CASE(TPG, VPT, D, MB, CS)                                  \
  if (!generic && tpg == TPG && vpt == VPT && d == D && mb == MB && cs == CS) { \
    launch_sweep_shape<VPT, TPG, D, MB, CS>(a, s, persistent != 0);             \
    return true;                                                                \
  }
#define REPLAY_SWEEP_GENERIC_CASE(TPG, VPT, D, MB, CS)                         \
  if (generic && tpg == TPG && vpt == VPT && d == D && mb == MB && cs == CS) { \
    launch_sweep_generic<VPT, TPG, D, MB, CS>(a, s, persistent != 0);          \
    return true;                                                               \
  }
  REPLAY_NORM_FWD_SWEEP(REPLAY_SWEEP_CASE)
  REPLAY_NORM_FWD_SWEEP_GENERIC(REPLAY_SWEEP_GENERIC_CASE)
#undef REPLAY_SWEEP_CASE
#undef REPLAY_SWEEP_GENERIC_CASE
  throw std::invalid_argument(std::string("REPLAY_NORM_FWD_GEOMETRY='") + env + "' is not among the " +
                              (generic ? "generic body's" : "compiled shapes'") +
                              " sweep configurations (kernels.cu)");
}

template <typename T>
void dispatch_optimized(const NormFwdArgs& a, cudaStream_t s) {
  if (launch_sweep(a, s)) return;
  auto [tpg, vpt] = geometry(a.cols / Vec<T>::kElems);
  const bool add = a.residual != nullptr;
  if (tpg == 16)
    add ? dispatch_vpt<T, 16, true>(vpt, a, s) : dispatch_vpt<T, 16, false>(vpt, a, s);
  else if (tpg == 32)
    add ? dispatch_vpt<T, 32, true>(vpt, a, s) : dispatch_vpt<T, 32, false>(vpt, a, s);
  else
    add ? dispatch_vpt<T, 128, true>(vpt, a, s) : dispatch_vpt<T, 128, false>(vpt, a, s);
}

template <typename T>
void launch_baseline(const NormFwdArgs& args, float* mean, float* rstd, void* h_ws,
                     cudaStream_t stream) {
  NormFwdArgs a = args;
  if (a.residual) {  // kernel 0: h to memory; the two kernels below read it as their x
    T* h = static_cast<T*>(a.h_out ? a.h_out : h_ws);
    const int64_t h_stride = a.h_out ? a.h_row_stride : a.cols;
    constexpr int kAddThreads = 256;
    const int64_t n = a.rows * (a.cols / Vec<T>::kElems);
    const int64_t blocks = std::min<int64_t>((n + kAddThreads - 1) / kAddThreads, 132 * 16);
    residual_add_kernel<T>
        <<<static_cast<unsigned>(blocks), kAddThreads, 0, stream>>>(a, h, h_stride);
    REPLAY_CUDA_LAUNCH("residual_add_kernel");
    a.x = h;
    a.x_row_stride = h_stride;
    a.residual = nullptr;
    a.h_out = nullptr;
  }
  constexpr int kStatsThreads = 256;  // 8 rows per block
  const int64_t stats_blocks = (a.rows + kStatsThreads / 32 - 1) / (kStatsThreads / 32);
  norm_stats_kernel<T>
      <<<static_cast<unsigned>(stats_blocks), kStatsThreads, 0, stream>>>(a, mean, rstd);
  REPLAY_CUDA_LAUNCH("norm_stats_kernel");
  constexpr int kApplyThreads = 256;
  const int64_t n = a.rows * (a.cols / Vec<T>::kElems);
  const int64_t blocks = std::min<int64_t>((n + kApplyThreads - 1) / kApplyThreads, 132 * 16);
  // The same compiled epilogue shapes as the optimized kernel: the baseline differs only in not
  // fusing the statistics with the normalization.
  auto apply = norm_apply_kernel<T, EpiKind::kGeneric>;
  switch (classify_epilogue(a)) {
    case EpiKind::kIdentity:
      apply = norm_apply_kernel<T, EpiKind::kIdentity>;
      break;
    case EpiKind::kScale:
      apply = norm_apply_kernel<T, EpiKind::kScale>;
      break;
    case EpiKind::kAffine:
      apply = norm_apply_kernel<T, EpiKind::kAffine>;
      break;
    case EpiKind::kRoundScale:
      apply = norm_apply_kernel<T, EpiKind::kRoundScale>;
      break;
    default:
      break;
  }
  apply<<<static_cast<unsigned>(blocks), kApplyThreads, 0, stream>>>(a, mean, rstd);
  REPLAY_CUDA_LAUNCH("norm_apply_kernel");
}

}  // namespace

std::string layernorm_fwd_supports(const NormFwdArgs& a, NormVariant variant) {
  if (a.n_weights > kNormMaxWeights) return "more than 2 weight operands in the epilogue";
  if (a.rows <= 0 || a.cols <= 0) return "empty rows";
  const DType t = a.x_dtype;
  if (t != DType::kBFloat16 && t != DType::kFloat16 && t != DType::kFloat32)
    return "x dtype " + std::string(dtype_name(t)) + " (needs bfloat16, float16 or float32)";
  auto writable = [](DType d) {
    return d == DType::kBFloat16 || d == DType::kFloat16 || d == DType::kFloat32;
  };
  if (!writable(a.out_dtype))
    return "output dtype " + std::string(dtype_name(a.out_dtype)) +
           " (needs bfloat16, float16 or float32)";
  for (int i = 0; i < a.n_weights; ++i)
    if (a.w_dtype[i] != t) return "a weight's dtype differs from the input dtype";
  const int64_t elems = 16 / static_cast<int64_t>(dtype_size(t));
  if (a.cols % elems || a.x_row_stride % elems || a.out_row_stride % elems)
    return "row length or stride not a multiple of a 16-byte vector";
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (a.n_row_exports < 0 || a.n_row_exports > kNormMaxExports)
    return "more than " + std::to_string(kNormMaxExports) + " exported intermediates";
  for (int i = 0; i < a.n_row_exports; ++i) {
    const NormRowExport& x = a.row_exports[i];
    if (!writable(x.dtype))
      return "an exported intermediate is " + std::string(dtype_name(x.dtype)) +
             " (needs bfloat16, float16 or float32)";
    if (!aligned(x.ptr) || x.row_stride % elems)
      return "an exported intermediate is not in 16-byte aligned rows";
    if (x.stage < kStageCentered || x.stage >= a.n_epilogue)
      return "an exported intermediate's stage " + std::to_string(x.stage) + " is not in the chain";
  }
  if (a.n_weight_exports < 0 || a.n_weight_exports > kNormMaxWeights)
    return "more than " + std::to_string(kNormMaxWeights) + " exported weights";
  for (int i = 0; i < a.n_weight_exports; ++i) {
    const NormWeightExport& x = a.weight_exports[i];
    if (!writable(x.dtype) || x.weight < 0 || x.weight >= a.n_weights || !x.ptr)
      return "an exported weight is not a bfloat16, float16 or float32 copy of an epilogue weight";
  }
  if (!aligned(a.x) || !aligned(a.out) || (a.n_weights > 0 && !aligned(a.w[0])) ||
      (a.n_weights > 1 && !aligned(a.w[1])))
    return "a pointer is not 16-byte aligned";
  if (a.x32_out && (!aligned(a.x32_out) || a.x32_row_stride % 4))
    return "the exported fp32 x is not in 16-byte aligned rows";
  if (a.eps_ptr && reinterpret_cast<uintptr_t>(a.eps_ptr) % alignof(float))
    return "the eps tensor is not aligned";
  if (a.residual) {
    if (!aligned(a.residual) || a.residual_row_stride % elems || (a.h_out && !aligned(a.h_out)) ||
        (a.h_out && a.h_row_stride % elems))
      return "the residual or h is not in 16-byte aligned rows";
    if (a.h_round != t && a.h_round != DType::kFloat32)
      return "h rounded to " + std::string(dtype_name(a.h_round)) + ", not to x's dtype";
  } else if (a.h_out) {
    return "h to write but no residual to add";
  }
  // The optimized kernel reads x and the residual through the read-only data path (ld.global.nc):
  // nothing it writes may overlap them.
  auto span = [&a](const void* p, int64_t row_stride, DType dt) {
    const auto* b = static_cast<const char*>(p);
    if (!b) return std::make_pair(b, b);
    return std::make_pair(b, b + ((a.rows - 1) * row_stride + a.cols) * int64_t(dtype_size(dt)));
  };
  auto overlaps = [](std::pair<const char*, const char*> u, std::pair<const char*, const char*> w) {
    return u.first < w.second && w.first < u.second;
  };
  if (variant == NormVariant::kOptimized) {
    std::vector<std::pair<const char*, const char*>> read{span(a.x, a.x_row_stride, t)};
    if (a.residual) read.push_back(span(a.residual, a.residual_row_stride, t));
    std::vector<std::pair<const char*, const char*>> written{
        span(a.out, a.out_row_stride, a.out_dtype)};
    if (a.h_out) written.push_back(span(a.h_out, a.h_row_stride, t));
    if (a.x32_out) written.push_back(span(a.x32_out, a.x32_row_stride, DType::kFloat32));
    for (int i = 0; i < a.n_row_exports; ++i)
      written.push_back(
          span(a.row_exports[i].ptr, a.row_exports[i].row_stride, a.row_exports[i].dtype));
    for (const auto& r : read)
      for (const auto& w : written)
        if (r.first && w.first && overlaps(r, w))
          return "an output overlaps x or the residual (in place)";
  }
  if (variant == NormVariant::kOptimized && geometry(a.cols / elems).second > kMaxVpt)
    return "row of " + std::to_string(a.cols) +
           " elements is longer than the register-resident "
           "kernel holds (" +
           std::to_string(kMaxVpt * 128 * elems) + ")";
  return "";
}

void layernorm_fwd_baseline(const NormFwdArgs& a, float* mean, float* rstd, void* h_ws,
                            cudaStream_t stream) {
  std::string why = layernorm_fwd_supports(a, NormVariant::kBaseline);
  if (!why.empty()) throw std::invalid_argument("layernorm_fwd baseline: " + why);
  if (a.residual && !a.h_out && !h_ws)
    throw std::invalid_argument("layernorm_fwd baseline: a residual add needs an h workspace");
  switch (a.x_dtype) {
    case DType::kBFloat16:
      return launch_baseline<__nv_bfloat16>(a, mean, rstd, h_ws, stream);
    case DType::kFloat16:
      return launch_baseline<__half>(a, mean, rstd, h_ws, stream);
    default:
      return launch_baseline<float>(a, mean, rstd, h_ws, stream);
  }
}

void layernorm_fwd_optimized(const NormFwdArgs& a, cudaStream_t stream) {
  std::string why = layernorm_fwd_supports(a, NormVariant::kOptimized);
  if (!why.empty()) throw std::invalid_argument("layernorm_fwd optimized: " + why);
  switch (a.x_dtype) {
    case DType::kBFloat16:
      dispatch_optimized<__nv_bfloat16>(a, stream);
      break;
    case DType::kFloat16:
      dispatch_optimized<__half>(a, stream);
      break;
    default:
      dispatch_optimized<float>(a, stream);
      break;
  }
  if (!launch_widths_recording()) return;
  // What norm_rows does: 16-byte vectors of x's dtype (E elements) for every [rows, cols]
  // operand in x's dtype and the weights (staged through shared memory); another dtype's rows
  // are stored E elements at a time (store_as: 16 bytes for float32, 8 for 16-bit beside a
  // float32 x); the statistics one float per row.
  const int e = 16 / static_cast<int>(dtype_size(a.x_dtype));
  auto row_bytes = [e](DType t) { return std::min(16, e * static_cast<int>(dtype_size(t))); };
  const char* k = "layernorm_fwd_rows";
  record_launch_width(k, "x", 16);
  if (a.residual) record_launch_width(k, "residual", 16);
  for (int i = 0; i < a.n_weights; ++i) record_launch_width(k, "w[" + std::to_string(i) + "]", 16);
  record_launch_width(k, "out", row_bytes(a.out_dtype));
  if (a.h_out) record_launch_width(k, "h", 16);
  if (a.x32_out) record_launch_width(k, "x32", 16);
  for (int i = 0; i < a.n_row_exports; ++i)
    record_launch_width(k, "export[" + std::to_string(i) + "]", row_bytes(a.row_exports[i].dtype));
  if (a.mean_out) record_launch_width(k, "mean", 4);
  if (a.rstd_out) record_launch_width(k, "rstd", 4);
}

}  // namespace replay
