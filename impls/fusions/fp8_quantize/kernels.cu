// fp8_quantize kernels: amax -> scale -> saturated float8 cast of one source tensor, every
// quantization the graph makes of it (tensorwise, rowwise, columnwise; float8_e4m3fn, e5m2;
// row-major and column-major copies), bit-identical to the graph's eager sequence
// (quant_math.hpp holds the arithmetic, shared with the CPU tests).
//
//   amax_kernel       one read of x: every row, column and global amax it is asked for, as
//                     order-preserving keys (atomicMax on uint32: NaN propagates). A CTA owns a
//                     256-column strip and walks its row bands grid-stride (64 rows per band, 8
//                     16-byte loads in flight per thread), keeping column and global keys in
//                     registers until the end: one atomicMax per column per CTA, one per row per
//                     strip. Bands are visited from the top of x to the bottom by all CTAs
//                     together, so the bottom of x is what the L2 holds when the pass ends.
//   amax_packed_kernel  the same for |x| of 16-bit x in 16-byte vectors (the float8 linears):
//                     amax_reuse's packed tiles body (1024-column strips, packed 16-bit
//                     magnitudes, keys only per row, column and CTA), steps walking x top down
//   scales_kernel     amax -> float32 scale (float64 math as the graph), and the scale, reciprocal
//                     and amax outputs the graph reads (the baseline; the optimized cast kernel
//                     computes its tile's scales itself: one launch fewer)
//   cast_kernel       one more read of x: every float8 dest of every quantization, 128 x 128 tiles
//                     visited bottom-up (the tiles the amax pass read last come from the L2).
//                     Row-major dests straight from registers (8-byte stores, a warp writes two
//                     full 128-byte rows); column-major ones through a swizzled shared-memory tile
//                     (conflict-free both ways), transposed 4 x 4 bytes at a time in registers
//                     (byte_perm) and written as 16-byte stores, 8 lanes per 128-byte column run.
//                     After the amax pass (optimized) it is that pass's programmatic dependent
//                     (impls/cuda/pdl.cuh): its tiles' loads of x overlap the pass's tail, and
//                     it waits for the pass before it reads an amax
//   cast_fast_kernel  the same for the common groups (CastFast: one or two quantizations, one
//                     row-major and one column-major dest each): static parameter offsets, no
//                     per-row dest loop or layout tests (generic kernel: REPLAY_FP8_CAST=generic)
//   rowwise_ring_kernel  rowwise quantizations only, row-major dests, 16-bit rows of up to 4096
//                     elements: a warp per row, each warp's rows through its own ring of
//                     shared-memory slots filled by cp.async.bulk (impls/cuda/bulk_copy.cuh), the
//                     float8 dtype and store width chosen once per row (v5), the row read from its
//                     slot into registers once and the slot refilled before the cast (v6);
//                     REPLAY_FP8_RING=0: rowwise_warp_kernel, the row in the lane's registers
//   rowwise_kernel    rowwise quantizations only, row-major dests: a CTA per row holds the whole
//                     row in registers (up to kRowwiseMaxCols elements) and loads the next row
//                     while it reduces and casts this one: x leaves DRAM once, read once
//   rowwise_stream_kernel  the same for wider rows: the row read twice, the second time from L2
//   transpose_kernel  the baseline's separate column-major copy (32 x 32 tiles)
//
// Napkin math, H200 (HBM3e ~4.8 TB/s peak, ~4.2 TB/s copy, 50 MiB L2), x [8192, 4096] bfloat16 =
// 64 MiB: tensorwise with its column-major copy (the tensorwise forward's x): read x twice (the
// cast needs the global amax; 64 MiB does not stay in L2, part of it does) + write 2 x 32 MiB
// float8 = 192 MiB, ~46 us at copy bandwidth. Rowwise + columnwise of the same x (the rowwise
// forward): the same 192 MiB. Rowwise only: 64 + 32 MiB, ~23 us. The eager sequence moves ~1.3 GB
// for the same work (|x| written and read, x.float() written, the product and two clamps in
// float32, the cast, the clone), ~280 us. Measurements: TUNING.md.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>

#include "impls/cuda/bulk_copy.cuh"
#include "impls/cuda/cuda_check.hpp"
#include "impls/cuda/device_sms.hpp"
#include "impls/cuda/dtype_device.cuh"
#include "impls/cuda/pdl.cuh"
#include "impls/cuda/vec16.cuh"
#include "impls/fusions/amax_reuse/multi_amax.cuh"
#include "impls/fusions/fp8_quantize/kernels.hpp"
#include "impls/fusions/fp8_quantize/quant_math.hpp"

namespace replay::fp8_quantize {
namespace {

constexpr int kThreads = 256;  // threads per CTA of the tile kernels: 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kAmaxRowsPerWarp = 8;                   // loads in flight per thread, amax pass
constexpr int kAmaxBand = kWarps * kAmaxRowsPerWarp;  // rows of one band of the amax pass
static_assert(kAmaxCols == 32 * 8, "a lane of the amax pass covers 8 columns");
constexpr int kCastLanes = kCastTile / 8;            // threads per tile row (8 columns each)
constexpr int kCastRowStep = kThreads / kCastLanes;  // tile rows one load step covers
constexpr int kCastRowsPerThread = kCastTile / kCastRowStep;  // loads in flight per thread
constexpr int kCastWords = kCastTile / 4;                     // 32-bit words per float8 tile row
static_assert(kCastLanes == 16 && kCastWords == 32, "the swizzle below assumes 128 x 128 tiles");

// 8 consecutive elements of one row of x, widened to float: a 16-byte vector load per 8
// bfloat16/float16 (two per 8 float32) when `vec` (cols a multiple of 8, x 16-byte aligned), else
// one load per element; columns at or past `cols` read as 0 and are flagged out by the callers.
template <typename T>
struct Chunk {
  static constexpr int kRaw = 8 / Vec<T>::kElems;  // uint4s per 8 elements
  uint4 raw[kRaw];
  __device__ void load(const T* __restrict__ row, int64_t c0, int64_t cols, bool vec) {
    if (vec && c0 + 8 <= cols) {
      const uint4* p = reinterpret_cast<const uint4*>(row + c0);
#pragma unroll
      for (int i = 0; i < kRaw; ++i) raw[i] = p[i];
      return;
    }
    T* e = reinterpret_cast<T*>(raw);
#pragma unroll
    for (int k = 0; k < 8; ++k) e[k] = c0 + k < cols ? row[c0 + k] : T(0.0f);
  }
  /// The 8 elements at p, 16-byte aligned (vector loads only).
  __device__ __forceinline__ void raw_load(const T* __restrict__ p) {
#pragma unroll
    for (int i = 0; i < kRaw; ++i) raw[i] = reinterpret_cast<const uint4*>(p)[i];
  }
  __device__ void unpack(float (&v)[8]) const {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {  // one shift or mask per element
      const uint32_t w[4] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        v[2 * k] = __uint_as_float(w[k] << 16);
        v[2 * k + 1] = __uint_as_float(w[k] & 0xFFFF0000u);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kRaw; ++i) Vec<T>::unpack(raw[i], v + i * Vec<T>::kElems);
    }
  }
  /// An empty asm that "rewrites" the raw words: inside a loop it keeps the compiler from hoisting
  /// the (cheap) unpack of every row out of the loop and holding 8 floats per row in registers.
  __device__ __forceinline__ void pin() {
#pragma unroll
    for (int i = 0; i < kRaw; ++i)
      asm volatile("" : "+r"(raw[i].x), "+r"(raw[i].y), "+r"(raw[i].z), "+r"(raw[i].w));
  }
};

// The scale of element k: one per element (columnwise), or one for all 8 (tensorwise, rowwise:
// no per-element copies of it).
__device__ __forceinline__ float scale_at(const float* s, int k) {
  return s[k];
}
__device__ __forceinline__ float scale_at(float s, int) {
  return s;
}

// The 8 float8 bytes of v[k] * s[k] clamped to the float8 dtype's max (byte k = element k,
// little-endian in x then y): the clamp and the cast are one saturating conversion of two floats
// (cvt.rn.satfinite.{e4m3,e5m2}x2.f32). A product past the max rounds to it either way, and a
// NaN product (the GPU's canonical, positive NaN) becomes 0x7F as float8_bits writes it. The
// binder declines a clamp bound other than the dtype's max (Quantization::fp8_max).
// S: const float* (8 scales) or float (one), by value.
template <bool kE5M2, typename S>
__device__ __forceinline__ uint2 pack8_sat(const float (&v)[8], S s) {
  uint32_t h[4];
#pragma unroll
  for (int p = 0; p < 4; ++p)
    h[p] = __nv_cvt_float2_to_fp8x2(
        make_float2(v[2 * p] * scale_at(s, 2 * p), v[2 * p + 1] * scale_at(s, 2 * p + 1)),
        __NV_SATFINITE, kE5M2 ? __NV_E5M2 : __NV_E4M3);
  return make_uint2(h[0] | (h[1] << 16), h[2] | (h[3] << 16));
}

template <typename S>
__device__ __forceinline__ uint2 pack8(const float (&v)[8], S s, bool e5m2) {
  return e5m2 ? pack8_sat<true>(v, s) : pack8_sat<false>(v, s);
}

// Stores the first n (<= 8) bytes of b at p, p[k * cs] for byte k: one 8-byte store when they are
// contiguous, aligned and all 8.
__device__ __forceinline__ void store8(uint8_t* p, int64_t cs, int n, uint2 b) {
  if (cs == 1 && n == 8 && (reinterpret_cast<uintptr_t>(p) & 7) == 0) {
    *reinterpret_cast<uint2*>(p) = b;
    return;
  }
  for (int k = 0; k < n; ++k)
    p[k * cs] = static_cast<uint8_t>(((k < 4 ? b.x : b.y) >> (8 * (k % 4))) & 0xFFu);
}

// Elements of the 8-column chunk at c0 that lie inside the row.
__device__ __forceinline__ int chunk_len(int64_t c0, int64_t cols) {
  return c0 >= cols ? 0 : (cols - c0 < 8 ? static_cast<int>(cols - c0) : 8);
}

// |x| of the 8 elements of a chunk as unsigned integers whose max is the max of |x| (a
// non-negative float's bits order as the float; NaN bits lie above +inf's): for 16-bit types two
// magnitudes per word (one __vmaxu2 per pair), for float32 one. Far fewer instructions per
// element than a key per element: the passes issue ~24 bytes of x per SM cycle at HBM speed.
template <typename T>
struct Mag {
  static constexpr bool k16 = sizeof(T) == 2;
  static constexpr int kWords = k16 ? 4 : 8;
  uint32_t w[kWords];
  __device__ __forceinline__ static uint32_t combine(uint32_t a, uint32_t b) {
    return k16 ? __vmaxu2(a, b) : max(a, b);
  }
  __device__ __forceinline__ explicit Mag(const Chunk<T>& c) {
#pragma unroll
    for (int i = 0; i < Chunk<T>::kRaw; ++i) {
      const uint4 r = c.raw[i];
      const uint32_t m = k16 ? 0x7FFF7FFFu : 0x7FFFFFFFu;
      w[4 * i] = r.x & m;
      w[4 * i + 1] = r.y & m;
      w[4 * i + 2] = r.z & m;
      w[4 * i + 3] = r.w & m;
    }
  }
  /// The max of every magnitude in `w`, packed as one word.
  __device__ __forceinline__ uint32_t all() const {
    uint32_t m = w[0];
#pragma unroll
    for (int i = 1; i < kWords; ++i) m = combine(m, w[i]);
    return m;
  }
  /// max_key of the float a 16-bit (or 32-bit) magnitude stands for.
  __device__ __forceinline__ static uint32_t key_of(uint32_t bits) {
    if constexpr (sizeof(T) == 4) return max_key(__uint_as_float(bits));
    if constexpr (std::is_same_v<T, __half>)
      return max_key(__half2float(__ushort_as_half(static_cast<unsigned short>(bits))));
    return max_key(__uint_as_float(bits << 16));
  }
  /// The key of the largest magnitude packed in word m.
  __device__ __forceinline__ static uint32_t key(uint32_t m) {
    return k16 ? key_of(max(m >> 16, m & 0xFFFFu)) : key_of(m);
  }
  /// The key of element k (0..7) of packed words `cw`.
  __device__ __forceinline__ static uint32_t element_key(const uint32_t (&cw)[kWords], int k) {
    return k16 ? key_of((cw[k / 2] >> (16 * (k % 2))) & 0xFFFFu) : key_of(cw[k]);
  }
};

// The max |x| key of the whole of x alone (a tensorwise quantization's amax: the common case),
// x contiguous as n16 16-byte vectors: a grid-stride stream, 8 vectors in flight per thread,
// packed magnitudes, one atomicMax per CTA.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    amax_all_kernel(const uint4* __restrict__ x, int64_t n16, uint32_t* glob_ws) {
  pdl_launch_dependents();  // the cast may launch now; it waits for this grid before its scales
  using M = Mag<T>;
  __shared__ uint32_t part[kWarps];
  constexpr uint32_t kMask = M::k16 ? 0x7FFF7FFFu : 0x7FFFFFFFu;
  auto mag = [](const uint4& v) {
    return M::combine(M::combine(v.x & kMask, v.y & kMask), M::combine(v.z & kMask, v.w & kMask));
  };
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  uint32_t m = 0;
  for (; i < n16; i += 8 * stride) {  // the last round predicated, its loads still in flight
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u)
      v[u] = i + u * stride < n16 ? x[i + u * stride] : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < 8; ++u) m = M::combine(m, mag(v[u]));
  }
  const uint32_t k = __reduce_max_sync(0xffffffffu, M::key(m));
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = k;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t b = 0;
    for (int w = 0; w < kWarps; ++w) b = max(b, part[w]);
    atomicMax(glob_ws, b);
  }
}

