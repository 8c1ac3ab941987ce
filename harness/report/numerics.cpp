#include "harness/report/numerics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <stdexcept>

#include "impls/reference/reference.hpp"
#include "workloads/ir/strided_loop.hpp"
#include "workloads/ops/nn.hpp"
#include "workloads/ops/op.hpp"

namespace replay {

namespace {
// Elements per chunk of check_numerics' passes (rows of a second-pass chunk hold about as many).
constexpr int64_t kCheckChunk = int64_t{1} << 16;
}  // namespace

std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kPass:
      return "PASS";
    case Verdict::kFail:
      return "FAIL";
    case Verdict::kNotCompared:
      break;
  }
  return "not compared";
}

double allowed_beyond_1ulp(int64_t numel, double max_share) {
  const double expected = max_share * static_cast<double>(std::max<int64_t>(numel, 0));
  return expected + 3 * std::sqrt(expected);
}

Verdict combine(Verdict a, Verdict b) {
  if (a == Verdict::kFail || b == Verdict::kFail) return Verdict::kFail;
  if (a == Verdict::kPass || b == Verdict::kPass) return Verdict::kPass;
  return Verdict::kNotCompared;
}

std::string NumericsResult::failure() const {
  if (!not_checked.empty()) return "not checked: " + not_checked;
  char buf[200];
  if (nonfinite_mismatch > 0) {
    std::snprintf(buf, sizeof buf, "%lld NaN/Inf where the target differs",
                  static_cast<long long>(nonfinite_mismatch));
    return buf;
  }
  if (elem_excess > 0) {
    std::snprintf(
        buf, sizeof buf, "%lld element(s) beyond %g ulps + %.1e x rms(target) (max %.3g ulp)",
        static_cast<long long>(elem_excess), bounds.elem_ulps, bounds.elem_floor, max_ulp_err);
    return buf;
  }
  if (!(max_row_rel_l2 <= bounds.max_row_rel_l2)) {
    std::snprintf(buf, sizeof buf, "row %lld: rel_l2 %.2e > %.2e",
                  static_cast<long long>(worst_row), max_row_rel_l2, bounds.max_row_rel_l2);
    return buf;
  }
  if (!(rel_l2 <= bounds.max_rel_l2)) {
    std::snprintf(buf, sizeof buf, "rel_l2 %.2e > %.2e", rel_l2, bounds.max_rel_l2);
    return buf;
  }
  if (!(std::fabs(bias) <= bounds.max_bias + 6 * bias_se)) {
    std::snprintf(buf, sizeof buf, "systematic relative error %.2e > %.2e + 6 x %.1e (noise)", bias,
                  bounds.max_bias, bias_se);
    return buf;
  }
  if (!(static_cast<double>(beyond_1ulp) <= allowed_beyond_1ulp(numel, bounds.max_beyond_1ulp))) {
    std::snprintf(
        buf, sizeof buf, "%lld elements (%.3g%%) beyond 1 ulp > %.3g%% of %lld + 3 sigma = %.1f",
        static_cast<long long>(beyond_1ulp), 100 * beyond_1ulp_share, 100 * bounds.max_beyond_1ulp,
        static_cast<long long>(numel), allowed_beyond_1ulp(numel, bounds.max_beyond_1ulp));
    return buf;
  }
  return "";
}

