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

Float8GemmError float8_gemm_error(int64_t k, bool fast_accum) {
  const double kk = static_cast<double>(std::max<int64_t>(k, 1));
  Float8GemmError e;
  e.noise = std::ldexp(1.0, -11);
  e.drift = std::ldexp(1.0, -13);
  if (fast_accum) {
    e.noise = std::max(e.noise, std::ldexp(1.0, -13.5) * std::sqrt(kk));
    e.drift *= std::max(1.0, std::sqrt(kk / 128));
  }
  // The tail is long: the worst of 65536 elements measured 16-18 sigma of the noise (K = 32, 256
  // and 2048 rowwise, with and without fast accumulation), up to 3.8 noise bounds (K = 256).
  e.max_err = 16 * e.noise;
  return e;
}

NumericsBounds default_bounds(DType t, int ops, int64_t k, Float8GemmError f8, int64_t tc_k,
                              double inherited, bool summed) {
  NumericsBounds b;
  char buf[320];
  if (!is_floating(t)) {
    b.why = "integer/bool output: exact";
    return b;
  }
  const double u_acc = unit_roundoff(t == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32);
  double delta = u_acc * (8.0 * std::max(ops, 1) +
                          4.0 * std::sqrt(static_cast<double>(std::max<int64_t>(k, 1))));
  // Tensor-core GEMM accumulation drifts toward zero: a bias of about K * 2^-30 relative
  // (measured on an H100 through cuBLASLt, bf16 operands: -1.4e-6 at K = 1600, -3.9e-6 at 4096);
  // allowed at 4x, in the bias and in delta.
  const double tc_drift = static_cast<double>(std::max<int64_t>(tc_k, 0)) * std::ldexp(1.0, -28);
  delta += tc_drift;
  const double u = unit_roundoff(t);
  const double n = f8.noise;  // a float8 GEMM's absolute noise, a share of rms (header)
  b.max_bias = 16 * u_acc + tc_drift + f8.drift;
  if (u > delta) {
    b.max_rel_l2 = 2 * std::sqrt((delta + n) * u) + n;
    b.max_beyond_1ulp = std::min(1.0, 1e-4 + 0.1 * delta / u);
  } else {
    b.max_rel_l2 = 2 * delta + n;
    b.max_beyond_1ulp = 1;
  }
  b.max_row_rel_l2 = std::max({3 * u, 4 * delta, 4 * n});
  b.elem_floor = 4 * u + 8 * delta + f8.max_err;
  b.share_floor = 2 * n;
  const double s = inherited;
  if (s > 0) {  // one-ulp flips of a rounded intermediate upstream (see the header)
    b.elem_ulps = 4;
    if (summed) {
      b.max_rel_l2 += s;
      b.elem_floor += 6 * s;
      b.share_floor += 2 * s;
      b.max_row_rel_l2 = std::max(b.max_row_rel_l2, 4 * (s + n));
    }
  }
  std::string extra;
  if (n > 0)
    extra += ", float8 GEMM upstream: noise " + fmt_g(n) + " rms, drift " + fmt_g(f8.drift);
  if (s > 0)
    extra += ", flips of rounded intermediates upstream: " + fmt_g(s) +
             (summed ? " (summed since)" : "");
  std::snprintf(buf, sizeof buf,
                "default for %s after %d op(s), longest reduction %lld terms: delta = %.2g%s",
                std::string(dtype_name(t)).c_str(), ops, static_cast<long long>(k), delta,
                extra.c_str());
  b.why = buf;
  return b;
}

}  // namespace replay
