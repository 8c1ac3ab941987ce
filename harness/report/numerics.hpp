// Numerics check: a GPU (or PyTorch golden) tensor against its target, the float64 reference
// rounded to the output dtype. Reports max error in ulps, the share of elements more than one ulp
// off, rel_l2; the verdict needs all of: no NaN/Inf where the target has none (and the target's
// NaN/Inf matched), rel_l2 within bound, share beyond one ulp within bound (NumericsBounds,
// workloads/ir/tolerance.hpp, gives the bounds and how they are derived).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "workloads/ir/graph.hpp"
#include "workloads/ir/host_tensor.hpp"
#include "workloads/ir/tolerance.hpp"
#include "workloads/plan/plan.hpp"

namespace replay {

/// Outcome of a check, or of a set of checks: a skipped comparison is "not compared", never PASS.
enum class Verdict : uint8_t { kNotCompared, kPass, kFail };
std::string_view verdict_name(Verdict v);  ///< "not compared", "PASS", "FAIL"
/// Two verdicts together: any FAIL fails; else any PASS passes; else not compared.
Verdict combine(Verdict a, Verdict b);

/// Criterion 5's allowance: how many of `numel` elements may be more than one ulp off at a share
/// bound `max_share`: p N + 3 sqrt(p N). Flips are rare independent events, so their count is
/// Poisson: at p N = 0.5 (a [16, 176] output, p = 1.7e-4) one flip is no evidence of a wrong
/// kernel, while on millions of elements the slack is a few percent of p N. 0 when p = 0.
double allowed_beyond_1ulp(int64_t numel, double max_share);

struct NumericsResult {
  std::string value;  ///< value (tensor) name checked
  DType dtype = DType::kFloat32;
  int64_t numel = 0;
  int64_t nonfinite_mismatch =
      0;  ///< NaN/Inf where the target is finite, or target NaN/Inf unmatched
  /// finite elements more than one ulp (of the target, or of the larger addend with
  /// bounds.addend_ulps) off; with bounds.share_floor > 0, more than one ulp plus that floor
  /// (criterion 5)
  int64_t beyond_1ulp = 0;
  double beyond_1ulp_share = 0;  ///< beyond_1ulp / numel
  double max_ulp_err = 0;        ///< max |got - target| / ulp(target) over finite elements
  double max_abs_err = 0;
  double max_rel_err = 0;     ///< max |got - target| / |target| over elements with target != 0
  double rel_l2 = 0;          ///< ||got - target|| / ||target|| over finite elements (0/0 = 0)
  double bias = 0;            ///< least-squares relative scale error sum(e t) / sum(t^2)
  double bias_se = 0;         ///< its standard error, sqrt(sum(e^2 t^2)) / sum(t^2)
  double max_row_rel_l2 = 0;  ///< the worst row's rel_l2 (rows: slices along the last dim)
  int64_t worst_row = -1;     ///< its index (rows in row-major order), -1 when no row
  int64_t elem_excess = 0;    ///< elements beyond 2 ulps + elem_floor * rms(target)
  NumericsBounds bounds;
  /// Multi-index of the first element that breaks a bound (non-finite mismatch, elementwise
  /// bound, or else more than one ulp off); empty if none.
  std::vector<int64_t> first_bad;
  double first_got = 0, first_target = 0;
  /// Set when this value was not checked where it had to be (a rank of a multi-process run that
  /// checked nothing while the others checked it): the result fails, saying why.
  std::string not_checked;

  bool pass() const { return failure().empty(); }
  /// Which criterion failed ("" when it passes), e.g. "rel_l2 1.3e-03 > 4.6e-04".
  std::string failure() const;
};

/// Check `got` against `reference` rounded to got's dtype, with `bounds` (criteria in
/// NumericsBounds). Sums are taken on values scaled by the largest |target|, so float64 results
/// cannot underflow them. `magnitude` (same shape, or null): the per-element addend magnitudes
/// that bounds.addend_ulps asks for (addend_magnitude); ulps are then those of max(|t|, m), in
/// the criteria and in max_ulp_err. With bounds.check_as a narrower float dtype d and every
/// element of `got` exactly representable in d, the check runs as d (got's values are d values,
/// the reference rounded to d). Throws std::invalid_argument on a shape mismatch.
NumericsResult check_numerics(const std::string& value, const HostTensor& got,
                              const HostTensor& reference, const NumericsBounds& bounds,
                              const HostTensor* magnitude = nullptr);

/// The indices output `v` of a topk or sort.default node, with every index of `got` that selects
/// a value equal to the one `target`'s index selects (in the node's input, from `ref`) replaced by
/// target's: PyTorch leaves the order of equal values unspecified for these ops (sort.stable's is
/// defined and compared as is), so only an index that picks a different value is a mismatch. A
/// row of `got` with an index out of range or repeated is left as is (and fails). std::nullopt
/// for any other value, or when `ref` lacks the node's input.
std::optional<HostTensor> ties_as_target(const Graph& g, int v, const HostTensor& got,
                                         const HostTensor& target,
                                         const std::map<int, HostTensor>& ref);

/// check_numerics of value `v` of `g`: `got` against `target`, with the addend magnitudes from
/// the reference values `ref` (addend_magnitude) where bounds.addend_ulps asks for them; the
/// indices of topk and sort.default compared up to the order of equal values (ties_as_target).
NumericsResult check_value(const Graph& g, int v, const HostTensor& got, const HostTensor& target,
                           const std::map<int, HostTensor>& ref, const NumericsBounds& bounds);

/// Default bounds of every value of `g` (indexed by value), from its dtype and the chain of ops
/// that produces it from the graph inputs: the number of ops on the longest chain and the longest
/// reduction on it (default_bounds).
std::vector<NumericsBounds> default_value_bounds(const Graph& g);

/// The bounds of value `v`: those its producing region's fusion declares (FusionSpec::tolerance;
/// for an identity the region absorbed, Region::tail, those of the output it passes on), else
/// `defaults[v]` (default_value_bounds).
NumericsBounds output_bounds(const Graph& g, const Plan& plan,
                             const std::vector<NumericsBounds>& defaults, int v);

/// The bounds as results.json and repro.json write them (every field of NumericsBounds).
nlohmann::json to_json(const NumericsBounds& b);
nlohmann::json to_json(const NumericsResult& r);

}  // namespace replay