NumericsResult check_numerics(const std::string& value, const HostTensor& got,
                              const HostTensor& reference, const NumericsBounds& bounds,
                              const HostTensor* magnitude) {
  if (got.meta.shape != reference.meta.shape)
    throw std::invalid_argument("check " + value + ": shape " + got.meta.str() + " vs " +
                                reference.meta.str());
  if (!bounds.addend_ulps) magnitude = nullptr;
  if (bounds.check_as != DType::kCount && is_floating(got.meta.dtype) &&
      got.meta.dtype != bounds.check_as) {
    const DType d = bounds.check_as;
    const bool exact = std::all_of(got.data.begin(), got.data.end(), [&](double x) {
      return !std::isfinite(x) || round_to(d, x) == x;
    });
    if (exact) {  // checked as d: got relabelled (its values are d values), the target rounded to d
      HostTensor got_d = got;
      got_d.meta.dtype = d;
      return check_numerics(value, got_d, reference, bounds, magnitude);
    }
  }
  if (magnitude && magnitude->data.size() != got.data.size())
    throw std::invalid_argument("check " + value + ": addend magnitudes " + magnitude->meta.str() +
                                " for " + got.meta.str());
  NumericsResult r;
  r.value = value;
  r.dtype = got.meta.dtype;
  r.bounds = bounds;
  r.numel = static_cast<int64_t>(got.data.size());
  const bool exact = !is_floating(r.dtype);
  const int64_t N = r.numel;
  // Every pass runs over fixed chunks of elements (rows in the second pass) on the host's
  // threads; each chunk keeps its own partial sums, counts and first index, combined afterwards
  // in chunk order, so the result does not depend on the thread count.
  const int64_t chunks = (N + kCheckChunk - 1) / kCheckChunk;
  std::vector<double> target(got.data.size());
  std::vector<double> chunk_scale(chunks, 0.0);
  parallel_for(
      chunks,
      [&](int64_t c) {
        double m = 0;
        for (int64_t i = c * kCheckChunk; i < std::min(N, (c + 1) * kCheckChunk); ++i) {
          target[i] = round_to(r.dtype, reference.data[i]);
          if (std::isfinite(target[i])) m = std::max(m, std::fabs(target[i]));
        }
        chunk_scale[c] = m;
      },
      kCheckChunk);
  // Largest finite |target|: sums are taken on values divided by it.
  double scale = 0;
  for (double m : chunk_scale) scale = std::max(scale, m);
  if (scale == 0) scale = 1;
  // One ulp at element i: of its target, or of the larger addend (NumericsBounds::addend_ulps).
  auto ulp_at = [&](int64_t i, double t) {
    return ulp_of(r.dtype, magnitude ? std::max(std::fabs(t), magnitude->data[i]) : t);
  };
  constexpr int64_t kNone = -1;
  struct Pass1 {
    int64_t nonfinite = 0, beyond = 0, finite = 0;
    int64_t first_nonfinite = kNone, first_beyond = kNone;
    double max_ulp = 0, max_abs = 0, max_rel = 0;
    double err2 = 0, tgt2 = 0, et = 0, e2t2 = 0;  // of scaled values
  };
  std::vector<Pass1> p1(chunks);
  parallel_for(
      chunks,
      [&](int64_t c) {
        Pass1 q;
        for (int64_t i = c * kCheckChunk; i < std::min(N, (c + 1) * kCheckChunk); ++i) {
          const double g = got.data[i], t = target[i];
          if (!std::isfinite(g) || !std::isfinite(t)) {
            if (!(g == t || (std::isnan(g) && std::isnan(t)))) {  // NaN/Inf must match
              if (q.nonfinite++ == 0) q.first_nonfinite = i;
            }
            continue;
          }
          ++q.finite;
          const double diff = std::fabs(g - t);
          const double ulps = diff / ulp_at(i, t);
          if (exact ? diff != 0 : ulps > 1) {
            if (q.beyond++ == 0) q.first_beyond = i;
          }
          q.max_ulp = std::max(q.max_ulp, ulps);
          q.max_abs = std::max(q.max_abs, diff);
          if (t != 0) q.max_rel = std::max(q.max_rel, diff / std::fabs(t));
          const double es = (g - t) / scale, ts = t / scale;
          q.err2 += es * es;
          q.tgt2 += ts * ts;
          q.et += es * ts;
          q.e2t2 += es * es * ts * ts;
        }
        p1[c] = q;
      },
      kCheckChunk);
  double err2 = 0, tgt2 = 0, et = 0, e2t2 = 0;
  int64_t finite = 0, first_nonfinite = kNone, first_beyond = kNone;
  for (const Pass1& q : p1) {
    if (first_nonfinite == kNone) first_nonfinite = q.first_nonfinite;
    if (first_beyond == kNone) first_beyond = q.first_beyond;
    r.nonfinite_mismatch += q.nonfinite;
    r.beyond_1ulp += q.beyond;
    finite += q.finite;
    r.max_ulp_err = std::max(r.max_ulp_err, q.max_ulp);
    r.max_abs_err = std::max(r.max_abs_err, q.max_abs);
    r.max_rel_err = std::max(r.max_rel_err, q.max_rel);
    err2 += q.err2;
    tgt2 += q.tgt2;
    et += q.et;
    e2t2 += q.e2t2;
  }
  r.beyond_1ulp_share =
      r.numel ? static_cast<double>(r.beyond_1ulp) / static_cast<double>(r.numel) : 0;
  r.rel_l2 = tgt2 > 0 ? std::sqrt(err2 / tgt2) : (err2 > 0 ? INFINITY : 0.0);
  if (tgt2 > 0) {
    r.bias = et / tgt2;
    r.bias_se = std::sqrt(e2t2) / tgt2;
  }
  // Elementwise and per-row bounds, against the scale of the whole tensor (rms of its targets).
  const double rms = finite ? std::sqrt(tgt2 / static_cast<double>(finite)) : 0;  // scaled
  const int64_t cols = got.meta.shape.empty() ? 1 : std::max<int64_t>(got.meta.shape.back(), 1);
  const double row_floor2 = static_cast<double>(cols) * rms * rms;
  // Criterion 5 past the inherited noise level (NumericsBounds::share_floor): recounted here,
  // where rms(target) is known.
  const bool recount = bounds.share_floor > 0 && !exact;
  const int64_t nrows = (N + cols - 1) / cols;
  const int64_t rows_per_chunk = std::max<int64_t>(1, kCheckChunk / cols);
  const int64_t row_chunks = (nrows + rows_per_chunk - 1) / rows_per_chunk;
  struct Pass2 {
    int64_t beyond = 0, excess = 0, first_excess = kNone, worst_row = kNone;
    double max_row_rel = 0;
  };
  std::vector<Pass2> p2(row_chunks);
  parallel_for(
      row_chunks,
      [&](int64_t c) {
        Pass2 q;
        for (int64_t row = c * rows_per_chunk; row < std::min(nrows, (c + 1) * rows_per_chunk);
             ++row) {
          double e2 = 0, t2 = 0;
          for (int64_t i = row * cols; i < std::min(N, (row + 1) * cols); ++i) {
            const double g = got.data[i], t = target[i];
            if (!std::isfinite(g) || !std::isfinite(t)) continue;
            const double diff = std::fabs(g - t);
            const double ulp = exact ? 0 : ulp_at(i, t);
            if (recount && diff > ulp + bounds.share_floor * rms * scale) ++q.beyond;
            if (!exact && diff > bounds.elem_ulps * ulp + bounds.elem_floor * rms * scale) {
              if (q.excess++ == 0) q.first_excess = i;
            }
            const double es = (g - t) / scale, ts = t / scale;
            e2 += es * es;
            t2 += ts * ts;
          }
          const double denom2 = std::max(t2, row_floor2);
          const double rel = denom2 > 0 ? std::sqrt(e2 / denom2) : (e2 > 0 ? INFINITY : 0.0);
          if (rel > q.max_row_rel || q.worst_row == kNone) {
            q.max_row_rel = rel;
            q.worst_row = row;
          }
        }
        p2[c] = q;
      },
      kCheckChunk);
  int64_t first_excess = kNone;
  if (recount) r.beyond_1ulp = 0;
  for (const Pass2& q : p2) {
    if (first_excess == kNone) first_excess = q.first_excess;
    r.beyond_1ulp += q.beyond;
    r.elem_excess += q.excess;
    if (q.worst_row != kNone && (q.max_row_rel > r.max_row_rel_l2 || r.worst_row < 0)) {
      r.max_row_rel_l2 = q.max_row_rel;
      r.worst_row = q.worst_row;
    }
  }
  if (recount)
    r.beyond_1ulp_share =
        r.numel ? static_cast<double>(r.beyond_1ulp) / static_cast<double>(r.numel) : 0;
  // The first element that breaks a bound: a NaN/Inf mismatch, else an elementwise excess, else
  // the first element more than one ulp off.
  const int64_t first = first_nonfinite != kNone ? first_nonfinite
                        : first_excess != kNone  ? first_excess
                                                 : first_beyond;
  if (first != kNone) {
    r.first_got = got.data[first];
    r.first_target = target[first];
    int64_t rem = first;
    r.first_bad.assign(got.meta.shape.size(), 0);
    for (size_t d = got.meta.shape.size(); d-- > 0;) {
      r.first_bad[d] = rem % got.meta.shape[d];
      rem /= got.meta.shape[d];
    }
  }
  return r;
}