// |x| amaxes per row and column (and of the whole) of 16-bit x in 16-byte vectors: amax_reuse's
// packed tiles body (strips of 1024 columns, packed magnitudes, keys only per row, column and
// CTA; its keys are max_key's). Its steps walk x top to bottom, as amax_kernel's bands.
static_assert(kThreads == amax_reuse::device::kThreads, "tiles_packed_body assumes its CTA size");
template <typename T>
__global__ void __launch_bounds__(kThreads)
    amax_packed_kernel(const T* __restrict__ x, int64_t rows, int64_t cols, uint32_t* row_ws,
                       uint32_t* col_ws, uint32_t* glob_ws) {
  pdl_launch_dependents();
  amax_reuse::device::tiles_packed_body<T>(x, rows, cols, cols, row_ws, col_ws, glob_ws);
}

template <typename T, bool kAbs>
__global__ void __launch_bounds__(kThreads)
    amax_kernel(const T* __restrict__ x, int64_t rows, int64_t cols, bool vec, uint32_t* row_ws,
                uint32_t* col_ws, uint32_t* glob_ws) {
  pdl_launch_dependents();
  using M = Mag<T>;
  __shared__ uint32_t col_part[kWarps][kAmaxCols];
  __shared__ uint32_t glob_part[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kAmaxCols + lane * 8;
  const int n = chunk_len(c0, cols);
  const int64_t bands = (rows + kAmaxBand - 1) / kAmaxBand;
  // kAbs: packed magnitudes (cm per column pair, tm over everything; zero-filled tail columns
  // cannot raise a max of |x|); else keys per element.
  uint32_t cm[M::kWords] = {}, tm = 0;
  uint32_t ck[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tk = 0;
  for (int64_t band = blockIdx.y; band < bands; band += gridDim.y) {
    const int64_t r0 = band * kAmaxBand + warp;
    Chunk<T> ch[kAmaxRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kAmaxRowsPerWarp; ++i) {  // every load in flight before any reduction
      const int64_t r = r0 + i * kWarps;
      if (r < rows && n) ch[i].load(x + r * cols, c0, cols, vec);
    }
#pragma unroll
    for (int i = 0; i < kAmaxRowsPerWarp; ++i) {
      const int64_t r = r0 + i * kWarps;
      if (r >= rows) break;  // warp-uniform
      uint32_t rk = 0;
      if (n) {
        if constexpr (kAbs) {
          const M m(ch[i]);
#pragma unroll
          for (int j = 0; j < M::kWords; ++j) cm[j] = M::combine(cm[j], m.w[j]);
          const uint32_t rm = m.all();
          tm = M::combine(tm, rm);
          if (row_ws) rk = M::key(rm);
        } else {
          float v[8];
          ch[i].unpack(v);
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            if (k >= n) continue;
            const uint32_t key = max_key(v[k]);
            ck[k] = max(ck[k], key);
            rk = max(rk, key);
          }
          tk = max(tk, rk);
        }
      }
      if (row_ws) {
        rk = __reduce_max_sync(0xffffffffu, rk);
        if (lane == 0 && rk) atomicMax(&row_ws[r], rk);
      }
    }
  }
  if constexpr (kAbs) {
    if (n) {
#pragma unroll
      for (int k = 0; k < 8; ++k) ck[k] = k < n ? M::element_key(cm, k) : 0;
      tk = M::key(tm);
    }
  }
  if (col_ws) {  // the strip's column keys: over the warps, then one atomic per column
#pragma unroll
    for (int k = 0; k < 8; ++k) col_part[warp][lane * 8 + k] = ck[k];
    __syncthreads();
    uint32_t m = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = max(m, col_part[w][threadIdx.x]);
    const int64_t c = static_cast<int64_t>(blockIdx.x) * kAmaxCols + threadIdx.x;
    if (c < cols && m) atomicMax(&col_ws[c], m);
  }
  if (glob_ws) {
    tk = __reduce_max_sync(0xffffffffu, tk);
    if (lane == 0) glob_part[warp] = tk;
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t m = 0;
      for (int w = 0; w < kWarps; ++w) m = max(m, glob_part[w]);
      if (m) atomicMax(glob_ws, m);
    }
  }
}

__device__ void store_vec(const VecOut& o, int64_t i, float v) {
  store_elem<float>(o.ptr, i * o.stride, o.dtype, v);
}

// Quantization q's outputs at element i: its scale s, the reciprocal and the amax, where asked.
__device__ __forceinline__ void store_scale_outputs(const QuantArgs& q, int64_t i, float s,
                                                    float amax) {
  for (int j = 0; j < q.n_scales; ++j) store_vec(q.scales[j], i, s);
  for (int j = 0; j < q.n_recips; ++j) store_vec(q.recips[j], i, 1.0f / s);
  for (int j = 0; j < q.n_amaxes; ++j) store_vec(q.amaxes[j], i, amax);
}

// Element i of quantization q's scales (its amax from the workspace key, or the given amax), and,
// when `write`, its scale, reciprocal and amax outputs.
__device__ __forceinline__ float quant_scale(const QuantizeArgs& a, const QuantArgs& q, int64_t i,
                                             bool write) {
  const float amax = q.given ? load_elem<float>(q.given, i, q.given_dtype)
                             : from_max_key(a.amax_ws[amax_slot(q.gran, q.abs)][i]);
  const float s = quant_scale_of(amax, q.eps, q.scale_mul, q.pow2);
  if (write) store_scale_outputs(q, i, s, amax);
  return s;
}

