// layernorm_fwd kernels: LayerNorm / RMSNorm forward over the last dim, with an epilogue of
// casts, a [C] weight multiply and a [C] bias add, as matched by match.cpp.
//
// Variants (kernels.cu):
//   baseline  — a statistics kernel (mean, rstd per row, fp32) and a normalize+epilogue kernel:
//               x is read twice, mean/rstd round-trip through memory; 16-byte vector I/O.
//   optimized — one row kernel: a group of 16, 32 or 128 threads reads each row once into
//               registers with 16-byte vector loads, statistics in fp32 (one shifted pass over
//               registers), epilogue applied in registers, 16-byte stores; up to two rows per
//               group in flight; weights staged once per block in shared memory; a persistent
//               grid for rows of more than 64 16-byte vectors (more than 512 elements in 16-bit),
//               one block per 8 rows below.
//               Geometry, cache hints and grid chosen by a sweep on an H200 (TUNING.md, issue
//               25; REPLAY_NORM_FWD_GEOMETRY overrides them for bfloat16 rows).
// Training forwards also export what the backward saves: both variants write mean and rstd
// (fp32 per row; the baseline from its statistics kernel, the optimized one from the same
// persistent kernel) and the upcast x (fp32, from the pass that reads x) when asked to. Graphs
// split by aot_autograd's default partitioner save intermediates too: x - mean, the fp32
// normalized value, an epilogue step's result (row exports, each written in its own dtype from
// the registers that hold it, in the pass that writes y) and the [C] weight as the epilogue uses
// it (Gemma's fp32 1 + w: written once, by the first block). An epilogue step's result selects
// the generic (run-time) epilogue.
// With a residual add prologue (h = x + residual, rounded to x's dtype, also returned), both
// variants compute the statistics and the normalization on the rounded h: the optimized kernel
// loads the x and residual rows, adds, rounds, writes h with the same 16-byte stores and keeps h in
// registers; the baseline runs a separate elementwise add kernel writing h, then its two kernels
// read h.
// Both need x and the weights in one dtype (bf16, fp16 or fp32), y and the row exports in
// fp32, bf16 or fp16, 16-byte aligned rows; the optimized one also a row of at most 8192 bf16
// (4096 fp32) elements. Otherwise the region runs eagerly and the report says why.
// Bytes that must move: rows*C*(sizeof x + sizeof y) + C*sizeof(w) per weight, + rows*4 per
// exported statistic, + rows*C*4 for an exported upcast x, + rows*C*sizeof x for a residual and
// again for an exported h, + rows*C*sizeof(export) per row export, + C*sizeof(export) per weight
// export.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "workloads/ir/dtype.hpp"

