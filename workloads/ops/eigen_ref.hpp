// Eigen helpers for the op rows' float64 reference functions (internal to workloads/ops).
#pragma once

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <stdexcept>

#include <Eigen/Core>

#include "workloads/ir/strided_loop.hpp"
#include "workloads/ops/op.hpp"

namespace replay::ref {

using Eigen::ArrayXd;

inline Eigen::Map<const ArrayXd> as_array(const HostTensor& t) {
  return {t.data.data(), static_cast<Eigen::Index>(t.data.size())};
}

/// A contiguous HostTensor of `out`'s shape and dtype holding `a` (not rounded).
inline HostTensor from_array(const ArrayXd& a, const TensorMeta& out) {
  HostTensor t = make_host_tensor_for_overwrite(out.shape, out.dtype);
  parallel_copy(t.data.data(), a.data(), a.size());
  return t;
}

/// Element strides of the contiguous tensor `t` read as broadcast to `shape` (0 on the leading
/// dims it lacks and on its size-1 dims).
inline std::vector<int64_t> broadcast_strides(const HostTensor& t, const Shape& shape) {
  std::vector<int64_t> out(shape.size(), 0);
  const auto st = contiguous_strides(t.meta.shape);
  const size_t lead = shape.size() - t.meta.shape.size();
  for (size_t i = 0; i < t.meta.shape.size(); ++i) out[lead + i] = t.meta.shape[i] == 1 ? 0 : st[i];
  return out;
}

/// Writes `t` broadcast to `shape` into `dst` (row-major, numel(shape) elements).
inline void broadcast_into(const HostTensor& t, const Shape& shape, double* dst) {
  const std::vector<int64_t> st = broadcast_strides(t, shape);
  const double* src = t.data.data();
  parallel_strided_loop(shape, {&st}, [&](int64_t i, const auto& off) { dst[i] = src[off[0]]; });
}

/// `t` broadcast to `shape` (materialized, row-major).
inline ArrayXd broadcast_to(const HostTensor& t, const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  ArrayXd out(static_cast<Eigen::Index>(n));
  broadcast_into(t, shape, out.data());
  return out;
}

/// The op's values at one output element: v[k] is operand k broadcast to the output (a tensor's
/// element, a Python number, or NaN for an absent optional operand).
using ElementValues = std::array<double, kMaxLoopOperands>;

/// A contiguous HostTensor of `out`'s shape and dtype with element i = f(v) (not rounded), v the
/// operands' values at i (ElementValues), split over threads. Tensor operands whose dtype differs
/// from `cast_to` are rounded to it first when it is a floating dtype, as TensorIterator casts
/// operands to the common dtype (a 0-dim float32 operand of a bfloat16 op is rounded to bfloat16);
/// Python numbers are not. Throws std::invalid_argument for more than kMaxLoopOperands operands.
template <typename F>
HostTensor elementwise(const RefArgs& a, const TensorMeta& out, std::optional<DType> cast_to, F f) {
  const size_t K = a.in.size();
  if (K > kMaxLoopOperands) throw std::invalid_argument("elementwise: more than 4 operands");
  std::vector<std::vector<int64_t>> strides;
  std::vector<const std::vector<int64_t>*> tensor_strides;
  std::array<const double*, kMaxLoopOperands> src{};
  std::array<int, kMaxLoopOperands> slot{};  // operand k's loop operand, -1 for a constant
  std::array<bool, kMaxLoopOperands> round{};
  ElementValues constant{};
  strides.reserve(K);
  for (size_t k = 0; k < K; ++k) {
    slot[k] = -1;
    if (a.node.operands[k].none) {
      constant[k] = std::numeric_limits<double>::quiet_NaN();
    } else if (!a.in[k]) {
      constant[k] = a.node.operands[k].scalar;
    } else {
      slot[k] = static_cast<int>(strides.size());
      strides.push_back(broadcast_strides(*a.in[k], out.shape));
      src[k] = a.in[k]->data.data();
      round[k] = cast_to && is_floating(*cast_to) && a.in[k]->meta.dtype != *cast_to;
    }
  }
  for (const auto& s : strides) tensor_strides.push_back(&s);
  HostTensor t = make_host_tensor_for_overwrite(out.shape, out.dtype);
  double* dst = t.data.data();
  const DType to = cast_to.value_or(DType::kFloat64);
  parallel_strided_loop(out.shape, tensor_strides, [&](int64_t i, const auto& off) {
    ElementValues v = constant;
    for (size_t k = 0; k < K; ++k) {
      if (slot[k] < 0) continue;
      const double x = src[k][off[slot[k]]];
      v[k] = round[k] ? round_to(to, x) : x;
    }
    dst[i] = f(v);
  });
  return t;
}

/// x as a matrix: rows = kept elements, cols = reduced elements, for a reduction over `dims`.
/// Reads x in place when the reduced dims are its trailing dims; otherwise holds the permuted copy.
class ReductionMatrix {
 public:
  ReductionMatrix(const HostTensor& x, const std::vector<int64_t>& dims) : x_(&x) {
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
    rows_ = rows;
    cols_ = cols;
    bool in_order = true;
    for (size_t d = 0; d < perm.size(); ++d)
      in_order = in_order && perm[d] == static_cast<int64_t>(d);
    if (in_order) return;
    auto st = contiguous_strides(x.meta.shape);
    TensorMeta layout;
    layout.dtype = x.meta.dtype;
    for (int64_t d : perm) {
      layout.shape.push_back(x.meta.shape[d]);
      layout.stride.push_back(st[d]);
    }
    permuted_ = strided_view(x, layout);
  }
  Eigen::Index rows() const { return rows_; }
  Eigen::Index cols() const { return cols_; }
  /// Row r (the reduced elements of kept element r), [cols].
  Eigen::Map<const Eigen::Array<double, 1, Eigen::Dynamic>> row(Eigen::Index r) const {
    const double* base = permuted_.data.empty() ? x_->data.data() : permuted_.data.data();
    return {base + r * cols_, cols_};
  }

 private:
  const HostTensor* x_;
  HostTensor permuted_;
  Eigen::Index rows_ = 0, cols_ = 0;
};

/// A contiguous HostTensor of `out`'s shape with element r = f(m.row(r)) (not rounded), one row
/// per thread at a time.
template <typename F>
HostTensor reduce_rows(const ReductionMatrix& m, const TensorMeta& out, F f) {
  HostTensor t = make_host_tensor_for_overwrite(out.shape, out.dtype);
  parallel_for(
      m.rows(), [&](int64_t r) { t.data[r] = f(m.row(r)); }, m.cols());
  return t;
}

}  // namespace replay::ref
