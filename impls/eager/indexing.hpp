// Eager lowering of the indexing family (workloads/ops/indexing.cpp): index, index_put, gather,
// scatter, scatter_add, embedding and its backward, constant_pad_nd, cumsum, argmax/argmin,
// sort and topk. Kernels in impls/eager/indexing.cu.
#pragma once

#include <vector>

#include "impls/eager/kernels.hpp"

namespace replay {

/// The launch of indexing node `n` of `g` (its row's IndexingFn `fn`), prepared once: geometry,
/// workspaces (a float32 / float64 / int64 accumulator for the summing ops, sort keys and CUB's
/// temporary storage) allocated now and owned by the returned step. `in`: one DeviceTensor per
/// operand (empty for None or a number); `out`: one per output. An index outside its dim is never
/// dereferenced: a gather writes 0 there and a scatter skips it (the reference reports it).
/// Throws std::invalid_argument for a shape the kernels do not take (more than kMaxDims dims,
/// a sort of more than 2^31 elements).
EagerLaunch lower_indexing(const Graph& g, const Node& n, IndexingFn fn,
                           const std::vector<DeviceTensor>& in,
                           const std::vector<DeviceTensor>& out);

}  // namespace replay
