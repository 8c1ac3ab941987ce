// fp8_quantize kernels: amax -> scale -> saturated float8 cast of one source tensor, every
// quantization the graph makes of it (tensorwise, rowwise, columnwise; float8_e4m3fn, e5m2;
// row-major and column-major copies), bit-identical to the graph's eager sequence
// (quant_math.hpp holds the arithmetic, shared with the CPU tests).
//
//   amax_kernel       one read of x: every row, column and global amax it is asked for, as
//                     order-preserving keys (atomicMax on uint32: NaN propagates); 64 x 256 tiles
//   scales_kernel     amax -> float32 scale (float64 math as the graph), and the scale, reciprocal
//                     and amax outputs the graph reads
//   cast_kernel       one read of x: every float8 dest of every quantization; row-major dests
//                     straight from registers (8 bytes per thread), column-major ones through a
//                     64 x 256 shared-memory tile written out as 64-byte column runs
//   rowwise_kernel    rowwise quantizations only, row-major dests: a CTA per row computes the
//                     row's amax, scale and float8 row in one pass (the second read of the row
//                     hits L1/L2), so x leaves DRAM once
//   transpose_kernel  the baseline's separate column-major copy (32 x 32 tiles)
//
// Napkin math, H200 (HBM3e ~4.8 TB/s, 50 MiB L2), x [8192, 4096] bfloat16 = 64 MiB:
//   tensorwise with its column-major copy (the tensorwise forward's x): read x twice (the cast
//   needs the global amax; 64 MiB does not stay in L2) + write 2 x 32 MiB float8 = 192 MiB,
//   ~40 us. Rowwise + columnwise of the same x (the rowwise forward): the same 192 MiB.
//   The eager sequence moves ~1.3 GB for the same work (|x| written and read, x.float() written,
//   the product and two clamps in float32, the cast, the clone), ~280 us.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "impls/cuda/cuda_check.hpp"
#include "impls/cuda/dtype_device.cuh"
#include "impls/cuda/vec16.cuh"
#include "impls/fusions/fp8_quantize/kernels.hpp"
#include "impls/fusions/fp8_quantize/quant_math.hpp"