std::optional<HostTensor> ties_as_target(const Graph& g, int v, const HostTensor& got,
                                         const HostTensor& target,
                                         const std::map<int, HostTensor>& ref) {
  const int p = g.values[v].producer;
  if (p < 0) return std::nullopt;
  const Node& n = g.nodes[p];
  if ((n.op != Op::kTopk && n.op != Op::kSort) || n.outputs.size() < 2 || n.outputs[1] != v)
    return std::nullopt;
  const auto x_it = ref.find(n.operands[0].value);
  if (x_it == ref.end() || got.data.size() != target.data.size()) return std::nullopt;
  const HostTensor& x = x_it->second;
  const Shape& xs = x.meta.shape;
  const Shape& os = got.meta.shape;
  int64_t outer = 1, len = 1, k = 1, inner = 1;
  if (!xs.empty()) {
    for (int64_t d = 0; d < n.dim; ++d) outer *= xs[d];
    len = xs[n.dim];
    k = os.at(n.dim);
    for (size_t d = n.dim + 1; d < xs.size(); ++d) inner *= xs[d];
  }
  HostTensor out = got;
  auto same = [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); };
  std::vector<char> used(static_cast<size_t>(len));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t q = 0; q < inner; ++q) {
      auto at = [&](int64_t j) { return (o * k + j) * inner + q; };
      auto value = [&](double idx) {
        return x.data[(o * len + static_cast<int64_t>(idx)) * inner + q];
      };
      std::fill(used.begin(), used.end(), 0);
      bool valid = true;  // got's indices of this row: in range and distinct
      for (int64_t j = 0; j < k && valid; ++j) {
        const double i = got.data[at(j)];
        valid = i >= 0 && i < len && i == std::floor(i) && !used[static_cast<size_t>(i)];
        if (valid) used[static_cast<size_t>(i)] = 1;
      }
      if (!valid) continue;
      for (int64_t j = 0; j < k; ++j) {
        const double t = target.data[at(j)];
        if (t >= 0 && t < len && same(value(got.data[at(j)]), value(t))) out.data[at(j)] = t;
      }
    }
  return out;
}

