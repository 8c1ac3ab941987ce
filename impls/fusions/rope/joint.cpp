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

}  // namespace replay::rope
