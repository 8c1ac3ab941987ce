// fp8_quantize matcher. A source tensor x is a value read by aten.abs (or by an amax whose result
// starts a scale chain). From x it collects, in one place:
//   magnitudes  |x| through abs and exact upcasts (the rowwise forms write abs -> float32 -> abs),
//               and x.float() (x itself when x is float32);
//   amaxes      aten.amax / aten.max.default of a magnitude: every dim (tensorwise), dim -1 with
//               keepdim (rowwise), dim 0 of a 2-D x (columnwise); or a given amax: a one-element
//               value the graph did not compute from x here (the tensorwise min-cut backward
//               requantizes the weight from the amax its forward saved), whose scale chain casts
//               x.float();
//   scales      amax -> float64 -> clamp_min(eps) -> reciprocal -> * M -> float32, each step read
//               only by the next; then, where the graph rounds the scale down to a power of two
//               (torchao's round_scales_to_power_of_2, on by default in its rowwise recipes),
//               log2 -> floor -> exp2 (or pow(2, .)) of the float32 scale, each read only by the
//               next, the rounded value the scale;
//   casts       x.float() * scale -> clamp(-M', M') (clamp_min/clamp_max, either order, or one
//               clamp) -> float8, M = M' = the float8 dtype's largest finite value; the float8
//               tensor's 2-D transposes (the column-major copy: permute -> clone -> permute, whose
//               clone the canonical form leaves as a tail); reciprocals of the scale, directly or
//               through a vector view (the rowwise weight scale's permute).
// Every quantization of x found goes into one region, whose fused step runs where x is ready
// (Region::anchor): the graph makes the column-major copies only after the GEMMs that read the
// first float8 tensor. The magnitudes and x.float() are claimed where nothing outside reads them
// (else they stay eager and the region reads them as inputs, unused: the kernels read x).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "impls/fusions/fp8_quantize/params.hpp"
#include "impls/fusions/fp8_quantize/quant_math.hpp"
#include "workloads/ops/op.hpp"
#include "workloads/plan/canonical.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::fp8_quantize {
namespace {

// The shortest decimal that reads back as v ("448", "1e-12", "57344").
std::string num(double v) {
  char c[32];
  if (std::nearbyint(v) == v && std::fabs(v) < 1e15) {
    std::snprintf(c, sizeof c, "%.0f", v);
    return c;
  }
  for (int p = 1; p < 17; ++p) {
    std::snprintf(c, sizeof c, "%.*g", p, v);
    if (std::strtod(c, nullptr) == v) return c;
  }
  std::snprintf(c, sizeof c, "%.17g", v);
  return c;
}

bool is_float8(DType t) {
  return t == DType::kFloat8E4M3 || t == DType::kFloat8E5M2;
}

bool exact_upcast(DType from, DType to) {
  return is_floating(from) && is_floating(to) && !is_float8(to) &&
         promote_types(from, to) == std::optional<DType>(to);
}

bool is_clamp(Op op) {
  return op == Op::kClamp || op == Op::kClampMin || op == Op::kClampMax;
}

bool is_vector_view(Op op) {
  return op == Op::kPermute || is_reshape_family(op);
}

// At most one dim larger than 1: every layout of it holds the elements in the same order.
bool vector_like(const std::vector<int64_t>& shape) {
  int big = 0;
  for (int64_t d : shape) big += d > 1;
  return big <= 1;
}

std::string node_str(const Graph& g, int n) {
  return "'" + g.nodes[n].id + "' (" + std::string(op_name(g.nodes[n].op)) + ")";
}

// One source tensor and everything the matcher found of its quantizations.
class SourceMatcher {
 public:
  SourceMatcher(const Graph& g, Matches& out, int x) : g_(g), out_(out), x_(x) {}

  void run();

 private:
  struct Found {
    Quantization q;
    std::vector<int> nodes;
    int start = -1;  ///< the amax node
  };

  const Node& node(int n) const { return g_.nodes[n]; }
  int out0(int n) const { return g_.nodes[n].outputs.at(0); }
  const TensorMeta& meta(int v) const { return g_.meta(v); }

  void collect_magnitudes();
  bool match_amax(int a, bool abs, Found& f);
  bool match_chain(int a, int f64, Found& f);
  bool match_pow2(int a, Found& f);
  bool match_given(int mul, int scale, Found& f);
  bool match_cast(int a, int mul, Found& f);