NumericsResult check_value(const Graph& g, int v, const HostTensor& got, const HostTensor& target,
                           const std::map<int, HostTensor>& ref, const NumericsBounds& bounds) {
  std::optional<HostTensor> m;
  if (bounds.addend_ulps) m = addend_magnitude(g, ref, v);
  if (auto tied = ties_as_target(g, v, got, target, ref))
    return check_numerics(g.values[v].name, *tied, target, bounds, m ? &*m : nullptr);
  return check_numerics(g.values[v].name, got, target, bounds, m ? &*m : nullptr);
}

namespace {
// Ops whose result is exactly what the reference gets when their operands are: they select,
// move, negate or take the magnitude of an operand, or round it once, as PyTorch does, to a
// dtype (casts; both sides round to nearest even from the same value). Their output is no new
// source of one-ulp flips (default_bounds, `inherited`): a bf16 `abs` of a graph input is the
// input's magnitude on both sides, as the float8 scales' amax chain showed bit-exact on the H100.
bool exact_op(Op op) {
  switch (op) {
    case Op::kAbs:
    case Op::kNeg:
    case Op::kAmax:
    case Op::kAmin:
    case Op::kMax:
    case Op::kMin:
    case Op::kMaxDim:
    case Op::kMaximum:
    case Op::kMinimum:
    case Op::kClamp:
    case Op::kClampMin:
    case Op::kClampMax:
    case Op::kWhere:
    case Op::kClone:
    case Op::kConvertElementType:
    case Op::kToCopy:
    case Op::kCat:
    case Op::kSliceScatter:
    case Op::kSelectScatter:
    case Op::kCopy:
    case Op::kIndex:  // indexing ops that move elements without arithmetic
    case Op::kGather:
    case Op::kScatterSrc:
    case Op::kScatterValue:
    case Op::kEmbedding:
    case Op::kConstantPadNd:
    case Op::kTopk:
    case Op::kSort:
    case Op::kSortStable:
      return true;
    default:
      return false;
  }
}

// The most terms an indexing op sums into one output element (0: it sums nothing): a cumsum's
// row, a scatter_add's self plus the index's length along dim, an accumulating index_put's self
// plus every value, an embedding backward's every index.
int64_t indexing_sum_terms(const Graph& g, const Node& n) {
  auto numel = [&](int operand) {
    int64_t k = 1;
    for (int64_t d : g.meta(n.operands.at(operand).value).shape) k *= d;
    return k;
  };
  switch (n.op) {
    case Op::kCumsum: {
      const auto& s = g.meta(n.operands[0].value).shape;
      return s.empty() ? 1 : s[n.dim];
    }
    case Op::kScatterAdd:
      return 1 + g.meta(n.operands[1].value).shape[n.dim];
    case Op::kIndexPut:
      return n.flag ? 1 + numel(1) : 0;
    case Op::kEmbeddingDenseBackward:
      return numel(1);
    default:
      return 0;
  }
}

// The larger of two float8 GEMM error models, term by term (a value downstream of several).
void widen(Float8GemmError& a, const Float8GemmError& b) {
  a.noise = std::max(a.noise, b.noise);
  a.drift = std::max(a.drift, b.drift);
  a.max_err = std::max(a.max_err, b.max_err);
}
}  // namespace

