// Eager executor kernels: one launch per op, like PyTorch eager. A generic strided pointwise kernel
// and a generic reduction kernel serve every op of the table (the op rows name the function, see
// workloads/ops/eager_fn.hpp). Views are host-side aliases and launch nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "workloads/ir/graph.hpp"
#include "workloads/ops/eager_fn.hpp"

namespace replay {

constexpr int kMaxDims = kMaxRank;

/// A strided device tensor as the kernels see it: strides in elements, 0 for broadcast dims.
struct DeviceTensor {
  void* ptr = nullptr;
  DType dtype = DType::kFloat32;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};
};

/// DeviceTensor for `meta` at `ptr`. Throws std::invalid_argument beyond kMaxDims dims.
DeviceTensor device_tensor(void* ptr, const TensorMeta& meta);

/// out = op(a, b) elementwise with broadcasting. `b` may be null (unary op, or a Python scalar
/// passed in `scalar`); add/sub compute a + alpha * b. Computes in float32 (float64 if any operand
/// is float64), as PyTorch's opmath does, and rounds once to out's dtype.
/// [out] any shape; a and b broadcast to it (their DeviceTensors are aligned to out's rank).
void launch_pointwise(PointwiseFn op, const DeviceTensor& out, const DeviceTensor& a,
                      const DeviceTensor* b, double scalar, double alpha, cudaStream_t stream);

/// Reduce `in` over `dims` (normalized, sorted) into `out0` (and `out1` = mean for
/// ReduceFn::kVarMean, with out0 = var using divisor N - correction). One block per output element,
/// float32 accumulation, two passes for the variance. `out0`/`out1` have the kept dims, with or
/// without keepdim.
void launch_reduction(ReduceFn op, const DeviceTensor& in, const std::vector<int64_t>& dims,
                      const DeviceTensor& out0, const DeviceTensor* out1, double correction,
                      cudaStream_t stream);

/// Fill `bytes` at `ptr` with 0xFF (NaN for every float dtype): the poison written into outputs
/// before a numerics run, so unwritten elements are caught.
void poison(void* ptr, size_t bytes, cudaStream_t stream);

}  // namespace replay