namespace replay::fp8_quantize {
namespace {

constexpr int kThreads = 256;  // 8 warps; a warp covers one row of a tile, 8 columns per lane
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = kTileRows / kWarps;
static_assert(kTileCols == 32 * 8, "a lane covers 8 columns");

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
  __device__ void unpack(float (&v)[8]) const {
#pragma unroll
    for (int i = 0; i < kRaw; ++i) Vec<T>::unpack(raw[i], v + i * Vec<T>::kElems);
  }
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    amax_kernel(const T* __restrict__ x, int64_t rows, int64_t cols, bool vec, bool abs,
                uint32_t* row_ws, uint32_t* col_ws, uint32_t* glob_ws) {
  __shared__ uint32_t col_part[kWarps][kTileCols];
  __shared__ uint32_t glob_part[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTileCols + lane * 8;
  const int64_t row_tiles = (rows + kTileRows - 1) / kTileRows;
  for (int64_t tile = blockIdx.y; tile < row_tiles; tile += gridDim.y) {
    const int64_t r0 = tile * kTileRows + warp;
    Chunk<T> ch[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {  // every load in flight before any reduction
      const int64_t r = r0 + i * kWarps;
      if (r < rows && c0 < cols) ch[i].load(x + r * cols, c0, cols, vec);
    }
    uint32_t ck[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tk = 0;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int64_t r = r0 + i * kWarps;
      if (r >= rows) break;  // warp-uniform
      uint32_t rk = 0;
      if (c0 < cols) {
        float v[8];
        ch[i].unpack(v);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          if (c0 + k >= cols) continue;
          const uint32_t key = max_key(abs ? fabsf(v[k]) : v[k]);
          ck[k] = max(ck[k], key);
          rk = max(rk, key);
        }
      }
      tk = max(tk, rk);
      if (row_ws) {
        rk = __reduce_max_sync(0xffffffffu, rk);
        if (lane == 0) atomicMax(&row_ws[r], rk);
      }
    }
    if (col_ws) {
#pragma unroll
      for (int k = 0; k < 8; ++k) col_part[warp][lane * 8 + k] = ck[k];
      __syncthreads();
      uint32_t m = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) m = max(m, col_part[w][threadIdx.x]);
      const int64_t c = static_cast<int64_t>(blockIdx.x) * kTileCols + threadIdx.x;
      if (c < cols && m) atomicMax(&col_ws[c], m);
      __syncthreads();
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
      __syncthreads();
    }
  }
}

__device__ void store_vec(const VecOut& o, int64_t i, float v) {
  store_elem<float>(o.ptr, i * o.stride, o.dtype, v);
}

__global__ void scales_kernel(QuantizeArgs a, unsigned quants, int64_t rows, int64_t cols) {
  const int qi = blockIdx.y;
  if (!((quants >> qi) & 1u)) return;
  const QuantArgs& q = a.q[qi];
  const int64_t len = q.gran == Granularity::kTensorwise ? 1
                      : q.gran == Granularity::kRowwise  ? rows
                                                         : cols;
  const uint32_t* ws = a.amax_ws[amax_slot(q.gran, q.abs)];
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < len;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float amax = from_max_key(ws[i]);
    const float s = scale_from_amax(amax, q.eps, q.scale_mul);
    q.scale_ws[i] = s;
    for (int j = 0; j < q.n_scales; ++j) store_vec(q.scales[j], i, s);
    for (int j = 0; j < q.n_recips; ++j) store_vec(q.recips[j], i, 1.0f / s);
    for (int j = 0; j < q.n_amaxes; ++j) store_vec(q.amaxes[j], i, amax);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    cast_kernel(const T* __restrict__ x, QuantizeArgs a, unsigned quants, bool vec) {
  __shared__ __align__(16) uint8_t tile_t[kMaxColMajor][kTileRows][kTileCols];
  const int64_t rows = a.rows, cols = a.cols;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t cb = static_cast<int64_t>(blockIdx.x) * kTileCols;
  const int64_t c0 = cb + lane * 8;
  bool col_major = false;
  for (int qi = 0; qi < a.n_quants; ++qi)
    for (int d = 0; d < a.q[qi].n_dests; ++d)
      col_major |= ((quants >> qi) & 1u) && a.q[qi].dests[d].smem_slot >= 0;
  const int64_t row_tiles = (rows + kTileRows - 1) / kTileRows;
  for (int64_t tile = blockIdx.y; tile < row_tiles; tile += gridDim.y) {
    const int64_t rb = tile * kTileRows;
    Chunk<T> ch[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int64_t r = rb + warp + i * kWarps;
      if (r < rows && c0 < cols) ch[i].load(x + r * cols, c0, cols, vec);
    }
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int rt = warp + i * kWarps;  // row in the tile
      const int64_t r = rb + rt;
      if (r >= rows || c0 >= cols) continue;
      float v[8];
      ch[i].unpack(v);
      for (int qi = 0; qi < a.n_quants; ++qi) {
        if (!((quants >> qi) & 1u)) continue;
        const QuantArgs& q = a.q[qi];
        float s[8];
        if (q.gran == Granularity::kTensorwise) {
          const float t = q.scale_ws[0];
#pragma unroll
          for (int k = 0; k < 8; ++k) s[k] = t;
        } else if (q.gran == Granularity::kRowwise) {
          const int64_t rr = (r ^ a.row_scale_xor) < rows ? (r ^ a.row_scale_xor) : r;
          const float t = q.scale_ws[rr];
#pragma unroll
          for (int k = 0; k < 8; ++k) s[k] = t;
        } else {
#pragma unroll
          for (int k = 0; k < 8; ++k) s[k] = c0 + k < cols ? q.scale_ws[c0 + k] : 0.0f;
        }
        uint32_t lo = 0, hi = 0;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const uint32_t b = float8_bits(scaled_clamped(v[k], s[k], q.fp8_max), q.e5m2);
          if (k < 4)
            lo |= b << (8 * k);
          else
            hi |= b << (8 * (k - 4));
        }
        for (int d = 0; d < q.n_dests; ++d) {
          const Fp8Dest& o = q.dests[d];
          if (o.smem_slot >= 0) {
            *reinterpret_cast<uint2*>(&tile_t[o.smem_slot][rt][lane * 8]) = make_uint2(lo, hi);
            continue;
          }
          uint8_t* p = o.ptr + r * o.rs + c0 * o.cs;
          if (o.cs == 1 && c0 + 8 <= cols && (reinterpret_cast<uintptr_t>(p) & 7) == 0) {
            *reinterpret_cast<uint2*>(p) = make_uint2(lo, hi);
            continue;
          }
          for (int k = 0; k < 8 && c0 + k < cols; ++k)
            p[k * o.cs] =
                static_cast<uint8_t>((k < 4 ? lo >> (8 * k) : hi >> (8 * (k - 4))) & 0xFFu);
        }
      }
    }
    if (!col_major) continue;
    __syncthreads();
    // Column-major write-out: thread t owns column cb + t and writes its rows of this tile, 64
    // contiguous bytes (four 16-byte stores) where the layout allows.
    const int64_t c = cb + threadIdx.x;
    const int nr = rows - rb < kTileRows ? static_cast<int>(rows - rb) : kTileRows;
    if (c < cols) {
      for (int qi = 0; qi < a.n_quants; ++qi) {
        if (!((quants >> qi) & 1u)) continue;
        for (int d = 0; d < a.q[qi].n_dests; ++d) {
          const Fp8Dest& o = a.q[qi].dests[d];
          if (o.smem_slot < 0) continue;
          uint8_t* p = o.ptr + c * o.cs + rb * o.rs;
          if (o.rs == 1 && nr == kTileRows && (reinterpret_cast<uintptr_t>(p) & 15) == 0) {
#pragma unroll
            for (int j = 0; j < kTileRows / 16; ++j) {
              uint32_t w[4];
#pragma unroll
              for (int m = 0; m < 4; ++m) {
                w[m] = 0;
#pragma unroll
                for (int k = 0; k < 4; ++k)
                  w[m] |=
                      static_cast<uint32_t>(tile_t[o.smem_slot][16 * j + 4 * m + k][threadIdx.x])
                      << (8 * k);
              }
              reinterpret_cast<uint4*>(p)[j] = make_uint4(w[0], w[1], w[2], w[3]);
            }
          } else {
            for (int k = 0; k < nr; ++k) p[k * o.rs] = tile_t[o.smem_slot][k][threadIdx.x];
          }
        }
      }
    }
    __syncthreads();
  }
}

// Rowwise quantizations only, every dest row-major: one CTA per row at a time. The row's amaxes
// (|x| and x, as asked) over 16-byte loads, a block reduce, each quantization's scale computed by
// every thread (one float64 division), then the row read again, from L1/L2 (8 KiB for 4096
// bfloat16), and cast: x leaves DRAM once.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    rowwise_kernel(const T* __restrict__ x, QuantizeArgs a, unsigned quants, bool vec) {
  __shared__ uint32_t part[2][kWarps];
  const int64_t rows = a.rows, cols = a.cols;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  bool need_x = false, need_abs = false;
  for (int qi = 0; qi < a.n_quants; ++qi)
    if ((quants >> qi) & 1u) (a.q[qi].abs ? need_abs : need_x) = true;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * cols;
    uint32_t k[2] = {0, 0};
    for (int64_t c0 = threadIdx.x * 8; c0 < cols; c0 += kThreads * 8) {
      Chunk<T> ch;
      ch.load(row, c0, cols, vec);
      float v[8];
      ch.unpack(v);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (c0 + e >= cols) continue;
        if (need_x) k[0] = max(k[0], max_key(v[e]));
        if (need_abs) k[1] = max(k[1], max_key(fabsf(v[e])));
      }
    }
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
    float scale[kMaxQuants];
