#include "workloads/ir/tolerance.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace replay {

namespace {
std::string fmt_g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2g", v);
  return buf;
}
}  // namespace

double unit_roundoff(DType t) {
  return is_floating(t) ? std::ldexp(1.0, -(mantissa_bits(t) + 1)) : 0;
}

double ulp_of(DType t, double v) {
  if (!is_floating(t)) return 1;
  const double a = std::fabs(v);
  const int emin = min_normal_exponent(t);
  const int e = (a > 0 && std::isfinite(a)) ? std::max(std::ilogb(a), emin) : emin;
  return std::ldexp(1.0, e - mantissa_bits(t));
}

NumericsBounds default_bounds(DType t, int ops, int64_t k, double coarse_acc, int64_t tc_k,
                              double inherited, bool summed) {
  NumericsBounds b;
  char buf[256];
  if (!is_floating(t)) {
    b.why = "integer/bool output: exact";
    return b;
  }
  const double u_acc = std::max(
      coarse_acc, t == DType::kFloat64 ? unit_roundoff(DType::kFloat64) : std::ldexp(1.0, -24));
  double delta = u_acc * (8.0 * std::max(ops, 1) +
                          4.0 * std::sqrt(static_cast<double>(std::max<int64_t>(k, 1))));
  // Tensor-core GEMM accumulation drifts toward zero: a bias of about K * 2^-30 relative
  // (measured on an H100 through cuBLASLt, bf16 operands: -1.4e-6 at K = 1600, -3.9e-6 at 4096);
  // allowed at 4x, in the bias and in delta.
  const double tc_drift = static_cast<double>(std::max<int64_t>(tc_k, 0)) * std::ldexp(1.0, -28);
  delta += tc_drift;
  const double u = unit_roundoff(t);
  b.max_bias = 16 * u_acc + tc_drift;
  if (u > delta) {
    b.max_rel_l2 = 2 * std::sqrt(delta * u);
    // Behind a coarse accumulator (float8 GEMM) the error is absolute, not relative: outputs near
    // 0 (cancellation) are off by more than one ulp far more often than a second rounding makes
    // them (PyTorch's own float8 golden outputs measure 2.8 % at delta / u = 0.26, K = 32).
    b.max_beyond_1ulp = std::min(1.0, 1e-4 + (coarse_acc > 0 ? 0.25 : 0.1) * delta / u);
  } else {
    b.max_rel_l2 = 2 * delta;
    b.max_beyond_1ulp = 1;
  }
  b.max_row_rel_l2 = std::max(3 * u, 4 * delta);
  b.elem_floor = 4 * u + 8 * delta;
  const double s = inherited;
  if (s > 0) {  // one-ulp flips of a rounded intermediate upstream (see the header)
    b.elem_ulps = 4;
    if (summed) {
      b.max_rel_l2 += s;
      b.elem_floor += 6 * s;
      b.share_floor = 2 * s;
      b.max_row_rel_l2 = std::max(b.max_row_rel_l2, 4 * s);
    }
  }
  std::snprintf(buf, sizeof buf,
                "default for %s after %d op(s), longest reduction %lld terms: delta = %.2g%s",
                std::string(dtype_name(t)).c_str(), ops, static_cast<long long>(k), delta,
                s > 0 ? (", flips of rounded intermediates upstream: " + fmt_g(s) +
                         (summed ? " (summed since)" : ""))
                            .c_str()
                      : "");
  b.why = buf;
  return b;
}

}  // namespace replay