  const Graph& g_;
  Matches& out_;
  int x_;
  int64_t rows_ = 0, cols_ = 0;
  std::vector<std::pair<int, bool>> mags_;  ///< magnitude values and whether they are |x|
  std::vector<int> prefix_;                 ///< nodes producing them (abs, converts, x.float())
  /// x.float(): x itself when float32, and every convert of x to float32 (a default-partition
  /// backward recomputes it once per quantization)
  std::vector<int> x32s_;
  bool is_x32(int v) const { return std::find(x32s_.begin(), x32s_.end(), v) != x32s_.end(); }
  std::set<int> own_scales_;  ///< scales of x's amaxes, matched or declined
};

void SourceMatcher::collect_magnitudes() {
  mags_.push_back({x_, false});
  if (meta(x_).dtype == DType::kFloat32) x32s_.push_back(x_);
  for (size_t i = 0; i < mags_.size(); ++i) {
    const auto [v, abs] = mags_[i];
    for (int u : g_.values[v].users) {
      const Node& n = node(u);
      if (n.outputs.size() != 1 || sole_tensor(n) != v) continue;
      const int o = n.outputs[0];
      bool add = false, is_abs = abs;
      if (n.op == Op::kAbs) {
        add = true;
        is_abs = true;
      } else if ((n.op == Op::kConvertElementType || n.op == Op::kToCopy) &&
                 exact_upcast(meta(v).dtype, meta(o).dtype)) {
        if (v == x_ && meta(o).dtype == DType::kFloat32) {
          x32s_.push_back(o);
          add = true;
        } else {
          add = abs;
        }
      }
      if (!add || std::any_of(mags_.begin(), mags_.end(), [&](auto& m) { return m.first == o; }))
        continue;
      mags_.push_back({o, is_abs});
      prefix_.push_back(u);
    }
  }
}

bool SourceMatcher::match_amax(int a, bool abs, Found& f) {
  const Node& an = node(a);
  const auto& xs = meta(x_).shape;
  const int rank = static_cast<int>(xs.size());
  Quantization& q = f.q;
  q.abs = abs;
  q.amax = out0(a);
  f.start = a;
  f.nodes.push_back(a);
  // The float64 convert that starts the scale chain; other readers of the amax: it is exported.
  int f64 = -1;
  for (int u : g_.values[q.amax].users)
    if (node(u).op == Op::kConvertElementType && meta(out0(u)).dtype == DType::kFloat64)
      f64 = f64 < 0 ? u : f64;
  if (f64 < 0) {
    if (!abs) return false;  // an amax of x for something else (a softmax's max): no candidate
    return out_.decline(a, "the amax of |'" + g_.values[x_].name +
                               "'| is not converted to float64 for a scale (amax -> float64 -> "
                               "clamp_min -> reciprocal -> * float8 max -> float32)");
  }
  const bool every_dim = an.op == Op::kMax || static_cast<int>(an.dims.size()) == rank;
  if (every_dim) {
    q.granularity = Granularity::kTensorwise;
  } else if (rank >= 2 && an.dims == std::vector<int64_t>{rank - 1}) {
    if (!an.keepdim)
      return out_.decline(a,
                          "rowwise amax without keepdim: its [rows] scale would broadcast "
                          "along the columns");
    q.granularity = Granularity::kRowwise;
  } else if (rank == 2 && an.dims == std::vector<int64_t>{0}) {
    q.granularity = Granularity::kColumnwise;
  } else {
    return out_.decline(a, "amax over dims " + shape_str(an.dims) + " of " + shape_str(xs) +
                               ": neither tensorwise (every dim), rowwise (dim -1) nor columnwise "
                               "(dim 0 of a 2-D tensor)");
  }
  return match_chain(a, f64, f);
}

// The scale chain from the amax's float64 convert f64 on, and the cast it feeds; declines at `a`.
bool SourceMatcher::match_chain(int a, int f64, Found& f) {
  Quantization& q = f.q;
  const auto& xs = meta(x_).shape;
  // amax -> float64 -> clamp_min(eps) -> reciprocal -> * M -> float32.
  auto chain_fail = [&](int at, const std::string& want) {
    return out_.decline(a, "scale chain of amax '" + g_.values[q.amax].name + "': expected " +
                               want + " at " +
                               (at >= 0 ? node_str(g_, at) : std::string("(none)")));
  };
  f.nodes.push_back(f64);
  int c = single_user(g_, out0(f64));
  if (c < 0 || !is_clamp(node(c).op) || !node(c).operands[1].is_scalar() ||
      !node(c).operands[2].none)
    return chain_fail(c, "clamp_min(eps) of the float64 amax, its only reader");
  q.eps = node(c).operands[1].scalar;
  f.nodes.push_back(c);
  const int r = single_user(g_, out0(c));
  if (r < 0 || node(r).op != Op::kReciprocal) return chain_fail(r, "reciprocal, its only reader");
  f.nodes.push_back(r);
  const int m = single_user(g_, out0(r));
  const Node* mn = m >= 0 ? &node(m) : nullptr;
  if (!mn || mn->op != Op::kMul || mn->operands.size() != 2 ||
      !(mn->operands[0].is_scalar() || mn->operands[1].is_scalar()))
    return chain_fail(m, "a multiply by the float8 max (a Python scalar), its only reader");
  const double scale_mul =
      mn->operands[0].is_scalar() ? mn->operands[0].scalar : mn->operands[1].scalar;
  f.nodes.push_back(m);
  const int s32 = single_user(g_, out0(m));
  if (s32 < 0 || node(s32).op != Op::kConvertElementType ||
      meta(out0(s32)).dtype != DType::kFloat32)
    return chain_fail(s32, "a convert to float32 (the scale), its only reader");
  f.nodes.push_back(s32);
  q.scale = out0(s32);
  if (!match_pow2(a, f)) return false;
  own_scales_.insert(q.scale);
  // The scale broadcasts against x as its granularity says.
  const auto& ss = meta(q.scale).shape;
  bool shape_ok = false;
  if (q.granularity == Granularity::kTensorwise) {
    shape_ok = meta(q.scale).numel() == 1 && ss.size() <= xs.size();
  } else if (q.granularity == Granularity::kRowwise) {
    auto want = xs;
    want.back() = 1;
    shape_ok = ss == want;
  } else {
    shape_ok = ss == std::vector<int64_t>{1, cols_} || ss == std::vector<int64_t>{cols_};
  }
  if (!shape_ok)
    return out_.decline(a, "scale '" + g_.values[q.scale].name + "' of shape " + shape_str(ss) +
                               " does not broadcast as a " +
                               std::string(granularity_name(q.granularity)) + " scale of " +
                               shape_str(xs));
  // Readers of the scale: the cast (x.float() * scale), reciprocals (directly or through a
  // vector view read only by reciprocals); anything else reads the exported scale.
  int cast_mul = -1;
  for (int u : g_.values[q.scale].users) {
    const Node& un = node(u);
    if (un.op == Op::kMul && cast_mul < 0 && un.operands.size() == 2 &&
        un.operands[0].is_tensor() && un.operands[1].is_tensor() &&
        is_x32(other_tensor(un, q.scale))) {
      cast_mul = u;
      continue;
    }
    if (un.op == Op::kReciprocal && meta(out0(u)).dtype == DType::kFloat32) {
      f.nodes.push_back(u);
      q.recip_outs.push_back(out0(u));
      continue;
    }
    if (is_vector_view(un.op) && un.outputs.size() == 1 && vector_like(meta(out0(u)).shape) &&
        vector_like(ss) && !g_.values[out0(u)].graph_output && !g_.values[out0(u)].users.empty()) {
      const auto& vu = g_.values[out0(u)].users;
      if (std::all_of(vu.begin(), vu.end(), [&](int w) {
            return node(w).op == Op::kReciprocal && meta(out0(w)).dtype == DType::kFloat32;
          })) {
        f.nodes.push_back(u);
        for (int w : vu) {
          f.nodes.push_back(w);
          q.recip_outs.push_back(out0(w));
        }
        continue;
      }
    }
    // read outside: exported (the region's outputs say)
  }
  if (cast_mul < 0)
    return out_.decline(a, "scale '" + g_.values[q.scale].name + "' multiplies no x.float() of '" +
                               g_.values[x_].name + "': no float8 cast of this tensor");
  if (!match_cast(a, cast_mul, f)) return false;
  // The scale's multiplier and the cast's clamp bounds are the float8 dtype's max.
  const double fmax = float8_max(q.fp8 == DType::kFloat8E5M2);
  if (scale_mul != fmax)
    return out_.decline(a, "the scale multiplies by " + num(scale_mul) + ", not " +
                               std::string(dtype_name(q.fp8)) + "'s max " + num(fmax));
  q.fp8_max = fmax;
  return true;
}

// exp2 of a float32 value: aten.exp2, or aten.pow.Scalar with base 2 (`2 ** t`).
bool is_exp2(const Node& n) {
  return n.op == Op::kExp2 || (n.op == Op::kPowScalar && n.operands.size() == 2 &&
                               n.operands[0].is_scalar() && n.operands[0].scalar == 2.0);
}

// After the float32 scale q.scale: log2 -> floor -> exp2, the power-of-two rounding (torchao
// float8_utils._round_scale_down_to_power_of_2). Taken when the scale's only reader is a log2;
// then the scale is exp2's output. A log2 of the scale that does not go on to floor and exp2 of
// float32, each read only by the next, declines at `a`.
bool SourceMatcher::match_pow2(int a, Found& f) {
  Quantization& q = f.q;
  const auto& users = g_.values[q.scale].users;
  const bool to_log2 =
      std::any_of(users.begin(), users.end(), [&](int u) { return node(u).op == Op::kLog2; });
  if (!to_log2) return true;  // no rounding
  // The values of the rounding as far as it goes: this chain's, so that a cast reading one of
  // them is not taken for a cast by another tensor's scale (one decline, here).
  auto fail = [&](const std::vector<int>& walked, const std::string& why) {
    for (int n : walked)  // the step and the ones after it, up to the cast's multiply
      for (int v = out0(n), d = 0; v >= 0 && d < 8; ++d) {
        own_scales_.insert(v);
        const int u = single_user(g_, v);
        if (u < 0 || node(u).op == Op::kMul || node(u).outputs.size() != 1) break;
        v = out0(u);
      }
    return out_.decline(a, "the scale '" + g_.values[q.scale].name +
                               "' goes to log2 (a power-of-two rounding: log2 -> floor -> exp2 of "
                               "float32, each read only by the next) but " +
                               why);
  };
  const int l = single_user(g_, q.scale);
  if (l < 0) {
    std::vector<int> logs;
    for (int u : users)
      if (node(u).op == Op::kLog2) logs.push_back(u);
    return fail(logs, "is also read by " + readers_str(g_, q.scale));
  }
  auto next = [&](int n, bool ok, const std::string& want) -> std::string {
    if (ok) return "";
    const int v = out0(n);
    const int u = single_user(g_, v);
    return "the reader of " + node_str(g_, n) + " is " +
           (u >= 0 ? node_str(g_, u)
                   : (g_.values[v].users.empty() && !g_.values[v].graph_output
                          ? std::string("nothing")
                          : "not one node (" + readers_str(g_, v) + ")")) +
           ", not " + want;
  };
  const int fl = single_user(g_, out0(l));
  if (auto w = next(l, fl >= 0 && node(fl).op == Op::kFloor, "a floor"); !w.empty())
    return fail({l}, w);
  const int e = single_user(g_, out0(fl));
  if (auto w = next(fl, e >= 0 && is_exp2(node(e)), "an exp2 (or pow(2, .))"); !w.empty())
    return fail({l, fl}, w);
  for (int n : {l, fl, e})
    if (meta(out0(n)).dtype != DType::kFloat32)
      return fail({l, fl, e}, node_str(g_, n) + " is " +
                                  std::string(dtype_name(meta(out0(n)).dtype)) + ", not float32");
  f.nodes.insert(f.nodes.end(), {l, fl, e});
  q.pow2 = true;
  q.scale = out0(e);
  return true;
}

// x.float() * scale, where the scale's chain starts from an amax not computed from x here: the
// chain walked back from the scale (through a power-of-two rounding) to its float64 convert, then
// matched forward as any other.
bool SourceMatcher::match_given(int mul, int scale, Found& f) {
  auto back = [&](int v, Op op) {
    const int p = v >= 0 ? g_.values[v].producer : -1;
    return p >= 0 && node(p).op == op && node(p).outputs.size() == 1 ? p : -1;
  };
  // exp2 <- floor <- log2 of the float32 scale: the rounding match_pow2 takes forward.
  int s = scale;  // the float32 scale before any rounding
  if (const int e = scale >= 0 ? g_.values[scale].producer : -1; e >= 0 && is_exp2(node(e))) {
    const int fl = back(sole_tensor(node(e)), Op::kFloor);
    const int l = fl >= 0 ? back(sole_tensor(node(fl)), Op::kLog2) : -1;
    if (l < 0) return false;  // not a scale chain: the caller declines
    s = sole_tensor(node(l));
  }
  const int s32 = back(s, Op::kConvertElementType);
  const int m = s32 >= 0 ? back(sole_tensor(node(s32)), Op::kMul) : -1;
  int r = -1;
  if (m >= 0)
    for (const auto& o : node(m).operands)
      if (o.is_tensor()) r = back(o.value, Op::kReciprocal);
  const int c = r >= 0 ? g_.values[sole_tensor(node(r))].producer : -1;
  const int f64 = c >= 0 && is_clamp(node(c).op) && node(c).operands[0].is_tensor()
                      ? back(node(c).operands[0].value, Op::kConvertElementType)
                      : -1;
  if (f64 < 0 || meta(out0(f64)).dtype != DType::kFloat64)
    return false;  // not a scale chain at all: the caller declines
  // The scale casts another tensor too (its own source's region claims the chain): not given.
  for (int u : g_.values[scale].users)
    if (u != mul && node(u).op == Op::kMul) return false;
  Quantization& q = f.q;
  q.amax = sole_tensor(node(f64));
  q.given = true;
  q.abs = true;
  f.start = f64;
  if (meta(q.amax).numel() != 1)
    return out_.decline(mul, "the scale of x.float() of '" + g_.values[x_].name +
                                 "' comes from a given amax '" + g_.values[q.amax].name +
                                 "' of shape " + shape_str(meta(q.amax).shape) +
                                 " (not computed from this tensor): only a one-element "
                                 "(tensorwise) given amax is taken");
  const DType ad = meta(q.amax).dtype;
  if (ad != DType::kBFloat16 && ad != DType::kFloat16 && ad != DType::kFloat32)
    return out_.decline(mul, "the given amax '" + g_.values[q.amax].name + "' is " +
                                 std::string(dtype_name(ad)) +
                                 ": the kernels read a given amax as float32 (bfloat16, float16 "
                                 "or float32 only)");
  // x's own amax feeding a second scale chain: computed in this region, not given.
  const int pa = g_.values[q.amax].producer;
  if (pa >= 0 && (node(pa).op == Op::kAmax || node(pa).op == Op::kMax) &&
      std::any_of(mags_.begin(), mags_.end(),
                  [&](const auto& m) { return m.first == sole_tensor(node(pa)); }))
    return out_.decline(mul, "amax '" + g_.values[q.amax].name + "' of '" + g_.values[x_].name +
                                 "' feeds a second scale chain (its own quantization takes the "
                                 "first): one scale chain per amax");
  q.granularity = Granularity::kTensorwise;
  return match_chain(f64, f64, f);
}

bool SourceMatcher::match_cast(int a, int mul, Found& f) {
  Quantization& q = f.q;
  const auto& xs = meta(x_).shape;
  if (meta(out0(mul)).shape != xs || meta(out0(mul)).dtype != DType::kFloat32)
    return out_.decline(a, "the cast's multiply " + node_str(g_, mul) + " gives " +
                               meta(out0(mul)).str() + ", not float32 of x's shape");
  f.nodes.push_back(mul);
  std::optional<double> lo, hi;
  int cur = mul, next = single_user(g_, out0(mul));
  for (int k = 0; k < 2 && next >= 0 && is_clamp(node(next).op); ++k) {
    const Node& cn = node(next);
    for (int i : {1, 2}) {
      const Operand& o = cn.operands[i];
      if (o.none) continue;
      if (!o.is_scalar())
        return out_.decline(a, "clamp " + node_str(g_, next) + " has a tensor bound");
      auto& b = i == 1 ? lo : hi;
      if (b)
        return out_.decline(a, "two " + std::string(i == 1 ? "lower" : "upper") +
                                   " clamp bounds in the cast (" + node_str(g_, next) + ")");
      b = o.scalar;
    }
    f.nodes.push_back(next);
    cur = next;
    next = single_user(g_, out0(next));
  }
  if (!lo || !hi)
    return out_.decline(a, "the scaled x " + node_str(g_, cur) +
                               " is not clamped to [-max, max] (clamp_min and clamp_max, its "
                               "only readers) before the cast");
  if (next < 0 || node(next).op != Op::kConvertElementType)
    return out_.decline(a, "the clamped value " + node_str(g_, cur) +
                               " is not cast (its only reader: " +
                               (next >= 0 ? node_str(g_, next) : std::string("none")) + ")");
  const DType to = meta(out0(next)).dtype;
  if (!is_float8(to))
    return out_.decline(a, "the quantized value is cast to " + std::string(dtype_name(to)) +
                               " by " + node_str(g_, next) + ", not to a float8 dtype");
  q.fp8 = to;
  const double fmax = float8_max(to == DType::kFloat8E5M2);
  if (*lo != -fmax || *hi != fmax)
    return out_.decline(a, "clamp bounds [" + num(*lo) + ", " + num(*hi) + "] are not " +
                               std::string(dtype_name(to)) + "'s [-" + num(fmax) + ", " +
                               num(fmax) + "]");
  f.nodes.push_back(next);
  q.q = out0(next);
  // 2-D transposes of the float8 tensor: written by the region (the column-major copy), which
  // the program allocates in the layout of the copy's clone. Not a transpose a _scaled_mm reads
  // as its mat2: that one must stay the column-major view of the row-major tensor (cuBLASLt's
  // float8 kernels take only TN), and the clone beside it then runs as the copy it is.
  auto read_as_mat2 = [&](int v) {
    for (int r : g_.values[v].users)
      if (node(r).op == Op::kScaledMm && node(r).operands.size() > 1 &&
          node(r).operands[1].value == v)
        return true;
    return false;
  };
  for (int u : g_.values[q.q].users) {
    const Node& un = node(u);
    if (un.op == Op::kPermute && xs.size() == 2 && un.dims == std::vector<int64_t>{1, 0} &&
        !read_as_mat2(out0(u))) {
      f.nodes.push_back(u);
      q.q_outs.push_back(out0(u));
    }
  }
  return true;
}

void SourceMatcher::run() {
  const auto& xs = meta(x_).shape;
  const DType xd = meta(x_).dtype;
  if (xs.empty() || (xd != DType::kBFloat16 && xd != DType::kFloat16 && xd != DType::kFloat32))
    return;
  cols_ = xs.back();
  rows_ = cols_ > 0 ? meta(x_).numel() / cols_ : 0;
  collect_magnitudes();
  // Amaxes of the magnitudes, in graph order.
  std::vector<std::pair<int, bool>> amaxes;
  for (const auto& [v, abs] : mags_)
    for (int u : g_.values[v].users)
      if ((node(u).op == Op::kAmax || node(u).op == Op::kMax) && sole_tensor(node(u)) == v)
        amaxes.push_back({u, abs});
  std::sort(amaxes.begin(), amaxes.end());
  std::vector<Found> found;
  for (const auto& [a, abs] : amaxes) {
    Found f;
    if (!match_amax(a, abs, f)) continue;
    if (static_cast<int>(found.size()) == kMaxQuants) {
      out_.decline(a, "more than " + std::to_string(kMaxQuants) + " quantizations of '" +
                          g_.values[x_].name + "' (the kernels' limit)");
      continue;
    }
    found.push_back(std::move(f));
  }
  // A cast of x.float() by a scale that is not from x's amax: declined where it starts.
  for (int x32 : x32s_) {
    std::set<int> casts;
    for (const auto& f : found) casts.insert(f.nodes.begin(), f.nodes.end());
    for (int u : g_.values[x32].users) {
      const Node& un = node(u);
      if (un.op != Op::kMul || casts.count(u) || un.operands.size() != 2) continue;
      const int other = other_tensor(un, x32);
      if (other < 0 || is_x32(other) || own_scales_.count(other)) continue;
      // Only a multiply that goes on to a float8 cast is a quantization candidate.
      int w = single_user(g_, out0(u));
      while (w >= 0 && is_clamp(node(w).op)) w = single_user(g_, out0(w));
      if (w < 0 || node(w).op != Op::kConvertElementType || !is_float8(meta(out0(w)).dtype))
        continue;
      Found gf;
      if (match_given(u, other, gf)) {
        if (static_cast<int>(found.size()) == kMaxQuants) {
          out_.decline(u, "more than " + std::to_string(kMaxQuants) + " quantizations of '" +
                              g_.values[x_].name + "' (the kernels' limit)");
          continue;
        }
        found.push_back(std::move(gf));
        continue;
      }
      if (gf.q.given) continue;  // a given amax's chain that declined, with its reason
      const int sp = g_.values[other].producer;
      out_.decline(u, "the scale '" + g_.values[other].name + "' (" +
                          (sp >= 0 ? std::string(op_name(node(sp).op)) : std::string("an input")) +
                          ") multiplying x.float() of '" + g_.values[x_].name +
                          "' is not computed from this tensor's amax");
    }
  }
  if (found.empty()) return;
  int first = found.front().start;
  for (const auto& f : found) first = std::min(first, f.start);
  // The region: every quantization's nodes and the magnitude prefix nodes nothing outside reads.
  std::set<int> set;
  for (const auto& f : found) set.insert(f.nodes.begin(), f.nodes.end());
  std::set<int> prefix(prefix_.begin(), prefix_.end());
  for (int p : prefix) set.insert(p);
  for (bool changed = true; changed;) {
    changed = false;
    for (int p : prefix) {
      if (!set.count(p)) continue;
      const Value& v = g_.values[out0(p)];
      bool outside = v.graph_output;
      for (int u : v.users) outside |= !set.count(u);
      if (outside) {
        set.erase(p);
        changed = true;
      }
    }
  }
  Params params;
  params.x = x_;
  params.rows = rows_;
  params.cols = cols_;
  Region r = make_region(g_, std::vector<int>(set.begin(), set.end()), {});
  // The kernels read x itself, also where |x| and x.float() stay eager (something outside reads
  // them, e.g. a quantization that was declined): x is then an input though no claimed node reads
  // it.
  if (std::find(r.inputs.begin(), r.inputs.end(), x_) == r.inputs.end())
    r.inputs.insert(std::upper_bound(r.inputs.begin(), r.inputs.end(), x_), x_);
  // What the fused step writes: every region output must be one of these.
  std::map<int, std::pair<int, int>> writable;  // value -> (quantization, kind)
  enum { kQ, kScale, kRecip, kAmax };
  for (size_t i = 0; i < found.size(); ++i) {
    const Quantization& q = found[i].q;
    const int qi = static_cast<int>(i);
    writable[q.q] = {qi, kQ};
    for (int v : q.q_outs) writable[v] = {qi, kQ};
    writable[q.scale] = {qi, kScale};
    for (int v : q.recip_outs) writable[v] = {qi, kRecip};
    if (!q.given) writable[q.amax] = {qi, kAmax};
  }
  for (auto& f : found) {
    f.q.q_outs.clear();
    f.q.recip_outs.clear();
  }
  for (int o : r.outputs) {
    auto it = writable.find(o);
    if (it == writable.end()) {
      const int p = g_.values[o].producer;
      return (void)out_.decline(first, "'" + g_.values[o].name + "' (" +
                                           std::string(op_name(node(p).op)) +
                                           ") is read outside the region, and the fused step "
                                           "does not write it");
    }
    Quantization& q = found[it->second.first].q;
    switch (it->second.second) {
      case kQ:
        q.q_outs.push_back(o);
        break;
      case kScale:
        q.scale_outs.push_back(o);
        break;
      case kRecip:
        q.recip_outs.push_back(o);
        break;
      default:
        q.amax_outs.push_back(o);
    }
  }
  // The fused step runs at the first claimed node after everything the region reads is ready;
  // every reader outside must come after it.
  int ready = -1;
  for (int v : r.inputs) ready = std::max(ready, g_.values[v].producer);
  int anchor = -1;
  for (int n : r.nodes)
    if (n > ready) {
      anchor = n;
      break;
    }
  if (anchor < 0) return (void)out_.decline(first, "no claimed node after the region's inputs");
  for (int o : r.outputs)
    for (int u : g_.values[o].users)
      if (!set.count(u) && u < anchor)
        return (void)out_.decline(first, "'" + g_.values[o].name + "' is read by " +
                                             node_str(g_, u) + " before the fused step can run (" +
                                             node_str(g_, anchor) + ")");
  for (auto& f : found) params.quants.push_back(std::move(f.q));
  r.params = std::move(params);
  r.anchor = anchor;
  out_.regions.push_back(std::move(r));
}

}  // namespace

