// matmul_epilogue kernels: the pointwise epilogue that follows a cuBLASLt GEMM when cuBLASLt's own
// epilogues cannot compute it with the graph's roundings (see TUNING.md): one fused kernel reading
// each GEMM output once (optimized), or the same steps one kernel each (baseline). The GEMMs
// themselves are impls/eager/gemm.hpp's prepare_matmul.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "workloads/ir/dtype.hpp"

namespace replay::matmul_epilogue {

/// The activation of the epilogue, computed in float32 (erff, tanhf, expf; SiLU as x * s with
/// s = __frcp_rn(1 + expf(-x)), the same s its derivative uses).
enum class Act : uint8_t {
  kNone,      ///< no activation (casts only)
  kGeluErf,   ///< 0.5 x (1 + erf(x / sqrt 2)): nn.GELU(), F.gelu
  kGeluTanh,  ///< 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): GPT-2 gelu_new, Gemma
  kSilu,      ///< x / (1 + exp(-x)) = x * sigmoid(x): Llama, Qwen, Mistral
  /// Any pointwise chain of one 16-bit value, as a lookup table over its 65536 bit patterns
  /// (EpilogueArgs::table): GPT-2's gelu_new op by op in bfloat16, an activation none of the
  /// above is. Forward epilogues only.
  kTable,
};
const char* act_name(Act a);

/// One row-major [M, N] matrix operand (row stride `ld` elements, unit column stride).
struct EpiMat {
  void* ptr = nullptr;
  DType dtype = DType::kFloat32;
  int64_t ld = 0;
};

/// Per element (m, n) of [M, N], in float32 (rounded to each step's dtype, as the graph does):
///   v = z[m, n]
///   if bias:  v = round(bias_round, v + bias[n]);  if pre.ptr: pre[m, n] = v
///   if act_step: v = round(act_round, act(v));       if mid.ptr: mid[m, n] = v
///   if up.ptr: v = round(y.dtype, v * up[m, n])
///   if res.ptr: v = v + res[m, n]               (a residual add)
///   y[m, n] = round(y.dtype, v)
/// A step that is off is skipped. bias is a unit-stride [N] vector. Dtypes: float32, bfloat16,
/// float16.
struct EpilogueArgs {
  int64_t M = 0, N = 0;
  EpiMat z;
  const void* bias = nullptr;
  DType bias_dtype = DType::kFloat32;
  DType bias_round = DType::kFloat32;
  EpiMat pre;  ///< optional: the value after the bias, written (the exported pre-activation)
  bool act_step = false;
  Act act = Act::kNone;
  DType act_round = DType::kFloat32;
  EpiMat mid;  ///< optional: the value after the activation, written
  EpiMat up;   ///< optional: the gating operand
  EpiMat res;  ///< optional: the residual added last
  EpiMat y;
  /// When set (required for act == kTable; a fixed act's table from build_act_table otherwise):
  /// act(v) = table[the bits of v as `table_in`], 65536 entries of act_round's 16-bit dtype,
  /// staged in shared memory per block (128 KiB). v must be a value of table_in (bfloat16 or
  /// float16: the GEMM output, or the bias step's result, in that dtype).
  const uint16_t* table = nullptr;
  DType table_in = DType::kBFloat16;
};

/// Entries of an Act::kTable table: one per 16-bit pattern.
constexpr int64_t kTableEntries = 65536;

/// Whether build_act_table takes `act` from `in` to `out`: GELU (erf, tanh) or SiLU, both dtypes
/// bfloat16 or float16.
bool act_tabulable(Act act, DType in, DType out);

/// Writes the table of a fixed activation: table[b] = round(out, act(the `in` value with bits b)),
/// computed by the kernels' own float32 act (so a lookup gives the bits computing it gives), into
/// `table` (kTableEntries 16-bit entries, device memory) on `stream`. The optimized forward
/// epilogue looks its activation up instead of computing erf / tanh / exp per element. Throws
/// RuntimeFailure when !act_tabulable(act, in, out) or on a launch failure.
void build_act_table(Act act, DType in, DType out, uint16_t* table, cudaStream_t stream);

/// True when the epilogue takes the vector kernel: N and every row stride multiples of 8
/// elements, every base (and bias) 16-byte aligned, every dtype float32, bfloat16 or float16.
bool epilogue_vectorized(const EpilogueArgs& a);

/// The forward kernels' geometry (TUNING.md, "Bytes in flight"): vectors per thread iteration of
/// the vector kernel (1, 2 or 4; its generic instance takes at most 2), threads of the table
/// kernel's block (512: ring stages 10 for z alone, 5 with up; 1024: 6 and 3), and whether an
/// all-bfloat16 chain of z and the table alone takes raw 16-bit lookups. Every geometry gives the
/// same bits.
struct FwdGeometry {
  int vpt = 1, table_threads = 1024;
  bool raw = true;
};

/// The geometry launch_epilogue uses: set_forward_geometry's, else REPLAY_EPILOGUE_GEOMETRY=
/// VPT,TABLE_THREADS,RAW (read once; the sweep mode of scripts/device.sh epifwd), else the
/// defaults. Throws std::invalid_argument when the variable names a geometry not compiled.
FwdGeometry forward_geometry();

/// Makes launch_epilogue use `g` from now on (the tests walk every compiled instance). Throws
/// std::invalid_argument for a geometry not compiled.
void set_forward_geometry(const FwdGeometry& g);

/// Enqueues the epilogue on `stream`: one grid-stride kernel, 8 elements (16-byte accesses) per
/// vector and forward_geometry().vpt vectors per thread iteration when epilogue_vectorized(a), else
/// one element per iteration; both compute the same float32 steps (bit-identical results);
/// `allow_vector` false forces the scalar kernel (the test that proves the two agree). With a
/// table: one block per SM, staging the table in 128 KiB of its shared memory first (for 16-bit z
/// and up, forward_geometry().table_threads threads and a cp.async ring, raw 16-bit lookups where
/// the chain allows; else the scalar kernel with 1024). Throws RuntimeFailure on a launch failure,
/// a table with a dtype other than bfloat16 / float16 on either side, or M or N of 2^31 or more;
/// std::invalid_argument for a REPLAY_EPILOGUE_GEOMETRY that names no compiled geometry.
void launch_epilogue(const EpilogueArgs& a, cudaStream_t stream, bool allow_vector = true);

/// The backward epilogue (params.hpp, Backward), per element (m, n) of [M, N], in float32:
///   gv = g[m, n] (1 when g.ptr is null: the kernel then writes act'(x) alone), xv = x[m, n]
///   gated:  a = round(act_round, act(xv)) (act_in[m, n] when act_in.ptr is set)
///           dup[m, n] = round(dup.dtype, gv * a)
///           h = round(h_round, gv * up[m, n]);  dx[m, n] = round(dx.dtype, h * act'(xv))
///   plain:  dx[m, n] = round(dx.dtype, gv * act'(xv))
/// With dbias: dbias[n] = round(dbias_dtype, sum over m of dx[m, n] as stored), summed in float32
/// in a fixed order (per block, rows in order per thread, then the 8 row lanes in order; then the
/// blocks' partials in order by a second kernel): bit-identical run to run on one device.
/// Needs the vector layout (backward_vectorized); dtypes float32, bfloat16, float16.
struct BackwardArgs {
  int64_t M = 0, N = 0;
  Act act = Act::kNone;
  bool gated = false;
  EpiMat g, x, up, dx, dup;
  EpiMat act_in;  ///< gated, optional: act(x) as saved, read instead of computed
  DType act_round = DType::kFloat32, h_round = DType::kFloat32;
  void* dbias = nullptr;  ///< [N] unit stride; nullptr: no bias gradient
  DType dbias_dtype = DType::kFloat32;
  float* partial = nullptr;  ///< workspace of backward_partial_floats(M, N) floats, with dbias
};

/// True when the backward kernel can run `a`: N a multiple of 8, every row stride a multiple of 8
/// elements, every base 16-byte aligned, every dtype float32, bfloat16 or float16.
bool backward_vectorized(const BackwardArgs& a);

/// Floats of column partials a bias gradient over [M, N] needs (blocks along M times N), on the
/// current device.
int64_t backward_partial_floats(int64_t M, int64_t N);

/// Enqueues the backward epilogue on `stream`: one kernel, plus a second reducing the column
/// partials when dbias is set. Its grid is one wave: 256-column blocks by as many row blocks as
/// fit 4 blocks of 256 threads per SM (a function of M, N and the SM count, shared with
/// launch_column_sum). Throws RuntimeFailure on a launch failure or a layout outside
/// backward_vectorized.
void launch_backward(const BackwardArgs& a, cudaStream_t stream);

/// True when launch_column_sum can read `src` as [.., N]: N and its row stride multiples of 8
/// elements, its base 16-byte aligned, a float32, bfloat16 or float16 dtype.
bool column_sum_vectorized(const EpiMat& src, int64_t N);

/// The bias gradient alone (the baseline's separate reduction): dbias[n] = round(dbias_dtype,
/// sum over m of src[m, n]) with the same fixed-order float32 summation as launch_backward.
/// `partial`: backward_partial_floats(M, N) floats. Throws RuntimeFailure as launch_backward.
void launch_column_sum(const EpiMat& src, int64_t M, int64_t N, void* dbias, DType dbias_dtype,
                       float* partial, cudaStream_t stream);

}  // namespace replay::matmul_epilogue
