// bookend, the segmented form: a boundary meta op materialized by a copy kernel. The copy reads
// one strided layout and writes another of the same shape and dtype (a view of a fused qkv into a
// contiguous q; a contiguous result into the strided output view), one vector of w bytes per
// thread step along the innermost dim, w chosen when the copy is planned (bind time) by
// vector_bytes over both operands and recorded by every launch.
//
// Napkin math: a copy of N bytes reads and writes N bytes; Llama-3-8B's q view [1, 8192, 32, 128]
// bf16 is 64 MiB, 2 x 64 MiB at ~4.4 TB/s: ~30 us per boundary tensor, the cost the segmented
// form adds for each input it materializes.
#pragma once

#include <cstdint>
#include <string>

#include "impls/fusions/binding.hpp"
#include "impls/fusions/bookend/segment_kernel.hpp"
#include "workloads/ir/graph.hpp"

namespace replay::bookend {

/// The copy of `src` into `dst` (same shape and dtype; `dst` must not overlap itself). Throws
/// std::invalid_argument when the shapes or dtypes differ or the rank exceeds kSegmentMaxRank.
SegmentCopy make_segment_copy(const BoundTensor& dst, const BoundTensor& src);

}  // namespace replay::bookend
