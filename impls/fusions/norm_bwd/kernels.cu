// norm_bwd: baseline and optimized variants side by side (see kernels.hpp).
//
// Napkin math, [576000, 384] bf16 (the issue's shape): x and dy read 442 MB each, dx written
// 442 MB, w 768 B, mean/rstd 2.3 MB each: 1.332 GB; at 4.24 TB/s (H200 1 GiB copy) SOL is 314 µs.
// The baseline moves x and dy twice (2.22 GB: at most 60 % of SOL). The optimized kernel's extra
// traffic is its partial dw/db rows: 2 * blocks * C * 4 B (264 blocks: 0.8 MB, 0.06 %).
// nanoGPT [16384, 1600] bf16: 157 MB + 0.13 MB stats, SOL 37 µs.
//
// Kernel 1 (both variants): a group of G threads owns a row; thread t holds the row's 16-byte
// vectors t, t+G, ..., (VPT of them) of x and dy packed in registers; the next row's vectors are
// loaded while the current one is computed. Two passes over the registers: (1) S1 = sum(g),
// S2 = sum(g * xhat), reduced over the group; (2) dx, and (optimized) the dw/db terms accumulated
// in fp32 registers — each thread owns the same columns in every row of its block's rows (row
// groups interleaved over the grid). At the end the block's groups are summed in a fixed order
// through shared memory
// and the block writes one partial row of dw and of db. w_eff = rnd(w + offset) is staged in
// shared memory as fp32 once per block.
// Kernel 2 (baseline only): column sums of dy * xhat and dy over row chunks, read again from
// memory (what a separate column reduction must do), one partial row per chunk.
// Kernel 3 (both): sums the partial rows of each column in a fixed order, rounds and stores.
// A dx epilogue add (the residual stream's other gradient, `tangent + dx.to(bf16)`) is read and
// added in kernel 1's dx store, both variants: dx rounded to its dtype first, then the add in fp32,
// rounded again. It does not touch dw/db, whose order of summation stays fixed.
// dx only (a norm without affine parameters: no w, dw, db): both variants launch kernel 1 alone,
// without the accumulators (kAcc false), with w_eff = 1 staged; no workspace, no kernels 2, 3.
// Measured history and the split-size heuristic: TUNING.md (this folder).
#include "impls/fusions/norm_bwd/kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <type_traits>

#include "impls/cuda/cp_async.cuh"
#include "impls/cuda/cuda_check.hpp"
#include "impls/cuda/dtype_device.cuh"
#include "impls/cuda/pdl.cuh"
#include "impls/cuda/vec16.cuh"