std::vector<NumericsBounds> default_value_bounds(const Graph& g) {
  struct Path {
    int ops = 0;
    int64_t k = 1;
    Float8GemmError f8;     // a float8 GEMM upstream (its largest noise and drift), else 0
    int64_t tc_k = 0;       // the longest K of a 16-bit tensor-core GEMM upstream
    bool computed = false;  // may differ from the reference's value: an inexact op upstream
    double inherited = 0;   // flips of rounded intermediates upstream (default_bounds)
    bool summed = false;    // ... and a sum (reduction, GEMM, add, sub) took them in since
    bool addend = false;    // an add / sub of such values made it (views and copies since)
  };
  std::vector<Path> path(g.values.size());
  std::vector<NumericsBounds> out(g.values.size());
  std::vector<bool> done(g.values.size(), false);
  auto bounds_of = [&](size_t v) -> const NumericsBounds& {
    if (!done[v]) {
      const Path& p = path[v];
      out[v] =
          default_bounds(g.values[v].meta.dtype, p.ops, p.k, p.f8, p.tc_k, p.inherited, p.summed);
      if (p.addend && is_floating(g.values[v].meta.dtype)) {
        out[v].addend_ulps = true;
        out[v].why += "; ulps of the larger addend of the add that made it";
      }
      done[v] = true;
    }
    return out[v];
  };
  for (const Node& n : g.nodes) {
    const OpDef& def = op_def(n.op);
    const bool is_view = def.kind == OpKind::kView;
    // amax / amin / max.dim select one of their inputs: no rounding error accumulates over their
    // terms (a tensorwise float8 scale's amax over 33M elements must not widen the bound of
    // everything downstream).
    const bool selects = n.op == Op::kAmax || n.op == Op::kAmin || n.op == Op::kMax ||
                         n.op == Op::kMin || n.op == Op::kMaxDim;
    const int64_t indexing_terms = indexing_sum_terms(g, n);
    // nn ops (softmax, nll_loss, norms) sum along rows; dropout's backward is elementwise.
    const bool nn_sums = def.kind == OpKind::kNn && nn_reduced_terms(g, n) > 1;
    const bool sums = (def.kind == OpKind::kReduction && !selects) || def.kind == OpKind::kMatmul ||
                      n.op == Op::kAdd || n.op == Op::kSub || indexing_terms > 0 || nn_sums;
    Path p;
    for (const auto& o : n.operands)
      if (o.is_tensor()) {
        const Path& in = path[o.value];
        p.ops = std::max(p.ops, in.ops);
        p.k = std::max(p.k, in.k);
        widen(p.f8, in.f8);
        p.tc_k = std::max(p.tc_k, in.tc_k);
        p.computed = p.computed || in.computed;
        p.inherited = std::max(p.inherited, in.inherited);
        p.summed = p.summed || in.summed;
        // A computed operand rounded to a narrow dtype flips by one ulp where its exact value is
        // near a rounding boundary (default_bounds, `inherited`); a view passes its flips on.
        const DType dt = g.values[o.value].meta.dtype;
        if (!is_view && in.computed && (dt == DType::kBFloat16 || dt == DType::kFloat16)) {
          const NumericsBounds& ob = bounds_of(o.value);
          // 2 sqrt(delta u) is the operand's own rel_l2 bound; its flips: 1.5 sqrt(delta u).
          // Its bound carries inherited flips only where a sum took them in (default_bounds).
          if (ob.max_beyond_1ulp < 1)
            p.inherited =
                std::max(p.inherited, 0.75 * (ob.max_rel_l2 - (in.summed ? in.inherited : 0.0)));
        }
        // A float8 operand flips only where what it was cast from differs from the reference's:
        // its own float32 chain (the scale, x * scale) rounds as the reference does (bit-exact
        // on the H100, 33M elements), so delta is no source there. Flips of bf16 intermediates
        // or a float8 GEMM's noise upstream (chained float8 linears: GEMM -> bf16 -> cast -> GEMM)
        // are: a relative perturbation eps moves a value across a float8 rounding boundary with
        // probability ~eps / u8, by one float8 ulp (u8 to 2 u8 relative): an rms of at most
        // 1.5 sqrt(eps u8), which the GEMM that reads it sums. The flips inherited through a bf16
        // GEMM output already count that GEMM's noise (its rel_l2 bound holds it), so the larger
        // of the two, not their sum.
        const double eps = std::max(in.inherited, in.f8.noise);
        if (!is_view && in.computed && is_floating(dt) && dtype_size(dt) == 1 && eps > 0)
          p.inherited = std::max(p.inherited, 1.5 * std::sqrt(eps * unit_roundoff(dt)));
      }
    if (!is_view) {
      ++p.ops;  // a view computes nothing
      if (!exact_op(n.op)) p.computed = true;
    }
    if (sums && p.inherited > 0) p.summed = true;
    if (def.kind == OpKind::kReduction && !selects) {
      const auto& shape = g.meta(n.operands[0].value).shape;
      int64_t terms = 1;
      for (int64_t d : n.dims) terms *= shape.empty() ? 1 : shape[d];
      p.k = std::max(p.k, terms);
    }
    p.k = std::max(p.k, indexing_terms);
    if (def.kind == OpKind::kNn) p.k = std::max(p.k, nn_reduced_terms(g, n));
    if (def.kind == OpKind::kMatmul) {  // a dot product of K terms per output element
      const bool with_bias = n.op == Op::kAddmm || n.op == Op::kBaddbmm;
      const auto& a = g.meta(n.operands.at(with_bias ? 1 : 0).value).shape;
      const int64_t K = a.empty() ? int64_t{1} : a.back();
      p.k = std::max(p.k, K);
      if (n.op == Op::kScaledMm) widen(p.f8, float8_gemm_error(K, n.flag));  // flag: fast accum
      const DType at = g.meta(n.operands.at(with_bias ? 1 : 0).value).dtype;
      if (at == DType::kBFloat16 || at == DType::kFloat16) p.tc_k = std::max(p.tc_k, K);
    }
    // Addend flips: one ulp of the addend, however much the sum cancels (default_bounds).
    const int carried = carried_value(n);
    p.addend = is_addition(n.op) ? p.inherited > 0 : carried >= 0 && path[carried].addend;
    for (int v : n.outputs) path[v] = p;
  }
  for (size_t v = 0; v < g.values.size(); ++v) bounds_of(v);
  // Exact widenings of a narrower float (and views of them) take the source's bounds, checked in
  // the source's dtype (NumericsBounds::check_as).
  for (const Node& n : g.nodes) {
    if (n.operands.empty() || !n.operands[0].is_tensor() || n.outputs.empty()) continue;
    const int src = n.operands[0].value, v = n.outputs[0];
    const DType sd = g.meta(src).dtype, vd = g.meta(v).dtype;
    const bool narrow_src = sd == DType::kBFloat16 || sd == DType::kFloat16;
    // Only a computed source (one that may differ from the reference by flips): the upcast of a
    // graph input is exact on both sides and keeps its tight float32 bounds.
    const bool widens = (n.op == Op::kConvertElementType || n.op == Op::kToCopy) && narrow_src &&
                        path[src].computed && (vd == DType::kFloat32 || vd == DType::kFloat64);
    const bool passes_on = (op_def(n.op).kind == OpKind::kView || n.op == Op::kClone) &&
                           out[src].check_as != DType::kCount && vd == sd;
    if (widens) {
      out[v] = out[src];
      out[v].check_as = sd;
      out[v].why += "; an exact widening of '" + g.values[src].name + "' (" +
                    std::string(dtype_name(sd)) + "): checked as " + std::string(dtype_name(sd));
    } else if (passes_on) {
      out[v] = out[src];
    }
  }
  return out;
}

