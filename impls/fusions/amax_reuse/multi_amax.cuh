// Every amax / amin of one tensor in one pass over it: the device code of amax_reuse, written to be
// reused (a float8 quantization's rowwise, columnwise and tensorwise scales read x once here).
//
// x is [M, N] (row stride `ld`, unit column stride) of T in {__nv_bfloat16, __half, float};
// kAbs takes |x| first. Each output is the max or min (amax_keys.hpp: NaN propagates, -0 < +0)
// over the rows ([M]), the columns ([N]) or everything ([1]). Every element becomes a 32-bit key
// (amax_keys.hpp) and every reduction is an unsigned max of keys, so partial results combine in
// any order, by warp reductions, atomicMax, or from coarser to finer dims, with the same bits.
//
// Kernels (launchers in kernels.cu):
//   multi_amax_rows_kernel   a warp per row, grid-stride over rows; 16-byte loads, 4 in flight per
//                            lane; a row's keys reduced with __reduce_max_sync and stored by lane
//                            0; the whole results: one atomicMax per CTA on a key in the
//                            workspace, and the last CTA (a ticket counter) stores them and zeroes
//                            the key and the counter. |x| max over bf16/fp16 takes the packed path:
//                            __vmaxu2 on pairs of 16-bit magnitudes (an unsigned max of the bits
//                            of non-negative floats is their max; NaN bits are above +inf's).
//   multi_amax_tiles_kernel  CTA tile = a chunk of rows x 256 lanes x 16 bytes of columns; each
//                            thread keeps its columns' keys in registers over the chunk, reads
//                            kBand rows per step (kBand 16-byte loads in flight), reduces each
//                            row over the CTA through shared memory; rows, columns and the whole
//                            by atomicMax on keys in the workspace.
//   multi_amax_tiles_packed_kernel  the same for maxima of |x| of 16-bit floats (the float8
//                            recipes): strips of 1024 columns, each warp a row of the strip at a
//                            time (2 rows, 8 16-byte loads in flight per lane), column maxima as
//                            packed 16-bit magnitudes in registers; keys only per row, column and
//                            CTA.
//   multi_amax_finalize_kernel  keys -> outputs in their dtypes, and the keys zeroed again.
// Workspace (uint32): rows max [M], rows min [M], cols max [N], cols min [N], all max, all min,
// counter: zero before the first launch, zero after each.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "impls/fusions/amax_reuse/amax_keys.hpp"
#include "impls/fusions/amax_reuse/kernels.hpp"

namespace replay::amax_reuse::device {

constexpr int kThreads = 256;  // threads per CTA of every kernel
constexpr int kWarps = kThreads / 32;
constexpr int kBand = 8;  // rows per step of the tiles kernel

/// Offsets of the workspace's key arrays (uint32 elements).
struct Slots {
  int64_t rows[2], cols[2], all[2], counter;
  __host__ __device__ Slots(int64_t M, int64_t N) {
    rows[0] = 0;
    rows[1] = M;
    cols[0] = 2 * M;
    cols[1] = 2 * M + N;
    all[0] = 2 * M + 2 * N;
    all[1] = all[0] + 1;
    counter = all[0] + 2;
  }
  __host__ __device__ int64_t size() const { return counter + 1; }
};

/// Float32 bits of a raw element of T.
template <typename T>
__device__ __forceinline__ uint32_t f32_bits(uint32_t raw);
template <>
__device__ __forceinline__ uint32_t f32_bits<float>(uint32_t raw) {
  return raw;
}
template <>
__device__ __forceinline__ uint32_t f32_bits<__nv_bfloat16>(uint32_t raw) {
  return raw << 16;  // bfloat16 is the top half of a float32
}
template <>
__device__ __forceinline__ uint32_t f32_bits<__half>(uint32_t raw) {
  return __float_as_uint(__half2float(__ushort_as_half(static_cast<unsigned short>(raw))));
}

/// Keys of one element for each extreme (only those asked for are computed).
struct Keys {
  uint32_t k[2] = {0, 0};
  __device__ __forceinline__ void add(uint32_t bits, bool need_max, bool need_min) {
    if (need_max) k[0] = combine(k[0], encode(Extreme::kMax, bits));
    if (need_min) k[1] = combine(k[1], encode(Extreme::kMin, bits));
  }
  __device__ __forceinline__ void add(const Keys& o) {
    k[0] = combine(k[0], o.k[0]);
    k[1] = combine(k[1], o.k[1]);
  }
};

template <bool kAbs>
__device__ __forceinline__ uint32_t magnitude(uint32_t bits) {
  return kAbs ? (bits & 0x7fffffffu) : bits;
}

/// Adds the elements of one 16-byte vector of T to `keys`.
template <typename T, bool kAbs>
__device__ __forceinline__ void add_vec(const uint4& v, Keys& keys, bool need_max, bool need_min) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (sizeof(T) == 4) {
      keys.add(magnitude<kAbs>(w[i]), need_max, need_min);
    } else {
      keys.add(magnitude<kAbs>(f32_bits<T>(w[i] & 0xffffu)), need_max, need_min);
      keys.add(magnitude<kAbs>(f32_bits<T>(w[i] >> 16)), need_max, need_min);
    }
  }
}

