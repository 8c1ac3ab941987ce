// bookend, the segmented form's copy kernel: the plan it runs (built on the host by
// make_segment_copy, segment.hpp) and its launcher. Kept free of the binder's headers so that
// nvcc compiles it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace replay::bookend {

inline constexpr int kSegmentMaxRank = 8;  ///< kMaxRank (workloads/ir/graph.hpp)

/// A planned copy: dims of size 1 dropped, dims contiguous in both operands merged (so a
/// permuted view of a [B, T, H, D] buffer is at most 4 dims). Built once at bind time.
struct SegmentCopy {
  void* dst = nullptr;
  const void* src = nullptr;
  int elem = 2;  ///< element bytes
  int rank = 0;
  int64_t shape[kSegmentMaxRank] = {};
  int64_t dst_stride[kSegmentMaxRank] = {}, src_stride[kSegmentMaxRank] = {};
  int64_t numel = 0;
  int vec_bytes = 0;  ///< bytes per access, chosen by make_segment_copy (vector_width.hpp)
};

/// Enqueue the copy; records its width (launch_record.hpp) as "bookend_copy" src and dst.
void launch_segment_copy(const SegmentCopy& c, cudaStream_t stream);

}  // namespace replay::bookend