__global__ void scales_kernel(QuantizeArgs a, unsigned quants, int64_t rows, int64_t cols) {
  const int qi = blockIdx.y;
  if (!((quants >> qi) & 1u)) return;
  const QuantArgs& q = a.q[qi];
  const int64_t len = q.gran == Granularity::kTensorwise ? 1
                      : q.gran == Granularity::kRowwise  ? rows
                                                         : cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < len;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    q.scale_ws[i] = quant_scale(a, q, i, true);
}

// Word swizzle of the float8 tile (rows of kCastWords 32-bit words): row rt's word w is stored at
// w ^ swizzle(rt). The cast writes two adjacent rows per warp store (rt even and rt + 1: the odd
// row lands on the other parity of banks) and the write-out reads 16 consecutive rows of 4 word
// columns per thread, 8 row groups x 4 columns per warp (the row group moves bits 2-4 of the
// bank): both conflict-free.
__device__ __forceinline__ int swizzle(int rt) {
  return (((rt >> 4) & 7) << 2) | (rt & 1);
}

// 4 x 4 byte transpose: o[k] = byte k of a, b, c, d (in that order, little-endian).
__device__ __forceinline__ void transpose4x4(uint32_t a, uint32_t b, uint32_t c, uint32_t d,
                                             uint32_t (&o)[4]) {
  const uint32_t ab01 = __byte_perm(a, b, 0x5140), cd01 = __byte_perm(c, d, 0x5140);
  const uint32_t ab23 = __byte_perm(a, b, 0x7362), cd23 = __byte_perm(c, d, 0x7362);
  o[0] = __byte_perm(ab01, cd01, 0x5410);
  o[1] = __byte_perm(ab01, cd01, 0x7632);
  o[2] = __byte_perm(ab23, cd23, 0x5410);
  o[3] = __byte_perm(ab23, cd23, 0x7632);
}

// The tile at blockIdx.x of the cast pass: 128 x 128 of x, tiles visited bottom-up (the amax
// pass left the bottom of x in the L2). rb, cb: its first row and column.
struct CastTile {
  int64_t rb, cb;
  __device__ CastTile(int64_t rows, int64_t cols) {
    const int64_t col_tiles = (cols + kCastTile - 1) / kCastTile;
    const int64_t row_tiles = (rows + kCastTile - 1) / kCastTile;
    const int64_t tile = blockIdx.x;
    rb = (row_tiles - 1 - tile / col_tiles) * kCastTile;
    cb = (tile % col_tiles) * kCastTile;
  }
};

// fold: the cast computes the scales (no scales kernel before it). Each CTA computes the scales
// of its tile's 128 rows or columns into `tile_scales[qi]` (a float64 division per thread and
// quantization); the CTAs of the first tile column (rowwise) or tile row (columnwise), or the
// first CTA (tensorwise), also write the scale, reciprocal and amax outputs. Ends with a barrier.
__device__ void fold_tile_scales(const QuantizeArgs& a, unsigned quants, const CastTile& t,
                                 float (*tile_scales)[kCastTile]) {
  for (int qi = 0; qi < a.n_quants; ++qi) {
    if (!((quants >> qi) & 1u)) continue;
    const QuantArgs& q = a.q[qi];
    if (q.gran == Granularity::kTensorwise) {
      if (threadIdx.x == 0) tile_scales[qi][0] = quant_scale(a, q, 0, blockIdx.x == 0);
      continue;
    }
    const bool by_row = q.gran == Granularity::kRowwise;
    const int64_t base = by_row ? t.rb : t.cb, len = by_row ? a.rows : a.cols;
    const bool write = by_row ? t.cb == 0 : t.rb == 0;
    for (int i = threadIdx.x; i < kCastTile; i += kThreads)
      if (base + i < len) tile_scales[qi][i] = quant_scale(a, q, base + i, write);
  }
  __syncthreads();
}

// Column-major write-out of the tile's float8 values staged in `tile_t` (after a barrier):
// thread (rg, cg) owns tile rows 16 rg .. 16 rg + 15 of tile columns 4 cg .. 4 cg + 3 and writes
// them as four 16-byte column runs.
__device__ void write_col_major(const QuantizeArgs& a, unsigned quants, const CastTile& tile,
                                const uint32_t (*tile_t)[kCastTile * kCastWords]) {
  const int64_t rows = a.rows, cols = a.cols, rb = tile.rb, cb = tile.cb;
  const int rg = threadIdx.x & 7, cg = threadIdx.x >> 3;
  const bool full = rb + kCastTile <= rows && cb + kCastTile <= cols;
  for (int qi = 0; qi < a.n_quants; ++qi) {
    if (!((quants >> qi) & 1u)) continue;
    for (int d = 0; d < a.q[qi].n_dests; ++d) {
      const Fp8Dest& o = a.q[qi].dests[d];
      if (o.smem_slot < 0) continue;
      const uint32_t* t = tile_t[o.smem_slot];
      uint32_t w[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const int rt = 16 * rg + i;
        w[i] = t[rt * kCastWords + (cg ^ swizzle(rt))];
      }
      uint8_t* base = o.ptr + (cb + 4 * cg) * o.cs + (rb + 16 * rg) * o.rs;
      if (full && o.rs == 1 && (o.cs & 15) == 0 && (reinterpret_cast<uintptr_t>(base) & 15) == 0) {
        uint32_t col[4][4];  // col[k][m]: tile column 4 cg + k, rows 16 rg + 4 m .. + 3
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          uint32_t o4[4];
          transpose4x4(w[4 * m], w[4 * m + 1], w[4 * m + 2], w[4 * m + 3], o4);
#pragma unroll
          for (int k = 0; k < 4; ++k) col[k][m] = o4[k];
        }
#pragma unroll
        for (int k = 0; k < 4; ++k)
          *reinterpret_cast<uint4*>(base + k * o.cs) =
              make_uint4(col[k][0], col[k][1], col[k][2], col[k][3]);
        continue;
      }
      for (int i = 0; i < 16; ++i) {
        const int64_t r = rb + 16 * rg + i;
        if (r >= rows) break;
        for (int k = 0; k < 4; ++k) {
          const int64_t c = cb + 4 * cg + k;
          if (c < cols)
            o.ptr[r * o.rs + c * o.cs] = static_cast<uint8_t>((w[i] >> (8 * k)) & 0xFFu);
        }
      }
    }
  }
}

// Stores the 8 float8 bytes of tile row rt (chunk column cl) into a shared-memory tile.
__device__ __forceinline__ void stage8(uint32_t* tile, int rt, int cl, uint2 b) {
  uint32_t* t = tile + rt * kCastWords;
  t[(2 * cl) ^ swizzle(rt)] = b.x;
  t[(2 * cl + 1) ^ swizzle(rt)] = b.y;
}

// The generic cast: any quantizations and dests (fold: see fold_tile_scales).
template <typename T>
__global__ void __launch_bounds__(kThreads, sizeof(T) == 2 ? 3 : 2)  // 96 KiB of x in flight
    cast_kernel(const T* __restrict__ x, QuantizeArgs a, unsigned quants, bool vec, bool fold) {
  __shared__ __align__(16) uint32_t tile_t[kMaxColMajor][kCastTile * kCastWords];
  __shared__ float tile_scales[kMaxQuants][kCastTile];  // fold: the tile's rows' or columns'
  const int64_t rows = a.rows, cols = a.cols;
  const CastTile tile(rows, cols);
  const int64_t rb = tile.rb, cb = tile.cb;
  const int cl = threadIdx.x % kCastLanes, rt0 = threadIdx.x / kCastLanes;
  const int64_t c0 = cb + cl * 8;
  const int n = chunk_len(c0, cols);
  bool col_major = false;
  for (int qi = 0; qi < a.n_quants; ++qi)
    for (int d = 0; d < a.q[qi].n_dests; ++d)
      col_major |= ((quants >> qi) & 1u) && a.q[qi].dests[d].smem_slot >= 0;
  Chunk<T> ch[kCastRowsPerThread];
#pragma unroll
  for (int i = 0; i < kCastRowsPerThread; ++i) {
    const int64_t r = rb + rt0 + i * kCastRowStep;
    if (r < rows && n) ch[i].load(x + r * cols, c0, cols, vec);
  }
  // Launched as the amax pass's programmatic dependent (launch_cast's after_amax), the tile's
  // loads of x above overlap that pass's tail; its amaxes are read only after this.
  pdl_wait();
  if (fold) fold_tile_scales(a, quants, tile, tile_scales);  // while the loads are in flight
  // Quantization by quantization (one or two in practice), the tile's rows unrolled inside: the
  // tensorwise and columnwise scales are read once per tile.
  for (int qi = 0; qi < a.n_quants; ++qi) {
    if (!((quants >> qi) & 1u) || !n) continue;
    const QuantArgs& q = a.q[qi];
#pragma unroll
    for (int i = 0; i < kCastRowsPerThread; ++i) ch[i].pin();
    // The scales: this tile's in shared memory (fold), else the scales kernel's in scale_ws.
    const float* sv = fold ? tile_scales[qi] : q.scale_ws;
    const int64_t row_base = fold ? rb : 0, col_base = fold ? cb : 0;
    float s[8];
    if (q.gran == Granularity::kTensorwise) {
      const float t = sv[0];
#pragma unroll
      for (int k = 0; k < 8; ++k) s[k] = t;
    } else if (q.gran == Granularity::kColumnwise) {
#pragma unroll
      for (int k = 0; k < 8; ++k) s[k] = k < n ? sv[c0 - col_base + k] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kCastRowsPerThread; ++i) {
      const int rt = rt0 + i * kCastRowStep;  // row in the tile
      const int64_t r = rb + rt;
      if (r >= rows) break;
      if (q.gran == Granularity::kRowwise) {
        // The mutant hook's row: inside x and, with the scales folded, inside this tile (the
        // tile's scales are all that shared memory holds).
        const int64_t rx = r ^ a.row_scale_xor;
        const bool rx_ok = rx < rows && (!fold || (rx >= rb && rx < rb + kCastTile));
        const float t = sv[(rx_ok ? rx : r) - row_base];
#pragma unroll
        for (int k = 0; k < 8; ++k) s[k] = t;
      }
      float v[8];
      ch[i].unpack(v);
      const uint2 b = pack8(v, s, q.e5m2);
      for (int d = 0; d < q.n_dests; ++d) {
        const Fp8Dest& o = q.dests[d];
        if (o.smem_slot >= 0) {
          stage8(tile_t[o.smem_slot], rt, cl, b);
          continue;
        }
        store8(o.ptr + r * o.rs + c0 * o.cs, o.cs, n, b);
      }
    }
  }
  if (!col_major) return;
  __syncthreads();
  write_col_major(a, quants, tile, tile_t);
}

