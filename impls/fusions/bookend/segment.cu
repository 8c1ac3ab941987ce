// bookend, the segmented form's copy kernel (segment.hpp).
#include <algorithm>

#include "impls/cuda/cuda_check.hpp"
#include "impls/cuda/vec16.cuh"
#include "impls/fusions/bookend/segment_kernel.hpp"
#include "impls/fusions/launch_record.hpp"

namespace replay::bookend {
namespace {

// One W-byte word per step: word i is (outer coords, innermost chunk); 64-bit index arithmetic
// (a copy is bandwidth-bound; one decomposition per 16 bytes).
template <int W>
__global__ void segment_copy_kernel(SegmentCopy c) {
  using T = typename RawWord<W>::type;
  const int per = W / c.elem;  // elements per word
  const int64_t inner_words = c.shape[c.rank - 1] / per;
  const int64_t words = c.numel / per;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < words;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rem = i / inner_words;
    const int64_t inner = (i - rem * inner_words) * per;
    int64_t so = inner * c.src_stride[c.rank - 1], d_o = inner * c.dst_stride[c.rank - 1];
    for (int d = c.rank - 2; d >= 0; --d) {
      const int64_t q = rem / c.shape[d];
      const int64_t k = rem - q * c.shape[d];
      so += k * c.src_stride[d];
      d_o += k * c.dst_stride[d];
      rem = q;
    }
    // per > 1 only where both innermost strides are 1 (make_segment_copy)
    reinterpret_cast<T*>(static_cast<char*>(c.dst) + d_o * c.elem)[0] =
        reinterpret_cast<const T*>(static_cast<const char*>(c.src) + so * c.elem)[0];
  }
}

}  // namespace

void launch_segment_copy(const SegmentCopy& c, cudaStream_t stream) {
  if (c.numel == 0) return;
  constexpr int kThreads = 256;
  const int64_t words = c.numel / (c.vec_bytes / c.elem);
  const int blocks = static_cast<int>(
      std::clamp<int64_t>((words + kThreads - 1) / kThreads, 1, int64_t(132) * 16));
  switch (c.vec_bytes) {
    case 16:
      segment_copy_kernel<16><<<blocks, kThreads, 0, stream>>>(c);
      break;
    case 8:
      segment_copy_kernel<8><<<blocks, kThreads, 0, stream>>>(c);
      break;
    case 4:
      segment_copy_kernel<4><<<blocks, kThreads, 0, stream>>>(c);
      break;
    case 2:
      segment_copy_kernel<2><<<blocks, kThreads, 0, stream>>>(c);
      break;
    default:
      segment_copy_kernel<1><<<blocks, kThreads, 0, stream>>>(c);
      break;
  }
  REPLAY_CUDA_LAUNCH("segment_copy_kernel");
  if (launch_widths_recording()) {
    record_launch_width("bookend_copy", "src", c.vec_bytes);
    record_launch_width("bookend_copy", "dst", c.vec_bytes);
  }
}

}  // namespace replay::bookend
