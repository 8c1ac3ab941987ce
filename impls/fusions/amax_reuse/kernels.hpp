// amax_reuse kernels: every amax / amin of one tensor in one pass over it (optimized), or one pass
// per reduction (baseline). The device code is multi_amax.cuh, reusable by other fusions (a
// float8 quantization computes its scales' amaxes with it); napkin math in kernels.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "impls/fusions/amax_reuse/amax_keys.hpp"
#include "workloads/ir/dtype.hpp"

namespace replay::amax_reuse {

/// Which dims of x seen as [M, N] an output reduces over.
enum class AmaxKind : uint8_t {
  kRows,  ///< over N: one value per row, [M]
  kCols,  ///< over M: one value per column, [N]
  kAll,   ///< over both: one value
};
const char* kind_name(AmaxKind k);

/// One reduction result: `extreme` of |x| (or x) over `kind`, written in `dtype` (float32,
/// bfloat16 or float16; x's values are exact in it) at ptr[i * stride].
struct AmaxOutput {
  void* ptr = nullptr;
  DType dtype = DType::kFloat32;
  int64_t stride = 1;  ///< elements between consecutive values ([M] or [N] outputs)
  Extreme extreme = Extreme::kMax;
  AmaxKind kind = AmaxKind::kAll;
};

inline constexpr int kMaxAmaxOutputs = 8;

/// x [M, N] (row stride `ld` elements, unit column stride; float32, bfloat16 or float16), with
/// |x| taken first when `abs`, and the reductions to compute from one read of it.
struct MultiAmaxArgs {
  const void* x = nullptr;
  DType x_dtype = DType::kBFloat16;
  int64_t M = 0, N = 0, ld = 0;
  bool abs = false;
  AmaxOutput out[kMaxAmaxOutputs];
  int n_out = 0;
};

/// The reason the kernels cannot run `a` (dtype, sizes, too many outputs), or "".
std::string multi_amax_supports(const MultiAmaxArgs& a);

/// Device workspace launch_multi_amax needs, bytes: uint32 keys for the row, column and whole
/// results of each extreme (2 (M + N + 1)) and a counter. It must be zero before the first launch
/// (clear_multi_amax_workspace); every launch leaves it zero again.
size_t multi_amax_workspace_bytes(const MultiAmaxArgs& a);
void clear_multi_amax_workspace(void* workspace, const MultiAmaxArgs& a, cudaStream_t stream);

/// Which kernel launch_multi_amax takes: `rows` (a warp per row, row results stored directly, the
/// whole results by one atomicMax per CTA and the last CTA's store) when there is no column
/// result and enough rows to fill the GPU; else `tiles_packed` for maxima of |x| of 16-bit floats
/// in 16-byte vectors (strips of 1024 columns, packed 16-bit magnitudes in registers, keys only
/// per row, column and CTA) or `tiles` ([rows, 256 x 16 bytes] tiles, a key per element); both
/// tiles kernels combine row, column and whole partials by atomicMax on keys, then a finalize
/// kernel writes the outputs.
const char* multi_amax_path(const MultiAmaxArgs& a);

/// Enqueues every output of `a` on `stream` from one read of x. Throws RuntimeFailure on a launch
/// failure. Results are bit-identical whatever the grid (amax_keys.hpp).
void launch_multi_amax(const MultiAmaxArgs& a, void* workspace, cudaStream_t stream);

}  // namespace replay::amax_reuse
