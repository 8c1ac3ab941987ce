// Deliberately wrong results, for proving that the numerics check catches a wrong kernel. Output
// mutations act on a result as a wrong kernel would have written it: the CPU tests apply them to
// the reference's output, the GPU tests to what a correct variant wrote, and the check must FAIL.
#pragma once

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "workloads/ir/host_tensor.hpp"

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
/// (left as the NaN poison), the last row stale, the whole output stale.
inline std::vector<OutputMutation> output_mutations() {
  auto any = [](const HostTensor& t) { return !t.data.empty(); };
  auto two_rows = [](const HostTensor& t) { return rows(t) >= 2; };
  auto long_row = [](const HostTensor& t) { return row_len(t) >= 2; };
  auto each = [](HostTensor y, auto f) {
    for (double& v : y.data) v = round_to(y.meta.dtype, f(v));
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
  };
}

}  // namespace replay::test