namespace replay {
namespace {

// Round v to t where the graph materializes a narrow value (t uniform: a kernel argument).
__device__ __forceinline__ float round_as(float v, DType t) {
  if (t == DType::kBFloat16) return __bfloat162float(__float2bfloat16_rn(v));
  if (t == DType::kFloat16) return __half2float(__float2half_rn(v));
  return v;
}

// Rounding modes of the row kernel (a template parameter): none; each rounding the graph
// materializes applied at its runtime dtype (uniform branches per element); or the Llama form
// (Meta / Hugging Face RMSNorm: g = rnd(dy * w), rnd(xhat) and the dw term rounded to bfloat16,
// nothing else), compiled to two instructions per rounding with no branch.
enum RoundMode : int { kRndNone = 0, kRndAny = 1, kRndBf16 = 2 };

template <int R>
__device__ __forceinline__ float rnd(float v, DType t) {
  if constexpr (R == kRndNone)
    return v;
  else if constexpr (R == kRndBf16)
    return __bfloat162float(__float2bfloat16_rn(v));
  else
    return round_as(v, t);
}

constexpr int block_of(int g) {
  return g > 256 ? g : 256;
}

// Sums of a and b over the G threads of a row group (G a power of two; groups of G <= 32 are
// aligned lane segments, larger ones whole warps summed through shared memory in warp order).
// red: 2 x block / 32 slots, used by alternate calls (`phase` counts the calls, the same in every
// thread): a call's barrier also orders the previous call's reads of the other half before the next
// call's writes to it, so one barrier per call suffices (two before: a G = 256 row paid four per
// row with recomputed statistics).
template <int G>
__device__ __forceinline__ float2 group_sum2(float a, float b, float2* red, int& phase) {
  constexpr int W = G < 32 ? G : 32;
#pragma unroll
  for (int o = W / 2; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  if constexpr (G <= 32) {
    return make_float2(a, b);
  } else {
    constexpr int kWarps = G / 32;
    const int warp = threadIdx.x / 32, first = warp / kWarps * kWarps;
    red += (phase++ & 1) * (block_of(G) / 32);
    if (threadIdx.x % 32 == 0) red[warp] = make_float2(a, b);
    __syncthreads();
    float2 t = make_float2(0.f, 0.f);
#pragma unroll
    for (int i = 0; i < kWarps; ++i) {
      t.x += red[first + i].x;
      t.y += red[first + i].y;
    }
    return t;
  }
}

// ---------------------------------------------------------------------------------------------
// Kernel 1: dx rows (both variants); with kAcc, the chunk's dw/db partials (optimized).
// Block b takes the row groups b, b + grid, ... (about `split` rows). kRnd: how the graph rounds g,
// xhat, the dw term.
// stats_out (baseline, recomputed statistics): the row's mean and rstd for the column kernel.
//
// x and dy reach the thread through a ring of kStages shared-memory slots filled with cp.async
// (16 bytes, L2 only, zero-filled past the row end or the last row): the kStages - 1 rows after the
// current one are in flight while the current one is computed, without registers held for it (they
// go to the dw/db accumulators). Each thread copies and reads only its own slots, so the ring needs
// no barrier. Three stages (two rows in flight per group): H100, [8192, 4096] RMSNorm 98.5 -> 84.3
// µs; same time at [576000, 384] and [16384, 1600]; four stages gained nothing (TUNING.md).
// Rings of 4-5 parts per dy vector (the default partitioner's fp32 x beside a saved xhat: 1.3-1.7x
// the bytes per row of x, dy in one 16-bit dtype) take two stages: at three, they held one (Gemma:
// fp32 x and xs) or two (Llama: fp32 x, bf16 xs) 256-thread blocks per SM; at two, two or three
// (issue 25, TUNING.md).
constexpr int ring_stages(int parts) {
  return parts >= 4 ? 2 : 3;
}

// Row r's first element in a tensor laid out by m (NormBwdRowMap).
__device__ __forceinline__ int64_t row_off(const NormBwdArgs& a, const NormBwdRowMap& m,
                                           int64_t r) {
  return norm_bwd_row_offset(a.row_n1, a.row_n2, m, r);
}

// Row r's index (i0, i1, i2) over the row dims (n0, n1, n2), decomposed once per row for every
// tensor the row kernel addresses (norm_bwd_row_offset divides per tensor: per-head rows of 128
// paid two 64-bit divisions per tensor per row and thread). 32-bit division where the rows fit.
struct RowIx {
  int64_t i0, i1, i2;
};
__device__ __forceinline__ RowIx row_ix(const NormBwdArgs& a, int64_t r) {
  if (a.row_n1 == 1 && a.row_n2 == 1) return {r, 0, 0};  // plain rows (a uniform branch)
  if (a.rows <= INT32_MAX) {
    const uint32_t r32 = static_cast<uint32_t>(r), n1 = static_cast<uint32_t>(a.row_n1),
                   n2 = static_cast<uint32_t>(a.row_n2), q = r32 / n2;
    return {q / n1, q % n1, r32 % n2};
  }
  const int64_t q = r / a.row_n2;
  return {q / a.row_n1, q % a.row_n1, r % a.row_n2};
}
__device__ __forceinline__ int64_t ix_off(const RowIx& i, const NormBwdRowMap& m) {
  return i.i0 * m.s[0] + i.i1 * m.s[1] + i.i2 * m.s[2];
}

// 16-byte vectors of U per 16-byte vector of T (the kernels' column unit is one vector of dy):
// 1 for U = T, 2 for a float32 x or saved xhat beside a 16-bit dy, 0 for U = void (not read).
template <typename U, typename T>
constexpr int parts_of() {
  if constexpr (std::is_void_v<U>)
    return 0;
  else
    return static_cast<int>(sizeof(U) / sizeof(T));
}

// Unpacks the NP 16-byte vectors of U at p[0..NP) into f (NP * Vec<U>::kElems elements).
template <typename U, int NP>
__device__ __forceinline__ void unpack_parts(const uint4* const* p, float* f) {
#pragma unroll
  for (int q = 0; q < NP; ++q) Vec<U>::unpack(*p[q], f + q * Vec<U>::kElems);
}

// Dynamic shared memory of the row kernel: w_eff [cols] (fp32; bfloat16 in the Llama form,
// w_bytes 2), then the ring [stages][K][VPT][block] of 16-byte vectors, K = x's parts + 1 (dy) +
// the saved xhat's parts; the final partial sums [RPI][cols] reuse the ring.
__host__ __device__ constexpr size_t ring_offset(int64_t cols, int w_bytes) {
  return (static_cast<size_t>(cols) * w_bytes + 15) / 16 * 16;
}

// Resident blocks per SM the row kernel is compiled for (its register cap): 1 for G = 512, else 2;
// 3 for the Llama min-cut form (one dtype, kRndBf16, no db: 94 registers at 2 blocks, 80 and no
// spills at 3), whose 64 KiB block at C = 4096 leaves room for a third block: 6 rows in flight per
// SM instead of 4. H200: Llama [8192, 4096] 86.6 -> 83.8 µs, qk_norm rows of 128 84.5 -> 79.7 µs.
// Issue 25 (packed Llama form): only at 2 vectors per thread (its g is kept packed for pass 2,
// VPT x 4 registers: at 3 vectors ptxas spilled 16-26 bytes under the 80-register cap); and the
// one-dtype form without rounding or bias (litgpt's RMSNorm) likewise, to be measured.
// Llama's default-partition form (fp32 x, bf16 saved xhat, kRndBf16, 2 vectors) likewise: its
// two-stage ring and bfloat16 w take 72 KiB at C = 4096, room for three blocks.
template <typename T, typename TX, typename TS, int G, int VPT, bool kAcc, int kRnd, bool kDb>
constexpr int rows_min_blocks() {
  if constexpr (G > 256)
    return 1;
  else if constexpr (kAcc && !kDb && (kRnd == kRndBf16 || kRnd == kRndNone) && VPT <= 2 &&
                     std::is_same_v<T, TX> && std::is_void_v<TS>)
    return 3;
  else if constexpr (kAcc && !kDb && kRnd == kRndBf16 && VPT <= 2 && std::is_same_v<TS, T>)
    return 3;
  else
    return 2;
}

// T: dy and dx; TX: x (T, or float beside a 16-bit T); TS: the saved xhat of the dw term (void:
// none, dw uses xhat; only with kAcc). kRnd: RoundMode. kDb: db accumulated (with kAcc; false for
// a norm without bias: the db accumulators and their adds are dropped, VPT x 8 registers for bf16).
template <typename T, typename TX, typename TS, int G, int VPT, bool kAcc, int kRnd, bool kDb>
__global__ void __launch_bounds__(block_of(G),
                                  rows_min_blocks<T, TX, TS, G, VPT, kAcc, kRnd, kDb>())
    norm_bwd_rows_kernel(NormBwdArgs a, int64_t split, float* part_dw, float* part_db,
                         float* stats_out) {
  using V = Vec<T>;
  constexpr int E = V::kElems;
  constexpr int NX = parts_of<TX, T>(), NS = parts_of<TS, T>(), K = NX + 1 + NS;
  static_assert(NX >= 1 && (NS == 0 || kAcc), "x at least as wide as dy; xs only with dw");
  constexpr int kBlock = block_of(G);
  constexpr int RPI = kBlock / G;  // rows per block iteration
  constexpr int kStages = ring_stages(K);
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* w_s = reinterpret_cast<float*>(smem_raw);
  uint4* ring = reinterpret_cast<uint4*>(
      smem_raw + ring_offset(a.cols, kRnd == kRndBf16 ? sizeof(__nv_bfloat16) : sizeof(float)));
  __shared__ float2 red[2 * kBlock / 32];
  int phase = 0;  // group_sum2 calls so far
  const int tid = threadIdx.x % G, grp = threadIdx.x / G;
  const int nvec = static_cast<int>(a.cols / E);
  // Rows interleaved over the grid: block b takes the row groups b, b + grid, b + 2 grid, ... (RPI
  // rows each), about `split` rows in all (the grid is ceil(rows / split) blocks). Contiguous
  // chunks per block made every tensor ~grid sequential streams far apart in memory: the default
  // partitioner's forms ran at ~2.5 TB/s whatever the blocks per SM (TUNING.md, issue 25 step 4).
  // A block's set of rows is fixed by the grid, so its partial dw/db row is run-to-run identical.
  (void)split;
  const int64_t row0 = int64_t(blockIdx.x) * RPI, step = int64_t(RPI) * gridDim.x;
  const float inv_c = 1.f / float(a.cols);
  // This thread's slot k of part j (0 .. NX-1: x, NX: dy, NX+1 ..: xs) in stage st.
  auto slot = [&](int st, int j, int k) -> uint4* {
    return ring + ((st * K + j) * VPT + k) * kBlock + threadIdx.x;
  };
  // A float32 x or saved xhat beside a 16-bit dy is 32 bytes per dy vector, one DRAM sector, which
  // the thread's two 16-byte copies would read half by half (each copy instruction touching 32
  // sectors for 512 bytes). Paired, lanes 2m and 2m + 1 (vectors v and v ^ 1: G is even) copy the
  // pair's even vector's sector with the first instruction and the odd one's with the second, each
  // into its owner's slot; the lanes then read slots their partner filled, so a warp barrier
  // follows the wait and precedes the next copy into a stage (TUNING.md, issue 25 step 4).
  constexpr bool kPairX = NX == 2, kPairS = NS == 2, kPaired = kPairX || kPairS;
  const bool odd = tid & 1;
  auto copy_paired = [&](uint4* own_lo, uint4* own_hi, const uint4* src, int v, bool in, bool pin) {
    // own_lo / own_hi: this thread's slots of the part's halves; the partner's are one thread
    // over. First copy, the even vector's sector: the even lane its own lower half, the odd lane
    // the partner's upper; second, the odd vector's: the even lane the partner's lower, the odd
    // lane its own upper. Selected, not branched: each copy is one instruction for the warp.
    const bool p1 = odd ? pin : in, p2 = odd ? in : pin;
    cp_async16(odd ? own_hi - 1 : own_lo, src + (p1 ? 2 * (v & ~1) + (odd ? 1 : 0) : 0), p1);
    cp_async16(odd ? own_hi : own_lo + 1, src + (p2 ? 2 * (v | 1) + (odd ? 1 : 0) : 0), p2);
  };
  auto issue = [&](int64_t row, int st) {
    const bool ok = row < a.rows;
    const RowIx ix = row_ix(a, ok ? row : 0);
    const uint4* xr =
        reinterpret_cast<const uint4*>(static_cast<const TX*>(a.x) + ix_off(ix, a.x_rows));
    const uint4* dr =
        reinterpret_cast<const uint4*>(static_cast<const T*>(a.dy) + ix_off(ix, a.dy_rows));
    const uint4* sr = nullptr;
    if constexpr (NS > 0)
      sr = reinterpret_cast<const uint4*>(static_cast<const TS*>(a.xs) + ix_off(ix, a.xs_rows));
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int v = tid + k * G;
      const bool in = ok && v < nvec, pin = ok && (v ^ 1) < nvec;
      if constexpr (kPairX) {
        copy_paired(slot(st, 0, k), slot(st, 1, k), xr, v, in, pin);
      } else {
#pragma unroll
        for (int q = 0; q < NX; ++q) cp_async16(slot(st, q, k), xr + (in ? v * NX + q : 0), in);
      }
      cp_async16(slot(st, NX, k), dr + (in ? v : 0), in);
      if constexpr (kPairS) {
        copy_paired(slot(st, NX + 1, k), slot(st, NX + 2, k), sr, v, in, pin);
      } else {
#pragma unroll
        for (int q = 0; q < NS; ++q)
          cp_async16(slot(st, NX + 1 + q, k), sr + (in ? v * NS + q : 0), in);
      }
    }
    cp_async_commit();
  };
  auto unpack_x = [&](int st, int k, float* f) {
    const uint4* p[NX];
#pragma unroll
    for (int q = 0; q < NX; ++q) p[q] = slot(st, q, k);
    unpack_parts<TX, NX>(p, f);
  };
  auto load_stats = [&](int64_t row, float& m, float& s) {
    m = 0.f;
    s = 1.f;
    if (row < a.rows && a.stats != NormBwdStats::kRecompute) {
      if (a.mean) m = __ldg(a.mean + row * a.mean_stride);
      if (a.rstd) s = __ldg(a.rstd + row * a.rstd_stride);
    }
  };

  // The finalize (a programmatic dependent) may launch once every block of this grid has
  // started; it waits for this grid's completion before it reads (norm_bwd_finalize_kernel).
  pdl_launch_dependents();
  int64_t row = row0 + grp;
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) issue(row + i * step, i);  // in flight during staging
  float nm, ns;
  load_stats(row, nm, ns);
  // No weight: w = 1 (dy * 1 is exact). The Llama form stages w_eff as bfloat16 (exact: round_mode
  // requires it) for the packed product g = rnd(dy * w).
  __nv_bfloat16* w_b = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  for (int64_t c = threadIdx.x; c < a.cols; c += kBlock) {
    const float w =
        a.w ? round_as(load_elem<float>(a.w, c, a.w_dtype) + a.w_offset, a.w_round) : 1.f;
    if constexpr (kRnd == kRndBf16)
      w_b[c] = __float2bfloat16_rn(w);
    else
      w_s[c] = w;
  }
  float eps = a.eps;
  if (a.stats == NormBwdStats::kRecompute && a.eps_ptr)
    eps += load_elem<float>(a.eps_ptr, 0, a.eps_dtype);
  __syncthreads();

