// norm_bwd kernels: LayerNorm / RMSNorm backward over the last dim, x and dy [rows, cols], as
// matched by match.cpp. Per row (fp32 math):
//   xhat = (x - m) * s          (m, s: mean and rstd; RMSNorm m = 0; x already normalized: m = 0,
//                                s = 1; mean/rstd saved by the forward, or recomputed from x)
//   g    = rnd_g(dy * w_eff)    w_eff = rnd_w(w + w_offset), staged once per block
//   dx   = rstd * (g - (S1 + xhat * S2) / cols)   S1 = sum(g) (LayerNorm only), S2 = sum(g * xhat)
//          (recenter: xhat * S2 -> (xhat - S3 / cols) * S2, S3 = sum(xhat); dx_part_round: the
//          terms rstd * g and the rest rounded apart before their sum, as T5's graph rounds)
//   dw  += rnd_dwt(dy * rnd_xhat(xhat)),  db += dy                (column sums over the rows)
// rnd_*: optional roundings to bfloat16/float16 where the captured graph materializes a narrow
// value (Meta Llama and Hugging Face RMSNorm multiply by the weight after the down-cast, so g,
// xhat and the dw term are bf16 there); float32 means "not rounded".
//
// Variants (kernels.cu):
//   baseline  — what PyTorch eager and Inductor without mix-order reduction do: a persistent row
//               kernel for dx, then a column-reduction kernel that reads x and dy again for dw/db
//               (partial sums over row chunks), then the fixed-order final sum and cast.
//   optimized — mix-order reduction (PyTorch PR 165370): one persistent kernel computes dx and
//               accumulates dw/db for its `split_size` rows (row groups interleaved over the grid
//               of ceil(rows / split) blocks) in fp32 registers, writes one partial row per block;
//               a small kernel sums the partials in a fixed order and casts.
//               x and dy are read once. Deterministic: no float atomics; the same split gives
//               bit-identical dw/db.
// dx only (a norm without affine parameters: w, dw and db null): g = dy (w = 1), no column sums;
// both variants are then the row kernel alone over the same persistent grid — there is no column
// reduction to fuse, so the baseline (what eager and Inductor run for it) is the same launch.
// Dtypes: dy and dx (and a dx epilogue add) in one dtype T (bf16, fp16 or fp32); x in T, or fp32
// beside a bf16 dy (the default partitioner saves the fp32 upcast x); the column unit is one
// 16-byte vector of dy, x's part of it one or two 16-byte vectors.
// Saved xhat (NormBwdArgs::xs, the default partitioner's Llama / Gemma RMSNorm backward): the dw
// term reads the graph's saved normalized value instead of xhat, dw += rnd_dwt(dy *
// rnd_xhat(xs)), while dx still uses xhat = (x - m) * s from x and the statistics — what the
// graph computes (xs is not assumed equal to rnd(x * rstd)); xs bf16 or fp32 beside an fp32 x and
// a bf16 dy. The baseline's column kernel then reads dy and xs (not x).
// Row addressing: row r of every tensor at i0 * s[0] + i1 * s[1] + i2 * s[2] (NormBwdRowMap), so
// a per-head norm's transposed dy ([B, T, H, D] through permute(0, 2, 1, 3)) is read in place.
// Both need 16-byte aligned rows, mean/rstd in fp32; rows of at most 512 x 3 16-byte vectors of dy
// for 16-bit types (12288 elements) and 512 x 4 for fp32 (8192 elements), and a ring (3 stages of
// x, dy and xs vectors; 2 for an fp32 x beside a saved xhat) within 227 KiB of shared memory; every
// rounding flag bf16, fp16 or none.
// Bytes that must move: rows*cols*(|x| + |dy| + |dx|) + cols*(|w| + |dw| + |db|) + rows*4 per
// saved statistic, + rows*cols*|dx| for a dx epilogue add (the residual stream's other gradient,
// read once in the dx store), + rows*cols*|xs| for a saved xhat.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "workloads/ir/dtype.hpp"

