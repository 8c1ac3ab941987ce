#include "workloads/ir/graph.hpp"

namespace replay {

int64_t TensorMeta::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t TensorMeta::storage_elems() const {
  if (numel() == 0) return 0;
  int64_t span = 1;
  for (size_t i = 0; i < shape.size(); ++i) span += (shape[i] - 1) * stride[i];
  return span;
}

bool TensorMeta::is_contiguous() const {
  int64_t expect = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && stride[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string TensorMeta::str() const {
  return std::string(dtype_name(dtype)) + shape_str(shape);
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> st(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return st;
}

int Graph::find_value(const std::string& n) const {
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].name == n) return static_cast<int>(i);
  return -1;
}

}  // namespace replay
