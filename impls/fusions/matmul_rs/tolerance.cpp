// matmul_rs numerics bounds of the reduce-scattered result: a sum over the n ranks of GEMM
// outputs rounded to the partials' dtype. Each partial may differ from the reference's rounding
// by one ulp where its exact value lies within the GEMM's error of a rounding boundary (float32
// accumulation in another order; a float8 GEMM's noise, float8_gemm_error), and the sum carries
// those flips however much the partials cancel. So the bounds are those of a summed value over
// the longest reduction, n K terms (K per rank, then the n partials), after 1 + n roundings, with
// the flips' rms as `inherited` (workloads/ir/tolerance.hpp), as the GPU pipeline tests bound it
// (tests/gpu_pipeline.cpp). A flip is one ulp of a partial, which is more than one ulp of the sum
// where the partials cancel; so the share of elements beyond one ulp may be up to the chance that
// any of the n partials flipped, n (delta + noise) / u of the partials' dtype (u: its unit
// roundoff). On an H200 (2026-11-26) a correct float8 rowwise reduce-scatter at n = 2, K = 128
// had 0.2-1.1 % of elements beyond one ulp: the summed bounds alone allowed 0.02 %, this 25 %
// (the noise bound is 3x the measured noise and more); rel_l2, the row and element bounds stay,
// and they catch a wrong or missing chunk.
#include <algorithm>
#include <cmath>

#include "impls/fusions/matmul_rs/params.hpp"
#include "workloads/ir/tolerance.hpp"

namespace replay::matmul_rs {

std::optional<NumericsBounds> tolerance(const Graph& g, const Region& r, int value) {
  const auto& p = std::any_cast<const Params&>(r.params);
  if (value != p.out) return std::nullopt;  // a returned alias of it: output_bounds asks for it
  const Node& mm = g.nodes[g.values[p.mm_out].producer];
  const Float8GemmError f8 = p.scaled ? float8_gemm_error(p.K, mm.flag) : Float8GemmError{};
  const double delta = std::ldexp(8 + 4 * std::sqrt(static_cast<double>(p.K)), -24) +
                       static_cast<double>(p.K) * std::ldexp(1, -28);
  const double inherited =
      1.5 * std::sqrt((delta + f8.noise) * unit_roundoff(g.meta(p.mm_out).dtype));
  const int n = static_cast<int>(p.world_size);
  NumericsBounds b = default_bounds(g.meta(p.out).dtype, 1 + n, n * p.K, f8, p.scaled ? 0 : p.K,
                                    inherited, true);
  const double flips = n * (delta + f8.noise) / unit_roundoff(g.meta(p.mm_out).dtype);
  b.max_beyond_1ulp = std::min(1.0, std::max(b.max_beyond_1ulp, 1e-4 + flips));
  b.why = "matmul_rs: a sum of " + std::to_string(n) + " GEMM outputs (K " + std::to_string(p.K) +
          (p.scaled ? ", float8" : "") + ") rounded to " +
          std::string(dtype_name(g.meta(p.mm_out).dtype)) +
          ", their one-ulp flips against the reference's roundings summed (beyond one ulp: up to " +
          std::to_string(b.max_beyond_1ulp) + " of the elements); " + b.why;
  return b;
}

}  // namespace replay::matmul_rs