// The common groups, specialized (CastFast): kNQ (1 or 2) quantizations, each with at most one
// row-major dest (8-byte aligned rows) and one column-major dest staged in shared memory, x in
// 16-byte vectors (cols a multiple of 8). What the generic kernel decides per row and dest from
// the parameters (the dest loop, store8's layout tests, 64-bit row addresses from the strides)
// is fixed per tile here; the quantizations' fields sit at static offsets of the parameters.
template <typename T, int kNQ>
__global__ void __launch_bounds__(kThreads, sizeof(T) == 2 ? 3 : 2)
    cast_fast_kernel(const T* __restrict__ x, QuantizeArgs a, CastFast f, bool fold) {
  __shared__ __align__(16) uint32_t tile_t[kMaxColMajor][kCastTile * kCastWords];
  __shared__ float tile_scales[kMaxQuants][kCastTile];
  const int64_t rows = a.rows, cols = a.cols;
  const CastTile tile(rows, cols);
  const int64_t rb = tile.rb, cb = tile.cb;
  const int cl = threadIdx.x % kCastLanes, rt0 = threadIdx.x / kCastLanes;
  const int64_t c0 = cb + cl * 8;
  const bool in = c0 < cols;  // the chunk is whole (cols % 8 == 0) or past the row
  const bool full_rows = rb + kCastTile <= rows;
  const int rows_left = full_rows ? kCastTile : static_cast<int>(rows - rb);
  Chunk<T> ch[kCastRowsPerThread];
#pragma unroll
  for (int i = 0; i < kCastRowsPerThread; ++i) {
    const int64_t r = rb + rt0 + i * kCastRowStep;
    if ((full_rows || r < rows) && in) ch[i].raw_load(x + r * cols + c0);
  }
  pdl_wait();  // as cast_kernel: the loads of x above may overlap the amax pass's tail
  if (fold) fold_tile_scales(a, f.quants, tile, tile_scales);
  if (in) {
#pragma unroll
    for (int j = 0; j < kNQ; ++j) {
      const CastFast::Quant& q = f.q[j];
#pragma unroll
      for (int i = 0; i < kCastRowsPerThread; ++i) ch[i].pin();
      // The scales: this tile's in shared memory (fold), else the scales kernel's in scale_ws.
      // Columnwise: 8 per thread; rowwise: one per row (rs[rt]); tensorwise: one.
      const float* sv = fold ? tile_scales[q.qi] : q.scale_ws;
      const bool by_col = q.gran == Granularity::kColumnwise;
      const bool by_row = q.gran == Granularity::kRowwise;
      float s[8], t = 0.0f;
      if (by_col) {
#pragma unroll
        for (int k = 0; k < 8; ++k) s[k] = sv[c0 - (fold ? cb : 0) + k];
      } else if (!by_row) {
        t = sv[0];
      }
      const float* rs = fold ? sv : sv + rb;  // tile row rt's scale: rs[rt]
      // Row-major dest: this thread's 8 bytes of tile row rt0, then kCastRowStep rows apart.
      uint8_t* rm = q.rm ? q.rm + (rb + rt0) * q.rs + c0 : nullptr;
      const int64_t rm_step = kCastRowStep * q.rs;
      // Column-major dest: the staged tile's rows rt0 + 16 i, whose word swizzle (swizzle()) is
      // 4 i ^ (rt0 & 1) for rt0 < 16: word x0 ^ 4 i and its neighbour, at fixed offsets.
      static_assert(kCastRowStep == 16 && kCastRowsPerThread <= 8, "the swizzle below");
      uint32_t* st = q.slot >= 0 ? tile_t[q.slot] + rt0 * kCastWords : nullptr;
      const int x0 = (2 * cl) ^ (rt0 & 1);
#pragma unroll
      for (int i = 0; i < kCastRowsPerThread; ++i) {
        const int rt = rt0 + i * kCastRowStep;
        if (rt >= rows_left) break;
        float v[8];
        ch[i].unpack(v);
        const uint2 b = by_col ? pack8(v, s, q.e5m2) : pack8(v, by_row ? rs[rt] : t, q.e5m2);
        if (rm) *reinterpret_cast<uint2*>(rm + i * rm_step) = b;
        if (st) {
          uint32_t* row = st + i * kCastRowStep * kCastWords;
          const int w = x0 ^ (i << 2);
          row[w] = b.x;
          row[w ^ 1] = b.y;
        }
      }
    }
  }
  if (!f.col_major) return;
  __syncthreads();
  write_col_major(a, f.quants, tile, tile_t);
}

// Rowwise quantizations only, every dest row-major: the amaxes (|x| and x, as asked) of the
// whole row, a block reduce, each quantization's scale (computed by every thread: one float64
// division), the float8 row.
struct RowScales {
  float s[kMaxQuants];
};

// The row's scales from its keys (k[0]: of x, k[1]: of |x|), and the scale, reciprocal and amax
// outputs (by the `writer` thread).
__device__ __forceinline__ RowScales row_scales(const QuantizeArgs& a, unsigned quants, int64_t r,
                                                const uint32_t (&k)[2], bool writer) {
  RowScales out;
#pragma unroll
  for (int qi = 0; qi < kMaxQuants; ++qi) {
    out.s[qi] = 0.0f;
    if (qi >= a.n_quants || !((quants >> qi) & 1u)) continue;
    const QuantArgs& q = a.q[qi];
    const float amax = from_max_key(q.abs ? k[1] : k[0]);
    out.s[qi] = quant_scale_of(amax, q.eps, q.scale_mul, q.pow2);
    if (writer) store_scale_outputs(q, r, out.s[qi], amax);
  }
  return out;
}

// Casts one 8-column chunk of row r (n elements valid) for every quantization.
__device__ __forceinline__ void cast_chunk(const QuantizeArgs& a, unsigned quants, int64_t r,
                                           int64_t c0, int n, const float (&v)[8],
                                           const RowScales& rs) {
#pragma unroll
  for (int qi = 0; qi < kMaxQuants; ++qi) {
    if (qi >= a.n_quants || !((quants >> qi) & 1u)) continue;
    const QuantArgs& q = a.q[qi];
    float s[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) s[k] = rs.s[qi];
    const uint2 b = pack8(v, s, q.e5m2);
    for (int d = 0; d < q.n_dests; ++d) store8(q.dests[d].ptr + r * q.dests[d].rs + c0, 1, n, b);
  }
}

// Adds the keys of the n valid elements of chunk c to k (k[0]: of x, k[1]: of |x|; the |x| one
// packed, as Mag<T>, turned into a key by the caller).
template <typename T>
__device__ __forceinline__ void add_keys(const Chunk<T>& c, int n, bool need_x, bool need_abs,
                                         uint32_t (&k)[2]) {
  if (!n) return;
  if (need_abs) k[1] = Mag<T>::combine(k[1], Mag<T>(c).all());
  if (!need_x) return;
  float v[8];
  c.unpack(v);
#pragma unroll
  for (int e = 0; e < 8; ++e)
    if (e < n) k[0] = max(k[0], max_key(v[e]));
}

// Which key kinds the quantizations in `quants` read.
__device__ __forceinline__ void key_needs(const QuantizeArgs& a, unsigned quants, bool& need_x,
                                          bool& need_abs) {
  need_x = need_abs = false;
  for (int qi = 0; qi < a.n_quants; ++qi)
    if ((quants >> qi) & 1u) (a.q[qi].abs ? need_abs : need_x) = true;
}

// The row's keys from each lane's (k[1] a packed |x| max until here): the warp's maxima.
template <typename T>
__device__ __forceinline__ void warp_row_keys(uint32_t (&k)[2], bool need_abs) {
  if (need_abs) k[1] = Mag<T>::key(k[1]);
  k[0] = __reduce_max_sync(0xffffffffu, k[0]);
  k[1] = __reduce_max_sync(0xffffffffu, k[1]);
}

// Quantization q's scale of row r from the row's warp-reduced keys (k[0]: of x, k[1]: of |x|);
// the `writer` lane stores its scale, reciprocal and amax outputs.
__device__ __forceinline__ float warp_row_scale(const QuantArgs& q, int64_t r,
                                                const uint32_t (&k)[2], bool writer) {
  const float amax = from_max_key(q.abs ? k[1] : k[0]);
  const float sc = quant_scale_of(amax, q.eps, q.scale_mul, q.pow2);
  if (writer) store_scale_outputs(q, r, sc, amax);
  return sc;
}

