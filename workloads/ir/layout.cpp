#include "workloads/ir/layout.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace replay {
namespace {

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw std::invalid_argument("shapes " + shape_str(a) + " and " + shape_str(b) +
                                  " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> normalize_dims(const std::vector<int64_t>& dims, size_t ndim) {
  std::vector<int64_t> out;
  if (ndim == 0) {  // a 0-d tensor takes dim 0 or -1 (as ATen does), which reduce nothing
    for (int64_t d : dims)
      if (d != 0 && d != -1)
        throw std::invalid_argument("dim " + std::to_string(d) + " out of range for a 0-d tensor");
    return out;
  }
  if (dims.empty()) {
    for (size_t i = 0; i < ndim; ++i) out.push_back(static_cast<int64_t>(i));
    return out;
  }
  const auto nd = static_cast<int64_t>(std::max<size_t>(ndim, 1));
  for (int64_t d : dims) {
    int64_t n = d < 0 ? d + nd : d;
    if (n < 0 || n >= nd)
      throw std::invalid_argument("dim " + std::to_string(d) + " out of range for a " +
                                  std::to_string(ndim) + "-d tensor");
    out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end())
    throw std::invalid_argument("repeated dim in reduction");
  return out;
}

Shape reduced_shape(const Shape& in, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (size_t i = 0; i < in.size(); ++i) {
    bool reduced = std::find(dims.begin(), dims.end(), static_cast<int64_t>(i)) != dims.end();
    if (!reduced)
      out.push_back(in[i]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

Shape resolve_view_shape(const Shape& target, int64_t numel) {
  Shape out = target;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0) throw std::invalid_argument("only one dimension can be -1 in a view");
      infer = static_cast<int>(i);
    } else if (out[i] < 0) {
      throw std::invalid_argument("negative size in view shape " + shape_str(target));
    } else if (__builtin_mul_overflow(known, out[i], &known)) {
      throw std::invalid_argument("view shape " + shape_str(target) + " overflows int64");
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      throw std::invalid_argument("view shape " + shape_str(target) + " does not fit " +
                                  std::to_string(numel) + " elements");
    out[infer] = numel / known;
  }
  if (checked_numel(out) != numel)
    throw std::invalid_argument("view shape " + shape_str(target) + " has " +
                                std::to_string(known) + " elements, input has " +
                                std::to_string(numel));
  return out;
}

std::optional<std::vector<int64_t>> view_strides(const Shape& shape,
                                                 const std::vector<int64_t>& stride,
                                                 const Shape& new_shape) {
  std::vector<int64_t> out(new_shape.size(), 1);
  if (shape.empty()) return contiguous_strides(new_shape);
  if (numel_of(shape) == 0) return contiguous_strides(new_shape);
  // Walk the old dims from the innermost outward, in runs that are contiguous with each other
  // ("chunks"); each chunk must be covered exactly by a run of new dims.
  auto nd = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t base = stride.back(), chunk = 1, covered = 1;
  for (auto od = static_cast<int64_t>(shape.size()) - 1; od >= 0; --od) {
    chunk *= shape[od];
    bool chunk_ends = od == 0 || (shape[od - 1] != 1 && stride[od - 1] != chunk * base);
    if (!chunk_ends) continue;
    while (nd >= 0 && (covered < chunk || new_shape[nd] == 1)) {
      out[nd] = covered * base;
      covered *= new_shape[nd];
      --nd;
    }
    if (covered != chunk) return std::nullopt;
    if (od > 0) {
      base = stride[od - 1];
      chunk = 1;
      covered = 1;
    }
  }
  if (nd != -1) return std::nullopt;
  return out;
}

TensorMeta expand_meta(const TensorMeta& in, const Shape& sizes) {
  if (sizes.size() < in.shape.size())
    throw std::invalid_argument("expand to " + shape_str(sizes) + " has fewer dims than " +
                                shape_str(in.shape));
  TensorMeta out{Shape(sizes.size()), std::vector<int64_t>(sizes.size(), 0), in.dtype};
  size_t lead = sizes.size() - in.shape.size();
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < -1)
      throw std::invalid_argument("expand: negative size " + std::to_string(sizes[i]) + " in " +
                                  shape_str(sizes));
    if (i < lead) {
      if (sizes[i] < 0) throw std::invalid_argument("expand: -1 in a new leading dim");
      out.shape[i] = sizes[i];
      continue;
    }
    int64_t have = in.shape[i - lead];
    int64_t want = sizes[i] == -1 ? have : sizes[i];
    if (have == want) {
      out.shape[i] = have;
      out.stride[i] = in.stride[i - lead];
    } else if (have == 1) {
      out.shape[i] = want;
    } else {
      throw std::invalid_argument("expand: cannot expand " + shape_str(in.shape) + " to " +
                                  shape_str(sizes));
    }
  }
  return out;
}

int64_t row_stride(const TensorMeta& m, int64_t cols) {
  if (m.shape.empty() || m.shape.back() != cols || cols == 0) return -1;
  const int64_t rows = m.numel() / cols;
  auto st = view_strides(m.shape, m.stride, {rows, cols});
  if (!st || (*st)[1] != 1) return -1;
  return rows == 1 ? cols : (*st)[0];
}

int64_t flat_stride(const TensorMeta& m, int64_t n) {
  if (m.numel() != n) return -1;
  if (n <= 1) return 1;
  auto st = view_strides(m.shape, m.stride, {n});
  return st ? (*st)[0] : -1;
}

}  // namespace replay
