#include "harness/report/numerics.hpp"

#include <cmath>
#include <stdexcept>

namespace replay {

NumericsResult compare_tensors(const std::string& value, const HostTensor& got,
                               const HostTensor& ref, Tolerance tol) {
  if (got.meta.shape != ref.meta.shape)
    throw std::invalid_argument("compare " + value + ": shape " + got.meta.str() + " vs " +
                                ref.meta.str());
  NumericsResult r;
  r.value = value;
  r.tol = tol;
  r.numel = static_cast<int64_t>(got.data.size());
  double err2 = 0, ref2 = 0;
  for (int64_t i = 0; i < r.numel; ++i) {
    const double g = got.data[i], f = ref.data[i];
    const double diff = std::fabs(g - f);
    bool bad;
    if (std::isnan(g) || (std::isinf(g) && !std::isinf(f))) {
      ++r.nan_count;
      bad = true;
    } else if (std::isinf(f) || std::isnan(f)) {
      bad = !(g == f);  // an inf reference must be matched exactly; a NaN reference never is
    } else {
      bad = !(diff <= tol.atol + tol.rtol * std::fabs(f));
      r.max_abs_err = std::max(r.max_abs_err, diff);
      if (f != 0) r.max_rel_err = std::max(r.max_rel_err, diff / std::fabs(f));
      err2 += diff * diff;
      ref2 += f * f;
    }
    if (bad) {
      if (r.mismatches == 0) {
        r.first_got = g;
        r.first_ref = f;
        int64_t rem = i;
        r.first_mismatch.assign(got.meta.shape.size(), 0);
        for (size_t d = got.meta.shape.size(); d-- > 0;) {
          r.first_mismatch[d] = rem % got.meta.shape[d];
          rem /= got.meta.shape[d];
        }
      }
      ++r.mismatches;
    }
  }
  r.rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  if (r.nan_count > 0) r.rel_l2 = NAN;
  return r;
}

nlohmann::json to_json(const NumericsResult& r) {
  auto num = [](double v) {
    return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
  };
  nlohmann::json j = {{"value", r.value},
                      {"numel", r.numel},
                      {"mismatches", r.mismatches},
                      {"nan_count", r.nan_count},
                      {"max_abs_err", num(r.max_abs_err)},
                      {"max_rel_err", num(r.max_rel_err)},
                      {"rel_l2", num(r.rel_l2)},
                      {"atol", r.tol.atol},
                      {"rtol", r.tol.rtol},
                      {"pass", r.pass()}};
  if (!r.first_mismatch.empty())
    j["first_mismatch"] = {
        {"index", r.first_mismatch}, {"got", num(r.first_got)}, {"ref", num(r.first_ref)}};
  return j;
}

}  // namespace replay
