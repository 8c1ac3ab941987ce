// Addressing of the indexing ops (workloads/ops/indexing.cpp), shared by the float64 reference
// and the eager lowering (impls/eager/indexing.cu) so both walk the same elements.
//
// index, index_put, gather, scatter, scatter_add, embedding and its backward all visit a
// `domain` (an iteration shape) and, at each domain element i, one element of a `target` tensor:
//   offset(i) = sum_k i_k * base_stride[k] + sum_j idx_j(i) * idx[j].target_stride
// where idx_j(i) is index tensor j read at sum_k i_k * idx[j].stride[k] (0 on the domain dims it
// is broadcast over), negative values wrapped by idx[j].size where the op allows it. A gather
// reads the target at offset(i) into output element i; a scatter writes (or adds) its source's
// element i there.
#pragma once

#include <cstdint>
#include <vector>

#include "workloads/ir/graph.hpp"
#include "workloads/ir/layout.hpp"

namespace replay {

struct IndexAddressing {
  Shape domain;                      ///< the iteration shape
  std::vector<int64_t> base_stride;  ///< target strides of the domain dims (0: indexed dim)
  struct Index {
    int operand = -1;             ///< the node operand holding the index tensor
    std::vector<int64_t> stride;  ///< its element strides over the domain (0: broadcast)
    int64_t target_stride = 0;    ///< the target's stride along the indexed dim
    int64_t size = 0;  ///< the target's size along it (valid: [-size, size) or [0, size))
  };
  std::vector<Index> idx;
  bool wrap_negative = false;  ///< index and index_put take -size..-1 as from the end
};

/// Where advanced indexing puts its result dims (PyTorch's rule): the index tensors broadcast to
/// one shape B; when the indexed dims are adjacent, B replaces them in place, otherwise B goes
/// first and the un-indexed dims follow in order. `index_ops`: one operand per entry of the
/// `indices` list (-1 for None; fewer entries than dims leave the trailing dims un-indexed).
/// `index_shapes`/`index_strides`: per entry (ignored for None). Throws std::invalid_argument
/// when the index tensors do not broadcast or there are more entries than dims.
IndexAddressing advanced_index(const Shape& self, const std::vector<int64_t>& self_stride,
                               const std::vector<int>& index_ops,
                               const std::vector<Shape>& index_shapes,
                               const std::vector<std::vector<int64_t>>& index_strides);

/// gather / scatter / scatter_add along `dim`: the domain is the index's shape, the target
/// `target` (shape and strides) indexed by `index` along dim and by the domain elsewhere.
IndexAddressing dim_index(const Shape& target, const std::vector<int64_t>& target_stride,
                          int64_t dim, int index_op, const Shape& index,
                          const std::vector<int64_t>& index_stride);

/// embedding and its backward: the domain is indices.shape + [D], the target a [num_weights, D]
/// table (its strides) indexed by `indices` along dim 0.
IndexAddressing embedding_index(const Shape& table, const std::vector<int64_t>& table_stride,
                                int index_op, const Shape& indices,
                                const std::vector<int64_t>& index_stride);

/// pad[2k], pad[2k+1]: the (before, after) padding of dim ndim-1-k (negative: cropped), as
/// constant_pad_nd takes it; the result's shape. Throws std::invalid_argument for an odd-length
/// or too long pad, or a result dim below 0.
Shape padded_shape(const Shape& in, const std::vector<int64_t>& pad);

}  // namespace replay