// Rows of up to kV x 256 elements: a warp per row, grid-stride over rows. The row stays in the
// lane's registers (kV chunks of 8, 16-byte loads all in flight), its amaxes take warp
// reductions only (no barrier), then the cast: x is read once, and ~20 warps per SM each keep a
// whole row of loads in flight.
template <typename T, int kV>
__global__ void __launch_bounds__(128, 4)  // >= 16 warps per SM
    rowwise_warp_kernel(const T* __restrict__ x, QuantizeArgs a, unsigned quants, bool vec) {
  const int64_t rows = a.rows, cols = a.cols;
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  bool need_x, need_abs;
  key_needs(a, quants, need_x, need_abs);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
       r < rows; r += warps) {
    Chunk<T> ch[kV];
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      const int64_t c0 = static_cast<int64_t>(j * 32 + lane) * 8;
      if (c0 < cols) ch[j].load(x + r * cols, c0, cols, vec);
    }
    uint32_t k[2] = {0, 0};
#pragma unroll
    for (int j = 0; j < kV; ++j)
      add_keys(ch[j], chunk_len(static_cast<int64_t>(j * 32 + lane) * 8, cols), need_x, need_abs,
               k);
    warp_row_keys<T>(k, need_abs);
    // Quantization by quantization, dest by dest (one each in practice): the lane's chunks are
    // 256 elements apart, so every store is the dest row's base plus a constant.
    for (int qi = 0; qi < a.n_quants; ++qi) {
      if (!((quants >> qi) & 1u)) continue;
      const QuantArgs& q = a.q[qi];
      const float sc = warp_row_scale(q, r, k, lane == 0);
      float s8[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) s8[e] = sc;
      for (int d = 0; d < q.n_dests; ++d) {
        uint8_t* base = q.dests[d].ptr + r * q.dests[d].rs + lane * 8;
#pragma unroll
        for (int j = 0; j < kV; ++j) ch[j].pin();
#pragma unroll
        for (int j = 0; j < kV; ++j) {
          const int n = chunk_len(static_cast<int64_t>(j * 32 + lane) * 8, cols);
          if (!n) continue;
          float v[8];
          ch[j].unpack(v);
          store8(base + j * 256, 1, n, pack8(v, s8, q.e5m2));
        }
      }
    }
  }
}

// v5/v6 (TUNING.md): rows of up to kV x 256 16-bit elements, a warp per row as in
// rowwise_warp_kernel, but the rows come through shared memory. Each warp owns a ring of `stages`
// row slots; its lane 0 fills a slot with one bulk copy of the whole row (cp.async.bulk, completed
// on the slot's mbarrier) as soon as the warp has read the row the slot held into registers (v6;
// v5 refilled after the cast), so the copies of a warp's next rows are in flight while it
// reduces and casts one, and the bytes in flight cost shared memory instead of registers. The
// warps are independent (no CTA barrier). Needs 16-byte aligned rows of a multiple of 8 elements
// (ring_fits). Dynamic shared memory: ring_smem_bytes().
constexpr int kRingBarBytes = 1024;  // the warps' mbarriers, 8 bytes each, ahead of the slots

__host__ __device__ constexpr uint32_t ring_slot_bytes(int64_t cols, int elem_bytes) {
  return static_cast<uint32_t>((cols * elem_bytes + 127) / 128 * 128);
}

// Lane `lane`'s kV chunks of the 16-bit row `row` (a slot: cols elements, a multiple of 8) into
// ch, 256 elements apart, with no branch between the loads, so all kV shared-memory loads are in
// flight at once: a chunk past the row's end loads the row's last chunk instead (harmless to a
// max; for_each_row_chunk skips it).
template <typename T, int kV>
__device__ __forceinline__ void load_slot_row(const T* row, int cols, int lane,
                                              Chunk<T> (&ch)[kV]) {
#pragma unroll
  for (int j = 0; j < kV; ++j) ch[j].raw_load(row + min((j * 32 + lane) * 8, cols - 8));
}

// f(c0, chunk) for each of ch's chunks that lies in the row (load_slot_row's order).
template <typename T, int kV, typename F>
__device__ __forceinline__ void for_each_row_chunk(const Chunk<T> (&ch)[kV], int cols, int lane,
                                                   F f) {
#pragma unroll
  for (int j = 0; j < kV; ++j) {
    const int c0 = (j * 32 + lane) * 8;
    if (c0 < cols) f(c0, ch[j]);
  }
}

// The float8 row of ch times sc to base (8-byte aligned): one 8-byte store per chunk.
template <typename T, int kV, bool kE5M2>
__device__ __forceinline__ void cast_row(const Chunk<T> (&ch)[kV], int cols, int lane, float sc,
                                         uint8_t* base) {
  for_each_row_chunk<T, kV>(ch, cols, lane, [&](int c0, const Chunk<T>& c) {
    float v[8];
    c.unpack(v);
    *reinterpret_cast<uint2*>(base + c0) = pack8_sat<kE5M2>(v, sc);
  });
}

// v6: a warp's row goes from its slot into the lanes' registers once (kV uint4 per lane), the
// lanes' keys are taken from the registers, and the slot is refilled right then, before the
// warp reduction, the scale and the cast, which read only registers.
template <typename T, int kV>
__global__ void __launch_bounds__(512, 1)
    rowwise_ring_kernel(const T* __restrict__ x, QuantizeArgs a, unsigned quants, int stages) {
  extern __shared__ __align__(128) unsigned char ring_smem[];
  const int64_t rows = a.rows;
  const int cols = static_cast<int>(a.cols);  // <= 4096 (ring_fits)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const uint32_t row_bytes = static_cast<uint32_t>(cols * sizeof(T));
  const uint32_t slot_bytes = ring_slot_bytes(cols, sizeof(T));
  uint64_t* bar = reinterpret_cast<uint64_t*>(ring_smem) + warp * stages;
  unsigned char* ring = ring_smem + kRingBarBytes + static_cast<size_t>(warp) * stages * slot_bytes;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * warps;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * warps + warp;
  bool need_x, need_abs;
  key_needs(a, quants, need_x, need_abs);
  const auto issue = [&](int slot, int64_t r) {  // lane 0
    mbar_arrive_expect_tx(&bar[slot], row_bytes);
    bulk_load(ring + static_cast<size_t>(slot) * slot_bytes, x + r * cols, row_bytes, &bar[slot]);
  };
  if (lane == 0) {
    for (int i = 0; i < stages; ++i) mbar_init(&bar[i], 1);
    mbar_fence_init();
    for (int i = 0; i < stages && first + i * stride < rows; ++i) issue(i, first + i * stride);
  }
  __syncwarp();
  int slot = 0;
  uint32_t parity = 0;
  for (int64_t r = first; r < rows; r += stride) {
    mbar_wait(&bar[slot], parity);
    Chunk<T> ch[kV];
    load_slot_row<T, kV>(reinterpret_cast<const T*>(ring + static_cast<size_t>(slot) * slot_bytes),
                         cols, lane, ch);
    uint32_t k[2] = {0, 0};
    if (!need_x) {  // torchao's recipes: amaxes of |x| only, one packed max per chunk
#pragma unroll
      for (int j = 0; j < kV; ++j) k[1] = Mag<T>::combine(k[1], Mag<T>(ch[j]).all());
    } else {
#pragma unroll
      for (int j = 0; j < kV; ++j) add_keys(ch[j], 8, need_x, need_abs, k);
    }
    // The slot has been read: __syncwarp orders every lane's loads of it before lane 0's proxy
    // fence and the refill (bar.warp.sync's memory ordering; a __reduce_max_sync in its place
    // would not order them), and the copy runs while the warp reduces and casts from registers.
    __syncwarp();
    const int64_t next = r + static_cast<int64_t>(stages) * stride;
    if (lane == 0 && next < rows) {
      fence_proxy_async_smem();
      issue(slot, next);
    }
    if (++slot == stages) slot = 0, parity ^= 1u;
    warp_row_keys<T>(k, need_abs);
    for (int qi = 0; qi < a.n_quants; ++qi) {
      if (!((quants >> qi) & 1u)) continue;
      const QuantArgs& q = a.q[qi];
      const float sc = warp_row_scale(q, r, k, lane == 0);
      for (int d = 0; d < q.n_dests; ++d) {
        uint8_t* base = q.dests[d].ptr + r * q.dests[d].rs;
#pragma unroll
        for (int j = 0; j < kV; ++j) ch[j].pin();  // unpack per dest, not 8 floats per chunk held
        // The float8 dtype and the 8-byte stores decided once per row and dest, not per chunk.
        if ((reinterpret_cast<uintptr_t>(base) & 7) == 0) {
          if (q.e5m2)
            cast_row<T, kV, true>(ch, cols, lane, sc, base);
          else
            cast_row<T, kV, false>(ch, cols, lane, sc, base);
          continue;
        }
        float s8[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) s8[e] = sc;
        for_each_row_chunk<T, kV>(ch, cols, lane, [&](int c0, const Chunk<T>& c) {
          float v[8];
          c.unpack(v);
          store8(base + c0, 1, 8, pack8(v, s8, q.e5m2));
        });
      }
    }
  }
}