  float acc_w[kAcc ? VPT : 1][E], acc_b[kAcc && kDb ? VPT : 1][E];
  if constexpr (kAcc) {
#pragma unroll
    for (int k = 0; k < VPT; ++k)
#pragma unroll
      for (int e = 0; e < E; ++e) acc_w[k][e] = acc_b[kDb ? k : 0][e] = 0.f;
  }
  const int64_t iters = row0 < a.rows ? (a.rows - row0 + step - 1) / step : 0;
  // Ring stages of this row and of the row issued now, rotated (a 64-bit `it % kStages` per row
  // was two 64-bit divisions per row and thread).
  int st = 0, st_issue = kStages - 1;
  for (int64_t it = 0; it < iters; ++it, row += step, st = st + 1 == kStages ? 0 : st + 1,
               st_issue = st_issue + 1 == kStages ? 0 : st_issue + 1) {
    if constexpr (kPaired) __syncwarp();  // the partner is done reading stage st_issue
    issue(row + (kStages - 1) * step, st_issue);
    float m = nm, s = ns;
    load_stats(row + step, nm, ns);
    cp_async_wait<kStages - 1>();         // this row's copies (this thread's own) have landed
    if constexpr (kPaired) __syncwarp();  // and the partner's, into this thread's slots
    const bool valid = row < a.rows;
    // Row statistics: xhat = (x - m) * s; rs is the rstd of dx.
    float rs = s;
    if (a.stats == NormBwdStats::kNormalized) {
      m = 0.f;
      s = 1.f;
    } else if (a.stats == NormBwdStats::kRecompute) {
      float s1 = 0.f, s2 = 0.f;
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        float f[E];
        unpack_x(st, k, f);  // zero-filled past the row
#pragma unroll
        for (int e = 0; e < E; ++e) s1 += f[e];
      }
      const float mean = a.layernorm ? group_sum2<G>(s1, 0.f, red, phase).x * inv_c : 0.f;
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const bool in = tid + k * G < nvec;
        float f[E];
        unpack_x(st, k, f);
#pragma unroll
        for (int e = 0; e < E; ++e) {
          const float d = in ? f[e] - mean : 0.f;
          s2 = fmaf(d, d, s2);
        }
      }
      const float var =
          group_sum2<G>(s2, 0.f, red, phase).x * inv_c * (a.layernorm ? a.var_scale : 1.f);
      rs = rsqrtf(var + eps);
      m = mean;
      s = rs;
      if (stats_out && valid && tid == 0) {
        stats_out[row] = m;
        stats_out[a.rows + row] = s;
      }
    }
    // Rows past the last row read zeros (x, dy, xs zero-filled); with m = s = 0 their xhat is 0 too
    // (a recomputed rstd of a zero row with eps 0 is inf), so their dw/db terms are exact zeros
    // and need no select per element. Their dx is not stored.
    if (!valid) m = s = 0.f;
    const float ms = -m * s;
    // Pass 1: S1 = sum(g), S2 = sum(g * xhat).
    float p1[2] = {0.f, 0.f}, p2[2] = {0.f, 0.f}, p3 = 0.f;
    // The Llama form (RMSNorm, m = 0): g = rnd(dy * w) as one bf16x2 multiply per two elements
    // (the fp32 product of two bfloat16 values is exact, so its single rounding is the graph's),
    // kept packed for pass 2; S2 = s * sum(g * x) (one FMA per element; xhat is x * s).
    uint4 g_keep[kRnd == kRndBf16 ? VPT : 1];
    if constexpr (kRnd == kRndBf16) {
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int v = tid + k * G;
        if (v >= nvec) continue;
        float xf[E];
        unpack_x(st, k, xf);
        const uint4 d = *slot(st, NX, k), w = *reinterpret_cast<const uint4*>(w_b + v * E);
        const __nv_bfloat162* d2 = reinterpret_cast<const __nv_bfloat162*>(&d);
        const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&w);
        __nv_bfloat162* g2 = reinterpret_cast<__nv_bfloat162*>(&g_keep[k]);
#pragma unroll
        for (int j = 0; j < E / 2; ++j) {
          g2[j] = __hmul2_rn(d2[j], w2[j]);
          const float2 g = __bfloat1622float2(g2[j]);
          p2[0] = fmaf(g.x, xf[2 * j], p2[0]);
          p2[1] = fmaf(g.y, xf[2 * j + 1], p2[1]);
        }
      }
      p2[0] *= s;
      p2[1] *= s;
    }
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      if constexpr (kRnd == kRndBf16) break;
      const int v = tid + k * G;
      if (v >= nvec) continue;
      float xf[E], df[E];
      unpack_x(st, k, xf);
      V::unpack(*slot(st, NX, k), df);
      const float4* w4 = reinterpret_cast<const float4*>(w_s + v * E);