std::string_view granularity_name(Granularity g) {
  switch (g) {
    case Granularity::kTensorwise:
      return "tensorwise";
    case Granularity::kRowwise:
      return "rowwise";
    default:
      return "columnwise";
  }
}

void match(const Graph& g, Matches& out) {
  // Sources: values read by abs, or by an amax feeding a float64 convert; each once, in graph
  // order of their first such reader. A magnitude of another source is not a source itself.
  std::vector<int> sources;
  std::set<int> seen;
  for (const Node& n : g.nodes) {
    int x = -1;
    if (n.op == Op::kAbs) {
      x = sole_tensor(n);
      const int p = x >= 0 ? g.values[x].producer : -1;
      // |x| converted (abs -> float32 -> abs) is a magnitude of the same source.
      if (p >= 0 &&
          (g.nodes[p].op == Op::kAbs ||
           ((g.nodes[p].op == Op::kConvertElementType || g.nodes[p].op == Op::kToCopy) &&
            sole_tensor(g.nodes[p]) >= 0 && g.values[sole_tensor(g.nodes[p])].producer >= 0 &&
            g.nodes[g.values[sole_tensor(g.nodes[p])].producer].op == Op::kAbs)))
        continue;
    } else if (n.op == Op::kAmax || n.op == Op::kMax) {
      bool to_f64 = false;
      for (int u : g.values[n.outputs[0]].users)
        to_f64 |= g.nodes[u].op == Op::kConvertElementType &&
                  g.meta(g.nodes[u].outputs[0]).dtype == DType::kFloat64;
      if (!to_f64) continue;
      x = sole_tensor(n);
      const int p = x >= 0 ? g.values[x].producer : -1;
      if (p >= 0 && g.nodes[p].op == Op::kAbs) continue;  // the abs names the source
      // amax(x.float()): the source is x.
      if (p >= 0 && g.nodes[p].op == Op::kConvertElementType && sole_tensor(g.nodes[p]) >= 0 &&
          exact_upcast(g.meta(sole_tensor(g.nodes[p])).dtype, g.meta(x).dtype))
        x = sole_tensor(g.nodes[p]);
    } else if (n.op == Op::kMul && n.outputs.size() == 1 &&
               g.meta(n.outputs[0]).dtype == DType::kFloat32) {
      // x.float() * s -> clamps -> float8 with no amax of x in sight (a given amax): x is the
      // operand that is x.float() (a float32 upcast of x, or x itself in float32) of x's shape.
      int w = single_user(g, n.outputs[0]);
      while (w >= 0 && is_clamp(g.nodes[w].op)) w = single_user(g, g.nodes[w].outputs[0]);
      if (w < 0 || g.nodes[w].op != Op::kConvertElementType ||
          !is_float8(g.meta(g.nodes[w].outputs[0]).dtype))
        continue;
      for (const auto& o : n.operands) {
        if (!o.is_tensor() || g.meta(o.value).shape != g.meta(n.outputs[0]).shape) continue;
        const int p = g.values[o.value].producer;
        if (p >= 0 && (g.nodes[p].op == Op::kConvertElementType || g.nodes[p].op == Op::kToCopy) &&
            sole_tensor(g.nodes[p]) >= 0 &&
            exact_upcast(g.meta(sole_tensor(g.nodes[p])).dtype, DType::kFloat32))
          x = sole_tensor(g.nodes[p]);
        else if (g.meta(o.value).dtype == DType::kFloat32)
          x = o.value;
        if (x >= 0) break;
      }
    }
    if (x < 0 || seen.count(x)) continue;
    seen.insert(x);
    sources.push_back(x);
  }
  for (int x : sources) SourceMatcher(g, out, x).run();
}

}  // namespace replay::fp8_quantize