// A persistent CTA walks rows grid-stride; the row (kV chunks of 8 per thread) stays in registers
// from its load to its cast. kPrefetch (short rows): the next row's loads are issued before this
// row is reduced, in a second set of registers; long rows keep enough bytes in flight alone.
template <typename T, int kThreadsR, int kV, bool kPrefetch, int kMinBlocks>
__global__ void __launch_bounds__(kThreadsR, kMinBlocks)
    rowwise_kernel(const T* __restrict__ x, QuantizeArgs a, unsigned quants, bool vec) {
  constexpr int kW = kThreadsR / 32;
  __shared__ uint32_t part[2][2][kW];  // [row parity][x, |x|][warp]: one barrier per row
  const int64_t rows = a.rows, cols = a.cols;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  bool need_x, need_abs;
  key_needs(a, quants, need_x, need_abs);
  Chunk<T> cur[kV], nxt[kV];
  auto load_row = [&](Chunk<T>(&c)[kV], int64_t r) {
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      const int64_t c0 = (static_cast<int64_t>(j) * kThreadsR + threadIdx.x) * 8;
      if (c0 < cols) c[j].load(x + r * cols, c0, cols, vec);
    }
  };
  int64_t r = blockIdx.x;
  if (r < rows) load_row(cur, r);
  for (int parity = 0; r < rows; r += gridDim.x, parity ^= 1) {
    if (kPrefetch && r + gridDim.x < rows) load_row(nxt, r + gridDim.x);
    uint32_t k[2] = {0, 0};
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      const int64_t c0 = (static_cast<int64_t>(j) * kThreadsR + threadIdx.x) * 8;
      add_keys(cur[j], chunk_len(c0, cols), need_x, need_abs, k);
    }
    if (need_abs) k[1] = Mag<T>::key(k[1]);
#pragma unroll
    for (int f = 0; f < 2; ++f) {
      k[f] = __reduce_max_sync(0xffffffffu, k[f]);
      if (lane == 0) part[parity][f][warp] = k[f];
    }
    __syncthreads();
#pragma unroll
    for (int f = 0; f < 2; ++f) {
      k[f] = 0;
#pragma unroll
      for (int w = 0; w < kW; ++w) k[f] = max(k[f], part[parity][f][w]);
    }
    const RowScales rs = row_scales(a, quants, r, k, threadIdx.x == 0);
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      const int64_t c0 = (static_cast<int64_t>(j) * kThreadsR + threadIdx.x) * 8;
      const int n = chunk_len(c0, cols);
      if (!n) continue;
      float v[8];
      cur[j].unpack(v);
      cast_chunk(a, quants, r, c0, n, v, rs);
    }
    if constexpr (kPrefetch) {
#pragma unroll
      for (int j = 0; j < kV; ++j) cur[j] = nxt[j];
    } else if (r + gridDim.x < rows) {
      load_row(cur, r + gridDim.x);
    }
  }
}

// Rows wider than kRowwiseMaxCols: a CTA per row at a time; the row read once for its amaxes and
// again, from the L2, for the cast.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    rowwise_stream_kernel(const T* __restrict__ x, QuantizeArgs a, unsigned quants, bool vec) {
  __shared__ uint32_t part[2][kWarps];
  const int64_t rows = a.rows, cols = a.cols;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  bool need_x, need_abs;
  key_needs(a, quants, need_x, need_abs);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * cols;
    uint32_t k[2] = {0, 0};
    for (int64_t c0 = threadIdx.x * 8; c0 < cols; c0 += kThreads * 8) {
      Chunk<T> ch;
      ch.load(row, c0, cols, vec);
      add_keys(ch, chunk_len(c0, cols), need_x, need_abs, k);
    }
    if (need_abs) k[1] = Mag<T>::key(k[1]);
#pragma unroll
    for (int f = 0; f < 2; ++f) {
      k[f] = __reduce_max_sync(0xffffffffu, k[f]);
      if (lane == 0) part[f][warp] = k[f];
    }
    __syncthreads();
#pragma unroll
    for (int f = 0; f < 2; ++f) {
      k[f] = 0;
      for (int w = 0; w < kWarps; ++w) k[f] = max(k[f], part[f][w]);
    }
    __syncthreads();  // part is rewritten for the next row
    const RowScales rs = row_scales(a, quants, r, k, threadIdx.x == 0);
    for (int64_t c0 = threadIdx.x * 8; c0 < cols; c0 += kThreads * 8) {
      Chunk<T> ch;
      ch.load(row, c0, cols, vec);
      float v[8];
      ch.unpack(v);
      cast_chunk(a, quants, r, c0, chunk_len(c0, cols), v, rs);
    }
  }
}

__global__ void transpose_kernel(Fp8Dest src, Fp8Dest dst, int64_t rows, int64_t cols) {
  __shared__ uint8_t t[32][33];
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * 32,
                c0 = static_cast<int64_t>(blockIdx.x) * 32;
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {  // read along src's rows
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) t[i][threadIdx.x] = src.ptr[r * src.rs + c * src.cs];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {  // write along dst's columns
    const int64_t c = c0 + i, r = r0 + threadIdx.x;
    if (r < rows && c < cols) dst.ptr[r * dst.rs + c * dst.cs] = t[threadIdx.x][i];
  }
}

bool vec_ok(const QuantizeArgs& a) {
  return a.cols % 8 == 0 && (reinterpret_cast<uintptr_t>(a.x) & 15) == 0;
}

// CTAs of `kernel` (threads per CTA, static shared memory only) resident on the whole GPU.
template <typename K>
int64_t resident_ctas(K kernel, int threads) {
  int per_sm = 0;
  REPLAY_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  return static_cast<int64_t>(std::max(per_sm, 1)) * device_sms();
}

// The generic-cast switch: REPLAY_FP8_CAST=generic at start, set_cast_generic after.
bool& cast_generic_flag() {
  static bool forced = [] {
    const char* e = std::getenv("REPLAY_FP8_CAST");
    return e && std::string(e) == "generic";
  }();
  return forced;
}

}  // namespace

bool cast_generic() {
  return cast_generic_flag();
}

void set_cast_generic(bool generic) {
  cast_generic_flag() = generic;
}

bool cast_fast_plan(const QuantizeArgs& a, unsigned quants, CastFast& f) {
  f = CastFast{};
  if (!vec_ok(a) || a.row_scale_xor) return false;  // the mutant hook: the generic kernel
  for (int qi = 0; qi < a.n_quants; ++qi) {
    if (!((quants >> qi) & 1u)) continue;
    if (f.nq == 2) return false;
    const QuantArgs& q = a.q[qi];
    CastFast::Quant& c = f.q[f.nq++];
    c.qi = qi;
    c.gran = q.gran;
    c.e5m2 = q.e5m2;
    c.scale_ws = q.scale_ws;
    f.quants |= 1u << qi;
    for (int d = 0; d < q.n_dests; ++d) {
      const Fp8Dest& o = q.dests[d];
      if (o.smem_slot >= 0 && c.slot < 0) {
        c.slot = o.smem_slot;
        f.col_major = true;
      } else if (o.smem_slot < 0 && o.cs == 1 && !c.rm && o.rs % 8 == 0 &&
                 reinterpret_cast<uintptr_t>(o.ptr) % 8 == 0) {
        c.rm = o.ptr;
        c.rs = o.rs;
      } else {
        return false;  // a second dest of a kind, or one written byte by byte
      }
    }
  }
  return f.nq > 0;
}