namespace replay {

constexpr int kNormMaxEpilogue = 4;
constexpr int kNormMaxWeights = 2;
constexpr int kNormMaxExports = 4;
/// Stages of the row chain an export is taken at (epilogue step k's result: stage k >= 0).
constexpr int kStageCentered = -2;    ///< x - mean in fp32 (LayerNorm; RMSNorm: x itself)
constexpr int kStageNormalized = -1;  ///< (x - mean) * rstd or x * rstd, fp32

enum class NormKind : uint8_t { kLayerNorm, kRMSNorm };
enum class EpilogueOp : uint8_t { kRound, kMul, kAdd };

struct NormEpilogueStep {
  EpilogueOp op = EpilogueOp::kRound;
  DType dtype = DType::kFloat32;  ///< result is rounded to this dtype
  int weight = -1;                ///< kMul/kAdd: index into NormFwdArgs::w
};

/// An intermediate of the row chain written beside y: [rows, cols] in `dtype` (float32, bfloat16
/// or float16; the value rounded to it), row stride `row_stride` elements (16-byte aligned rows).
struct NormRowExport {
  void* ptr = nullptr;
  DType dtype = DType::kFloat32;
  int64_t row_stride = 0;
  int stage = kStageNormalized;  ///< kStageCentered, kStageNormalized, or after epilogue step k
};

/// An epilogue weight written once, [cols] contiguous in `dtype`: w[weight] upcast, or with
/// `offset`: round(w_offset_dtype, w + w_offset) (what the epilogue multiplies by), converted.
struct NormWeightExport {
  void* ptr = nullptr;
  DType dtype = DType::kFloat32;
  int weight = 0;  ///< index into NormFwdArgs::w
  bool offset = false;
};

/// Problem description shared by both variants. x is [rows, cols] with row stride x_row_stride
/// (elements; last dim contiguous); out likewise. Statistics in fp32:
/// LayerNorm: y = ((x - mean) * rstd), rstd = 1/sqrt(var + eps), var with divisor cols;
/// RMSNorm: y = x * rstd, rstd = 1/sqrt(mean(x^2) + eps); then the epilogue steps in order.
struct NormFwdArgs {
  NormKind kind = NormKind::kLayerNorm;
  int64_t rows = 0, cols = 0;
  float eps = 1e-5f;
  /// eps read from device memory (a float32 tensor of the graph) instead of `eps`; nullptr: `eps`.
  const float* eps_ptr = nullptr;
  /// LayerNorm: the variance is sum((x - mean)^2) / (cols - correction) = population variance *
  /// var_scale, var_scale = cols / (cols - correction) (1 for the usual correction 0).
  float var_scale = 1.f;
  const void* x = nullptr;
  DType x_dtype = DType::kBFloat16;
  int64_t x_row_stride = 0;
  /// Residual add prologue (fused add-norm): when set, the norm reads h = round(h_round, x +
  /// residual) (fp32 add, one rounding: PyTorch's add of 16-bit tensors) instead of x. residual is
  /// [rows, cols] in x_dtype with row stride residual_row_stride; h_round is x_dtype in a graph
  /// (float32: no rounding, a mutant's choice). h_out: h written ([rows, cols], x_dtype, row stride
  /// h_row_stride) in the same pass; nullptr: not written (the optimized kernel), a workspace the
  /// baseline supplies.
  const void* residual = nullptr;
  int64_t residual_row_stride = 0;
  DType h_round = DType::kFloat32;
  void* h_out = nullptr;
  int64_t h_row_stride = 0;
  const void* w[kNormMaxWeights] = {};  ///< [cols] each, contiguous
  DType w_dtype[kNormMaxWeights] = {};
  /// The epilogue uses round(w_offset_dtype[i], w[i] + w_offset[i]) when w_offset[i] != 0 (x * (1 +
  /// w): litgpt add_unit_offset, Gemma), the add in fp32 as PyTorch's opmath does.
  float w_offset[kNormMaxWeights] = {};
  DType w_offset_dtype[kNormMaxWeights] = {DType::kFloat32, DType::kFloat32};
  int n_weights = 0;
  NormEpilogueStep epilogue[kNormMaxEpilogue];
  int n_epilogue = 0;
  void* out = nullptr;
  /// y's dtype: x's, or any of float32, bfloat16, float16 (a region ending at a float32 value).
  DType out_dtype = DType::kBFloat16;
  int64_t out_row_stride = 0;
  /// Saved for the backward (training forwards); nullptr: not written. mean (LayerNorm only) and
  /// rstd: [rows] fp32 at element stride mean_stride / rstd_stride; x32: x upcast to fp32,
  /// [rows, cols] with row stride x32_row_stride (a multiple of 4, 16-byte aligned).
  float* mean_out = nullptr;
  int64_t mean_stride = 1;
  float* rstd_out = nullptr;
  int64_t rstd_stride = 1;
  float* x32_out = nullptr;
  int64_t x32_row_stride = 0;
  /// Intermediates a default-partitioner forward saves (x - mean, the fp32 normalized value, an
  /// epilogue step's result; Gemma's fp32 1 + w), each in its own dtype, in the same pass.
  NormRowExport row_exports[kNormMaxExports];
  int n_row_exports = 0;
  NormWeightExport weight_exports[kNormMaxWeights];
  int n_weight_exports = 0;
};

/// Which kernel a support query is about.
enum class NormVariant : uint8_t { kBaseline, kOptimized };

/// Empty if `variant` supports `a`, else the reason (e.g. a row too long for the
/// register-resident kernel, misaligned pointers, mixed dtypes).
std::string layernorm_fwd_supports(const NormFwdArgs& a, NormVariant variant);

/// Baseline: with a residual, an elementwise add kernel writing h (to a.h_out, or to `h_ws`, a
/// [rows, cols] x_dtype workspace, when a.h_out is null); then a stats kernel writing `mean`/`rstd`
/// ([rows] fp32 workspaces, and a.mean_out / a.rstd_out when set), then a normalize kernel
/// (writing a.x32_out when set), both reading h (or x without a residual).
void layernorm_fwd_baseline(const NormFwdArgs& a, float* mean, float* rstd, void* h_ws,
                            cudaStream_t stream);

/// Optimized: one row kernel. Requires layernorm_fwd_supports(a, kOptimized) == "" (which also
/// refuses an output overlapping x or the residual: they are read through the read-only path).
/// With REPLAY_NORM_FWD_GEOMETRY=TPG,VPT,D,MINB,CS,P set (sweep mode, TUNING.md) it launches that
/// compiled configuration instead of the heuristic's (the compiled epilogue shapes and the generic
/// body each have their own list); throws std::invalid_argument when the configuration is not
/// compiled for the region's epilogue, cannot hold the row, or the region is not a bfloat16 row
/// without a residual.
void layernorm_fwd_optimized(const NormFwdArgs& a, cudaStream_t stream);

}  // namespace replay