#pragma unroll
      for (int e = 0; e < E; e += 4) {
        const float4 w = w4[e / 4];
        const float wv[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float g = rnd<kRnd>(df[e + i] * wv[i], a.g_round);
          const float xh = fmaf(xf[e + i], s, ms);
          p1[i % 2] += g;
          p2[i % 2] = fmaf(g, xh, p2[i % 2]);
          if constexpr (kRnd != kRndBf16) p3 += xh;  // S3 (recenter only; the Llama form has none)
        }
      }
    }
    const float2 S = group_sum2<G>(p1[0] + p1[1], p2[0] + p2[1], red, phase);
    const float S3 = a.recenter ? group_sum2<G>(p3, 0.f, red, phase).x : 0.f;  // uniform branch
    // Pass 2: dx = rs * (g - (S1 + (xhat [- S3 / C]) * S2) / C); dw += rnd(dy * rnd(xhat or xs));
    // db += dy.
    const float ca = rs, cb = -rs * S.y * inv_c;
    const float cc = (a.layernorm ? -rs * S.x * inv_c : 0.f) - cb * S3 * inv_c;
    const RowIx dix = row_ix(a, valid ? row : 0);
    T* dxr = static_cast<T*>(a.dx) + ix_off(dix, a.dx_rows);
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int v = tid + k * G;
      if (v >= nvec) continue;
      float xf[E], df[E], out[E];
      unpack_x(st, k, xf);
      if constexpr (kRnd != kRndBf16) V::unpack(*slot(st, NX, k), df);
      float sf[NS > 0 ? E : 1];
      if constexpr (NS > 0) {
        const uint4* p[NS > 0 ? NS : 1];
#pragma unroll
        for (int q = 0; q < NS; ++q) p[q] = slot(st, NX + 1 + q, k);
        unpack_parts<std::conditional_t<NS == 0, T, TS>, NS>(p, sf);
      }
      if constexpr (kRnd == kRndBf16) {
        // g from pass 1; the dw term rnd(dy * rnd(xhat or xs)) as one bf16x2 multiply per two
        // elements (exact product, one rounding, as the graph's).
        const uint4 d = *slot(st, NX, k);
        const __nv_bfloat162* d2 = reinterpret_cast<const __nv_bfloat162*>(&d);
        const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&g_keep[k]);
#pragma unroll
        for (int j = 0; j < E / 2; ++j) {
          const float2 g = __bfloat1622float2(g2[j]);
          const float xh0 = fmaf(xf[2 * j], s, ms), xh1 = fmaf(xf[2 * j + 1], s, ms);
          out[2 * j] = fmaf(ca, g.x, fmaf(cb, xh0, cc));
          out[2 * j + 1] = fmaf(ca, g.y, fmaf(cb, xh1, cc));
          if constexpr (kAcc) {
            __nv_bfloat162 xr;
            if constexpr (NS > 0)
              xr = __floats2bfloat162_rn(sf[2 * j], sf[2 * j + 1]);
            else
              xr = __floats2bfloat162_rn(xh0, xh1);
            const float2 t = __bfloat1622float2(__hmul2_rn(d2[j], xr));
            acc_w[k][2 * j] += t.x;
            acc_w[k][2 * j + 1] += t.y;
          }
        }
      }
      const float4* w4 = reinterpret_cast<const float4*>(w_s + v * E);
