// Eager matmuls through cuBLASLt, one cublasLtMatmul per node as PyTorch eager does
// (at::cuda::blas::gemm_and_bias / bgemm_internal_cublaslt / scaled_gemm in ATen's CUDABlas.cpp):
// aten.mm, addmm, bmm, baddbmm (float32 without TF32, float64, bfloat16, float16; float32
// accumulation and alpha/beta for the 16-bit types) and aten._scaled_mm (float8 operands,
// tensorwise or rowwise float32 scales, optional bias, float32 accumulation).
//
// Row-major tensors are handed to cuBLASLt, which is column-major, as their transposes:
// out = a @ b is computed as out^T = b^T a^T, so a row-major [M, N] output is a column-major
// [N, M] matrix and a bias over N is cuBLASLt's per-row bias vector. An operand that is row-major
// or column-major per matrix (any leading dimension, any positive batch stride) is used in place,
// a column-major one through the transpose flag; any other layout (expanded dims, a batch stride
// of 0, gaps in both dims) is first copied into a contiguous temporary with a strided-copy kernel.
// An output that is not row-major per matrix is computed into a temporary and copied.
//
// cuBLASLt state: one handle and one 32 MiB workspace per device, created at the first launch on
// it and kept for the process (so GEMMs of one device must not run concurrently on several
// streams); the algorithm comes from cublasLtMatmulAlgoGetHeuristic once per (device, problem
// shape, dtypes, layouts, epilogue, pointer alignments) and is cached, so a launch after the first
// enqueues a single cublasLtMatmul (plus the copies its layouts need). Split-K reductions are
// limited to float32 partial sums (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE): the in-place and
// output-type schemes round partial sums to bfloat16/float16, which the numerics bounds (and a
// float32-accumulating GEMM) do not allow, and in-place ones are not deterministic. PyTorch allows
// them by default (allow_bf16_reduced_precision_reduction); this is the one deliberate difference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "impls/eager/kernels.hpp"