/// Raw bits of element i of a T array.
template <typename T>
__device__ __forceinline__ uint32_t load_raw(const void* p, int64_t i) {
  if constexpr (sizeof(T) == 4)
    return __ldg(static_cast<const uint32_t*>(p) + i);
  else
    return __ldg(static_cast<const unsigned short*>(p) + i);
}

/// Stores the value of `key` (extreme e) as dtype t at p[i].
__device__ __forceinline__ void store_key(void* p, int64_t i, DType t, Extreme e, uint32_t key) {
  const float v = __uint_as_float(decode(e, key));
  switch (t) {
    case DType::kFloat32:
      static_cast<float*>(p)[i] = v;
      return;
    case DType::kBFloat16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
      return;
    case DType::kFloat16:
      static_cast<__half*>(p)[i] = __float2half_rn(v);
      return;
    default:
      return;
  }
}

/// Which kinds and extremes the outputs ask for.
struct Needs {
  bool rows = false, cols = false, all = false;
  bool ext[2] = {false, false};
  __host__ __device__ explicit Needs(const MultiAmaxArgs& a) {
    for (int o = 0; o < a.n_out; ++o) {
      rows |= a.out[o].kind == AmaxKind::kRows;
      cols |= a.out[o].kind == AmaxKind::kCols;
      all |= a.out[o].kind == AmaxKind::kAll;
      ext[static_cast<int>(a.out[o].extreme)] = true;
    }
  }
};

/// Block-wide key max of `k` (every thread passes its key; thread 0 gets the result).
__device__ __forceinline__ uint32_t block_max(uint32_t k, uint32_t* smem) {
  k = __reduce_max_sync(0xffffffffu, k);
  if (threadIdx.x % 32 == 0) smem[threadIdx.x / 32] = k;
  __syncthreads();
  uint32_t r = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kWarps; ++w) r = combine(r, smem[w]);
  __syncthreads();
  return r;
}

/// The whole results: one atomicMax per CTA, then the last CTA to finish stores them and zeroes
/// the keys and the counter for the next launch.
__device__ __forceinline__ void finish_all(const MultiAmaxArgs& a, const Needs& need, Keys all,
                                           uint32_t* ws, const Slots& s) {
  __shared__ uint32_t red[kWarps];
  __shared__ bool last;
  for (int e = 0; e < 2; ++e) {
    if (!need.ext[e]) continue;
    const uint32_t k = block_max(all.k[e], red);
    if (threadIdx.x == 0 && k) atomicMax(ws + s.all[e], k);
  }
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned ticket = atomicAdd(ws + s.counter, 1u);
    last = ticket == gridDim.x * gridDim.y - 1;
  }
  __syncthreads();
  if (!last || threadIdx.x != 0) return;
  __threadfence();
  for (int e = 0; e < 2; ++e) {
    if (!need.ext[e]) continue;
    const uint32_t k = atomicExch(ws + s.all[e], 0u);
    for (int o = 0; o < a.n_out; ++o)
      if (a.out[o].kind == AmaxKind::kAll && static_cast<int>(a.out[o].extreme) == e)
        store_key(a.out[o].ptr, 0, a.out[o].dtype, a.out[o].extreme, k);
  }
  ws[s.counter] = 0;
}

