// Geometry of the neural-network ops (workloads/ops/nn.cpp), shared by their reference functions,
// their eager lowering (impls/eager/nn.cu) and the numerics bounds.
#pragma once

#include <cstdint>

#include "workloads/ir/graph.hpp"
#include "workloads/ir/layout.hpp"

namespace replay {

/// A row-wise op over dim `dim` of a contiguous tensor as [outer, len, inner]: row (o, i) holds
/// the elements o * len * inner + j * inner + i, j < len (inner = 1: rows are contiguous).
struct RowGeometry {
  int64_t outer = 1, len = 1, inner = 1;
  int64_t rows() const { return outer * inner; }
};
/// The rows of a softmax over `dim` (normalized) of `shape`; a 0-dim tensor is one row of one.
RowGeometry softmax_rows(const Shape& shape, int64_t dim);

/// nll_loss's reduction as ATen numbers it (at::Reduction): 0 none, 1 mean, 2 sum; the node holds
/// it as Node::mode ("none", "mean", "sum").
int nll_reduction(const Node& n);

/// native_group_norm(_backward)'s (N, C, HxW, group), from Node::sizes.
struct GroupNormDims {
  int64_t N = 0, C = 0, HxW = 0, group = 1;
  int64_t channels_per_group() const { return C / group; }
  int64_t group_size() const { return C / group * HxW; }  ///< elements per (n, group) statistic
};
GroupNormDims group_norm_dims(const Node& n);

/// The terms of the longest sum one output element of nn node `n` of `g` takes in: a softmax's row
/// length, a norm's row or group, a norm backward's batch rows (dw, db), nll_loss's batch; 1 for
/// native_dropout_backward. The `k` of its numerics bounds (workloads/ir/tolerance.hpp).
int64_t nn_reduced_terms(const Graph& g, const Node& n);

}  // namespace replay