#pragma unroll
      for (int e = 0; e < E; e += 4) {
        if constexpr (kRnd == kRndBf16) break;
        const float4 w = w4[e / 4];
        const float wv[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float g = rnd<kRnd>(df[e + i] * wv[i], a.g_round);
          const float xh = fmaf(xf[e + i], s, ms);
          if constexpr (kRnd == kRndAny) {  // T5: the two terms rounded apart before their sum
            if (a.dx_part_round != DType::kFloat32)
              out[e + i] =
                  round_as(ca * g, a.dx_part_round) + round_as(fmaf(cb, xh, cc), a.dx_part_round);
            else
              out[e + i] = fmaf(ca, g, fmaf(cb, xh, cc));
          } else {
            out[e + i] = fmaf(ca, g, fmaf(cb, xh, cc));
          }
          if constexpr (kAcc) {
            float xr = xh;
            if constexpr (NS > 0) xr = sf[e + i];  // the graph's saved normalized value
            xr = rnd<kRnd>(xr, a.xhat_round);
            const float t = rnd<kRnd>(df[e + i] * xr, a.dwt_round);
            acc_w[k][e + i] += t;  // rows past the last: t = 0 exactly (m = s = 0 above)
            if constexpr (kDb) acc_b[k][e + i] += df[e + i];
          }
        }
      }
      if (valid) {
        if (a.dx_add) {  // dx epilogue add: rnd(rnd(dx) + other), as the graph rounds
          float o[E];
          V::unpack(__ldcs(reinterpret_cast<const uint4*>(static_cast<const T*>(a.dx_add) +
                                                          ix_off(dix, a.dx_add_rows)) +
                           v),
                    o);
#pragma unroll
          for (int e = 0; e < E; ++e) out[e] = round_as(out[e], a.dy_dtype) + o[e];
        }
        // a plain store: the evict-first hint of st.global.cs cost the forward 3-7 % on the
        // H200 (layernorm_fwd/TUNING.md, issue 25 sweep)
        reinterpret_cast<uint4*>(dxr)[v] = V::pack(out);
      }
    }
  }
  cp_async_wait<0>();  // the last (empty) copies

  if constexpr (kAcc) {
    // One partial row per block: the groups' accumulators summed in group order, through the
    // ring's shared memory.
    float* scratch = reinterpret_cast<float*>(ring);
    __syncthreads();  // every thread is done with its ring slots
    for (int q = 0; q < (kDb ? 2 : 1); ++q) {
      float* part = q == 0 ? part_dw : part_db;
      if (!part) continue;
      float* dst = part + int64_t(blockIdx.x) * a.cols;
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int v = tid + k * G;
        if (v >= nvec) continue;
        float* o = (RPI == 1 ? dst : scratch + grp * a.cols) + v * E;
#pragma unroll
        for (int e = 0; e < E; e += 4)
          *reinterpret_cast<float4*>(o + e) =
              q == 0 ? make_float4(acc_w[k][e], acc_w[k][e + 1], acc_w[k][e + 2], acc_w[k][e + 3])
                     : make_float4(acc_b[kDb ? k : 0][e], acc_b[kDb ? k : 0][e + 1],
                                   acc_b[kDb ? k : 0][e + 2], acc_b[kDb ? k : 0][e + 3]);
      }
      if constexpr (RPI > 1) {
        __syncthreads();
        for (int64_t c = threadIdx.x; c < a.cols; c += kBlock) {
          float t = scratch[c];
#pragma unroll
          for (int gi = 1; gi < RPI; ++gi) t += scratch[gi * a.cols + c];
          dst[c] = t;
        }
        __syncthreads();
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Kernel 2 (baseline): column sums over a chunk of rows. Block: vt threads across 16-byte
// vectors of a column tile x (256 / vt) row lanes; partials summed over the lanes in lane order.
// With a saved xhat (TS not void) it reads dy and xs only.
constexpr int kColThreads = 256;

template <typename T, typename TX, typename TS, bool kRound>
__global__ void __launch_bounds__(kColThreads)
    norm_bwd_cols_kernel(NormBwdArgs a, const float* stats, int vt, int64_t rows_per_chunk,
                         float* part_dw, float* part_db) {
  using V = Vec<T>;
  constexpr int E = V::kElems;
  constexpr int NX = parts_of<TX, T>(), NS = parts_of<TS, T>();
  __shared__ float buf[kColThreads * E];
  const int tx = threadIdx.x % vt, ty = threadIdx.x / vt, lanes = kColThreads / vt;
  const int nvec = static_cast<int>(a.cols / E);
  const int v = blockIdx.x * vt + tx;
  const bool in = v < nvec;
  const int64_t r0 = int64_t(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = min(r0 + rows_per_chunk, a.rows);
  float aw[E], ab[E];
#pragma unroll
  for (int e = 0; e < E; ++e) aw[e] = ab[e] = 0.f;
  if (in) {
#pragma unroll 4
    for (int64_t row = r0 + ty; row < r1; row += lanes) {
      float xf[E], df[E];
      V::unpack(__ldcs(reinterpret_cast<const uint4*>(static_cast<const T*>(a.dy) +
                                                      row_off(a, a.dy_rows, row)) +
                       v),
                df);
      float m = 0.f, s = 1.f;
      if constexpr (NS > 0) {  // the saved normalized value: xhat = xs
        using U = std::conditional_t<NS == 0, T, TS>;
        const uint4* sr = reinterpret_cast<const uint4*>(static_cast<const U*>(a.xs) +
                                                         row_off(a, a.xs_rows, row));
#pragma unroll
        for (int q = 0; q < NS; ++q)
          Vec<U>::unpack(__ldcs(sr + v * NS + q), xf + q * Vec<U>::kElems);
      } else {
        const uint4* xr =
            reinterpret_cast<const uint4*>(static_cast<const TX*>(a.x) + row_off(a, a.x_rows, row));
#pragma unroll
        for (int q = 0; q < NX; ++q)
          Vec<TX>::unpack(__ldcs(xr + v * NX + q), xf + q * Vec<TX>::kElems);
        if (a.stats == NormBwdStats::kRecompute) {
          m = stats[row];
          s = stats[a.rows + row];
        } else if (a.stats == NormBwdStats::kSaved) {
          if (a.mean) m = __ldg(a.mean + row * a.mean_stride);
          s = __ldg(a.rstd + row * a.rstd_stride);
        }
      }
      const float ms = -m * s;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        float xr = fmaf(xf[e], s, ms);
        if constexpr (kRound) xr = round_as(xr, a.xhat_round);
        float t = df[e] * xr;
        if constexpr (kRound) t = round_as(t, a.dwt_round);
        aw[e] += t;
        ab[e] += df[e];
      }
    }
  }
  for (int q = 0; q < 2; ++q) {
    float* part = q == 0 ? part_dw : part_db;
    if (!part) continue;
#pragma unroll
    for (int e = 0; e < E; ++e) buf[(ty * vt + tx) * E + e] = q == 0 ? aw[e] : ab[e];
    __syncthreads();
    if (ty == 0 && in) {
#pragma unroll
      for (int e = 0; e < E; ++e) {
        float t = buf[tx * E + e];
        for (int l = 1; l < lanes; ++l) t += buf[(l * vt + tx) * E + e];
        part[int64_t(blockIdx.y) * a.cols + v * E + e] = t;
      }
    }
    __syncthreads();
  }
}

// ---------------------------------------------------------------------------------------------
// Kernel 3 (both): dw[c] = rnd(sum over partial rows p of part[p][c]), p in a fixed order:
// slice y of 32 sums p = y, y + 32, ... in order, then slices 0..31 in order. 32 slices (16
// before issue 25): the kernel runs after the row kernel, so its read of the partial rows (264
// x 4096 x 4 B = 4.3 MB for the Llama shape) is latency-bound tail time: with 1024 threads per
// 32 columns every thread's ~8 loads are in flight at once.
constexpr int kFinCols = 32, kFinSlices = 32;

__global__ void __launch_bounds__(kFinCols* kFinSlices)
    norm_bwd_finalize_kernel(const float* part_dw, const float* part_db, int64_t nparts,
                             int64_t cols, void* dw, DType dw_dtype, DType dw_round, void* db,
                             DType db_dtype, DType db_round) {
  __shared__ float buf[kFinSlices][kFinCols + 1];
  // Launched as a programmatic dependent of the row kernel (optimized variant): wait until that
  // grid has completed and its partial rows are visible (a no-op for a plain launch).
  pdl_wait();
  const int64_t c = int64_t(blockIdx.x) * kFinCols + threadIdx.x;
  for (int q = 0; q < 2; ++q) {
    const float* part = q == 0 ? part_dw : part_db;
    if (!part) continue;
    float s = 0.f;
    if (c < cols) {
#pragma unroll 8
      for (int64_t p = threadIdx.y; p < nparts; p += kFinSlices) s += part[p * cols + c];
    }
    buf[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
      float t = buf[0][threadIdx.x];
#pragma unroll
      for (int i = 1; i < kFinSlices; ++i) t += buf[i][threadIdx.x];
      if (q == 0)
        store_elem<float>(dw, c, dw_dtype, round_as(t, dw_round));
      else
        store_elem<float>(db, c, db_dtype, round_as(t, db_round));
    }
    __syncthreads();
  }
}

// pdl: launched with programmatic stream serialization after a row kernel that lets its
// dependents launch early (griddepcontrol.launch_dependents): the finalize's launch and block
// scheduling overlap the row kernel's tail instead of following its completion; its
// griddepcontrol.wait still orders every read of the partial rows after the row kernel.
void launch_finalize(const NormBwdArgs& a, const float* part_dw, const float* part_db,
                     int64_t nparts, cudaStream_t s, bool pdl = false) {
  const dim3 grid(static_cast<unsigned>((a.cols + kFinCols - 1) / kFinCols));
  REPLAY_CUDA(launch_maybe_pdl(norm_bwd_finalize_kernel, grid, dim3(kFinCols, kFinSlices), 0, s,
                               pdl, part_dw, part_db, nparts, a.cols, a.dw, a.dw_dtype, a.dw_round,
                               a.db, a.db_dtype, a.db_round));
  REPLAY_CUDA_LAUNCH("norm_bwd_finalize_kernel");
}

// ---------------------------------------------------------------------------------------------
// Host side: geometry, occupancy (cached), dispatch.

int elems_of(DType t) {
  return t == DType::kFloat32 ? 4 : 8;
}

int bytes_of(DType t) {
  return t == DType::kFloat32 ? 4 : 2;
}

int pow2ceil(int64_t n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

// Vectors per thread: at most 3 for 16-bit types (24 elements: the dw/db accumulators, the row and
// the prefetched next row then fit the 128-register cap of 2 blocks of 256 threads per SM; 4
// spilled up to 500 bytes), at most 4 for fp32 (16 elements). The group is the smallest power of
// two that holds the row, so a thread holds max_vpt/2 < vpt <= max_vpt vectors. The mixed forms
// (a float32 x beside a bfloat16 dy, or a saved xhat) too: at max_vpt only, as they were first
// instantiated, Llama's default-partition backward ([8192, 4096], fp32 x, bf16 xs) had a third
// vector per thread past the row, a 160 KiB ring and block, one block per SM: 239.5 us on an H200,
// 33 % of SOL.
constexpr int kMinGroup = 8, kMaxGroup = 512;

int max_vpt(DType t) {
  return t == DType::kFloat32 ? 4 : 3;
}

// Wide rows (issue 25): a 16-bit row of 128 to 512 vectors (C = 1024 .. 4096 bf16) in one dtype,
// without a saved xhat or db, takes up to 4 vectors per thread (groups of 32 .. 128 threads)
// instead of at most 3 (64 .. 256): each row pays a fixed cost per thread (ring copies issued,
// statistics loaded, addresses, two group reductions with a block barrier: ~250 instructions per
// warp and row in the H200 SASS of the G = 256 kernel, 36 executed instructions per element in
// all), so twice the elements per thread halve it per element. The dw accumulators (32 fp32
// registers at 4 vectors) fit the 128-register cap of 2 blocks per SM; with db they would not.
constexpr int kWideVpt = 4;

bool wide_rows(int64_t nvec, const NormBwdArgs& a) {
  return a.dy_dtype != DType::kFloat32 && a.x_dtype == a.dy_dtype && !a.xs && !a.db &&
         nvec >= 128 && nvec <= 512;
}

NormBwdGeometry geometry_of(int64_t nvec, DType t, bool wide) {
  NormBwdGeometry g;
  const int mv = wide ? kWideVpt : max_vpt(t);
  g.threads_per_row = std::clamp(pow2ceil((nvec + mv - 1) / mv), kMinGroup, kMaxGroup);
  g.vectors_per_thread =
      std::max<int>(mv - 1, static_cast<int>((nvec + g.threads_per_row - 1) / g.threads_per_row));
  g.block_threads = block_of(g.threads_per_row);
  g.rows_per_iter = g.block_threads / g.threads_per_row;
  return g;
}

bool needs_round(const NormBwdArgs& a) {
  auto narrow = [](DType t) { return t == DType::kBFloat16 || t == DType::kFloat16; };
  return narrow(a.g_round) || narrow(a.xhat_round) || narrow(a.dwt_round) ||
         narrow(a.dx_part_round);
}

// The row kernel's RoundMode: the Llama form (RMSNorm, bfloat16 dy; g, xhat and the dw term
// rounded to bfloat16, no other rounding, no bias, no recentering; w_eff a bfloat16 value, so that
// g = rnd(dy * w) is one exact bf16x2 multiply) compiled without branches; any other rounding at
// its runtime dtype.
int round_mode(const NormBwdArgs& a) {
  if (!needs_round(a)) return kRndNone;
  const DType b = DType::kBFloat16;
  const bool w_bf16 = !a.w || a.w_round == b || (a.w_dtype == b && a.w_offset == 0.f);
  // A bfloat16 saved xhat (Llama's default partition) is the dw term's xhat: its rounding to
  // bfloat16 is exact, so an unrounded xhat_round is the same form.
  const bool xhat_bf16 =
      a.xhat_round == b || (a.xs && a.xs_dtype == b && a.xhat_round == DType::kFloat32);
  if (a.dy_dtype == b && a.g_round == b && xhat_bf16 && a.dwt_round == b &&
      a.dx_part_round == DType::kFloat32 && !a.recenter && !a.db && !a.layernorm && w_bf16)
    return kRndBf16;
  return kRndAny;
}

using RowsKernel = void (*)(NormBwdArgs, int64_t, float*, float*, float*);

// Instantiations: dx only (no accumulators) without rounding or with any; with the accumulators:
// no rounding with or without db, any rounding (db when present), the Llama form (bfloat16 dy, no
// db).
template <typename T, typename TX, typename TS, int G, int VPT>
RowsKernel pick_rows(bool acc, int mode, bool db) {
  if constexpr (std::is_void_v<TS>) {
    if (!acc)
      return mode == kRndNone ? norm_bwd_rows_kernel<T, TX, TS, G, VPT, false, kRndNone, false>
                              : norm_bwd_rows_kernel<T, TX, TS, G, VPT, false, kRndAny, false>;
  }
  // a saved xhat is read by the dw term only: always with the accumulators
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    if (mode == kRndBf16) return norm_bwd_rows_kernel<T, TX, TS, G, VPT, true, kRndBf16, false>;
  if (mode != kRndNone) return norm_bwd_rows_kernel<T, TX, TS, G, VPT, true, kRndAny, true>;
  return db ? norm_bwd_rows_kernel<T, TX, TS, G, VPT, true, kRndNone, true>
            : norm_bwd_rows_kernel<T, TX, TS, G, VPT, true, kRndNone, false>;
}

// Wide rows (kWideVpt vectors per thread, 16-bit, one dtype, no saved xhat, no db): dx only, or
// with the dw accumulators in each rounding mode.
template <typename T, int G>
RowsKernel pick_rows_wide(bool acc, int mode) {
  constexpr int V = kWideVpt;
  if (!acc)
    return mode == kRndNone ? norm_bwd_rows_kernel<T, T, void, G, V, false, kRndNone, false>
                            : norm_bwd_rows_kernel<T, T, void, G, V, false, kRndAny, false>;
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    if (mode == kRndBf16) return norm_bwd_rows_kernel<T, T, void, G, V, true, kRndBf16, false>;
  return mode == kRndNone ? norm_bwd_rows_kernel<T, T, void, G, V, true, kRndNone, false>
                          : norm_bwd_rows_kernel<T, T, void, G, V, true, kRndAny, false>;
}

template <typename T, typename TX, typename TS, int G>
RowsKernel pick_vpt(int vpt, bool acc, int mode, bool db) {
  if constexpr (std::is_same_v<T, float>) {
    return vpt == 3 ? pick_rows<T, TX, TS, G, 3>(acc, mode, db)
                    : pick_rows<T, TX, TS, G, 4>(acc, mode, db);
  } else {
    if constexpr (std::is_same_v<T, TX> && std::is_void_v<TS> && G >= 32 && G <= 128)
      if (vpt == kWideVpt) return pick_rows_wide<T, G>(acc, mode);
    return vpt == 2 ? pick_rows<T, TX, TS, G, 2>(acc, mode, db)
                    : pick_rows<T, TX, TS, G, 3>(acc, mode, db);
  }
}

template <typename T, typename TX = T, typename TS = void>
RowsKernel pick_group(int g, int vpt, bool acc, int mode, bool db) {
  switch (g) {
    case 8:
      return pick_vpt<T, TX, TS, 8>(vpt, acc, mode, db);
    case 16:
      return pick_vpt<T, TX, TS, 16>(vpt, acc, mode, db);
    case 32:
      return pick_vpt<T, TX, TS, 32>(vpt, acc, mode, db);
    case 64:
      return pick_vpt<T, TX, TS, 64>(vpt, acc, mode, db);
    case 128:
      return pick_vpt<T, TX, TS, 128>(vpt, acc, mode, db);
    case 256:
      return pick_vpt<T, TX, TS, 256>(vpt, acc, mode, db);
    default:
      return pick_vpt<T, TX, TS, 512>(vpt, acc, mode, db);
  }
}

// The dtype combination of x, dy and the saved xhat the kernels are instantiated for; empty when
// supported (norm_bwd_supports reports the reason).
std::string combo_unsupported(const NormBwdArgs& a) {
  const DType t = a.dy_dtype;
  if (t != DType::kBFloat16 && t != DType::kFloat16 && t != DType::kFloat32)
    return "dy dtype " + std::string(dtype_name(t)) + " (needs bfloat16, float16 or float32)";
  if (a.x_dtype != t && !(a.x_dtype == DType::kFloat32 && t == DType::kBFloat16))
    return "x " + std::string(dtype_name(a.x_dtype)) + " beside dy " + std::string(dtype_name(t)) +
           " (the kernels take x in dy's dtype, or a float32 x beside a bfloat16 dy)";
  if (a.xs) {
    if (!a.dw) return "a saved xhat without dw";
    const bool x32 = a.x_dtype == DType::kFloat32 &&
                     (a.xs_dtype == DType::kBFloat16 || a.xs_dtype == DType::kFloat32);
    const bool x16 = a.x_dtype == DType::kBFloat16 && a.xs_dtype == DType::kBFloat16;  // T5
    if (t != DType::kBFloat16 || !(x32 || x16))
      return "saved xhat " + std::string(dtype_name(a.xs_dtype)) + " beside x " +
             std::string(dtype_name(a.x_dtype)) + " and dy " + std::string(dtype_name(t)) +
             " (the kernels take a bfloat16 or float32 saved xhat beside a float32 x and a "
             "bfloat16 dy, or a bfloat16 one beside a bfloat16 x and dy: the default "
             "partitioner's forms)";
  }
  return "";
}

RowsKernel rows_kernel(const NormBwdArgs& a, bool acc) {
  const NormBwdGeometry geo = norm_bwd_geometry(a);
  const int mode = round_mode(a);
  const bool db = a.db != nullptr;
  const int g = geo.threads_per_row, v = geo.vectors_per_thread;
  if (a.x_dtype == DType::kFloat32 && a.dy_dtype == DType::kBFloat16) {
    if (acc && a.xs && a.xs_dtype == DType::kBFloat16)
      return pick_group<__nv_bfloat16, float, __nv_bfloat16>(g, v, acc, mode, db);
    if (acc && a.xs) return pick_group<__nv_bfloat16, float, float>(g, v, acc, mode, db);
    return pick_group<__nv_bfloat16, float>(g, v, acc, mode, db);
  }
  if (acc && a.xs)  // bfloat16 x, dy and saved xhat (combo_unsupported allows no other)
    return pick_group<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16>(g, v, acc, mode, db);
  switch (a.dy_dtype) {
    case DType::kBFloat16:
      return pick_group<__nv_bfloat16>(g, v, acc, mode, db);
    case DType::kFloat16:
      return pick_group<__half>(g, v, acc, mode, db);
    default:
      return pick_group<float>(g, v, acc, mode, db);
  }
}

// 16-byte ring vectors per dy vector: x's parts, dy, and (acc) the saved xhat's parts.
int ring_parts(const NormBwdArgs& a, bool acc) {
  const int d = bytes_of(a.dy_dtype);
  return bytes_of(a.x_dtype) / d + 1 + (acc && a.xs ? bytes_of(a.xs_dtype) / d : 0);
}

// The row kernel's dynamic shared memory: w_eff (bfloat16 in the Llama form, which pick_rows
// instantiates only with the accumulators: a dx-only kernel of the same args stages fp32) and the
// ring.
size_t rows_smem(const NormBwdArgs& a, bool acc) {
  const NormBwdGeometry geo = norm_bwd_geometry(a);
  const int w_bytes = acc && round_mode(a) == kRndBf16 ? 2 : 4;
  const int parts = ring_parts(a, acc);
  return ring_offset(a.cols, w_bytes) + size_t(ring_stages(parts)) * parts *
                                            geo.vectors_per_thread * geo.block_threads *
                                            sizeof(uint4);
}

struct DeviceInfo {
  int sms = 0;
  std::map<std::pair<const void*, size_t>, int> occupancy;  // (kernel, smem) -> blocks per SM
  std::map<const void*, size_t> smem_limit;                 // opted-in dynamic smem per kernel
};

std::mutex g_mu;
std::map<int, DeviceInfo> g_devices;

// Resident blocks per SM of `k` with `smem` dynamic shared memory (opting in above 48 KiB).
int blocks_per_sm(const void* k, int threads, size_t smem, int* sms) {
  int dev = 0;
  REPLAY_CUDA(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(g_mu);
  DeviceInfo& d = g_devices[dev];
  if (d.sms == 0) REPLAY_CUDA(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev));
  *sms = d.sms;
  auto key = std::make_pair(k, smem);
  auto it = d.occupancy.find(key);
  if (it != d.occupancy.end()) return it->second;
  // Opt in for every size, not only above 48 KiB: the 48 KiB default bounds static + dynamic
  // shared memory together, so a row kernel with exactly 48 KiB of dynamic memory plus its static
  // `red` array failed to launch (cudaErrorInvalidValue, C = 4096 bf16 on the H100). The opt-in
  // limit only grows: lowering it for a smaller launch would make a later, cached launch of the
  // same kernel with more shared memory fail.
  size_t& limit = d.smem_limit[k];
  if (smem > limit) {
    REPLAY_CUDA(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
    limit = smem;
  }
  int n = 0;
  REPLAY_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, threads, smem));
  return d.occupancy[key] = std::max(n, 1);
}

// Baseline column kernel shape: vt vectors per tile, row chunks.
struct ColShape {
  int vt = 0;
  int64_t tiles = 0, chunks = 0, rows_per_chunk = 0;
};

ColShape col_shape(const NormBwdArgs& a) {
  const int64_t nvec = a.cols / elems_of(a.dy_dtype);
  ColShape c;
  c.vt = 32;  // the largest power of two <= 32 dividing nvec, at least 8
  while (c.vt > 8 && nvec % c.vt) c.vt /= 2;
  c.tiles = (nvec + c.vt - 1) / c.vt;
  const int lanes = kColThreads / c.vt;
  int sms = 0;
  blocks_per_sm(reinterpret_cast<const void*>(norm_bwd_cols_kernel<float, float, void, false>),
                kColThreads, 0, &sms);
  // About 8 blocks per SM in all; each chunk a multiple of the row lanes.
  const int64_t want = std::max<int64_t>(1, int64_t(sms) * 8 / c.tiles);
  c.chunks = std::clamp<int64_t>((a.rows + lanes - 1) / lanes, 1, want);
  c.rows_per_chunk = (a.rows + c.chunks - 1) / c.chunks;
  c.rows_per_chunk = (c.rows_per_chunk + lanes - 1) / lanes * lanes;
  c.chunks = (a.rows + c.rows_per_chunk - 1) / c.rows_per_chunk;
  return c;
}

template <typename T, typename TX = T, typename TS = void>
void launch_cols(const NormBwdArgs& a, const ColShape& c, const float* stats, float* pw, float* pb,
                 cudaStream_t s) {
  auto k = needs_round(a) ? norm_bwd_cols_kernel<T, TX, TS, true>
                          : norm_bwd_cols_kernel<T, TX, TS, false>;
  k<<<dim3(static_cast<unsigned>(c.tiles), static_cast<unsigned>(c.chunks)), kColThreads, 0, s>>>(
      a, stats, c.vt, c.rows_per_chunk, pw, pb);
  REPLAY_CUDA_LAUNCH("norm_bwd_cols_kernel");
}

}  // namespace

NormBwdGeometry norm_bwd_geometry(const NormBwdArgs& a) {
  const int64_t nvec = a.cols / elems_of(a.dy_dtype);
  return geometry_of(nvec, a.dy_dtype, wide_rows(nvec, a));
}

std::string norm_bwd_supports(const NormBwdArgs& a) {
  if (a.rows <= 0 || a.cols <= 0) return "empty rows";
  if (a.row_n1 < 1 || a.row_n2 < 1) return "row dims n1, n2 must be positive";
  if (std::string why = combo_unsupported(a); !why.empty()) return why;
  const DType t = a.dy_dtype;
  const int64_t e = elems_of(t);
  // Every row start 16-byte aligned: each tensor's strides in whole 16-byte vectors of its dtype.
  auto rows_ok = [](const NormBwdRowMap& m, DType d) {
    const int64_t n = elems_of(d);
    return m.s[0] % n == 0 && m.s[1] % n == 0 && m.s[2] % n == 0;
  };
  if (a.cols % e || !rows_ok(a.x_rows, a.x_dtype) || !rows_ok(a.dy_rows, t) ||
      !rows_ok(a.dx_rows, t) || (a.xs && !rows_ok(a.xs_rows, a.xs_dtype)))
    return "row length or stride not a multiple of a 16-byte vector";
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!aligned(a.x) || !aligned(a.dy) || !aligned(a.dx) || (a.xs && !aligned(a.xs)))
    return "x, dy, dx or the saved xhat is not 16-byte aligned";
  if (a.dx_add && (!aligned(a.dx_add) || !rows_ok(a.dx_add_rows, t)))
    return "the tensor added to dx is not in 16-byte aligned rows";
  const int64_t nvec = a.cols / e;
  if (nvec > int64_t(kMaxGroup) * max_vpt(t))
    return "row of " + std::to_string(a.cols) + " elements is longer than the kernels hold (" +
           std::to_string(kMaxGroup * max_vpt(t) * e) + ")";
  for (DType w : {a.w_dtype, a.dw_dtype, a.db_dtype})
    if (w != DType::kBFloat16 && w != DType::kFloat16 && w != DType::kFloat32)
      return "weight or gradient dtype " + std::string(dtype_name(w));
  if (a.stats == NormBwdStats::kSaved && !a.rstd) return "no rstd";
  if (a.stats == NormBwdStats::kNormalized && !a.rstd) return "no rstd";
  if (!a.dw && a.db) return "db without dw";
  // sm_90 grants at most 227 KiB of shared memory per block (the static `red` array included).
  constexpr size_t kMaxSmem = 227 * 1024 - 1024;
  if (rows_smem(a, true) > kMaxSmem)
    return "row of " + std::to_string(a.cols) + " elements needs " +
           std::to_string(rows_smem(a, true)) + " bytes of shared memory (at most " +
           std::to_string(kMaxSmem) + ")";
  return "";
}

