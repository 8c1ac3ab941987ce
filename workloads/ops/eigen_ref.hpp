// Eigen helpers for the op rows' float64 reference functions (internal to workloads/ops).
#pragma once

#include <Eigen/Core>

#include "workloads/ops/op.hpp"

namespace replay::ref {

using Eigen::ArrayXd;
using RowMajorXXd = Eigen::Array<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

inline Eigen::Map<const ArrayXd> as_array(const HostTensor& t) {
  return {t.data.data(), static_cast<Eigen::Index>(t.data.size())};
}

/// A contiguous HostTensor of `out`'s shape and dtype holding `a` (not rounded).
inline HostTensor from_array(const ArrayXd& a, const TensorMeta& out) {
  HostTensor t = make_host_tensor(out.shape, out.dtype);
  for (Eigen::Index i = 0; i < a.size(); ++i) t.data[i] = a[i];
  return t;
}

/// `t` broadcast to `shape` (materialized, row-major).
inline ArrayXd broadcast_to(const HostTensor& t, const Shape& shape) {
  if (t.meta.shape == shape) return as_array(t);
  TensorMeta layout{shape, std::vector<int64_t>(shape.size(), 0), t.meta.dtype};
  auto st = contiguous_strides(t.meta.shape);
  size_t lead = shape.size() - t.meta.shape.size();
  for (size_t i = 0; i < t.meta.shape.size(); ++i)
    layout.stride[lead + i] = t.meta.shape[i] == 1 ? 0 : st[i];
  HostTensor b = strided_view(t, layout);
  return as_array(b);
}

/// Operand i broadcast to `shape`; a Python scalar becomes a constant array.
inline ArrayXd operand(const RefArgs& a, size_t i, const Shape& shape) {
  if (!a.in.at(i)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return ArrayXd::Constant(static_cast<Eigen::Index>(n), a.node.operands[i].scalar);
  }
  return broadcast_to(*a.in[i], shape);
}

/// x as a matrix: rows = kept elements, cols = reduced elements, for a reduction over `dims`.
inline RowMajorXXd reduction_matrix(const HostTensor& x, const std::vector<int64_t>& dims) {
  const size_t nd = x.meta.shape.size();
  std::vector<int64_t> perm;
  for (size_t d = 0; d < nd; ++d)
    if (std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) == dims.end())
      perm.push_back(static_cast<int64_t>(d));
  int64_t rows = 1, cols = 1;
  for (int64_t d : perm) rows *= x.meta.shape[d];
  for (int64_t d : dims) {
    perm.push_back(d);
    cols *= x.meta.shape[d];
  }
  auto st = contiguous_strides(x.meta.shape);
  TensorMeta layout;
  layout.dtype = x.meta.dtype;
  for (int64_t d : perm) {
    layout.shape.push_back(x.meta.shape[d]);
    layout.stride.push_back(st[d]);
  }
  HostTensor p = strided_view(x, layout);
  return Eigen::Map<const RowMajorXXd>(p.data.data(), rows, cols);
}

}  // namespace replay::ref
