// Deliberately wrong results, for proving that the numerics check catches a wrong kernel. Output
// mutations act on a result as a wrong kernel would have written it: the CPU tests apply them to
// the reference's output, the GPU tests to what a correct variant wrote, and the check must FAIL.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "workloads/ir/host_tensor.hpp"
#include "workloads/ir/strided_loop.hpp"

namespace replay::test {

struct OutputMutation {
  std::string name;
  /// Whether it applies to a tensor (rows are the last dim; some need two rows or a long row).
  std::function<bool(const HostTensor&)> applies;
  /// The mutated copy of `y`; `stale` is the same output computed from other inputs.
  std::function<HostTensor(HostTensor y, const HostTensor& stale)> apply;
};

inline int64_t row_len(const HostTensor& t) {
  return t.meta.shape.empty() ? 1 : std::max<int64_t>(t.meta.shape.back(), 1);
}
inline int64_t rows(const HostTensor& t) {
  return static_cast<int64_t>(t.data.size()) / row_len(t);
}

/// scaled output, offset output, two rows swapped, a row transposed (reversed), the last row lost
/// (left as the NaN poison), the last row stale, the whole output stale; errors confined to one
/// row (scaled by 1.02, offset by 0.05) or one element (3.0); the 0.4 % of elements nearest zero
/// zeroed or sign-flipped (a flush-to-zero or sign bug where ulps are small).
/// Indices of the `share` of elements with the smallest nonzero |value|.
inline std::vector<size_t> smallest(const HostTensor& t, double share) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < t.data.size(); ++i)
    if (t.data[i] != 0) idx.push_back(i);
  const size_t k =
      std::max<size_t>(1, static_cast<size_t>(share * static_cast<double>(t.data.size())));
  if (idx.size() <= k) return idx;
  std::nth_element(idx.begin(), idx.begin() + static_cast<long>(k), idx.end(),
                   [&](size_t a, size_t b) { return std::fabs(t.data[a]) < std::fabs(t.data[b]); });
  idx.resize(k);
  return idx;
}

inline std::vector<OutputMutation> output_mutations() {
  auto any = [](const HostTensor& t) { return !t.data.empty(); };
  auto many = [](const HostTensor& t) { return t.data.size() >= 10000; };
  auto two_rows = [](const HostTensor& t) { return rows(t) >= 2; };
  auto long_row = [](const HostTensor& t) { return row_len(t) >= 2; };
  auto each = [](HostTensor y, auto f) {
    double* d = y.data.data();
    const DType t = y.meta.dtype;
    parallel_for(static_cast<int64_t>(y.data.size()),
                 [=](int64_t i) { d[i] = round_to(t, f(d[i])); });
    return y;
  };
  return {
      {"scaled_x1.012", any,
       [each](HostTensor y, const HostTensor&) {
         return each(std::move(y), [](double v) { return v * 1.012; });
       }},
      {"offset_plus_0.012", any,
       [each](HostTensor y, const HostTensor&) {
         return each(std::move(y), [](double v) { return v + 0.012; });
       }},
      {"rows_swapped", two_rows,
       [](HostTensor y, const HostTensor&) {
         const int64_t n = row_len(y);
         std::swap_ranges(y.data.begin(), y.data.begin() + n, y.data.begin() + n);
         return y;
       }},
      {"row_transposed", long_row,
       [](HostTensor y, const HostTensor&) {
         std::reverse(y.data.begin(), y.data.begin() + row_len(y));
         return y;
       }},
      {"lost_last_row", any,
       [](HostTensor y, const HostTensor&) {
         std::fill(y.data.end() - row_len(y), y.data.end(), std::nan(""));
         return y;
       }},
      {"stale_last_row", two_rows,
       [](HostTensor y, const HostTensor& stale) {
         const int64_t n = row_len(y);
         std::copy(stale.data.end() - n, stale.data.end(), y.data.end() - n);
         return y;
       }},
      {"stale_output", any, [](HostTensor, const HostTensor& stale) { return stale; }},
      {"last_row_x1.02", any,
       [](HostTensor y, const HostTensor&) {
         for (auto it = y.data.end() - row_len(y); it != y.data.end(); ++it)
           *it = round_to(y.meta.dtype, *it * 1.02);
         return y;
       }},
      {"last_row_plus_0.05", any,
       [](HostTensor y, const HostTensor&) {
         for (auto it = y.data.end() - row_len(y); it != y.data.end(); ++it)
           *it = round_to(y.meta.dtype, *it + 0.05);
         return y;
       }},
      {"one_element_3.0", any,
       [](HostTensor y, const HostTensor&) {
         y.data[y.data.size() / 2] = 3.0;
         return y;
       }},
      {"smallest_0.4pct_zeroed", many,
       [](HostTensor y, const HostTensor&) {
         for (size_t i : smallest(y, 0.004)) y.data[i] = 0;
         return y;
       }},
      {"smallest_0.4pct_sign_flipped", many,
       [](HostTensor y, const HostTensor&) {
         for (size_t i : smallest(y, 0.004)) y.data[i] = -y.data[i];
         return y;
       }},
  };
}

}  // namespace replay::test
