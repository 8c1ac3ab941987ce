// amax_reuse launchers (device code: multi_amax.cuh).
//
// Napkin math (H200: 4.8 TB/s HBM3e, ~4.0 TB/s achievable by a read-mostly kernel): float8
// recipes take a rowwise and a tensorwise amax of |x|, x [16384, 8192] bf16 = 268 MB.
//   baseline (the reductions as captured, one pass each): 2 x 268 MB = 537 MB -> ~134 µs
//   optimized (one pass, the tensorwise amax from the row maxima): 268 MB + 64 KB -> ~67 µs
// PyTorch on the H200: eager 501 µs, torch.compile 255 µs, hand-rewritten reuse 82.7 µs; SOL
// (bytes over the measured copy bandwidth) 63 µs. The arithmetic is ~3 integer ops per element
// on the packed bf16 path (mask, __vmaxu2 per pair): ~0.4 Tops/s at 4 TB/s, far below the ALUs.
// Rowwise + columnwise (+ tensorwise) of the same |x| of 16-bit x: the packed tiles kernel, one
// read of x, plus atomics: rows x strips (16384 x 8 = 131 K) and row-step groups x N (64 x 8192 =
// 524 K) spread over the L2 (H200: 70.8 µs, 89 % of SOL; TUNING.md). Other tiles cases (amin,
// signed x, float32, unaligned rows) take the key-per-element tiles kernel.
#include <algorithm>

#include "impls/cuda/cuda_check.hpp"
#include "impls/cuda/device_sms.hpp"
#include "impls/fusions/amax_reuse/kernels.hpp"
#include "impls/fusions/amax_reuse/multi_amax.cuh"

namespace replay::amax_reuse {

const char* kind_name(AmaxKind k) {
  switch (k) {
    case AmaxKind::kRows:
      return "rows";
    case AmaxKind::kCols:
      return "cols";
    case AmaxKind::kAll:
      return "all";
  }
  return "?";
}

namespace {

using device::kThreads;

bool io_dtype(DType t) {
  return t == DType::kFloat32 || t == DType::kBFloat16 || t == DType::kFloat16;
}

// 16-byte vectors along every row: N and ld multiples of a vector, the base 16-byte aligned.
bool vectorizable(const MultiAmaxArgs& a) {
  const int64_t vec = 16 / static_cast<int64_t>(dtype_size(a.x_dtype));
  return a.N % vec == 0 && a.ld % vec == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
}

bool rows_path(const MultiAmaxArgs& a) {
  const device::Needs need(a);
  // A warp per row needs rows to fill the GPU; columns need the tiles' registers.
  return need.rows && !need.cols && a.M >= static_cast<int64_t>(device_sms()) * 4;
}

// The tiles' packed instantiation: |x| of 16-bit floats, maxima only, 16-byte vectors.
bool packed_tiles(const MultiAmaxArgs& a) {
  return a.abs && dtype_size(a.x_dtype) == 2 && !device::Needs(a).ext[1] && vectorizable(a);
}

// Persistent: as many CTAs of 8 warps as are resident at once (this instantiation's occupancy),
// each warp grid-striding over rows; a larger grid would run a second, partial wave.
template <typename T, bool kAbs, bool kPacked>
void launch_rows(const MultiAmaxArgs& a, uint32_t* ws, bool vec, cudaStream_t stream) {
  static const int per_sm = [] {
    int n = 0;
    REPLAY_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &n, device::multi_amax_rows_kernel<T, kAbs, kPacked>, kThreads, 0));
    return std::max(n, 1);
  }();
  // Every warp the same number of rows (no tail of warps with one row more than the rest):
  // x [16384, 8192] with 132 x 6 resident CTAs is 3 rows per warp on 683 CTAs, not 2.6 on 792.
  const int64_t resident = static_cast<int64_t>(device_sms()) * per_sm * device::kWarps;
  const int64_t rows_per_warp = (a.M + resident - 1) / resident;
  const int64_t warps = (a.M + rows_per_warp - 1) / rows_per_warp;
  const int64_t blocks = (warps + device::kWarps - 1) / device::kWarps;
  device::multi_amax_rows_kernel<T, kAbs, kPacked>
      <<<static_cast<int>(blocks), kThreads, 0, stream>>>(a, ws, vec);
  REPLAY_CUDA_LAUNCH("amax_reuse::multi_amax_rows_kernel");
}

void launch_finalize(const MultiAmaxArgs& a, uint32_t* ws, cudaStream_t stream) {
  const int64_t keys = device::Slots(a.M, a.N).counter;
  const int64_t fb =
      std::min<int64_t>((keys + kThreads - 1) / kThreads, static_cast<int64_t>(device_sms()) * 4);
  device::multi_amax_finalize_kernel<<<static_cast<int>(fb), kThreads, 0, stream>>>(a, ws);
  REPLAY_CUDA_LAUNCH("amax_reuse::multi_amax_finalize_kernel");
}