int64_t norm_bwd_default_split(const NormBwdArgs& a) {
  const NormBwdGeometry geo = norm_bwd_geometry(a);
  int sms = 0;
  const bool acc = a.dw != nullptr;
  const int per_sm = blocks_per_sm(reinterpret_cast<const void*>(rows_kernel(a, acc)),
                                   geo.block_threads, rows_smem(a, acc), &sms);
  const int64_t grid = int64_t(sms) * per_sm;
  int64_t split = (a.rows + grid - 1) / grid;
  split = (split + geo.rows_per_iter - 1) / geo.rows_per_iter * geo.rows_per_iter;
  return std::max<int64_t>(split, geo.rows_per_iter);
}

size_t norm_bwd_workspace_bytes(const NormBwdArgs& a, NormBwdVariant v, int64_t split) {
  if (!a.dw) return 0;  // dx only: no partials, no statistics for a column kernel
  int64_t parts = 0, stats = 0;
  if (v == NormBwdVariant::kOptimized) {
    parts = (a.rows + split - 1) / split;
  } else {
    parts = col_shape(a).chunks;
    if (a.stats == NormBwdStats::kRecompute) stats = 2 * a.rows;
  }
  return sizeof(float) * static_cast<size_t>(2 * parts * a.cols + stats);
}

