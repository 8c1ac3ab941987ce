// A host model of the fp8_quantize kernels: the same arithmetic (quant_math.hpp: the max keys,
// the float64 scale, the saturated cast), one quantization of x at a time, for the CPU tests.
#pragma once

#include <cmath>
#include <vector>

#include "impls/fusions/fp8_quantize/params.hpp"
#include "impls/fusions/fp8_quantize/quant_math.hpp"

namespace replay::test {

struct QuantModel {
  std::vector<float> amax, scale;  ///< 1, rows or cols of them
  std::vector<uint8_t> q;          ///< [rows, cols] row-major float8 bits
};

/// x: [rows, cols] row-major values (of x's dtype, widened).
inline QuantModel model_quantize(const std::vector<float>& x, int64_t rows, int64_t cols,
                                 const fp8_quantize::Quantization& q) {
  using namespace fp8_quantize;
  const int64_t len = q.granularity == Granularity::kTensorwise ? 1
                      : q.granularity == Granularity::kRowwise  ? rows
                                                                : cols;
  auto at = [&](int64_t r, int64_t c) {
    return q.granularity == Granularity::kTensorwise ? 0
           : q.granularity == Granularity::kRowwise  ? r
                                                     : c;
  };
  std::vector<uint32_t> keys(static_cast<size_t>(len), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = x[r * cols + c];
      uint32_t& k = keys[at(r, c)];
      k = std::max(k, max_key(q.abs ? std::fabs(v) : v));
    }
  QuantModel m;
  for (uint32_t k : keys) {
    m.amax.push_back(from_max_key(k));
    m.scale.push_back(quant_scale_of(m.amax.back(), q.eps, q.fp8_max, q.pow2));
  }
  const bool e5m2 = q.fp8 == DType::kFloat8E5M2;
  m.q.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      m.q[r * cols + c] = float8_bits(
          scaled_clamped(x[r * cols + c], m.scale[at(r, c)], static_cast<float>(q.fp8_max)), e5m2);
  return m;
}

}  // namespace replay::test
