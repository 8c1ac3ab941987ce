// Shape and stride arithmetic shared by the op table's shape rules, the loader and the executors:
// broadcasting, reduction dims, view strides, expand. Errors are std::invalid_argument with a
// readable message (the loader adds the file and node id).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "workloads/ir/graph.hpp"

namespace replay {

using Shape = std::vector<int64_t>;

/// NumPy/ATen broadcasting of two shapes. Throws std::invalid_argument when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b);
/// Normalize reduction dims (negative -> +ndim), sort, reject duplicates and out-of-range dims.
/// An empty list means "all dims" (ATen's sum/amax/mean semantics). A 0-d tensor accepts dim 0
/// or -1 and gives the empty list (there is nothing to reduce).
std::vector<int64_t> normalize_dims(const std::vector<int64_t>& dims, size_t ndim);
/// Shape after reducing `dims` (normalized) with or without keepdim.
Shape reduced_shape(const Shape& in, const std::vector<int64_t>& dims, bool keepdim);
/// Resolve a view/reshape target (at most one -1) against `numel`.
Shape resolve_view_shape(const Shape& target, int64_t numel);
/// Strides of a view of (shape, stride) as `new_shape` without copying, or std::nullopt if the
/// layout cannot be viewed that way (then reshape must copy). Same contract as ATen's view.
std::optional<std::vector<int64_t>> view_strides(const Shape& shape,
                                                 const std::vector<int64_t>& stride,
                                                 const Shape& new_shape);
/// Row stride (elements) of `m` seen as [numel / cols, cols] with a contiguous last dim, as a
/// row kernel indexes it; -1 if it cannot be viewed so (or cols is 0).
int64_t row_stride(const TensorMeta& m, int64_t cols);
/// Element stride of `m` seen as a flat [n] (a weight [C], per-row statistics [.., 1]); 1 for
/// n <= 1; -1 if `m` does not hold n elements or cannot be viewed so.
int64_t flat_stride(const TensorMeta& m, int64_t n);
/// Shape/stride of expand(x, sizes): new leading dims and size-1 dims broadcast with stride 0.
TensorMeta expand_meta(const TensorMeta& in, const Shape& sizes);

}  // namespace replay