// kPacked: |x| max of bf16 / fp16 with 16-byte vectors only (the launcher checks), the packed
// path alone in its own instantiation (fewer registers: more CTAs resident).
template <typename T, bool kAbs, bool kPacked>
static __global__ void __launch_bounds__(kThreads)
    multi_amax_rows_kernel(MultiAmaxArgs a, uint32_t* ws, bool vec) {
  static_assert(!kPacked || (kAbs && sizeof(T) == 2), "the packed path is |x| of 16-bit floats");
  const Needs need(a);
  const Slots s(a.M, a.N);
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  constexpr int kVec = 16 / sizeof(T);  // elements per 16-byte vector
  // |x| max of 16-bit elements: an unsigned max of pairs of 16-bit magnitudes.
  constexpr bool packed = kPacked;
  Keys all;
  for (int64_t m = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; m < a.M;
       m += warps) {
    const T* row = static_cast<const T*>(a.x) + m * a.ld;
    Keys keys;
    if (vec) {
      const uint4* rv = reinterpret_cast<const uint4*>(row);
      const int64_t nv = a.N / kVec;
      uint32_t acc = 0;  // packed: two 16-bit maxima
      int64_t v = lane;
      for (; v + 3 * 32 < nv; v += 4 * 32) {
        uint4 r[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) r[u] = __ldg(rv + v + u * 32);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          if constexpr (packed) {
            acc = __vmaxu2(acc, __vmaxu2(__vmaxu2(r[u].x & 0x7fff7fffu, r[u].y & 0x7fff7fffu),
                                         __vmaxu2(r[u].z & 0x7fff7fffu, r[u].w & 0x7fff7fffu)));
          } else {
            add_vec<T, kAbs>(r[u], keys, need.ext[0], need.ext[1]);
          }
        }
      }
      for (; v < nv; v += 32) {
        const uint4 r = __ldg(rv + v);
        if constexpr (packed)
          acc = __vmaxu2(acc, __vmaxu2(__vmaxu2(r.x & 0x7fff7fffu, r.y & 0x7fff7fffu),
                                       __vmaxu2(r.z & 0x7fff7fffu, r.w & 0x7fff7fffu)));
        else
          add_vec<T, kAbs>(r, keys, need.ext[0], need.ext[1]);
      }
      if constexpr (packed) {
        const uint32_t h = max(acc & 0xffffu, acc >> 16);
        if (v > lane) keys.add(f32_bits<T>(h), true, false);  // this lane read something
      }
    } else {
      for (int64_t c = lane; c < a.N; c += 32)
        keys.add(magnitude<kAbs>(f32_bits<T>(load_raw<T>(row, c))), need.ext[0], need.ext[1]);
    }
#pragma unroll
    for (int e = 0; e < 2; ++e)
      if (need.ext[e]) keys.k[e] = __reduce_max_sync(0xffffffffu, keys.k[e]);
    if (lane == 0 && need.rows)
      for (int o = 0; o < a.n_out; ++o) {
        const AmaxOutput& out = a.out[o];
        if (out.kind == AmaxKind::kRows)
          store_key(out.ptr, m * out.stride, out.dtype, out.extreme,
                    out.extreme == Extreme::kMax ? keys.k[0] : keys.k[1]);
      }
    all.add(keys);
  }
  if (need.all) finish_all(a, need, all, ws, s);
}