void norm_bwd_optimized(const NormBwdArgs& a, int64_t split, void* workspace, cudaStream_t s) {
  std::string why = norm_bwd_supports(a);
  if (!why.empty()) throw std::invalid_argument("norm_bwd optimized: " + why);
  if (split <= 0) throw std::invalid_argument("norm_bwd optimized: split size must be positive");
  const NormBwdGeometry geo = norm_bwd_geometry(a);
  const int64_t parts = (a.rows + split - 1) / split;
  const bool acc = a.dw != nullptr;  // dx only: no partials, no final sum
  auto* pw = acc ? static_cast<float*>(workspace) : nullptr;
  float* pb = acc && a.db ? pw + parts * a.cols : nullptr;
  RowsKernel k = rows_kernel(a, acc);
  const size_t smem = rows_smem(a, acc);
  int sms = 0;
  blocks_per_sm(reinterpret_cast<const void*>(k), geo.block_threads, smem, &sms);  // opt-in smem
  k<<<static_cast<unsigned>(parts), geo.block_threads, smem, s>>>(a, split, pw, pb, nullptr);
  REPLAY_CUDA_LAUNCH("norm_bwd_rows_kernel (optimized)");
  if (acc) launch_finalize(a, pw, pb, parts, s, /*pdl=*/true);
}

