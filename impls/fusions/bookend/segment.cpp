// bookend, the segmented form: planning a copy on the host (segment.hpp).
#include <stdexcept>

#include "impls/fusions/bookend/segment.hpp"
#include "impls/fusions/bookend/vector_width.hpp"

namespace replay::bookend {

SegmentCopy make_segment_copy(const BoundTensor& dst, const BoundTensor& src) {
  if (dst.layout.shape != src.layout.shape || dst.layout.dtype != src.layout.dtype)
    throw std::invalid_argument("segment copy of " + src.layout.str() + " into " +
                                dst.layout.str() + ": needs the same shape and dtype");
  SegmentCopy c;
  c.dst = dst.ptr;
  c.src = src.ptr;
  c.elem = static_cast<int>(dtype_size(src.layout.dtype));
  c.numel = src.layout.numel();
  // Drop size-1 dims, then merge dim d into d + 1 where both operands are contiguous across them.
  for (size_t d = 0; d < src.layout.shape.size(); ++d) {
    const int64_t n = src.layout.shape[d];
    if (n == 1) continue;
    if (c.rank > 0 && c.src_stride[c.rank - 1] == src.layout.stride[d] * n &&
        c.dst_stride[c.rank - 1] == dst.layout.stride[d] * n) {
      c.shape[c.rank - 1] *= n;
      c.src_stride[c.rank - 1] = src.layout.stride[d];
      c.dst_stride[c.rank - 1] = dst.layout.stride[d];
      continue;
    }
    if (c.rank == kSegmentMaxRank)
      throw std::invalid_argument("segment copy of " + src.layout.str() + ": more than " +
                                  std::to_string(kSegmentMaxRank) + " dims");
    c.shape[c.rank] = n;
    c.src_stride[c.rank] = src.layout.stride[d];
    c.dst_stride[c.rank] = dst.layout.stride[d];
    ++c.rank;
  }
  if (c.rank == 0) {  // one element
    c.rank = 1;
    c.shape[0] = 1;
    c.src_stride[0] = c.dst_stride[0] = 1;
  }
  const int n = c.rank - 1;
  c.vec_bytes = std::min(vector_bytes(reinterpret_cast<uintptr_t>(c.src), c.elem, c.src_stride, n,
                                      c.src_stride[n], c.shape[n]),
                         vector_bytes(reinterpret_cast<uintptr_t>(c.dst), c.elem, c.dst_stride, n,
                                      c.dst_stride[n], c.shape[n]));
  return c;
}

}  // namespace replay::bookend