#pragma unroll
    for (int qi = 0; qi < kMaxQuants; ++qi) {
      if (qi >= a.n_quants || !((quants >> qi) & 1u)) continue;
      const QuantArgs& q = a.q[qi];
      const float amax = from_max_key(k[q.abs ? 1 : 0]);
      scale[qi] = scale_from_amax(amax, q.eps, q.scale_mul);
      if (threadIdx.x == 0) {
        for (int j = 0; j < q.n_scales; ++j) store_vec(q.scales[j], r, scale[qi]);
        for (int j = 0; j < q.n_recips; ++j) store_vec(q.recips[j], r, 1.0f / scale[qi]);
        for (int j = 0; j < q.n_amaxes; ++j) store_vec(q.amaxes[j], r, amax);
      }
    }
    for (int64_t c0 = threadIdx.x * 8; c0 < cols; c0 += kThreads * 8) {
      Chunk<T> ch;
      ch.load(row, c0, cols, vec);
      float v[8];
      ch.unpack(v);
#pragma unroll
      for (int qi = 0; qi < kMaxQuants; ++qi) {
        if (qi >= a.n_quants || !((quants >> qi) & 1u)) continue;
        const QuantArgs& q = a.q[qi];
        uint32_t lo = 0, hi = 0;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const uint32_t b = float8_bits(scaled_clamped(v[e], scale[qi], q.fp8_max), q.e5m2);
          if (e < 4)
            lo |= b << (8 * e);
          else
            hi |= b << (8 * (e - 4));
        }
        for (int d = 0; d < q.n_dests; ++d) {
          const Fp8Dest& o = q.dests[d];
          uint8_t* p = o.ptr + r * o.rs + c0;
          if (c0 + 8 <= cols && (reinterpret_cast<uintptr_t>(p) & 7) == 0) {
            *reinterpret_cast<uint2*>(p) = make_uint2(lo, hi);
            continue;
          }
          for (int e = 0; e < 8 && c0 + e < cols; ++e)
            p[e] = static_cast<uint8_t>((e < 4 ? lo >> (8 * e) : hi >> (8 * (e - 4))) & 0xFFu);
        }
      }
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