template <typename T, bool kAbs>
static __global__ void __launch_bounds__(kThreads)
    multi_amax_tiles_kernel(MultiAmaxArgs a, uint32_t* ws, bool vec, int64_t rows_per_cta) {
  const Needs need(a);
  const Slots s(a.M, a.N);
  constexpr int kVec = 16 / sizeof(T);
  __shared__ uint32_t srow[2][kBand][kWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kVec;
  const int64_t m_lo = static_cast<int64_t>(blockIdx.y) * rows_per_cta;
  const int64_t m_hi = min(a.M, m_lo + rows_per_cta);
  Keys col[kVec];  // this thread's columns c0 .. c0 + kVec - 1 over the CTA's rows
  Keys all;
  for (int64_t b = m_lo; b < m_hi; b += kBand) {
    Keys rk[kBand];
    if (vec) {
      uint4 r[kBand];
#pragma unroll
      for (int i = 0; i < kBand; ++i)
        if (b + i < m_hi && c0 < a.N)
          r[i] = __ldg(
              reinterpret_cast<const uint4*>(static_cast<const T*>(a.x) + (b + i) * a.ld + c0));
#pragma unroll
      for (int i = 0; i < kBand; ++i) {
        if (!(b + i < m_hi && c0 < a.N)) continue;
        const uint32_t w[4] = {r[i].x, r[i].y, r[i].z, r[i].w};
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const uint32_t raw = sizeof(T) == 4 ? w[j] : (w[j / 2] >> (16 * (j % 2))) & 0xffffu;
          Keys k;
          k.add(magnitude<kAbs>(f32_bits<T>(raw)), need.ext[0], need.ext[1]);
          col[j].add(k);
          rk[i].add(k);
        }
      }
    } else {
      for (int i = 0; i < kBand && b + i < m_hi; ++i) {
        const T* row = static_cast<const T*>(a.x) + (b + i) * a.ld;
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          if (c0 + j >= a.N) break;
          Keys k;
          k.add(magnitude<kAbs>(f32_bits<T>(load_raw<T>(row, c0 + j))), need.ext[0], need.ext[1]);
          col[j].add(k);
          rk[i].add(k);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kBand; ++i) all.add(rk[i]);
    if (need.rows) {  // each row of the band over the CTA's columns: warps, then shared memory
#pragma unroll
      for (int i = 0; i < kBand; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (!need.ext[e]) continue;
          const uint32_t k = __reduce_max_sync(0xffffffffu, rk[i].k[e]);
          if (lane == 0) srow[e][i][warp] = k;
        }
      __syncthreads();
      if (threadIdx.x < 2 * kBand) {
        const int e = threadIdx.x / kBand, i = threadIdx.x % kBand;
        if (need.ext[e] && b + i < m_hi) {
          uint32_t k = 0;
          for (int w = 0; w < kWarps; ++w) k = combine(k, srow[e][i][w]);
          if (k) atomicMax(ws + s.rows[e] + b + i, k);
        }
      }
      __syncthreads();
    }
  }
  if (need.cols)
    for (int j = 0; j < kVec; ++j)
      for (int e = 0; e < 2; ++e)
        if (need.ext[e] && c0 + j < a.N && col[j].k[e])
          atomicMax(ws + s.cols[e] + c0 + j, col[j].k[e]);
  if (need.all) {
    __shared__ uint32_t red[kWarps];
    for (int e = 0; e < 2; ++e) {
      if (!need.ext[e]) continue;
      const uint32_t k = block_max(all.k[e], red);
      if (threadIdx.x == 0 && k) atomicMax(ws + s.all[e], k);
    }
  }
}

// The |x| max of 16-bit floats with every result a max (the float8 recipes' rowwise + columnwise
// + tensorwise amaxes of one tensor), 16-byte vectors only (the launcher checks): a CTA owns a
// strip of kStripCols columns and every gridDim.y-th step of 16 rows; each warp takes rows
// warp and warp + 8 of a step, every 16-byte load of them in flight (kStripVecs per lane and row),
// and keeps its strip's columns as packed 16-bit magnitudes in registers (one __vmaxu2 per two
// elements, no key per element). A row's max over the strip: a warp reduction and one atomicMax
// by lane 0; the columns: over the 8 warps through shared memory, then one atomicMax per column
// and CTA; the whole: one atomicMax per CTA. Keys only at those points.
constexpr int kStripVecs = 4;                         // 16-byte vectors per lane and row
constexpr int kStripCols = 32 * kStripVecs * 8;       // 1024 columns of 16-bit x per CTA
constexpr int kPackedRows = 2;                        // rows in flight per warp
constexpr int kPackedRowStep = kWarps * kPackedRows;  // rows of a chunk one step covers

/// The body of multi_amax_tiles_packed_kernel, for any kernel of 256 threads (a float8
/// quantization takes its rowwise, columnwise and tensorwise amaxes of |x| with it): x [M, N]
/// of 16-bit T, row stride ld, N and ld multiples of 8, x 16-byte aligned; the CTA at
/// (blockIdx.x, blockIdx.y) covers columns [1024 blockIdx.x, + 1024) of the steps of
/// kPackedRowStep rows blockIdx.y, + gridDim.y, ... (all CTAs walk x from top to bottom
/// together: the bottom of x is what the L2 holds at the end, for a cast pass that reads x again
/// bottom-up) and atomicMax-es the max keys (encode(Extreme::kMax, ..)) of |x| over its part of
/// each row into row_keys[M], of each column into col_keys[N], of everything into *all_key (each
/// null when not wanted).
template <typename T>
__device__ __forceinline__ void tiles_packed_body(const T* __restrict__ x, int64_t M, int64_t N,
                                                  int64_t ld, uint32_t* row_keys,
                                                  uint32_t* col_keys, uint32_t* all_key) {
  static_assert(sizeof(T) == 2, "the packed path is |x| of 16-bit floats");
  constexpr int kWords = kStripVecs * 4;  // packed words per lane and row: 2 columns each
  __shared__ uint32_t colpart[kWarps][kStripCols / 2];
  __shared__ uint32_t red[kWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t cb = static_cast<int64_t>(blockIdx.x) * kStripCols;  // the strip's first column
  const int64_t steps = (M + kPackedRowStep - 1) / kPackedRowStep;
  // Vector v of a lane covers columns cb + (v * 32 + lane) * 8 .. + 7 (a warp reads 512
  // contiguous bytes per vector index); valid when inside the row (N is a multiple of 8).
  bool ok[kStripVecs];
#pragma unroll
  for (int v = 0; v < kStripVecs; ++v) ok[v] = cb + (v * 32 + lane) * 8 < N;
  uint32_t cm[kWords];  // column pairs' max magnitudes
#pragma unroll
  for (int j = 0; j < kWords; ++j) cm[j] = 0;
  uint32_t tm = 0;  // the max magnitude of everything this lane read (packed)
  for (int64_t st = blockIdx.y; st < steps; st += gridDim.y) {
    const int64_t r0 = st * kPackedRowStep + warp;
    uint4 v4[kPackedRows][kStripVecs];
#pragma unroll
    for (int i = 0; i < kPackedRows; ++i) {
      const int64_t r = r0 + i * kWarps;
      const uint4* row = reinterpret_cast<const uint4*>(x + r * ld + cb);
#pragma unroll
      for (int v = 0; v < kStripVecs; ++v)
        v4[i][v] = r < M && ok[v] ? __ldg(row + v * 32 + lane) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < kPackedRows; ++i) {
      const int64_t r = r0 + i * kWarps;
      if (r >= M) break;  // warp-uniform
      uint32_t rm = 0;
#pragma unroll
      for (int v = 0; v < kStripVecs; ++v) {
        const uint32_t w[4] = {v4[i][v].x & 0x7fff7fffu, v4[i][v].y & 0x7fff7fffu,
                               v4[i][v].z & 0x7fff7fffu, v4[i][v].w & 0x7fff7fffu};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          cm[4 * v + k] = __vmaxu2(cm[4 * v + k], w[k]);
          rm = __vmaxu2(rm, w[k]);
        }
      }
      tm = __vmaxu2(tm, rm);
      if (row_keys) {
        const uint32_t h = __reduce_max_sync(0xffffffffu, max(rm & 0xffffu, rm >> 16));
        if (lane == 0) atomicMax(row_keys + r, encode(Extreme::kMax, f32_bits<T>(h)));
      }
    }
  }
  if (static_cast<int64_t>(blockIdx.y) >= steps) return;  // no rows (uniform over the CTA)
  if (col_keys) {
#pragma unroll
    for (int v = 0; v < kStripVecs; ++v)
#pragma unroll
      for (int k = 0; k < 4; ++k) colpart[warp][(v * 32 + lane) * 4 + k] = cm[4 * v + k];
    __syncthreads();
    for (int p = threadIdx.x; p < kStripCols / 2; p += kThreads) {
      uint32_t m = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) m = __vmaxu2(m, colpart[w][p]);
      const int64_t c = cb + 2 * static_cast<int64_t>(p);  // word p holds columns c, c + 1
      if (c < N) {
        atomicMax(col_keys + c, encode(Extreme::kMax, f32_bits<T>(m & 0xffffu)));
        atomicMax(col_keys + c + 1, encode(Extreme::kMax, f32_bits<T>(m >> 16)));
      }
    }
  }
  if (all_key) {
    const uint32_t k =
        block_max(encode(Extreme::kMax, f32_bits<T>(max(tm & 0xffffu, tm >> 16))), red);
    if (threadIdx.x == 0) atomicMax(all_key, k);
  }
}

