#include "workloads/ir/graph.hpp"

#include <algorithm>
#include <cstdio>

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

std::optional<int64_t> checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::nullopt;
  return n;
}

bool TensorMeta::non_overlapping_and_dense() const {
  std::vector<size_t> order;
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return stride[a] < stride[b]; });
  int64_t expect = 1;
  for (size_t i : order) {
    if (shape[i] == 0) return true;  // no elements: nothing overlaps
    if (stride[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
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

std::string CutNode::describe() const {
  std::string recorded, synthetic, golden;
  for (const Output& o : outputs) {
    if (o.golden) {
      golden += (golden.empty() ? "" : ", ") + o.value;
    } else if (o.recorded) {
      recorded += (recorded.empty() ? "" : ", ") + o.value;
    } else {
      char buf[96];
      std::snprintf(buf, sizeof buf, " (mean %g, std %g)", o.stats.mean, o.stats.std);
      synthetic += (synthetic.empty() ? "" : ", ") + o.value + buf;
    }
  }
  std::string line = "node '" + id + "': " + reason;
  if (outputs.empty() && lacked_outputs.empty()) line += "; the graph reads none of its outputs";
  if (!recorded.empty()) line += "; outputs " + recorded + " drawn from recorded stats";
  if (!golden.empty()) line += "; outputs " + golden + " taken from the golden file";
  if (!synthetic.empty())
    line += "; outputs " + synthetic + " drawn from synthetic stats (none recorded)";
  for (const std::string& l : lacked_outputs)
    line += "; output " + l + " (a dtype the harness lacks: its readers are cut)";
  return line;
}

int Graph::find_value(const std::string& n) const {
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].name == n) return static_cast<int>(i);
  return -1;
}

}  // namespace replay