NumericsBounds output_bounds(const Graph& g, const Plan& plan,
                             const std::vector<NumericsBounds>& defaults, int v) {
  const int prod = g.values[v].producer;
  const int r = prod >= 0 ? plan.node_region[prod] : -1;
  if (r >= 0) {
    const Region& reg = plan.regions[r];
    // An identity the region absorbed and the graph returns (Region::tail) holds the elements of
    // the region output it passes on: the fusion bounds that output.
    int asked = v;
    for (const TailAlias& t : reg.tail)
      if (g.nodes[t.node].outputs.at(0) == v) asked = t.source;
    if (reg.fusion->tolerance)
      if (auto b = reg.fusion->tolerance(g, reg, asked)) return *b;
  }
  return defaults[v];
}

nlohmann::json to_json(const NumericsBounds& b) {
  nlohmann::json j = {{"max_rel_l2", b.max_rel_l2},
                      {"max_beyond_1ulp", b.max_beyond_1ulp},
                      {"max_bias", b.max_bias},
                      {"max_row_rel_l2", b.max_row_rel_l2},
                      {"elem_floor", b.elem_floor},
                      {"elem_ulps", b.elem_ulps},
                      {"share_floor", b.share_floor},
                      {"addend_ulps", b.addend_ulps},
                      {"why", b.why}};
  if (b.check_as != DType::kCount) j["check_as"] = std::string(dtype_name(b.check_as));
  return j;
}