template <typename T>
void launch_tiles_packed(const MultiAmaxArgs& a, uint32_t* ws, cudaStream_t stream) {
  static const int per_sm = [] {
    int n = 0;
    REPLAY_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &n, device::multi_amax_tiles_packed_kernel<T>, kThreads, 0));
    return std::max(n, 1);
  }();
  const dim3 grid =
      device::tiles_packed_grid(a.M, a.N, static_cast<int64_t>(device_sms()) * per_sm);
  device::multi_amax_tiles_packed_kernel<T><<<grid, kThreads, 0, stream>>>(a, ws);
  REPLAY_CUDA_LAUNCH("amax_reuse::multi_amax_tiles_packed_kernel");
}

template <typename T, bool kAbs>
void launch_typed(const MultiAmaxArgs& a, uint32_t* ws, cudaStream_t stream) {
  const bool vec = vectorizable(a);
  const int64_t sms = device_sms();
  if (rows_path(a)) {
    if constexpr (kAbs && sizeof(T) == 2) {
      if (vec && !device::Needs(a).ext[1]) return launch_rows<T, true, true>(a, ws, vec, stream);
    }
    return launch_rows<T, kAbs, false>(a, ws, vec, stream);
  }
  if constexpr (kAbs && sizeof(T) == 2) {
    if (packed_tiles(a)) {
      launch_tiles_packed<T>(a, ws, stream);
      return launch_finalize(a, ws, stream);
    }
  }
  const int64_t kvec = 16 / static_cast<int64_t>(sizeof(T));
  const int64_t gx = (a.N + kThreads * kvec - 1) / (kThreads * kvec);
  // About 2 CTAs per SM in all: each keeps its columns' keys over many rows, so that the column
  // atomics (gy x N) stay few.
  const int64_t gy_target = std::max<int64_t>(1, (sms * 2 + gx - 1) / gx);
  int64_t rows_per_cta = (a.M + gy_target - 1) / gy_target;
  rows_per_cta = (rows_per_cta + device::kBand - 1) / device::kBand * device::kBand;
  const int64_t gy = (a.M + rows_per_cta - 1) / rows_per_cta;
  device::multi_amax_tiles_kernel<T, kAbs>
      <<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), kThreads, 0, stream>>>(
          a, ws, vec, rows_per_cta);
  REPLAY_CUDA_LAUNCH("amax_reuse::multi_amax_tiles_kernel");
  launch_finalize(a, ws, stream);
}

template <typename T>
void launch_abs(const MultiAmaxArgs& a, uint32_t* ws, cudaStream_t stream) {
  if (a.abs)
    launch_typed<T, true>(a, ws, stream);
  else
    launch_typed<T, false>(a, ws, stream);
}

}  // namespace

std::string multi_amax_supports(const MultiAmaxArgs& a) {
  if (!io_dtype(a.x_dtype))
    return "x is " + std::string(dtype_name(a.x_dtype)) +
           " (the kernels read float32, bfloat16, float16)";
  if (a.n_out < 1 || a.n_out > kMaxAmaxOutputs)
    return std::to_string(a.n_out) + " outputs (the kernels write 1 to " +
           std::to_string(kMaxAmaxOutputs) + ")";
  for (int o = 0; o < a.n_out; ++o)
    if (!io_dtype(a.out[o].dtype))
      return "an output is " + std::string(dtype_name(a.out[o].dtype)) +
             " (the kernels write float32, bfloat16, float16)";
  if (a.M < 1 || a.N < 1 || a.ld < a.N) return "x is not a non-empty [M, N] with rows ld apart";
  if (a.N > (int64_t(1) << 40) || a.M > (int64_t(1) << 31) * 64)
    return "x is larger than the grid covers";
  return "";
}

size_t multi_amax_workspace_bytes(const MultiAmaxArgs& a) {
  return static_cast<size_t>(device::Slots(a.M, a.N).size()) * sizeof(uint32_t);
}

void clear_multi_amax_workspace(void* workspace, const MultiAmaxArgs& a, cudaStream_t stream) {
  REPLAY_CUDA(cudaMemsetAsync(workspace, 0, multi_amax_workspace_bytes(a), stream));
}

const char* multi_amax_path(const MultiAmaxArgs& a) {
  return rows_path(a) ? "rows" : packed_tiles(a) ? "tiles_packed" : "tiles";
}

void launch_multi_amax(const MultiAmaxArgs& a, void* workspace, cudaStream_t stream) {
  auto* ws = static_cast<uint32_t*>(workspace);
  switch (a.x_dtype) {
    case DType::kBFloat16:
      return launch_abs<__nv_bfloat16>(a, ws, stream);
    case DType::kFloat16:
      return launch_abs<__half>(a, ws, stream);
    default:
      return launch_abs<float>(a, ws, stream);
  }
}

}  // namespace replay::amax_reuse
