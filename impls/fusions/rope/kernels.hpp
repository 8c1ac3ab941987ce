// rope kernels (kernels.cu): the rotary position embedding over strided q / k views (or their
// gradients), forward and backward, both variants. Each job is one rotated tensor: a head vector
// x[.., 0:D] (the backward: the incoming gradient g) with the first R = rotary_dim elements
// rotated and the rest passed through:
//   forward   j < R:   out = round(add, round(mul_cos, x[j] * cos[j]) + round(mul_sin, rot(x)[j] *
//                            sin[j]))
//             j >= R:  out = x[j]                                  (partial rotary's pass-through)
//   backward  j < R:   out = round(add, rotT(round(mul_sin, g * sin))[j] + round(mul_cos, g[j] *
//                            cos[j]))
//             j >= R:  out = g[j]
// rot(x) = cat(-x[h:R], x[0:h]) (rotate-half, h = R / 2) or, pair by pair, (-x[2i+1], x[2i])
// (interleaved); rotT its transpose, cat(y[h:R], -y[0:h]) or (y[2i+1], -y[2i]). Each product
// and the sum are rounded to the dtype the graph computes them in (a bfloat16 mul rounds to
// bfloat16; a convert after it rounds again), so the fused result is the eager op sequence's bit
// for bit; the backward's slice_scatter into zeros adds +0 (a -0 becomes +0, as it does there);
// the output is stored in its own dtype (a trailing convert, a promoting cat).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "impls/eager/fast_div.cuh"
#include "workloads/ir/dtype.hpp"

