// layernorm_fwd kernels: LayerNorm / RMSNorm forward over the last dim, with an epilogue of
// casts, a [C] weight multiply and a [C] bias add, as matched by match.cpp.
//
// Variants (kernels.cu):
//   baseline  — a statistics kernel (mean, rstd per row, fp32) and a normalize+epilogue kernel:
//               x is read twice, mean/rstd round-trip through memory; 16-byte vector I/O.
//   optimized — one persistent row kernel: each row is read once into registers with 16-byte
//               vector loads, statistics in fp32 (one shifted pass over registers), epilogue
//               applied in registers, 16-byte streaming stores; the next row's loads are in
//               flight while a row is computed; weights staged once per block in shared memory.
// Training forwards also export what the backward saves: both variants write mean and rstd
// (fp32 per row; the baseline from its statistics kernel, the optimized one from the same
// persistent kernel) and the upcast x (fp32, from the pass that reads x) when asked to.
// With a residual add prologue (h = x + residual, rounded to x's dtype, also returned), both
// variants compute the statistics and the normalization on the rounded h: the optimized kernel
// loads the x and residual rows, adds, rounds, writes h with the same 16-byte stores and keeps h in
// registers; the baseline runs a separate elementwise add kernel writing h, then its two kernels
// read h.
// Both need x, y and the weights in one dtype (bf16, fp16 or fp32), 16-byte aligned rows; the
// optimized one also a row of at most 8192 bf16 (4096 fp32) elements. Otherwise the region runs
// eagerly and the report says why.
// Bytes that must move: rows*C*(sizeof x + sizeof y) + C*sizeof(w) per weight, + rows*4 per
// exported statistic, + rows*C*4 for an exported upcast x, + rows*C*sizeof x for a residual and
// again for an exported h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "workloads/ir/dtype.hpp"

namespace replay {

constexpr int kNormMaxEpilogue = 4;
constexpr int kNormMaxWeights = 2;

enum class NormKind : uint8_t { kLayerNorm, kRMSNorm };
enum class EpilogueOp : uint8_t { kRound, kMul, kAdd };

struct NormEpilogueStep {
  EpilogueOp op = EpilogueOp::kRound;
  DType dtype = DType::kFloat32;  ///< result is rounded to this dtype
  int weight = -1;                ///< kMul/kAdd: index into NormFwdArgs::w
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

/// Optimized: one persistent row kernel. Requires layernorm_fwd_supports(a, kOptimized) == "".
void layernorm_fwd_optimized(const NormFwdArgs& a, cudaStream_t stream);

}  // namespace replay
