// How close a result must be to its target (the float64 reference rounded to the output dtype):
// the bounds of the numerics verdict (harness/report/numerics.hpp), derived from the output
// dtype's precision and the computation that produced the value. Fusions may declare their own
// (FusionSpec::tolerance), tighter or, with a reason, looser.
#pragma once

#include <cstdint>
#include <string>

#include "workloads/ir/dtype.hpp"

namespace replay {

/// Pass bounds of one output. Rows are the slices along the last dim. A result passes when:
///  1. it has no NaN/Inf where the target has none, and reproduces the target's NaN/Inf;
///  2. every element is within `elem_ulps` (2) ulps of its target plus a floor, |e| <= elem_ulps
///     ulp(t) + elem_floor * rms(target) (the floor covers targets near zero, whose ulp is tiny
///     after cancellation);
///  3. every row's rel_l2 = ||e_row|| / max(||t_row||, sqrt(cols) * rms(target)) is at most
///     `max_row_rel_l2` (an error confined to a row or two cannot hide in a large tensor);
///  4. the whole tensor's rel_l2 = ||e|| / ||t|| is at most `max_rel_l2`;
///  5. the count of elements more than one ulp (plus `share_floor` * rms(target)) off is at most
///     p N + 3 sqrt(p N), p = `max_beyond_1ulp`, N elements (a Poisson count's 3-sigma slack:
///     one flip in a [16, 176] output is no evidence; allowed_beyond_1ulp, numerics.hpp);
///  6. its systematic relative error is at most `max_bias` beyond noise: the least-squares scale
///     bias = sum(e t) / sum(t^2) must satisfy |bias| <= max_bias + 6 * its standard error
///     (sqrt(sum(e^2 t^2)) / sum(t^2)). A correct kernel's one-ulp differences have random sign
///     and average out; a systematic error far below one ulp (eps 1e-4 for 1e-6 in an RMSNorm:
///     5e-5 relative, 1/80 of a bf16 ulp) moves every affected element the same way.
/// Integer and bool outputs must match exactly (every bound 0).
struct NumericsBounds {
  double max_rel_l2 = 0;
  double max_beyond_1ulp = 0;  ///< a share in [0, 1]
  double max_bias = 0;         ///< relative scale bias allowed beyond noise
  double max_row_rel_l2 = 0;
  double elem_floor = 0;  ///< absolute slack of each element, in units of rms(target)
  double elem_ulps = 2;   ///< ulps of its target each element may be off, beyond the floor
  /// Criterion 5 counts an element as more than one ulp off only past ulp(t) + share_floor *
  /// rms(target): the noise level of flips inherited through a sum (0: none).
  double share_floor = 0;
  /// Criteria 2 and 5 take the ulp of max(|t|, m) in place of ulp(t), m = max(|a|, |alpha b|) of
  /// the add or sub that produced the value (through views and copies), per element from the
  /// reference (addend_magnitude, impls/reference/reference.hpp): an addend carrying flips of
  /// rounded intermediates is off by one ulp of the addend, which a cancelling sum does not
  /// shrink. Without the magnitudes the check uses ulp(t) (stricter).
  bool addend_ulps = false;
  std::string why;  ///< how the bounds were derived, for the results
  /// kCount: the value is checked in its own dtype. A narrower float dtype d: the value is an
  /// exact widening of a d value (a bfloat16 GEMM output upcast to float32 and returned, through
  /// views), whose one-ulp flips are 2^16 float32 ulps; when every element of the result is
  /// exactly representable in d, it is checked as d (the reference rounded to d) with these
  /// bounds, the source's; otherwise in its own dtype (a kernel that wrote other values fails).
  DType check_as = DType::kCount;
};

/// Unit roundoff of a dtype (half the spacing at 1.0): bfloat16 2^-8, float16 2^-11, float32
/// 2^-24, float64 2^-53, float8_e4m3fn 2^-4, float8_e5m2 2^-3; 0 for integers and bool.
double unit_roundoff(DType t);

/// Spacing of representable `t` values at magnitude |v| (one ulp), subnormals included; 1 for
/// integers and bool.
double ulp_of(DType t, double v);

/// The error of a float8 GEMM (aten._scaled_mm: float8 operands, products exact, scaled and
/// rounded to out_dtype) through cuBLASLt on Hopper tensor cores, before the output's rounding.
/// All three are shares of the output's rms: `noise` is the model's rms(y - y_exact) /
/// rms(y_exact) (an absolute error: elements near zero get the same), `drift` bounds the
/// systematic relative error sum(e y) / sum(y^2) (the tensor cores' adds truncate toward zero),
/// `max_err` one element's |e|. `noise` is a model parameter, 3.6x or more what was measured: a
/// correct output whose noise reached it would fail the share criterion (its floor, 2 noise, is
/// then 2 sigma).
///
/// Hopper's float8 MMA adds products with about 14 mantissa bits (DeepSeek-V3 technical report,
/// arXiv:2412.19437, section 3.3.2); cuBLASLt promotes the partial sums to float32 every few
/// k-blocks unless use_fast_accum, so the noise does not grow with K, and with fast accumulation
/// it does (like sqrt(K)). Fitted to what ScaledMmModel (tests/gpu/test_gemm.cpp) measured on an
/// H100 (2026-11-25, 256 x K x 256, float32 output, tensorwise and rowwise): without fast
/// accumulation noise 1.2e-4 at K = 256 to 16384 (3.5e-5 at K = 32), drift -3.9e-5 (-2.6e-5 at K =
/// 32), the worst element 1.9e-3 rms (K = 256); with it
/// noise 2.0e-4, 8.5e-4, 1.3-2.0e-3, 1.3-3.1e-3 at K = 256, 2048, 8192, 16384, drift down to
/// -5.6e-4, the worst element 0.047 rms (K = 16384). The float8 linears' eager outputs at K = 4096
/// and 8192: noise ~1.3e-4, drift -4.0e-5. Bounds:
///   noise = 2^-11 (4.9e-4),                drift = 2^-13 (1.2e-4)                (not fast);
///   noise = max(2^-11, 2^-13.5 sqrt(K)),   drift = 2^-13 max(1, sqrt(K / 128))   (fast);
///   max_err = 16 noise (one element's |e| / rms).
/// All zero where there is no float8 GEMM. Limits: measured with zero-mean operands (same-sign
/// data, whose truncation drift adds up coherently, is not); the noise stays a share of the rms
/// of each value downstream, which holds through views, scales and elementwise linear ops, not
/// through a cancelling add of two GEMM outputs or exp/softmax (a fusion may declare its own
/// tolerance there). With use_fast_accum the model's noise at K >= 2048 (3.9e-3 and up) is as
/// large as the smallest 0.4 % of a Gaussian output, so zeroing those is not caught.
struct Float8GemmError {
  double noise = 0;
  double drift = 0;
  double max_err = 0;  ///< bound on one element's |e| / rms(y_exact): 16 noise
};

/// The float8 GEMM error bounds for a K-term dot product (see Float8GemmError).
Float8GemmError float8_gemm_error(int64_t k, bool fast_accum);

/// Default bounds for an output of dtype `t` computed in float32 opmath along a chain of at most
/// `ops` ops whose longest reduction sums `k` terms (k = 1 without a reduction).
///
/// Model: a correct float32 implementation's value before the last rounding has relative error
///   delta = u32 * (8 * ops + 4 * sqrt(k)),   u32 = 2^-24
/// (a few roundings per op, transcendental functions included, and a k-term float32 reduction,
/// whose error grows like sqrt(k) for independent rounding errors, with a factor 4 for margin).
/// - Output narrower than float32 (u = unit_roundoff(t) > delta): an element differs from the
///   rounded target only when the computed value falls within delta of a rounding boundary, with
///   probability ~ delta / u, and then by one ulp (2u relative): rel_l2 ~ sqrt(delta / u) * 2u
///   = 2 sqrt(delta * u), the bound. Elements more than one ulp off come only from cancellation
///   (a target near 0) or, rarely, a second rounding of a narrow intermediate: at most
///   1e-4 + 0.1 delta / u (correct kernels measure ~1e-6).
/// - float32/float64 output: rel_l2 <= 2 delta (float64 opmath: u64 in place of u32 when
///   t is float64); one-ulp agreement is not expected, so the share bound is 1.
/// - Per row: max(3u, 4 delta) (a row of one-ulp flips stays under 2u; 4 delta is twice the
///   whole-tensor bound of a float32 output); elements: floor
///   4u + 8 delta times rms(target).
/// - Systematic bias: float32 opmath rounds to nearest (unbiased); its approximate functions
///   (rsqrtf, expf) err by at most 2 ulps, so max_bias = 16 u32 (9.5e-7; 16 u64 for float64).
/// Example: nanoGPT LayerNorm, bf16 out, 8 ops on the longest chain, k = 1600: delta = 1.3e-5,
/// rel_l2 <= 4.6e-4, beyond 1 ulp <= 0.044 %, rows <= 1.2e-2; a correct kernel measures ~2e-5 and
/// 0 %, while eps 1e-3 instead of 1e-5, biased variance or a 1.2 % scale measure 1.3e-3 and more.
/// `f8`: the error of a float8 GEMM (_scaled_mm) upstream (float8_gemm_error; zero if none). Its
/// noise n is absolute, a share of the GEMM output's rms, not relative to each element: the
/// unrounded value is off by N(0, (n' rms)^2), n' <= n. Rounded to a narrow output that is a
/// relative error of n' at rms magnitude and makes one-ulp flips of probability ~n / u, so
/// rel_l2 <= 2 sqrt((delta + n) u) + n; elements near zero are off by many ulps, so an element
/// counts as more than one ulp off only past ulp(t) + 2 n rms(target) (`share_floor`: 8 sigma or
/// more of the noise measured without fast accumulation at K >= 256, 7 or more with it), the floor
/// grows by f8.max_err and rows by 4 n; the bias by f8.drift. A float8 value cast from a perturbed
/// value (flips upstream, or a float8 GEMM's noise: chained float8 linears) flips by one float8 ulp
/// where the perturbation crosses a rounding boundary: default_value_bounds gives the GEMM reading
/// it `inherited` = 1.5 sqrt(eps u8), eps the perturbation's relative rms, u8 the float8 unit
/// roundoff.
/// `tc_k`: the longest K of a 16-bit (bf16/f16) tensor-core GEMM upstream, 0 if none: its float32
/// accumulation is not round-to-nearest and drifts toward zero by about K * 2^-30 relative
/// (H100, cuBLASLt); delta and max_bias grow by K * 2^-28.
/// `inherited`: the relative rms perturbation the value inherits from one-ulp flips of computed
/// intermediates rounded to a narrow dtype upstream (default_value_bounds: 1.5 sqrt(delta_i u_i)
/// for an intermediate of model error delta_i and unit roundoff u_i, the rms of flips of
/// probability delta_i / u_i and size one ulp, u_i to 2 u_i relative). Both the implementation and
/// the reference round the intermediate, but where its exact value falls within delta_i of a
/// rounding boundary they round to neighbours, and what follows carries the difference: an
/// elementwise op a few ulps, a long reduction (a GEMM over the intermediate) an error of relative
/// rms `inherited` of its output's rms, so elements near zero (cancellation) are off by many ulps.
/// With s = inherited > 0, each element may be 4 ulps off (plus the floor): two flipped operands
/// of an elementwise op and its own rounding (SiLU(a) x b of two GEMM outputs: 3 ulps measured).
/// The other bounds stay (their 0.1 delta / u already covers the flips' own share) unless a sum
/// took the flips in (`summed`: a reduction, GEMM, add or sub): its error is then absolute, about
/// N(0, (s rms)^2), and targets near zero are off by many ulps (1.8 % of a GEMM output beyond one
/// ulp: see below). So rel_l2 += s; floor += 6 s; row rel_l2 >= 4 s; and an element counts as more
/// than one ulp off only past ulp(t) + 2 s rms(target) (`share_floor`; s is a bound, >= 3x the
/// measured noise). A sum of two such values (add / sub) is off by one ulp of an addend where
/// that addend flipped, however much the addends cancel (dx = the sum of two GEMM outputs in
/// Llama SwiGLU MLP bwd, `add_3`): its ulps are the larger addend's (`addend_ulps`, set by
/// default_value_bounds; the harness supplies the magnitudes). Values made by exact ops (abs,
/// neg, selections, clamps, casts, copies) of unperturbed operands are no source; a float8 value
/// is one only where what it was cast from is perturbed (see `f8`). Measured on an H100 (eager,
/// Llama SwiGLU MLP fwd at [8192, 4096] x 14336, w2's output): 1.8 % beyond one ulp, rel_l2 9.0e-4,
/// i.e. an error of rms ~1.6e-4 of rms(target) against s = 5.5e-4; nanoGPT MLP fwd: 0.56 %, 5.0e-4,
/// rms ~5e-5 against s = 6.4e-4.
NumericsBounds default_bounds(DType t, int ops, int64_t k, Float8GemmError f8 = {},
                              int64_t tc_k = 0, double inherited = 0, bool summed = false);

}  // namespace replay