namespace replay::rope {

inline constexpr int kRopeMaxLead = 6;  ///< leading dims of a job's output ([B, H, T] ...)
inline constexpr int kRopeMaxJobs = 4;  ///< rotated tensors in one region (q and k, ...)

enum class Style : uint8_t {
  kRotateHalf,   ///< cat(-x2, x1): litgpt, Hugging Face Llama, GPT-NeoX, Phi-3
  kInterleaved,  ///< pairs (x[2i], x[2i+1]): Meta's reference, GPT-J, Cohere
};

/// One strided operand of a job: element (lead coords i, j) at
/// ptr[sum_k i_k * lead_stride[k] + j * last_stride]; a broadcast dim has stride 0.
struct RopeOperand {
  const void* ptr = nullptr;
  DType dtype = DType::kBFloat16;
  int64_t lead_stride[kRopeMaxLead] = {};
  int64_t last_stride = 1;
};

/// One rotated tensor. Shapes: out [lead..., D], x [lead..., D], cos / sin broadcast to
/// [lead..., R]. Dtypes bfloat16, float16 or float32.
struct RopeJob {
  RopeOperand x, cos, sin;
  void* out = nullptr;
  DType out_dtype = DType::kBFloat16;
  int64_t out_lead_stride[kRopeMaxLead] = {};
  int64_t out_last_stride = 1;
  int n_lead = 0;
  int64_t lead[kRopeMaxLead] = {};
  int64_t rows = 0;        ///< product of lead
  int64_t head_dim = 0;    ///< D
  int64_t rotary_dim = 0;  ///< R (even, <= D)
  DType mul_cos_dtype = DType::kFloat32, mul_sin_dtype = DType::kFloat32,
        add_dtype = DType::kFloat32;
  /// Converts the graph applies after a product, after the sum, and to the pass-through tail
  /// (float32: none; rounding to float32 changes no float32 value).
  DType mul_cos_cvt = DType::kFloat32, mul_sin_cvt = DType::kFloat32, sum_cvt = DType::kFloat32,
        tail_cvt = DType::kFloat32;
  /// The backward's partial rotary puts the rotated part and the tail into zeros by
  /// slice_scatter and adds them: each element + 0.
  bool zero_add = false;
  /// The backward's association of rotT(y) (each element one scattered value, the other scatter's
  /// zero) and mc = g * cos: 0 (scatters summed first, Hugging Face) (t + 0) + mc; 1 (litgpt)
  /// mc + the negated scatter first, then the other: (mc + t) + 0 where t is negated, else
  /// (mc + 0) + t; 2 the other scatter first.
  int sum_order = 0;
  /// The tables hold one value per pair ([.., R / 2]: Meta's apply_rotary_emb on real pairs, its
  /// freqs_cis as cos and sin): element j reads entry j / 2. Interleaved style only.
  bool pair_table = false;
  /// Set by rope_optimized: which operands take vector accesses (x, cos, sin, out).
  bool vec_x = false, vec_cos = false, vec_sin = false, vec_out = false;
  /// Set by rope_optimized when every index fits 31 bits: divisions by the chunks per row and
  /// by each lead size as multiply-high and shift (impls/eager/fast_div.cuh).
  FastDiv div_chunks, div_lead[kRopeMaxLead];
};

struct RopeArgs {
  Style style = Style::kRotateHalf;
  bool backward = false;  ///< the transposed rotation (dx from dout), else the forward
  int n_jobs = 0;
  RopeJob jobs[kRopeMaxJobs];
  float sin_sign = 1;          ///< test hook: -1 is the GPU mutant "sin sign flipped"
  bool write_tail = true;      ///< test hook: false is the mutant "pass-through tail dropped"
  bool force_index64 = false;  ///< test hook: the 64-bit index path at any size
  bool force_generic = false;  ///< test hook: the generic kernel where a fixed form would apply
  /// The compile-time fixed forms where one applies (kernels.cu, kFixedForms). On since the GPU
  /// test RopeGpuFixedForms (every fixed form bit-identical to the generic kernel) passed on an
  /// H200 (2026-11-26); false runs the generic kernel everywhere.
  bool fixed_forms = true;
  /// Parts of a joint gradient no job writes and the graph leaves zero (Joint::zero_steps), as
  /// 2-D byte ranges: `height` rows of `width` bytes, `pitch` bytes apart, from `ptr`. Both
  /// variants zero them (cudaMemset2DAsync) before their kernels.
  struct Zero {
    void* ptr = nullptr;
    size_t pitch = 0, width = 0, height = 0;
  };
  int n_zeros = 0;
  Zero zeros[kRopeMaxJobs];
};

/// Orders job j's lead dims (its rows) for both variants (bind.cpp): dims along which both tables
/// are broadcast (stride 0: heads, and batch where the table has none) innermost, where a row is
/// at least one 128-byte line (head_dim x the output's bytes); then each group by the output's
/// strides, largest first (the output's memory order). Consecutive rows then read the same table
/// row: litgpt's [B, H, T, D] outputs walked in their own order read a new float32 table row
/// (1 KiB of cos and sin) per row of 256 bytes of x from L2. A stable sort (size-1 dims, which
/// tables broadcast, may move inner; the kernels drop them). Reads head_dim, out_dtype and the
/// strides; sets lead and every lead stride.
void order_rows(RopeJob& j);

/// Elements per thread the optimized kernel can use for these jobs: the largest of 8, 4, 2 that
/// divides D, R and (rotate-half) R / 2 of every job; 1 otherwise. 16-byte accesses then happen
/// on each operand whose last stride is 1 and whose base and lead strides are aligned.
int rope_vector_width(const RopeArgs& a);

/// The fixed form (a kernel compiled for these operand dtypes, style, phase and rounding steps:
/// kernels.cu, kFixedForms) rope_optimized launches for these jobs, or nullptr where it launches
/// the generic kernel (another form, a vector width below 8, an unaligned or non-unit-stride
/// operand, an offset beyond 31 bits, the force_generic or force_index64 hook). Host only; reads
/// the pointers' alignment, never the data.
const char* rope_fixed_form(const RopeArgs& a);

/// The fixed forms' launch geometry (TUNING.md, "Packed bf16 math and a persistent grid"). Every
/// geometry gives the same bits (GPU test RopeGpuFixedForms walks them).
struct FixedGeometry {
  /// Packed bf16x2 math (mul.rn / add.rn / sub.rn.bf16x2) for the forms whose x, tables, output,
  /// products and sums are all bf16 (rotate-half: Llama, Phi-3, GPT-NeoX); false: float32 math
  /// with a rounding per step, as every other form.
  bool packed = true;
  /// 0: one pass, the grid covers the rows (256-thread blocks, one row per block row). N in 1..3:
  /// a persistent grid of N blocks of 256 threads per SM (3: the pipelined kernel's launch bound),
  /// shared among the jobs by their rows, each thread loading the next row's x before it computes
  /// the current one; packed forms only (the others keep one pass).
  int blocks_per_sm = 0;
};

/// Parses `PACKED,BLOCKS_PER_SM` (e.g. `1,3`). Throws std::invalid_argument naming the text for
/// anything else or a geometry set_fixed_geometry would refuse.
FixedGeometry parse_fixed_geometry(const std::string& text);

/// The geometry rope_optimized's fixed forms use: set_fixed_geometry's, else REPLAY_ROPE_GEOMETRY=
/// PACKED,BLOCKS_PER_SM (e.g. `1,3`) from the environment, else the defaults above. Throws
/// std::invalid_argument for a malformed variable or one outside set_fixed_geometry's range.
FixedGeometry fixed_geometry();

/// Sets the geometry for this process (a sweep or a test). Throws std::invalid_argument for
/// blocks_per_sm outside 0..3 or blocks_per_sm > 0 without packed math.
void set_fixed_geometry(const FixedGeometry& g);

/// The names of every fixed form compiled (kernels.cu, kFixedForms).
std::vector<const char*> rope_fixed_form_names();

/// Test hook: how many launches rope_optimized has sent to a fixed-form kernel in this process.
uint64_t rope_fixed_form_launches();

/// optimized: one kernel for every job: x read once (its partner half from the same lines),
/// cos / sin from their broadcast tables, out written once.
void rope_optimized(const RopeArgs& a, cudaStream_t stream);

/// baseline: the eager op sequence per job, each op a pass over memory. Forward: x * cos, the
/// rotation (neg + cat) materialized, rot * sin, the sum (+ the pass-through copy); backward:
/// g * cos, g * sin, its transposed rotation (neg + slice_scatter) materialized, the sum (+ the
/// tail). `workspace` holds rope_baseline_workspace(a) bytes.
void rope_baseline(const RopeArgs& a, void* workspace, cudaStream_t stream);
size_t rope_baseline_workspace(const RopeArgs& a);

}  // namespace replay::rope