namespace replay {

/// The launch of matmul node `n` (its op row's lowering is EagerLowering::kGemm). `in` holds one
/// DeviceTensor per operand in the row's order (an empty one for None), `out` the output, of the
/// shapes and dtypes the row's shape rule gives (workloads/ops/matmul.cpp):
///  - mm: in = {self [M, K], mat2 [K, N]}, out [M, N];
///    bmm: in = {self [B, M, K], mat2 [B, K, N]}, out [B, M, N]; one dtype (float32, float64,
///    bfloat16, float16) throughout.
///  - addmm / baddbmm: in = {self, mat1/batch1, mat2/batch2}, out = beta * self + alpha * (a @ b),
///    self broadcast to the output. With beta == 1 and self a unit-stride vector over N
///    (nn.Linear's bias [N]; [B, 1, N] per batch), cuBLASLt's bias epilogue, as PyTorch's
///    gemm_and_bias does; otherwise self is copied into the GEMM's output and enters as
///    cuBLASLt's C with beta: for bfloat16/float16 that output is a float32 temporary rounded into
///    `out` afterwards (cuBLASLt rounds alpha * (a @ b) to the output type before adding a
///    bfloat16 C when beta == 1: measured, see gemm.cu). beta == 0 ignores self (NaN included).
///  - _scaled_mm: in = {self [M, K], mat2 [K, N] (float8), scale_a, scale_b (float32: one element
///    each, or [M, 1] and [1, N]), bias ([N] or None), scale_result (None)}, n.dtype the output
///    dtype, n.flag use_fast_accum: out = (self * scale_a) @ (mat2 * scale_b) + bias. Hopper's
///    float8 kernels need self row-major and mat2 column-major (the "TN" layout): other layouts
///    are copied into it. Tensorwise scales are cuBLASLt's A/B scale pointers; rowwise scales its
///    outer-vector scale mode (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, cuBLAS 12.9+). Fallback
///    (when cuBLASLt has no algorithm for that, or refuses it at the first launch, and for
///    combinations cuBLASLt does not take: a float8 output, a float32 bias, a float16 bias with a
///    non-float16 output, strided scale or bias vectors): an unscaled float8 GEMM into a float32
///    [M, N] temporary, then a kernel computing acc * scale_a[m] * scale_b[n] + bias[n] in float32
///    and rounding once to the output dtype. gemm_counters() tells which path ran.
/// M, N or the batch 0: the launch does nothing; K == 0: the output is beta * self, bias, or 0.
/// Throws std::invalid_argument when `n` is not a matmul or the tensors' ranks do not fit it.
/// The launch throws RuntimeFailure naming the node and the cuBLASLt status (e.g.
/// CUBLAS_STATUS_NOT_SUPPORTED when no algorithm fits) or the CUDA error.
EagerLaunch lower_gemm(const Node& n, const std::vector<DeviceTensor>& in,
                       const std::vector<DeviceTensor>& out);

/// One cuBLASLt matmul for a fusion (impls/fusions/matmul_epilogue): d = a @ b (+ bias), through
/// the same handles, workspace, algorithm cache and operand layouts as lower_gemm.
///  - a [M, K], b [K, N]: 2-D, one dtype (bfloat16, float16, float32), each row- or column-major
///    (a `t`/`permute` of a [N, K] weight is a column-major b, read through cuBLASLt's transpose
///    flag); any other layout is copied first, as lower_gemm does.
///  - d [M, N]: a's dtype, or float32 for 16-bit operands (the accumulator, unrounded); row-major
///    (any row stride), else computed into a temporary and copied.
///  - bias: a [N] vector of d's dtype (unit stride, or N == 1): CUBLASLT_EPILOGUE_BIAS,
///    d = round(acc + bias) with one rounding (PyTorch's gemm_and_bias); nullptr: no epilogue.
///  - bias_grad (nullptr bias only): the bias gradient of a weight-gradient GEMM, reduced by
///    cuBLASLt over the GEMM's K in the same call and written to `bias_grad` in d's dtype (a
///    16-bit d only, unit stride): kRowsOfA, bias_grad[m] = sum over k of a[m, k] (nn.Linear's dW
///    = dY^T @ X with a = dY^T: CUBLASLT_EPILOGUE_BGRADB, cuBLASLt's B being our a);
///    kColsOfB, bias_grad[n] = sum over k of b[k, n] (GPT-2 Conv1D's dW = X^T @ dY with b = dY:
///    CUBLASLT_EPILOGUE_BGRADA). Its candidates are those without split-K (how cuBLASLt would add
///    split partials of the bias gradient is not documented), so the sums are in one fixed order.
///    When cuBLASLt has no such algorithm for the problem, throws std::invalid_argument saying so.
/// Float32 operands accumulate in float32 without TF32. `name` names the call in errors.
/// With `tune`, the algorithm is chosen now among the heuristic's first 16 deterministic
/// candidates, each timed (as prepare_scaled_matmul times its candidates; the buffers must be
/// allocated, d is overwritten), once per problem for the process, and recorded
/// (gemm_choice.hpp); without, at the first launch, the heuristic's first (what PyTorch eager
/// runs). Throws std::invalid_argument for ranks, shapes or dtypes outside this; the launch throws
/// RuntimeFailure with the cuBLASLt status as lower_gemm's does.
enum class BiasGrad { kNone, kRowsOfA, kColsOfB };
struct MatmulOperands {
  DeviceTensor a, b, d;
  const void* bias = nullptr;
  DType bias_dtype = DType::kFloat32;
  int64_t bias_stride = 1;
  BiasGrad bias_grad_of = BiasGrad::kNone;
  void* bias_grad = nullptr;  ///< [M] (kRowsOfA) or [N] (kColsOfB), d's dtype, unit stride
  bool tune = false;
};
EagerLaunch prepare_matmul(const std::string& name, const MatmulOperands& m);

/// The float32 scale step of a float8 GEMM run without cuBLASLt's scales (lower_gemm's _scaled_mm
/// fallback, the scaled_mm fusion's baseline): out[m, n] = round(acc[m, n] * (sa[m] * sb[n]) +
/// bias[n]), computed in float32 and rounded once to out's dtype. acc: row-major [M, N] float32;
/// sa, sb: float32 vectors with element strides (0 for a tensorwise scale); bias: float32,
/// bfloat16 or float16 with its stride, or nullptr; out: a 3-D [1, M, N] tensor of any strides
/// and a float dtype.
struct ScaledEpilogue {
  const float* acc = nullptr;
  int64_t M = 0, N = 0;
  const float* sa = nullptr;
  int64_t sa_stride = 0;
  const float* sb = nullptr;
  int64_t sb_stride = 0;
  const void* bias = nullptr;  ///< nullptr: no bias
  DType bias_dtype = DType::kFloat32;
  int64_t bias_stride = 0;
  DeviceTensor out;
};
/// Enqueues the scale step on `stream` (one grid-stride kernel). Throws RuntimeFailure on a launch
/// failure.
void launch_scaled_epilogue(const ScaledEpilogue& e, cudaStream_t stream);

/// One float8 cuBLASLt matmul for a fusion (impls/fusions/scaled_mm): d = (a * scale_a) @
/// (b * scale_b) (+ bias), accumulated in float32 and rounded once to d's dtype, through the same
/// handles, workspace and descriptor setup as lower_gemm's aten._scaled_mm, but never through a
/// copy or the float32 fallback: what cuBLASLt's float8 kernels cannot read in place is refused
/// with the reason (scaled_matmul_unsupported).
struct ScaledMatmulOperands {
  DeviceTensor a;  ///< [M, K] float8_e4m3fn / e5m2, row-major (unit column stride)
  DeviceTensor b;  ///< [K, N] float8, column-major (a `t`/`permute` of a row-major [N, K])
  DeviceTensor d;  ///< [M, N] bfloat16, float16 or float32, row-major (any row stride)
  const void* scale_a = nullptr;  ///< float32 device pointer: one element, or M (rowwise)
  const void* scale_b = nullptr;  ///< float32 device pointer: one element, or N (rowwise)
  /// Rowwise scales: scale_a [M] and scale_b [N], unit stride, through
  /// CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F (cuBLASLt 12.9+, sm_90); else tensorwise
  /// (CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER, one float each).
  bool rowwise = false;
  /// [N] unit stride, cuBLASLt's float8 bias epilogue: bfloat16 with a bfloat16 or float32 d,
  /// float16 with a float16 d; nullptr: none.
  const void* bias = nullptr;
  DType bias_dtype = DType::kBFloat16;
  bool fast_accum = false;  ///< CUBLASLT_MATMUL_DESC_FAST_ACCUM (aten._scaled_mm use_fast_accum)
  /// Time the heuristic's candidates once per problem and keep the fastest (see
  /// prepare_scaled_matmul); false: the heuristic's first, as lower_gemm does.
  bool tune = false;
};

/// Why cuBLASLt's float8 kernels cannot run `m` in place, or "" when they can: both operands
/// float8_e5m2; a not row-major or b not column-major (the "TN" layout Hopper's float8 kernels
/// take); K or N not a multiple of 16; a leading dimension or address not a multiple of 16
/// bytes; d not bfloat16/float16/float32 or not row-major; a bias combination outside cuBLASLt's
/// float8 table; rowwise scales before cuBLASLt 12.9 or on a device other than sm_90; a device
/// below sm_89. The layout checks need no device; the last two query the current one.
std::string scaled_matmul_unsupported(const ScaledMatmulOperands& m);

/// A prepared cuBLASLt matmul: the launch, or why there is none.
struct PreparedMatmul {
  EagerLaunch launch;       ///< empty when unsupported
  std::string unsupported;  ///< why cuBLASLt cannot run it (scaled_matmul_unsupported, or no
                            ///< algorithm for it)
  std::string algo;         ///< the algorithm chosen: "id 66 tile 20 stages 8 splitK 1 ..."
  int candidates = 0;       ///< heuristic candidates considered (timed when tune and > 1)
};

/// Prepares the float8 matmul `m` (`name` names it in errors). The algorithm is chosen now, on
/// the current device, once per problem (shape, dtypes, layouts, scale mode, bias, fast_accum,
/// pointer alignments) for the process, and cached:
///  - candidates: cublasLtMatmulAlgoGetHeuristic's first 8 with split-K reductions restricted to
///    CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE or none (a separate reduction kernel over float32
///    partial sums in a fixed order: deterministic; the in-place and output-type schemes are
///    not allowed), so every candidate gives bit-identical results run to run;
///  - with `tune`, each candidate runs once to warm up and then 5 times between CUDA events on a
///    stream of its own (reading and writing m's buffers, so they must be allocated; their
///    contents do not matter and d is overwritten); the first in the heuristic's order is kept
///    unless another is at least 3 % faster. Nothing else may use the device's cuBLASLt
///    workspace meanwhile (bind time: the program is being built).
/// The choice, its timings and the workspace the kept algorithm asks for (which is all it is
/// given) are recorded in a live GemmChoiceLog (gemm_choice.hpp), also when they come from the
/// cache. Later launches enqueue one cublasLtMatmul with that algorithm. Throws
/// std::invalid_argument for ranks or shapes that do not fit; the launch throws RuntimeFailure with
/// the cuBLASLt status.
PreparedMatmul prepare_scaled_matmul(const std::string& name, const ScaledMatmulOperands& m);

/// What the GEMM launches of this process did so far (for tests and logs).
struct GemmCounters {
  int64_t heuristic_queries = 0;  ///< cublasLtMatmulAlgoGetHeuristic calls (algorithm cache misses)
  int64_t matmuls = 0;            ///< cublasLtMatmul calls
  int64_t copied_operands = 0;    ///< operands given a temporary in a cuBLASLt layout (lowering)
  int64_t scaled_fallbacks = 0;   ///< _scaled_mm nodes that took the float32-GEMM + scale path
  int64_t tuned_problems = 0;     ///< problems whose candidates were timed (tune)
};
GemmCounters gemm_counters();

}  // namespace replay