/// The grid of tiles_packed_body: about `resident` CTAs (those resident at once), the strips
/// side by side, each CTA per_cta = ceil(steps / (resident / strips)) steps or one fewer.
inline dim3 tiles_packed_grid(int64_t M, int64_t N, int64_t resident) {
  const int64_t gx = (N + kStripCols - 1) / kStripCols;
  const int64_t steps = (M + kPackedRowStep - 1) / kPackedRowStep;
  const int64_t gy_target = resident / gx > 1 ? resident / gx : 1;
  const int64_t per_cta = (steps + gy_target - 1) / gy_target;
  return dim3(static_cast<unsigned>(gx), static_cast<unsigned>((steps + per_cta - 1) / per_cta));
}

template <typename T>
static __global__ void __launch_bounds__(kThreads)
    multi_amax_tiles_packed_kernel(MultiAmaxArgs a, uint32_t* ws) {
  const Needs need(a);
  const Slots s(a.M, a.N);
  tiles_packed_body<T>(static_cast<const T*>(a.x), a.M, a.N, a.ld,
                       need.rows ? ws + s.rows[0] : nullptr, need.cols ? ws + s.cols[0] : nullptr,
                       need.all ? ws + s.all[0] : nullptr);
}

/// Keys -> outputs (each key read once, written to every output of its kind and extreme, then
/// zeroed), grid-stride over the workspace's keys.
static __global__ void __launch_bounds__(kThreads)
    multi_amax_finalize_kernel(MultiAmaxArgs a, uint32_t* ws) {
  const Slots s(a.M, a.N);
  const int64_t total = s.counter;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const uint32_t key = ws[i];
    if (!key) continue;  // a slot no output asks for
    AmaxKind kind;
    int e;
    int64_t idx;
    if (i < s.cols[0]) {
      kind = AmaxKind::kRows, e = i >= s.rows[1], idx = i - s.rows[e];
    } else if (i < s.all[0]) {
      kind = AmaxKind::kCols, e = i >= s.cols[1], idx = i - s.cols[e];
    } else {
      kind = AmaxKind::kAll, e = static_cast<int>(i - s.all[0]), idx = 0;
    }
    for (int o = 0; o < a.n_out; ++o) {
      const AmaxOutput& out = a.out[o];
      if (out.kind == kind && static_cast<int>(out.extreme) == e)
        store_key(out.ptr, idx * out.stride, out.dtype, out.extreme, key);
    }
    ws[i] = 0;
  }
}

}  // namespace replay::amax_reuse::device