void norm_bwd_baseline(const NormBwdArgs& a, void* workspace, cudaStream_t s) {
  std::string why = norm_bwd_supports(a);
  if (!why.empty()) throw std::invalid_argument("norm_bwd baseline: " + why);
  const NormBwdGeometry geo = norm_bwd_geometry(a);
  const bool cols = a.dw != nullptr;  // dx only: the row kernel alone
  const ColShape c = cols ? col_shape(a) : ColShape{};
  auto* pw = cols ? static_cast<float*>(workspace) : nullptr;
  float* pb = cols && a.db ? pw + c.chunks * a.cols : nullptr;
  float* stats = cols && a.stats == NormBwdStats::kRecompute ? pw + 2 * c.chunks * a.cols : nullptr;
  // dx: the same row kernel without the column sums, over a persistent grid.
  RowsKernel k = rows_kernel(a, false);
  const size_t smem = rows_smem(a, false);
  int sms = 0;
  const int per_sm = blocks_per_sm(reinterpret_cast<const void*>(k), geo.block_threads, smem, &sms);
  const int64_t grid = int64_t(sms) * per_sm;
  int64_t split = (a.rows + grid - 1) / grid;
  split = std::max<int64_t>(
      geo.rows_per_iter, (split + geo.rows_per_iter - 1) / geo.rows_per_iter * geo.rows_per_iter);
  const int64_t blocks = (a.rows + split - 1) / split;
  k<<<static_cast<unsigned>(blocks), geo.block_threads, smem, s>>>(a, split, nullptr, nullptr,
                                                                   stats);
  REPLAY_CUDA_LAUNCH("norm_bwd_rows_kernel (baseline)");
  if (!cols) return;
  if (a.x_dtype == DType::kFloat32 && a.dy_dtype == DType::kBFloat16) {
    if (a.xs && a.xs_dtype == DType::kBFloat16)
      launch_cols<__nv_bfloat16, float, __nv_bfloat16>(a, c, stats, pw, pb, s);
    else if (a.xs)
      launch_cols<__nv_bfloat16, float, float>(a, c, stats, pw, pb, s);
    else
      launch_cols<__nv_bfloat16, float>(a, c, stats, pw, pb, s);
    launch_finalize(a, pw, pb, c.chunks, s);
    return;
  }
  if (a.xs) {  // bfloat16 x, dy and saved xhat
    launch_cols<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16>(a, c, stats, pw, pb, s);
    launch_finalize(a, pw, pb, c.chunks, s);
    return;
  }
  switch (a.dy_dtype) {
    case DType::kBFloat16:
      launch_cols<__nv_bfloat16>(a, c, stats, pw, pb, s);
      break;
    case DType::kFloat16:
      launch_cols<__half>(a, c, stats, pw, pb, s);
      break;
    default:
      launch_cols<float>(a, c, stats, pw, pb, s);
  }
  launch_finalize(a, pw, pb, c.chunks, s);
}

}  // namespace replay
