// Elementwise loops over strided layouts for the host (reference executor, input generation,
// packing), split over threads: OpenMP in a translation unit built with it, one thread otherwise.
// Every logical element is visited exactly once and the work on one element must not depend on
// another's, so the result is the same on any thread count (the reference stays bit-identical
// run to run). The layout of the loop is TensorIterator's: collapse dims that every operand walks
// contiguously, then run the innermost dim as a plain loop.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace replay {

/// Threads the parallel loops of this header run on in the workloads and impls libraries (built
/// with OpenMP when the build found it): omp_get_max_threads() there (OMP_NUM_THREADS, the CPU
/// affinity mask), 1 in a build without OpenMP. Defined in workloads/ir/host_tensor.cpp.
int host_threads();

/// Largest number of strided operands one loop walks.
inline constexpr size_t kMaxLoopOperands = 4;

/// The dims of a loop over `shape` with one stride vector per operand (element strides, 0 where
/// an operand is broadcast), after merging every pair of adjacent dims that all operands walk as
/// one (stride[d] == stride[d + 1] * shape[d + 1]) and dropping size-1 dims. At least one dim.
struct LoopDims {
  std::vector<int64_t> shape;                                 ///< outermost first
  std::array<std::vector<int64_t>, kMaxLoopOperands> stride;  ///< per operand
  size_t operands = 0;
};

/// Builds the collapsed loop. Throws std::invalid_argument when there are more than
/// kMaxLoopOperands operands or a stride vector's length differs from the shape's.
inline LoopDims collapse_loop(const std::vector<int64_t>& shape,
                              const std::vector<const std::vector<int64_t>*>& strides) {
  if (strides.size() > kMaxLoopOperands)
    throw std::invalid_argument("strided loop: more than 4 operands");
  LoopDims l;
  l.operands = strides.size();
  for (const auto* s : strides)
    if (s->size() != shape.size()) throw std::invalid_argument("strided loop: stride rank");
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !l.shape.empty();
    for (size_t k = 0; k < l.operands && merge; ++k)
      merge = l.stride[k].back() == (*strides[k])[d] * shape[d];
    if (merge) {
      l.shape.back() *= shape[d];
      for (size_t k = 0; k < l.operands; ++k) l.stride[k].back() = (*strides[k])[d];
      continue;
    }
    l.shape.push_back(shape[d]);
    for (size_t k = 0; k < l.operands; ++k) l.stride[k].push_back((*strides[k])[d]);
  }
  if (l.shape.empty()) {
    l.shape.push_back(1);
    for (size_t k = 0; k < l.operands; ++k) l.stride[k].push_back(0);
  }
  return l;
}

/// Calls f(i, off) for every row-major logical index i in [0, numel(shape)), where off is a
/// std::array<int64_t, kMaxLoopOperands> whose entry k is operand k's element offset
/// sum_d idx_d * strides[k][d]. Contiguous chunks of i run on different threads; `f` must only
/// write state owned by index i. Throws as collapse_loop.
template <typename F>
void parallel_strided_loop(const std::vector<int64_t>& shape,
                           const std::vector<const std::vector<int64_t>*>& strides, F&& f) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  if (n == 0) return;
  const LoopDims l = collapse_loop(shape, strides);
  const size_t nd = l.shape.size(), K = l.operands;
  const int64_t inner = l.shape.back();
  constexpr int64_t kChunk = int64_t{1} << 15;  // elements per task: small enough to balance
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(dynamic, 1) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    std::array<int64_t, kMaxLoopOperands> idx{}, off{};
    std::vector<int64_t> pos(nd);
    for (int64_t q = begin, d = static_cast<int64_t>(nd) - 1; d >= 0; --d) {  // unravel begin
      pos[d] = q % l.shape[d];
      q /= l.shape[d];
      for (size_t k = 0; k < K; ++k) off[k] += pos[d] * l.stride[k][d];
    }
    for (int64_t i = begin; i < end;) {
      const int64_t run = std::min(end - i, inner - pos[nd - 1]);
      for (int64_t j = 0; j < run; ++j) {
        for (size_t k = 0; k < K; ++k) idx[k] = off[k] + j * l.stride[k][nd - 1];
        f(i + j, idx);
      }
      i += run;
      for (size_t k = 0; k < K; ++k) off[k] += run * l.stride[k][nd - 1];
      pos[nd - 1] += run;
      for (size_t d = nd - 1; d > 0 && pos[d] == l.shape[d]; --d) {  // carry
        for (size_t k = 0; k < K; ++k) off[k] += l.stride[k][d - 1] - l.shape[d] * l.stride[k][d];
        pos[d] = 0;
        ++pos[d - 1];
      }
    }
  }
}

/// Calls f(i) for i in [0, n), contiguous chunks on different threads; `work` is the elements
/// one call touches (a reduction row's length), so that few long rows still split.
template <typename F>
void parallel_for(int64_t n, F&& f, int64_t work = 1) {
  constexpr int64_t kChunk = int64_t{1} << 15;
#pragma omp parallel for schedule(static) if (n > 1 && n * std::max <int64_t>(work, 1) > kChunk)
  for (int64_t i = 0; i < n; ++i) f(i);
}

/// dst[i] = src[i] for i in [0, n), split over threads (first touch of dst's pages by them).
inline void parallel_copy(double* dst, const double* src, int64_t n) {
  parallel_for(n, [=](int64_t i) { dst[i] = src[i]; });
}

}  // namespace replay