nlohmann::json to_json(const NumericsResult& r) {
  auto num = [](double v) {
    return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
  };
  nlohmann::json j = {{"value", r.value},
                      {"dtype", dtype_name(r.dtype)},
                      {"numel", r.numel},
                      {"nonfinite_mismatch", r.nonfinite_mismatch},
                      {"beyond_1ulp", r.beyond_1ulp},
                      {"beyond_1ulp_share", r.beyond_1ulp_share},
                      {"max_ulp_err", num(r.max_ulp_err)},
                      {"max_abs_err", num(r.max_abs_err)},
                      {"max_rel_err", num(r.max_rel_err)},
                      {"rel_l2", num(r.rel_l2)},
                      {"bias", num(r.bias)},
                      {"bias_se", num(r.bias_se)},
                      {"max_row_rel_l2", num(r.max_row_rel_l2)},
                      {"worst_row", r.worst_row},
                      {"elem_excess", r.elem_excess},
                      {"bounds", to_json(r.bounds)},
                      {"pass", r.pass()}};
  if (!r.not_checked.empty()) j["not_checked"] = r.not_checked;
  if (!r.pass()) j["failure"] = r.failure();
  if (!r.first_bad.empty())
    j["first_bad"] = {
        {"index", r.first_bad}, {"got", num(r.first_got)}, {"target", num(r.first_target)}};
  return j;
}

}  // namespace replay