namespace {

template <typename T>
bool amax_typed(const QuantizeArgs& a, unsigned slots, cudaStream_t s) {
  bool launched = false;  // the last work put in s is an amax kernel
  static const int64_t resident = resident_ctas(amax_kernel<T, true>, kThreads);
  const int64_t strips = (a.cols + kAmaxCols - 1) / kAmaxCols;
  const int64_t bands = (a.rows + kAmaxBand - 1) / kAmaxBand;
  const int64_t gy = std::clamp<int64_t>(resident / strips, 1, std::min<int64_t>(bands, 65535));
  const dim3 grid(static_cast<unsigned>(strips), static_cast<unsigned>(gy));
  for (int abs = 0; abs < 2; ++abs) {
    auto slot = [&](Granularity g) -> uint32_t* {
      const int k = amax_slot(g, abs != 0);
      return (slots >> k) & 1u ? a.amax_ws[k] : nullptr;
    };
    uint32_t* rw = slot(Granularity::kRowwise);
    uint32_t* cw = slot(Granularity::kColumnwise);
    uint32_t* gw = slot(Granularity::kTensorwise);
    if (!rw && !cw && !gw) continue;
    if (rw) REPLAY_CUDA(cudaMemsetAsync(rw, 0, a.rows * sizeof(uint32_t), s));
    if (cw) REPLAY_CUDA(cudaMemsetAsync(cw, 0, a.cols * sizeof(uint32_t), s));
    if (gw) REPLAY_CUDA(cudaMemsetAsync(gw, 0, sizeof(uint32_t), s));
    if (abs && !rw && !cw && vec_ok(a)) {  // the whole tensor's amax alone: one flat stream
      static const int64_t all_resident = resident_ctas(amax_all_kernel<T>, kThreads);
      const int64_t n16 = a.rows * a.cols * static_cast<int64_t>(sizeof(T)) / 16;
      const auto g =
          static_cast<unsigned>(std::min<int64_t>(all_resident, (n16 + kThreads - 1) / kThreads));
      amax_all_kernel<T><<<g, kThreads, 0, s>>>(static_cast<const uint4*>(a.x), n16, gw);
      REPLAY_CUDA_LAUNCH("fp8_quantize amax_all_kernel");
      launched = true;
      continue;
    }
    if constexpr (sizeof(T) == 2) {
      if (abs && vec_ok(a)) {  // packed magnitudes over 1024-column strips
        static const int64_t packed_resident = resident_ctas(amax_packed_kernel<T>, kThreads);
        const dim3 pg = amax_reuse::device::tiles_packed_grid(a.rows, a.cols, packed_resident);
        amax_packed_kernel<T>
            <<<pg, kThreads, 0, s>>>(static_cast<const T*>(a.x), a.rows, a.cols, rw, cw, gw);
        REPLAY_CUDA_LAUNCH("fp8_quantize amax_packed_kernel");
        launched = true;
        continue;
      }
    }
    if (abs)
      amax_kernel<T, true><<<grid, kThreads, 0, s>>>(static_cast<const T*>(a.x), a.rows, a.cols,
                                                     vec_ok(a), rw, cw, gw);
    else
      amax_kernel<T, false><<<grid, kThreads, 0, s>>>(static_cast<const T*>(a.x), a.rows, a.cols,
                                                      vec_ok(a), rw, cw, gw);
    REPLAY_CUDA_LAUNCH("fp8_quantize amax_kernel");
    launched = true;
  }
  return launched;
}

template <typename T>
void cast_typed(const QuantizeArgs& a, unsigned quants, bool fold, bool pdl, cudaStream_t s) {
  const int64_t tiles =
      ((a.cols + kCastTile - 1) / kCastTile) * ((a.rows + kCastTile - 1) / kCastTile);
  if (tiles > 0x7FFFFFFF) throw std::runtime_error("fp8_quantize: more than 2^31 cast tiles");
  const dim3 grid(static_cast<unsigned>(tiles)), block(kThreads);
  const auto* xp = static_cast<const T*>(a.x);
  CastFast f;
  if (!cast_generic() && cast_fast_plan(a, quants, f)) {
    REPLAY_CUDA(
        f.nq == 1
            ? launch_maybe_pdl(cast_fast_kernel<T, 1>, grid, block, 0, s, pdl, xp, a, f, fold)
            : launch_maybe_pdl(cast_fast_kernel<T, 2>, grid, block, 0, s, pdl, xp, a, f, fold));
    REPLAY_CUDA_LAUNCH("fp8_quantize cast_fast_kernel");
    return;
  }
  REPLAY_CUDA(
      launch_maybe_pdl(cast_kernel<T>, grid, block, 0, s, pdl, xp, a, quants, vec_ok(a), fold));
  REPLAY_CUDA_LAUNCH("fp8_quantize cast_kernel");
}

// kMinBlocks: CTAs per SM the registers must allow (>= 1024 threads for 512 and more).
template <typename T, int kThreadsR, int kV,
          int kMinBlocks = kThreadsR >= 512 ? 1024 / kThreadsR : 3>
void rowwise_launch(const QuantizeArgs& a, unsigned quants, cudaStream_t s) {
  constexpr bool kPrefetch = kV <= 4 && (sizeof(T) == 2 || kThreadsR < 256);  // registers
  static const int64_t resident =
      resident_ctas(rowwise_kernel<T, kThreadsR, kV, kPrefetch, kMinBlocks>, kThreadsR);
  const auto grid = static_cast<unsigned>(std::min<int64_t>(a.rows, resident));
  rowwise_kernel<T, kThreadsR, kV, kPrefetch, kMinBlocks>
      <<<grid, kThreadsR, 0, s>>>(static_cast<const T*>(a.x), a, quants, vec_ok(a));
  REPLAY_CUDA_LAUNCH("fp8_quantize rowwise_kernel");
}

template <typename T, int kV>
void rowwise_warp_launch(const QuantizeArgs& a, unsigned quants, cudaStream_t s) {
  static const int64_t resident = resident_ctas(rowwise_warp_kernel<T, kV>, 128);
  const auto grid = static_cast<unsigned>(std::min<int64_t>((a.rows + 3) / 4, resident));
  rowwise_warp_kernel<T, kV><<<grid, 128, 0, s>>>(static_cast<const T*>(a.x), a, quants, vec_ok(a));
  REPLAY_CUDA_LAUNCH("fp8_quantize rowwise_warp_kernel");
}

bool& ring_flag() {
  static bool on = [] {
    const char* e = std::getenv("REPLAY_FP8_RING");
    if (!e || !*e || std::string(e) == "1") return true;
    if (std::string(e) == "0") return false;
    throw std::invalid_argument(std::string("REPLAY_FP8_RING='") + e + "': expected 0 or 1");
  }();
  return on;
}

// The ring kernel's default geometry: 16 warps, each with slots for kRingWarpBytes of rows. At
// 4096 columns that is one 8 KB slot per warp (128 KB: one CTA per SM; 120 registers per thread
// allow 17 warps), from v6's sweep (H200, TUNING.md v6): with the slot refilled as soon as its row
// is in registers, one slot per warp keeps the next row's copy in flight during the cast, and 4
// warps per scheduler beat 8 x 3, 8 x 2 and 12 x 2 (the rowwise kernels of two torchao forwards:
// 41.3 / 71.2 µs against 45.3 / 75.4 at 8 x 3). Narrower rows get more slots, up to 8 (the
// barriers' room), so a warp keeps the same bytes in flight: not measured (no bundled graph has
// such rows); one slot of a 512-column row would leave ~16 KB in flight per SM.
constexpr int kRingWarps = 16, kRingMaxStages = 8;
constexpr int64_t kRingWarpBytes = 8192;

int64_t ring_smem_bytes(const QuantizeArgs& a, int warps, int stages) {
  return kRingBarBytes + int64_t{warps} * stages * ring_slot_bytes(a.cols, 2);
}

// Whether the ring kernel can take x at warps x stages: 16-bit rows (the callers' dtype) of up to
// 4096 elements in whole 16-byte vectors (the bulk copy's unit), the barriers within
// kRingBarBytes. The device's shared-memory limit is checked by ring_resident.
bool ring_fits(const QuantizeArgs& a, int warps, int stages) {
  return vec_ok(a) && a.cols > 0 && a.cols <= 4096 && warps >= 1 && warps <= 16 && stages >= 1 &&
         int64_t{warps} * stages * 8 <= kRingBarBytes;
}

// CTAs of the ring kernel `fn` at `warps` x 32 threads and `smem` bytes of dynamic shared memory
// resident on the current device; 0 when the device cannot run it (smem above its opt-in limit,
// or the opt-in or the occupancy query refused: the caller then takes the warp kernel). The
// opt-in (to the device's maximum) is set once per device and kernel, the occupancy asked once
// per device, kernel, warps and smem: a timed launch stays a launch.
int64_t ring_resident(const void* fn, int warps, int64_t smem) {
  static std::mutex mu;
  static std::map<std::tuple<int, const void*, int, int64_t>, int64_t> resident;
  static std::map<std::pair<int, const void*>, int> optin;  // the limit set, or 0: refused
  int dev = 0;
  REPLAY_CUDA(cudaGetDevice(&dev));
  const std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(dev, fn, warps, smem);
  if (const auto it = resident.find(key); it != resident.end()) return it->second;
  auto o = optin.find({dev, fn});
  if (o == optin.end()) {
    int limit = 0;
    if (cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
            cudaSuccess ||
        cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, limit) !=
            cudaSuccess) {
      (void)cudaGetLastError();  // a refusal is a fallback, not a pending error
      limit = 0;
    }
    o = optin.emplace(std::make_pair(dev, fn), limit).first;
  }
  int per_sm = 0;
  if (smem > o->second || cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                              &per_sm, fn, warps * 32, static_cast<size_t>(smem)) != cudaSuccess) {
    (void)cudaGetLastError();
    per_sm = 0;
  }
  return resident[key] = int64_t{per_sm} * device_sms();
}

std::atomic<uint64_t> g_ring_launches{0};

