// Eager executor kernels: one launch per op, like PyTorch eager. A generic strided pointwise kernel
// and a generic reduction kernel serve every op of the table (the op rows name the function, see
// workloads/ops/eager_fn.hpp). Views are host-side aliases and launch nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

#include "workloads/ir/graph.hpp"
#include "workloads/ops/eager_fn.hpp"

namespace replay {

constexpr int kMaxDims = kMaxRank;

/// One eager step, ready to enqueue on a stream.
using EagerLaunch = std::function<void(cudaStream_t)>;

/// A strided device tensor as the kernels see it: strides in elements, 0 for broadcast dims.
struct DeviceTensor {
  void* ptr = nullptr;
  DType dtype = DType::kFloat32;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};
};

/// Elements of `t` (the product of its shape; 1 for a scalar).
inline int64_t numel(const DeviceTensor& t) {
  int64_t n = 1;
  for (int d = 0; d < t.ndim; ++d) n *= t.shape[d];
  return n;
}

/// Row-major contiguous (size-1 dims take any stride).
inline bool is_contiguous(const DeviceTensor& t) {
  int64_t want = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.stride[d] != want) return false;
    want *= t.shape[d];
  }
  return true;
}

/// `t`'s shape and dtype at `ptr` with row-major contiguous strides (a temporary's layout).
inline DeviceTensor with_contiguous_strides(DeviceTensor t, void* ptr) {
  t.ptr = ptr;
  int64_t s = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.stride[d] = s;
    s *= t.shape[d];
  }
  return t;
}

/// DeviceTensor for `meta` at `ptr`. Throws std::invalid_argument beyond kMaxDims dims.
DeviceTensor device_tensor(void* ptr, const TensorMeta& meta);

/// One operand of a pointwise launch: a tensor (broadcast to the output), or a scalar.
struct PwOperand {
  DeviceTensor t;
  bool is_tensor = false;
  double scalar = 0;
};

/// out = fn(x, y, z) elementwise with broadcasting, x, y, z = in[0..2] (missing ones are 0).
/// Computes in the "opmath" of `compute`, as PyTorch does: float for float32 and the narrower
/// floats, double for float64, int64 for integers and bool; rounds once to out's dtype.
/// Throws std::invalid_argument for more than three operands, or a function that has no integer
/// form (exp of an int64 compute type). [out] any shape; operands broadcast to it.
void launch_pointwise(PointwiseFn fn, const DeviceTensor& out, const std::vector<PwOperand>& in,
                      double alpha, DType compute, cudaStream_t stream);

/// launch_pointwise prepared once for tensors that stay where they are: the dims ordered and
/// coalesced, the kernel and grid chosen, now; the returned step only enqueues the kernel (the
/// eager executor's host enqueue per op). Throws as launch_pointwise, at preparation.
EagerLaunch prepare_pointwise(PointwiseFn fn, const DeviceTensor& out,
                              const std::vector<PwOperand>& in, double alpha, DType compute);

/// Reduce `in` over `dims` (normalized, sorted) into `out0` (and `out1`: the mean for kVarMean,
/// the int64 index for kMaxDim). kVar/kVarMean divide by N - correction. One block per output
/// element; float accumulation (double when `in` or `out0` is float64 or an integer: exact sums).
/// `out0`/`out1` have the kept dims, with or without keepdim.
/// One-shot: a split reduction's workspace is allocated and freed stream-ordered around it.
void launch_reduction(ReduceFn op, const DeviceTensor& in, const std::vector<int64_t>& dims,
                      const DeviceTensor& out0, const DeviceTensor* out1, double correction,
                      cudaStream_t stream);

/// launch_reduction prepared once: geometry, path, grid and occupancy-based split chosen now, and
/// a split or two-pass reduction's workspace (counters, splits x outputs partials in the
/// accumulation type, one sum per output for a variance) allocated and zeroed now and owned by the
/// returned step, which then only enqueues its kernel(s). The step must not
/// run concurrently with itself on two streams (it shares its outputs and workspace). Throws
/// CudaError.
EagerLaunch prepare_reduction(ReduceFn op, const DeviceTensor& in, const std::vector<int64_t>& dims,
                              const DeviceTensor& out0, const DeviceTensor* out1,
                              double correction);

/// A strided copy (with cast) of `src` into `dst`; `src` broadcasts to dst's shape.
void launch_copy(const DeviceTensor& dst, const DeviceTensor& src, cudaStream_t stream);
/// launch_copy prepared once (see prepare_pointwise).
EagerLaunch prepare_copy(const DeviceTensor& dst, const DeviceTensor& src);
/// Whether launch_copy / prepare_copy take the tiled transpose kernel for `dst = src` (EAGER.md,
/// "Transposed copies"): one dtype and shape, at most three dims longer than 1, dst's unit-stride
/// dim not src's, both those dims at least 8 long. Host only: reads shapes, strides and the
/// pointers' alignment, never the data.
bool copy_takes_tiles(const DeviceTensor& dst, const DeviceTensor& src);

/// Fill `bytes` at `ptr` with 0xFF (NaN for every float dtype): the poison written into outputs
/// before a numerics run, so unwritten elements are caught.
void poison(void* ptr, size_t bytes, cudaStream_t stream);

}  // namespace replay
