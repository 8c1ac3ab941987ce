// Eager lowering: one launch per node, chosen by the op row's EagerLowering (workloads/ops/op.hpp).
// Views are not lowered here: the GPU program aliases their storage with the row's `alias` layout
// and copies (lower_copy) when the layout cannot be aliased.
#pragma once

#include <functional>
#include <vector>

#include "impls/eager/kernels.hpp"

namespace replay {

/// The launch of non-view node `n` of `g`: `in` holds one DeviceTensor per operand (an empty one
/// for a Python number or None, whose value is in the node), `out` one per output. Throws
/// std::invalid_argument for a view or an unknown lowering.
EagerLaunch lower_node(const Graph& g, const Node& n, const std::vector<DeviceTensor>& in,
                       const std::vector<DeviceTensor>& out);

/// A strided copy of `src` into `dst` (same shape, any strides and dtypes).
EagerLaunch lower_copy(const DeviceTensor& dst, const DeviceTensor& src);

}  // namespace replay
