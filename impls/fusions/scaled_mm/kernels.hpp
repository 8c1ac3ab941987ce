// scaled_mm kernels: the reciprocals of the quantization scales that feed the float8 GEMM
// (torchao passes `scale.reciprocal()`: the GEMM multiplies by 1 / scale), both operands' in one
// launch. The GEMMs themselves are cuBLASLt's (impls/eager/gemm.hpp: prepare_scaled_matmul for
// the optimized variant; prepare_matmul and launch_scaled_epilogue for the baseline).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace replay::scaled_mm {

/// One float32 vector: element i at src[i * src_stride] (0: one element broadcast), 1 / it (or
/// it, when not `invert`: a strided or broadcast rowwise scale made unit-stride for cuBLASLt)
/// written to dst[i * dst_stride].
struct RecipVec {
  const float* src = nullptr;
  int64_t src_stride = 1;
  float* dst = nullptr;
  int64_t dst_stride = 1;
  int64_t n = 0;
  bool invert = true;
};

/// dst = 1 / src, correctly rounded in float32 (__frcp_rn, as aten.reciprocal's 1.0f / x), or a
/// copy, for `count` (0 to 2) vectors: [M] and [N] rowwise, one element each tensorwise.
struct RecipArgs {
  RecipVec v[2];
  int count = 0;
};

/// Enqueues the reciprocals on `stream` (one kernel; nothing when count is 0). Throws
/// RuntimeFailure on a launch failure.
void launch_reciprocals(const RecipArgs& a, cudaStream_t stream);

}  // namespace replay::scaled_mm
