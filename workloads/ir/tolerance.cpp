#include "workloads/ir/tolerance.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace replay {

double unit_roundoff(DType t) {
  switch (t) {
    case DType::kBFloat16:
      return std::ldexp(1.0, -8);
    case DType::kFloat16:
      return std::ldexp(1.0, -11);
    case DType::kFloat32:
      return std::ldexp(1.0, -24);
    case DType::kFloat64:
      return std::ldexp(1.0, -53);
    case DType::kFloat8E4M3:
      return std::ldexp(1.0, -4);
    case DType::kFloat8E5M2:
      return std::ldexp(1.0, -3);
    default:
      return 0;
  }
}

double ulp_of(DType t, double v) {
  if (!is_floating(t)) return 1;
  int mant = 0, emin = 0;  // explicit mantissa bits, smallest normal exponent
  switch (t) {
    case DType::kBFloat16:
      mant = 7, emin = -126;
      break;
    case DType::kFloat16:
      mant = 10, emin = -14;
      break;
    case DType::kFloat32:
      mant = 23, emin = -126;
      break;
    case DType::kFloat64:
      mant = 52, emin = -1022;
      break;
    case DType::kFloat8E4M3:
      mant = 3, emin = -6;
      break;
    case DType::kFloat8E5M2:
      mant = 2, emin = -14;
      break;
    default:
      return 1;
  }
  const double a = std::fabs(v);
  const int e = (a > 0 && std::isfinite(a)) ? std::max(std::ilogb(a), emin) : emin;
  return std::ldexp(1.0, e - mant);
}

NumericsBounds default_bounds(DType t, int ops, int64_t k) {
  NumericsBounds b;
  char buf[256];
  if (!is_floating(t)) {
    b.why = "integer/bool output: exact";
    return b;
  }
  const double u_acc = t == DType::kFloat64 ? unit_roundoff(DType::kFloat64) : std::ldexp(1.0, -24);
  const double delta = u_acc * (8.0 * std::max(ops, 1) +
                                4.0 * std::sqrt(static_cast<double>(std::max<int64_t>(k, 1))));
  const double u = unit_roundoff(t);
  b.max_bias = 16 * u_acc;
  if (u > delta) {
    b.max_rel_l2 = 2 * std::sqrt(delta * u);
    b.max_beyond_1ulp = std::min(1.0, 1e-4 + 0.1 * delta / u);
  } else {
    b.max_rel_l2 = 2 * delta;
    b.max_beyond_1ulp = 1;
  }
  b.max_row_rel_l2 = std::max(3 * u, 8 * delta);
  b.elem_floor = 4 * u + 8 * delta;
  std::snprintf(buf, sizeof buf,
                "default for %s after %d op(s), longest reduction %lld terms: delta = %.2g",
                std::string(dtype_name(t)).c_str(), ops, static_cast<long long>(k), delta);
  b.why = buf;
  return b;
}

}  // namespace replay