namespace replay {

/// Where the row statistics come from.
enum class NormBwdStats : uint8_t {
  kSaved,       ///< mean (LayerNorm) and rstd read from [rows] fp32 tensors
  kRecompute,   ///< mean/rstd recomputed from the row of x (eps, correction below)
  kNormalized,  ///< x is already xhat (saved normalized activations); rstd read for dx
};

/// Where each row of a tensor starts: rows are indexed (i0, i1, i2) over the row dims
/// [rows / (n1 * n2), n1, n2] of NormBwdArgs (i2 fastest), and row r of the tensor starts
/// i0 * s[0] + i1 * s[1] + i2 * s[2] elements after its pointer. A plain [rows, cols] view:
/// n1 = n2 = 1 and s[0] its row stride. A transposed view (a per-head norm's dy read through
/// permute(0, 2, 1, 3): [B, T, H, D] with strides [T*H*D, D, T*D, 1]) keeps its own strides.
struct NormBwdRowMap {
  int64_t s[3] = {0, 0, 0};
};

/// Row r's first element in a tensor laid out by m, rows over dims [.., n1, n2] (host and
/// device: the kernels address every row through it).
__host__ __device__ inline int64_t norm_bwd_row_offset(int64_t n1, int64_t n2,
                                                       const NormBwdRowMap& m, int64_t r) {
  if (n1 == 1 && n2 == 1) return r * m.s[0];  // plain rows (a uniform branch in the kernels)
  const int64_t i2 = r % n2, q = r / n2;
  return (q / n1) * m.s[0] + (q % n1) * m.s[1] + i2 * m.s[2];
}

struct NormBwdArgs {
  int64_t rows = 0, cols = 0;
  /// Row dims n1, n2 (NormBwdRowMap); 1, 1 for plain rows.
  int64_t row_n1 = 1, row_n2 = 1;
  bool layernorm = true;  ///< dx has the mean term S1 (LayerNorm); RMSNorm does not
  NormBwdStats stats = NormBwdStats::kSaved;
  const void* x = nullptr;  ///< [rows, cols], rows at x_rows
  /// x's dtype: dy_dtype, or float32 beside a bfloat16 dy (the default partitioner saves the fp32
  /// upcast x of an RMSNorm / LayerNorm that computes in fp32).
  DType x_dtype = DType::kBFloat16;
  NormBwdRowMap x_rows;
  const void* dy = nullptr;           ///< [rows, cols], rows at dy_rows
  DType dy_dtype = DType::kBFloat16;  ///< dy's dtype, also dx's and dx_add's
  NormBwdRowMap dy_rows;
  const float* mean = nullptr;  ///< kSaved LayerNorm: [rows] with stride mean_stride
  int64_t mean_stride = 1;
  const float* rstd = nullptr;  ///< kSaved, kNormalized: [rows] with stride rstd_stride
  int64_t rstd_stride = 1;
  // kRecompute: rstd = 1/sqrt(var + eps), var = sum((x - mean)^2) / (cols - correction)
  // (LayerNorm; var_scale = cols / (cols - correction)) or mean(x^2) (RMSNorm).
  float eps = 0;
  const void* eps_ptr = nullptr;  ///< 0-dim tensor holding eps (added to `eps`), or null
  DType eps_dtype = DType::kFloat32;
  float var_scale = 1;
  /// Saved normalized value for the dw term (the default partitioner's saved `x * rstd`, rounded
  /// to bf16 by Llama-style RMSNorms, fp32 in Gemma's): when set, dw sums rnd_dwt(dy *
  /// rnd_xhat(xs)) and dx still uses xhat from x and the statistics, as the graph does (xs is not
  /// assumed equal to the recomputed xhat). [rows, cols] at xs_rows, dtype xs_dtype (dy_dtype or
  /// float32, with a float32 x and a bfloat16 dy); only with dw. nullptr: dw uses xhat.
  const void* xs = nullptr;
  DType xs_dtype = DType::kFloat32;
  NormBwdRowMap xs_rows;
  const void* w = nullptr;  ///< [cols] contiguous; null: w = 1 (w_offset, w_round unused)
  DType w_dtype = DType::kBFloat16;
  float w_offset = 0;  ///< x * (1 + w): 1
  DType w_round = DType::kFloat32, g_round = DType::kFloat32;
  DType xhat_round = DType::kFloat32, dwt_round = DType::kFloat32;
  /// LayerNorm: the xhat term of dx recentered, xhat - sum(xhat)/C (Params::recenter).
  bool recenter = false;
  /// dx = rnd(rnd_p(rstd * g) + rnd_p(rest)) (Params::dx_part_round); float32: not split.
  DType dx_part_round = DType::kFloat32;
  void* dx = nullptr;  ///< [rows, cols], dtype dy_dtype, rows at dx_rows
  NormBwdRowMap dx_rows;
  /// dx epilogue add: when set, the kernels store rnd(rnd_dy(dx) + dx_add) (dx rounded to
  /// dy_dtype, then the add in fp32 and rounded to dy_dtype again: the graph's
  /// `tangent + dx.to(bf16)`); [rows, cols] in dy_dtype, rows at dx_add_rows. nullptr: dx alone.
  const void* dx_add = nullptr;
  NormBwdRowMap dx_add_rows;
  void* dw = nullptr;  ///< [cols] contiguous; rounded to dw_round, stored as dw_dtype; null: dx
                       ///< only (no column sums; db must be null too)
  DType dw_dtype = DType::kBFloat16, dw_round = DType::kFloat32;
  void* db = nullptr;  ///< optional [cols]
  DType db_dtype = DType::kBFloat16, db_round = DType::kFloat32;
};

enum class NormBwdVariant : uint8_t { kBaseline, kOptimized };

/// Launch shape of the row kernel (both variants): a group of `threads_per_row` threads owns a
/// row, each thread `vectors_per_thread` 16-byte vectors of it; a block of `block_threads`
/// processes `rows_per_iter` rows at a time.
struct NormBwdGeometry {
  int threads_per_row = 0, vectors_per_thread = 0, block_threads = 0, rows_per_iter = 0;
};

/// Empty if the kernels support `a`, else the reason (dtypes, alignment, row length).
std::string norm_bwd_supports(const NormBwdArgs& a);

NormBwdGeometry norm_bwd_geometry(const NormBwdArgs& a);

/// The optimized kernel's split size (rows per block) by the heuristic of TUNING.md: one chunk
/// per resident block of the persistent grid, i.e. ceil(rows / (SMs * resident blocks per SM))
/// rounded up to a multiple of rows_per_iter. Queries the current device (cached).
int64_t norm_bwd_default_split(const NormBwdArgs& a);

/// Workspace bytes of a variant: optimized, the fp32 partial dw/db rows of ceil(rows / split)
/// blocks; baseline, the column kernel's partials (+ recomputed statistics).
size_t norm_bwd_workspace_bytes(const NormBwdArgs& a, NormBwdVariant v, int64_t split);

/// Optimized: the persistent dx + partial dw/db kernel, ceil(rows / split) blocks of about `split`
/// rows each (row groups interleaved over the grid), then the final reduction. `split` must be a positive multiple of geometry().rows_per_iter.
void norm_bwd_optimized(const NormBwdArgs& a, int64_t split, void* workspace, cudaStream_t s);

/// Baseline: dx row kernel, column-reduction kernel, final reduction.
void norm_bwd_baseline(const NormBwdArgs& a, void* workspace, cudaStream_t s);

}  // namespace replay
