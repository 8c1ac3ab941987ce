// rope's joint gradient: the layout steps (joint.hpp).
#include "impls/fusions/rope/joint.hpp"

#include "workloads/ir/graph.hpp"
#include "workloads/ir/layout.hpp"

namespace replay::rope {

std::optional<StridedLayout> apply_steps(StridedLayout cur, const std::vector<LayoutStep>& steps) {
  for (const LayoutStep& s : steps) {
    switch (s.kind) {
      case LayoutStep::Kind::kView: {
        const auto st = view_strides(cur.shape, cur.stride, s.shape);
        if (!st) return std::nullopt;
        cur.shape = s.shape;
        cur.stride = *st;
        break;
      }
      case LayoutStep::Kind::kPermute: {
        if (s.dims.size() != cur.shape.size()) return std::nullopt;
        StridedLayout in = cur;
        for (size_t k = 0; k < s.dims.size(); ++k) {
          const int64_t d = s.dims[k];
          if (d < 0 || d >= static_cast<int64_t>(s.dims.size())) return std::nullopt;
          in.shape[d] = cur.shape[k];
          in.stride[d] = cur.stride[k];
        }
        cur = std::move(in);
        break;
      }
      case LayoutStep::Kind::kPart:
        if (s.dim < 0 || s.dim >= static_cast<int>(cur.shape.size()) || s.start < 0 ||
            s.start + s.size > cur.shape[s.dim])
          return std::nullopt;
        cur.offset += s.start * cur.stride[s.dim];
        cur.shape[s.dim] = s.size;
        break;
    }
  }
  return cur;
}

std::optional<Rows2D> rows_2d(const StridedLayout& l, int64_t esize) {
  std::vector<int64_t> shape, stride;
  for (size_t k = 0; k < l.shape.size(); ++k) {
    if (l.shape[k] == 0) return Rows2D{l.offset * esize, esize, 0, 0};
    if (l.shape[k] != 1) {
      shape.push_back(l.shape[k]);
      stride.push_back(l.stride[k]);
    }
  }
  Rows2D r;
  r.offset = l.offset * esize;
  int k = static_cast<int>(shape.size()) - 1;
  int64_t run = 1;  // the dense innermost run, elements
  for (; k >= 0 && stride[k] == run; --k) run *= shape[k];
  if (k == static_cast<int>(shape.size()) - 1 && k >= 0) return std::nullopt;  // last stride != 1
  r.width = run * esize;
  r.height = 1;
  r.pitch = r.width;
  if (k >= 0) {
    for (int j = 0; j < k; ++j)
      if (stride[j] != stride[j + 1] * shape[j + 1]) return std::nullopt;
    for (int j = 0; j <= k; ++j) r.height *= shape[j];
    r.pitch = stride[k] * esize;
    if (r.pitch < r.width) return std::nullopt;
  }
  return r;
}

}  // namespace replay::rope