unsigned grid_y(int64_t row_tiles) {
  return static_cast<unsigned>(std::min<int64_t>(row_tiles, 65535));
}

bool vec_ok(const QuantizeArgs& a) {
  return a.cols % 8 == 0 && (reinterpret_cast<uintptr_t>(a.x) & 15) == 0;
}

template <typename T>
void amax_typed(const QuantizeArgs& a, unsigned slots, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((a.cols + kTileCols - 1) / kTileCols),
                  grid_y((a.rows + kTileRows - 1) / kTileRows));
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
    amax_kernel<T><<<grid, kThreads, 0, s>>>(static_cast<const T*>(a.x), a.rows, a.cols, vec_ok(a),
                                             abs != 0, rw, cw, gw);
    REPLAY_CUDA_LAUNCH("fp8_quantize amax_kernel");
  }
}

template <typename T>
void cast_typed(const QuantizeArgs& a, unsigned quants, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((a.cols + kTileCols - 1) / kTileCols),
                  grid_y((a.rows + kTileRows - 1) / kTileRows));
  cast_kernel<T><<<grid, kThreads, 0, s>>>(static_cast<const T*>(a.x), a, quants, vec_ok(a));
  REPLAY_CUDA_LAUNCH("fp8_quantize cast_kernel");
}

template <typename T>
void rowwise_typed(const QuantizeArgs& a, unsigned quants, cudaStream_t s) {
  static const int sms = [] {  // queried once: a launch stays a launch (host enqueue time)
    int dev = 0, n = 0;
    REPLAY_CUDA(cudaGetDevice(&dev));
    REPLAY_CUDA(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
  }();
  const auto grid = static_cast<unsigned>(std::min<int64_t>(a.rows, int64_t(sms) * 8));
  rowwise_kernel<T><<<grid, kThreads, 0, s>>>(static_cast<const T*>(a.x), a, quants, vec_ok(a));
  REPLAY_CUDA_LAUNCH("fp8_quantize rowwise_kernel");
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

void launch_amax(const QuantizeArgs& a, unsigned slots, cudaStream_t s) {
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

void launch_cast(const QuantizeArgs& a, unsigned quants, cudaStream_t s) {
  switch (a.x_dtype) {
    case DType::kBFloat16:
      return cast_typed<__nv_bfloat16>(a, quants, s);
    case DType::kFloat16:
      return cast_typed<__half>(a, quants, s);
    default:
      return cast_typed<float>(a, quants, s);
  }
}

void launch_transpose_copy(Fp8Dest src, Fp8Dest dst, int64_t rows, int64_t cols, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>((rows + 31) / 32));
  transpose_kernel<<<grid, dim3(32, 8), 0, s>>>(src, dst, rows, cols);
  REPLAY_CUDA_LAUNCH("fp8_quantize transpose_kernel");
}

}  // namespace replay::fp8_quantize