template <typename T, int kV>
bool rowwise_ring_launch(const QuantizeArgs& a, unsigned quants, const RingGeometry& g,
                         cudaStream_t s) {
  static_assert(sizeof(T) == 2, "the ring kernel takes 16-bit rows (ring_smem_bytes)");
  const auto kernel = rowwise_ring_kernel<T, kV>;
  const int64_t smem = ring_smem_bytes(a, g.warps, g.stages);
  int64_t ctas = ring_resident(reinterpret_cast<const void*>(kernel), g.warps, smem);
  if (ctas == 0) return false;
  if (g.max_ctas > 0) ctas = std::min<int64_t>(ctas, g.max_ctas);
  const auto grid =
      static_cast<unsigned>(std::min<int64_t>((a.rows + g.warps - 1) / g.warps, ctas));
  kernel<<<grid, g.warps * 32, static_cast<size_t>(smem), s>>>(static_cast<const T*>(a.x), a,
                                                               quants, g.stages);
  REPLAY_CUDA_LAUNCH("fp8_quantize rowwise_ring_kernel");
  g_ring_launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// The ring kernel for a's rows at geometry g (ring_fits must hold); false when the device cannot
// run it (nothing launched).
template <typename T>
bool rowwise_ring(const QuantizeArgs& a, unsigned quants, const RingGeometry& g, cudaStream_t s) {
  const int64_t chunks = a.cols / 8;
  if (chunks <= 32) return rowwise_ring_launch<T, 1>(a, quants, g, s);
  if (chunks <= 64) return rowwise_ring_launch<T, 2>(a, quants, g, s);
  if (chunks <= 128) return rowwise_ring_launch<T, 4>(a, quants, g, s);
  if (chunks <= 256) return rowwise_ring_launch<T, 8>(a, quants, g, s);
  return rowwise_ring_launch<T, 16>(a, quants, g, s);
}

std::mutex g_ring_geometry_mu;
RingGeometry g_ring_geometry;  // the test hook's (warps 0: none)

// REPLAY_FP8_ROWWISE=THREADS,V (a device sweep, scripts/device.sh fp8rows): the one-pass rowwise
// kernel for 16-bit rows of up to THREADS x V x 8 elements: THREADS 32 = a warp per row
// (rowwise_warp_kernel, V 4, 8 or 16), else a CTA of THREADS per row (rowwise_kernel: 128,4
// 256,2 256,4 448,4 512,4 1024,4); such a geometry wins over the ring kernel. rW,S: the ring
// kernel at W warps per CTA of S row slots each (where it takes the rows and REPLAY_FP8_RING is
// not 0). Another pair or rows too wide: the heuristic below. A value of another form is an
// error (validate_rowwise_env, at bind).
struct RowwiseGeometry {
  int threads = 0, v = 0;
  bool ring = false;  ///< then threads = warps per CTA, v = slots per warp
};
const RowwiseGeometry& rowwise_geometry() {
  static const RowwiseGeometry g = [] {
    RowwiseGeometry r;
    const char* e = std::getenv("REPLAY_FP8_ROWWISE");
    if (!e || !*e) return r;
    r.ring = *e == 'r';
    int used = 0;
    if (std::sscanf(e + r.ring, "%d,%d%n", &r.threads, &r.v, &used) == 2 &&
        e[r.ring + used] == '\0' && r.threads > 0 && r.v > 0)
      return r;
    throw std::invalid_argument(std::string("REPLAY_FP8_ROWWISE='") + e +
                                "': expected THREADS,V or rWARPS,SLOTS (positive integers)");
  }();
  return g;
}

// The ring's geometry for a's rows: the test hook's (set_rowwise_ring_geometry), else
// REPLAY_FP8_ROWWISE=rW,S, else kRingWarps warps of kRingWarpBytes of slots each.
RingGeometry ring_geometry(const QuantizeArgs& a) {
  {
    const std::lock_guard<std::mutex> lock(g_ring_geometry_mu);
    if (g_ring_geometry.warps > 0) return g_ring_geometry;
  }
  const RowwiseGeometry& e = rowwise_geometry();
  if (e.ring) return RingGeometry{e.threads, e.v, 0};
  const int64_t slots = kRingWarpBytes / ring_slot_bytes(std::max<int64_t>(a.cols, 1), 2);
  return RingGeometry{kRingWarps, static_cast<int>(std::clamp<int64_t>(slots, 1, kRingMaxStages)),
                      0};
}

// Launches the THREADS,V geometry asked for by REPLAY_FP8_ROWWISE when it is one of the list and
// holds the row; false otherwise (and for a ring geometry: ring_geometry(a) carries it).
template <typename T>
bool rowwise_swept(const QuantizeArgs& a, unsigned quants, cudaStream_t s) {
  const RowwiseGeometry& g = rowwise_geometry();
  if (static_cast<int64_t>(g.threads) * g.v * 8 < a.cols) return false;
  if (g.ring) return false;  // the ring's geometry: ring_geometry(a)
  const auto is = [&](int t, int v) { return g.threads == t && g.v == v; };
  if (is(32, 4)) return rowwise_warp_launch<T, 4>(a, quants, s), true;
  if (is(32, 8)) return rowwise_warp_launch<T, 8>(a, quants, s), true;
  if (is(32, 16)) return rowwise_warp_launch<T, 16>(a, quants, s), true;
  if (is(128, 4)) return rowwise_launch<T, 128, 4>(a, quants, s), true;
  if (is(256, 2)) return rowwise_launch<T, 256, 2>(a, quants, s), true;
  if (is(256, 4)) return rowwise_launch<T, 256, 4>(a, quants, s), true;
  if (is(448, 4)) return rowwise_launch<T, 448, 4, 2>(a, quants, s), true;
  if (is(512, 4)) return rowwise_launch<T, 512, 4>(a, quants, s), true;
  if (is(1024, 4)) return rowwise_launch<T, 1024, 4>(a, quants, s), true;
  return false;
}

template <typename T>
void rowwise_typed(const QuantizeArgs& a, unsigned quants, cudaStream_t s) {
  const int64_t chunks = (a.cols + 7) / 8;  // 8 columns per chunk
  if constexpr (sizeof(T) == 2) {
    if (rowwise_geometry().threads && rowwise_swept<T>(a, quants, s)) return;
    // 16-bit rows of up to 4096 elements in 16-byte vectors: the ring kernel (v5, v6: TUNING.md).
    if (ring_flag()) {
      const RingGeometry g = ring_geometry(a);
      if (ring_fits(a, g.warps, g.stages) && rowwise_ring<T>(a, quants, g, s)) return;
    }
  }
  // A warp per row up to 16 chunks per lane (8 for float32: registers), then a CTA per row.
  if (chunks <= 32) return rowwise_warp_launch<T, 1>(a, quants, s);
  if (chunks <= 64) return rowwise_warp_launch<T, 2>(a, quants, s);
  if (chunks <= 128) return rowwise_warp_launch<T, 4>(a, quants, s);
  if (chunks <= 256) return rowwise_warp_launch<T, 8>(a, quants, s);
  if constexpr (sizeof(T) == 2)
    if (chunks <= 512) return rowwise_warp_launch<T, 16>(a, quants, s);
  if (chunks <= 512) return rowwise_launch<T, 128, 4>(a, quants, s);
  if (chunks <= 1024) return rowwise_launch<T, 256, 4>(a, quants, s);
  // 14 warps of 4 chunks hold 14336 columns (Llama-3-8B's intermediate size) without an idle lane:
  // 16-bit x [8192, 14336] and [4096, 14336] 171.3 -> 158.0 µs against 512 x 4 (H200,
  // REPLAY_FP8_ROWWISE sweep, TUNING.md).
  if constexpr (sizeof(T) == 2)
    if (chunks > 1536 && chunks <= 1792) return rowwise_launch<T, 448, 4, 2>(a, quants, s);
  if (chunks <= 2048) return rowwise_launch<T, 512, 4>(a, quants, s);
  if (chunks <= 4096) return rowwise_launch<T, 1024, 4>(a, quants, s);
  static_assert(kRowwiseMaxCols == 4096 * 8, "the dispatch above covers kRowwiseMaxCols");
  const auto grid = static_cast<unsigned>(std::min<int64_t>(a.rows, int64_t(device_sms()) * 8));
  rowwise_stream_kernel<T>
      <<<grid, kThreads, 0, s>>>(static_cast<const T*>(a.x), a, quants, vec_ok(a));
  REPLAY_CUDA_LAUNCH("fp8_quantize rowwise_stream_kernel");
}

}  // namespace

bool rowwise_one_pass(const QuantizeArgs& a, unsigned quants) {
  for (int i = 0; i < a.n_quants; ++i) {
    if (!((quants >> i) & 1u)) continue;
    if (a.q[i].gran != Granularity::kRowwise) return false;
    for (int d = 0; d < a.q[i].n_dests; ++d)
      if (a.q[i].dests[d].cs != 1) return false;
  }
  return a.row_scale_xor == 0;
}

void launch_rowwise(const QuantizeArgs& a, unsigned quants, cudaStream_t s) {
  switch (a.x_dtype) {
    case DType::kBFloat16:
      return rowwise_typed<__nv_bfloat16>(a, quants, s);
    case DType::kFloat16:
      return rowwise_typed<__half>(a, quants, s);
    default:
      return rowwise_typed<float>(a, quants, s);
  }
}

int64_t vec_len(const QuantizeArgs& a, Granularity g) {
  return g == Granularity::kTensorwise ? 1 : g == Granularity::kRowwise ? a.rows : a.cols;
}

bool launch_amax(const QuantizeArgs& a, unsigned slots, cudaStream_t s) {
  switch (a.x_dtype) {
    case DType::kBFloat16:
      return amax_typed<__nv_bfloat16>(a, slots, s);
    case DType::kFloat16:
      return amax_typed<__half>(a, slots, s);
    default:
      return amax_typed<float>(a, slots, s);
  }
}

void launch_scales(const QuantizeArgs& a, unsigned quants, cudaStream_t s) {
  int64_t len = 1;
  for (int i = 0; i < a.n_quants; ++i)
    if ((quants >> i) & 1u) len = std::max(len, vec_len(a, a.q[i].gran));
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((len + 255) / 256, 1024)),
                  static_cast<unsigned>(a.n_quants));
  scales_kernel<<<grid, 256, 0, s>>>(a, quants, a.rows, a.cols);
  REPLAY_CUDA_LAUNCH("fp8_quantize scales_kernel");
}

bool rowwise_ring_enabled() {
  return ring_flag();
}
void set_rowwise_ring(bool on) {
  ring_flag() = on;
}
void set_rowwise_ring_geometry(RingGeometry g) {
  const std::lock_guard<std::mutex> lock(g_ring_geometry_mu);
  g_ring_geometry = g;
}
uint64_t rowwise_ring_launches() {
  return g_ring_launches.load(std::memory_order_relaxed);
}
void validate_rowwise_env() {
  (void)ring_flag();
  (void)rowwise_geometry();
}

bool pdl_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("REPLAY_FP8_PDL");
    if (!e || !*e || std::string(e) == "1") return true;
    if (std::string(e) == "0") return false;
    throw std::invalid_argument(std::string("REPLAY_FP8_PDL='") + e + "': expected 0 or 1");
  }();
  return on;
}

void launch_cast(const QuantizeArgs& a, unsigned quants, bool fold_scales, cudaStream_t s,
                 bool after_amax) {
  after_amax = pdl_enabled() && after_amax;
  switch (a.x_dtype) {
    case DType::kBFloat16:
      return cast_typed<__nv_bfloat16>(a, quants, fold_scales, after_amax, s);
    case DType::kFloat16:
      return cast_typed<__half>(a, quants, fold_scales, after_amax, s);
    default:
      return cast_typed<float>(a, quants, fold_scales, after_amax, s);
  }
}

void launch_transpose_copy(Fp8Dest src, Fp8Dest dst, int64_t rows, int64_t cols, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>((rows + 31) / 32));
  transpose_kernel<<<grid, dim3(32, 8), 0, s>>>(src, dst, rows, cols);
  REPLAY_CUDA_LAUNCH("fp8_quantize transpose_kernel");
}

}  // namespace replay::fp8_quantize
