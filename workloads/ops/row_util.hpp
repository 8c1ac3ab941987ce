// Argument and shape helpers shared by the op rows' parsers and shape rules (internal to
// workloads/ops).
#pragma once

#include <algorithm>
#include <optional>

#include "workloads/ops/op.hpp"

namespace replay::rows {

/// A dim argument of the tensor `value` in [-ndim, ndim) (a 0-d tensor takes 0 and -1),
/// normalized; `dflt` when absent and a default exists. Fails through `a` when out of range.
inline int64_t read_dim(ArgReader& a, const Graph& g, int value, size_t i, const char* kw,
                        std::optional<int64_t> dflt = std::nullopt) {
  const auto nd = std::max<int64_t>(static_cast<int64_t>(g.meta(value).shape.size()), 1);
  const int64_t d = dflt && !a.present(i, kw) ? *dflt : a.integer(i, kw, -nd, nd - 1);
  return d < 0 ? d + nd : d;
}

/// slice / slice_scatter bounds at positions `first` (start), first + 1 (end), first + 2 (step)
/// over a dim of `size`, normalized as ATen does: negative from the end, clamped to [0, size],
/// end at least start; step must be positive. Sets n.start, n.end, n.step.
inline void read_slice_bounds(ArgReader& a, size_t first, int64_t size, Node& n) {
  auto bound = [&](size_t i, const char* kw, int64_t dflt) {
    if (!a.present(i, kw)) return dflt;
    int64_t v = a.integer(i, kw);
    if (v < 0) v = v < -size ? 0 : v + size;
    return std::min(v, size);
  };
  n.start = bound(first, "start", 0);
  n.end = std::max(bound(first + 1, "end", size), n.start);
  n.step = a.present(first + 2, "step") ? a.integer(first + 2, "step", 1) : 1;
}

/// The broadcast shape of the node's tensor operands (Python numbers do not take part).
/// Throws std::invalid_argument when they do not broadcast.
inline Shape broadcast_operands(const Graph& g, const Node& n) {
  Shape s;
  bool any = false;
  for (const auto& o : n.operands) {
    if (!o.is_tensor()) continue;
    s = any ? broadcast_shapes(s, g.meta(o.value).shape) : g.meta(o.value).shape;
    any = true;
  }
  return s;
}

}  // namespace replay::rows
