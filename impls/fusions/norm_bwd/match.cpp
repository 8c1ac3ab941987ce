// norm_bwd matcher: finds, structurally, a LayerNorm or RMSNorm backward — a row reduction that
// produces dx and column reductions that produce dw (and db) over the same x and dy — in any of
// the ways model code and decompositions write it (algebra.hpp gives the normal form).
//
// 1. Anchors: sum.dim_IntList over every dim but the last of an [.., C] tensor. Each fixes the
//    row shape [R, C]; the graph is evaluated once per row shape (Algebra).
// 2. dw: an anchor whose summand is dy * xhat, with
//      xhat = (x - mean) * rstd  (saved mean: LayerNorm; no mean: RMSNorm),
//      xhat = (x - sum(x)/C) * rsqrt(var(x) + eps) or x * rsqrt(mean(x^2) + eps)  (recomputed; eps
//             a number or a 0-dim tensor),
//      xhat = a saved normalized x,
//    optionally rounded where the graph rounds (xhat, then dy * xhat, to bf16/fp16): the roles
//    x, dy, mean, rstd are tried over the leaves the summand mentions. A saved normalized value
//    S (a graph input with role "saved": aot_autograd's default partitioner saves x * rstd beside
//    the fp32 x) may feed dw alone: dx is then sought in terms of the xhat of another leaf x read
//    with dy in a row sum (step 4), and the kernels read S for the dw term (Params::xs).
// 3. db (optional): another anchor whose summand is dy itself.
// 4. dx: the first value equal to
//      rstd * g - rstd/C * sum(g) [LayerNorm only] - rstd/C * xhat * sum(g * xhat),
//      g = dy * w_eff (optionally rounded), w_eff = w + offset (optionally rounded)
//    for a [C] leaf w and offset 0 or any constant the graph adds to w (x * (1 + w)); or that
//    value with xhat recentered (LayerNorm: xhat - sum(xhat)/C, a two-pass LayerNorm's
//    backward written term by term: Cohere), or its two terms rstd * g and the rest each rounded
//    before their sum (T5LayerNorm).
// 5. Each output extends through single-use converts, views, clones (the down-casts of dx, dw,
//    db); the rounding it ends in is recorded. The region is every node between the leaves and
//    the outputs; every intermediate must stay private, and no node outside may read an output
//    before the region's last node (the fused step runs there).
// 6. dx only (a norm without affine parameters: OLMo's F.layer_norm(x, shape, None, None, eps),
//    an RMSNorm without weight): after every dw anchor has been tried, the row reductions
//    (sum or mean over the last dim) of [.., C] tensors that no region claims anchor a second
//    pass. The anchor's summand must be dy * xhat for one of the statistics of step 2 (the
//    candidates for rstd and mean also come from the values that read the anchor, since the
//    RMSNorm decomposition sums g * x and multiplies by rstd^3 afterwards), and some value must
//    equal step 4's dx with w = 1 (g = dy). Outputs: dx alone (Params::w, dw, db are -1).
//    Declines: only for row sums that look like a norm backward's sum(g * xhat): the summand
//    mentions exactly two [rows, cols] leaves and the anchor's readers mention a row statistic
//    ([rows, 1] leaf or a recomputed rsqrt), and it is not a weighted norm's whose dw column sum
//    step 2 already declined (that reason explains it). Every other row sum (softmax backward's
//    sum(dy * y), a loss's row sums, the S1 = sum(g) half of a norm backward) is not reported.
// 7. dx epilogue add (issue 24, the backward of a fused add-norm): when the only reader of dx is
//    an aten.add.Tensor (alpha 1) with another [.., C] operand of dx's shape and dtype computed
//    outside the region (the residual stream's gradient from its other readers), the add joins
//    the region and its sum is exported as dx; an add that cannot be fused is declined with why.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "impls/fusions/norm_bwd/algebra.hpp"
#include "impls/fusions/norm_bwd/params.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::norm_bwd {
namespace {

// One choice of an optionally rounded quantity: its polynomial and the rounding (kFloat32: none).
struct Choice {
  Poly p;
  DType round = DType::kFloat32;
};

// `p` itself and every rounding of it the graph materializes.
std::vector<Choice> choices(const Algebra& A, const Poly& p) {
  std::vector<Choice> r = {{p, DType::kFloat32}};
  for (auto [t, atom] : A.rounds_of(p)) r.push_back({Poly::atom(atom), t});
  return r;
}

struct Stats {
  NormBwdStats mode = NormBwdStats::kSaved;
  int x = -1;  // atom
  bool layernorm = false, ln_known = true;
  Poly xhat, rstd;  // rstd: empty for kNormalized until the dx search picks one
  int mean_atom = -1, rstd_atom = -1;
  double eps = 0, correction = 0;
  int eps_atom = -1;
};

// rstd recomputed as rsqrt(inner): inner = sum(x^2)/C + eps (RMSNorm) or
// (sum(x^2) - sum(x)^2/C)/(C - correction) + eps (LayerNorm), eps a number and/or a 0-dim leaf.
bool recomputed(Algebra& A, const Poly& inner, int x, Stats& s) {
  const double C = static_cast<double>(A.cols());
  auto xx = A.mul(Poly::atom(x), Poly::atom(x));
  if (!xx) return false;
  auto s2 = A.rowsum(*xx);
  auto s1 = A.rowsum(Poly::atom(x));
  if (!s2 || !s1 || s2->t.size() != 1) return false;
  auto it = inner.t.find(s2->t.begin()->first);
  if (it == inner.t.end()) return false;
  const double a = it->second;  // 1 / (C - correction)
  Poly eps;
  for (const auto& [m, c] : inner.t) {
    if (m.empty()) s.eps = c;
    if (m.size() == 1 && m[0].second == 1 && A.atom(m[0].first).kind == Atom::kLeaf &&
        A.atom(m[0].first).cls == Cls::kScalar && c == 1)
      s.eps_atom = m[0].first;
  }
  eps = Poly::constant(s.eps);
  if (s.eps_atom >= 0) eps = Algebra::add(eps, Poly::atom(s.eps_atom));
  // RMSNorm
  if (same(inner, Algebra::add(Algebra::scale(*s2, 1 / C), eps))) {
    s.layernorm = false;
    s.correction = 0;
    return true;
  }
  auto s1s1 = A.mul(*s1, *s1);
  if (!s1s1 || !(a > 0)) return false;
  const double corr = C - 1 / a;
  Poly ln = Algebra::add(Algebra::scale(Algebra::add(*s2, *s1s1, -1 / C), a), eps);
  if (!same(inner, ln) || std::fabs(corr - std::round(corr)) > 1e-6) return false;
  s.layernorm = true;
  s.correction = std::round(corr);
  return true;
}

// Every way of reading the leaves of the dw summand as (x, mean, rstd).
std::vector<Stats> stats_candidates(Algebra& A, const std::vector<int>& atoms) {
  std::vector<int> elem, row, rsq;
  for (int a : atoms) {
    const Atom& at = A.atom(a);
    if (at.kind == Atom::kLeaf && at.cls == Cls::kElem) elem.push_back(a);
    if (at.kind == Atom::kLeaf && at.cls == Cls::kRow) row.push_back(a);
    if (at.kind == Atom::kRsqrt) rsq.push_back(a);
  }
  std::vector<Stats> out;
  for (int x : elem) {
    for (int r : row) {
      std::vector<int> means = {-1};
      for (int m : row)
        if (m != r) means.push_back(m);
      for (int m : means) {
        Stats s;
        s.mode = NormBwdStats::kSaved;
        s.x = x;
        s.rstd_atom = r;
        s.mean_atom = m;
        s.layernorm = m >= 0;
        // No saved mean: RMSNorm's x, or LayerNorm's x saved already centred (Cohere's default
        // partition saves x - mean); the dx search tries both.
        s.ln_known = m >= 0;
        s.rstd = Poly::atom(r);
        Poly centered = Poly::atom(x);
        if (m >= 0) centered = Algebra::add(centered, Poly::atom(m), -1);
        auto xh = A.mul(centered, s.rstd);
        if (!xh) continue;
        s.xhat = *xh;
        out.push_back(s);
      }
    }
    for (int r : rsq) {
      Stats s;
      s.mode = NormBwdStats::kRecompute;
      s.x = x;
      if (!recomputed(A, A.atom(r).inner, x, s)) continue;
      s.rstd = Poly::atom(r);
      Poly centered = Poly::atom(x);
      if (s.layernorm) {
        auto s1 = A.rowsum(Poly::atom(x));
        if (!s1) continue;
        centered = Algebra::add(centered, Algebra::scale(*s1, 1.0 / A.cols()), -1);
      }
      auto xh = A.mul(centered, s.rstd);
      if (!xh) continue;
      s.xhat = *xh;
      out.push_back(s);
    }
    Stats s;
    s.mode = NormBwdStats::kNormalized;
    s.x = x;
    s.ln_known = false;
    s.xhat = Poly::atom(x);
    out.push_back(s);
  }
  return out;
}

// The atoms dx's statistics may come from when dw reads a saved normalized value: the atoms of
// every row sum that mentions dy (S2 = sum(g * x) names x), every row leaf (a saved rstd or mean
// may be applied outside the row sums) and every recomputed rsqrt.
std::vector<int> dx_atoms(const Algebra& A, int dy) {
  std::set<int> out;
  for (int a = 0; a < A.num_atoms(); ++a) {
    const Atom& at = A.atom(a);
    if ((at.kind == Atom::kLeaf && at.cls == Cls::kRow) || at.kind == Atom::kRsqrt) out.insert(a);
    if (at.kind != Atom::kRowSum) continue;
    const auto in = A.closure(at.inner);
    if (std::find(in.begin(), in.end(), dy) != in.end()) out.insert(in.begin(), in.end());
  }
  return {out.begin(), out.end()};
}

// A graph input the forward saved (role "saved"): only such a value is taken as the normalized
// value of the dw term beside another x for dx (the default partitioner's form); a column sum of
// dy times any other tensor is not claimed as a norm's dw.
bool saved_by_forward(const Graph& g, int v) {
  return v >= 0 && g.values[v].producer < 0 && g.values[v].role == "saved";
}

// rstd * g - [LayerNorm] rstd/C * sum(g) - rstd/C * sum(g * xhat) * (xhat [- sum(xhat)/C when
// recentered]). Recentered: a two-pass LayerNorm's backward written term by term (Cohere) takes the
// mean of the xhat term too, which the saved mean makes no exact zero: the graph's value is kept.
std::optional<Poly> expected_dx(Algebra& A, const Poly& rstd, const Poly& g, const Poly& xhat,
                                bool layernorm, bool recenter = false) {
  const double inv_c = 1.0 / static_cast<double>(A.cols());
  auto rg = A.mul(rstd, g);
  auto gx = A.mul(g, xhat);
  auto s2 = gx ? A.rowsum(*gx) : std::nullopt;
  auto t2 = s2 ? A.mul(rstd, xhat) : std::nullopt;
  if (t2) t2 = A.mul(*t2, *s2);
  if (!rg || !t2) return std::nullopt;
  Poly dx = Algebra::add(*rg, *t2, -inv_c);
  if (layernorm) {
    auto s1 = A.rowsum(g);
    auto t1 = s1 ? A.mul(rstd, *s1) : std::nullopt;
    if (!t1) return std::nullopt;
    dx = Algebra::add(dx, *t1, -inv_c);
  }
  if (recenter) {
    auto s3 = A.rowsum(xhat);
    auto t3 = s3 ? A.mul(rstd, *s2) : std::nullopt;
    if (t3) t3 = A.mul(*t3, *s3);
    if (!t3) return std::nullopt;
    dx = Algebra::add(dx, *t3, inv_c * inv_c);
  }
  return dx;
}

// The forms dx may take in the graph: exact (or rounded once, extend()), recentered (LayerNorm),
// and with its two terms rstd * g and the rest each rounded to t before their sum (T5LayerNorm
// casts to the weight's dtype before the weight: dx = rnd(rnd_t(rstd * g) + rnd_t(rest))).
struct DxForm {
  Poly exact;
  bool recenter = false;
  DType part_round = DType::kFloat32;
};

std::vector<DxForm> dx_forms(Algebra& A, const Poly& rstd, const Poly& g, const Poly& xhat,
                             bool layernorm) {
  std::vector<DxForm> out;
  for (bool rc : {false, true}) {
    if (rc && !layernorm) continue;
    auto E = expected_dx(A, rstd, g, xhat, layernorm, rc);
    if (!E) continue;
    out.push_back({*E, rc, DType::kFloat32});
    auto rg = A.mul(rstd, g);
    if (!rg) continue;
    const Poly rest = Algebra::add(*E, *rg, -1);
    for (auto [t, ra] : A.rounds_of(*rg)) {
      const int rb = A.find_round(rest, t);
      if (rb >= 0) out.push_back({Algebra::add(Poly::atom(ra), Poly::atom(rb)), rc, t});
    }
  }
  return out;
}

// Follows single users through casts, clones and views that keep the class; returns the last
// value and the rounding its polynomial ends in relative to `exact` (kFloat32: none), or -1 when
// the chain double-rounds.
std::pair<int, DType> extend(const Graph& g, const Algebra& A, int v, const Poly& exact,
                             DType first_round) {
  int cur = v;
  for (;;) {
    const int u = single_user(g, cur);
    if (u < 0) break;
    const Node& n = g.nodes[u];
    const Op op = n.op;
    const bool ok = op == Op::kConvertElementType || op == Op::kToCopy || op == Op::kClone ||
                    op == Op::kAlias || op == Op::kView || op == Op::kUnsafeView ||
                    op == Op::kReshape || op == Op::kSqueeze || op == Op::kSqueezeDim ||
                    op == Op::kSqueezeDims || op == Op::kUnsqueeze;
    if (!ok || n.outputs.size() != 1 || !A.absorbed(n.outputs[0]) || !A.value(n.outputs[0])) break;
    if (A.classify(g.meta(n.outputs[0]).shape) != A.classify(g.meta(cur).shape)) break;
    cur = n.outputs[0];
  }
  const Poly& p = *A.value(cur);
  if (same(p, exact)) return {cur, first_round};
  if (p.t.size() == 1 && p.t.begin()->second == 1 && p.t.begin()->first.size() == 1) {
    const Atom& a = A.atom(p.t.begin()->first[0].first);
    if (a.kind == Atom::kRound && same(a.inner, exact) && first_round == DType::kFloat32)
      return {cur, a.dtype};
  }
  return {-1, DType::kFloat32};
}

// Nodes between the leaves and `outs`, through absorbed values.
std::vector<int> region_nodes(const Graph& g, const Algebra& A, const std::vector<int>& outs) {
  std::set<int> nodes;
  std::vector<int> todo = outs;
  std::set<int> seen;
  while (!todo.empty()) {
    const int v = todo.back();
    todo.pop_back();
    if (!seen.insert(v).second || !A.absorbed(v)) continue;
    const int p = g.values[v].producer;
    if (p < 0) continue;
    nodes.insert(p);
    for (const Operand& o : g.nodes[p].operands)
      if (o.is_tensor()) todo.push_back(o.value);
  }
  return {nodes.begin(), nodes.end()};
}

// No node outside the region reads an output before the region's last node.
bool convex(const Graph& g, const std::vector<int>& nodes, const std::vector<int>& outs) {
  const int last = nodes.back();
  std::set<int> in(nodes.begin(), nodes.end());
  for (int v : outs)
    for (int u : g.values[v].users)
      if (!in.count(u) && u < last) return false;
  return true;
}

int leaf_value(const Algebra& A, int atom) {
  return atom < 0 ? -1 : A.atom(atom).value;
}

struct Found {
  Params p;
  std::vector<int> anchors;
};

// The add extending dx (step 6): its node, or -1 with `why` set when an add reads dx and cannot
// be fused.
int match_dx_add(const Graph& g, const Params& p, std::string& why) {
  const int u = single_user(g, p.dx);
  if (u < 0 || g.nodes[u].op != Op::kAdd) return -1;
  const Node& n = g.nodes[u];
  const std::string what = "add '" + n.id + "' after dx not fused into the norm backward: ";
  const int other = other_tensor(n, p.dx);
  if (n.operands.size() != 2 || other < 0 || other == p.dx) {
    why = what + "its other operand is not a tensor other than dx";
    return -1;
  }
  const TensorMeta &dm = g.meta(p.dx), &om = g.meta(other), &sm = g.meta(n.outputs[0]);
  if (om.shape != dm.shape || sm.shape != dm.shape) {
    why = what + "'" + g.values[other].name + "' is " + shape_str(om.shape) + ", dx " +
          shape_str(dm.shape) + " (a broadcast add)";
    return -1;
  }
  if (om.dtype != dm.dtype || sm.dtype != dm.dtype) {
    why = what + "'" + g.values[other].name + "' is " + std::string(dtype_name(om.dtype)) +
          ", dx " + std::string(dtype_name(dm.dtype)) + " and the sum " +
          std::string(dtype_name(sm.dtype)) + " (mixed dtypes)";
    return -1;
  }
  if (n.alpha != 1) {
    why = what + "alpha is " + std::to_string(n.alpha) + ", not 1";
    return -1;
  }
  return u;
}

// Tries anchor `dw_node` as the dw column reduction.
// On failure, `why` says how far it got.
std::optional<Found> try_anchor(const Graph& g, Algebra& A, int dw_node,
                                const std::vector<int>& anchors, const std::set<int>& used,
                                std::string& why) {
  const int cs = A.colsum_atom(dw_node);
  if (cs < 0) {
    why = "the column sum's summand is not a polynomial of row-shaped values";
    return std::nullopt;
  }
  const Poly dw_sum = A.atom(cs).inner;
  const auto atoms = A.closure(dw_sum);
  std::vector<int> elem;
  int row_leaves = 0;
  for (int a : atoms) {
    if (A.atom(a).kind == Atom::kLeaf && A.atom(a).cls == Cls::kElem) elem.push_back(a);
    if (A.atom(a).cls == Cls::kRow) ++row_leaves;
  }
  // dy * xhat mentions x, dy and at most mean, rstd (or the atoms of their recomputation).
  if (elem.size() < 2 || elem.size() > 3 || row_leaves > 8) {
    why =
        "the summand mentions " + std::to_string(elem.size()) + " [rows, cols] leaves and " +
        std::to_string(row_leaves) +
        " row leaves; dw = sum(dy * xhat) mentions x, dy (2 or 3 leaves) and at most 8 row leaves";
    return std::nullopt;
  }
  why = "the summand is not dy * xhat for a LayerNorm or RMSNorm xhat of its leaves";
  std::vector<int> rows;
  for (int a = 0; a < A.num_atoms(); ++a)
    if (A.atom(a).kind == Atom::kLeaf && A.atom(a).cls == Cls::kRow) rows.push_back(a);
  // The weight: a [C] leaf that a row sum multiplies with dy (sum(g) or sum(g * xhat)).
  auto weights_with = [&](int dy) {
    std::set<int> w;
    for (int a = 0; a < A.num_atoms(); ++a) {
      if (A.atom(a).kind != Atom::kRowSum) continue;
      const auto in = A.closure(A.atom(a).inner);
      if (std::find(in.begin(), in.end(), dy) == in.end()) continue;
      for (int b : in)
        if (A.atom(b).kind == Atom::kLeaf && A.atom(b).cls == Cls::kCol) w.insert(b);
    }
    return std::vector<int>(w.begin(), w.end());
  };

  bool why_saved = false;  // `why` names a saved normalized value
  for (Stats st : stats_candidates(A, atoms)) {
    for (int dy : elem) {
      if (dy == st.x) continue;
      const Poly DY = Poly::atom(dy);
      // dw: sum(rnd(dy * rnd(xhat)))
      std::optional<Choice> xh_pick, dwt_pick;
      for (const Choice& xh : choices(A, st.xhat)) {
        auto t = A.mul(DY, xh.p);
        if (!t) continue;
        for (const Choice& dwt : choices(A, *t))
          if (same(dwt.p, dw_sum)) xh_pick = xh, dwt_pick = dwt;
      }
      if (!xh_pick) continue;
      {
        auto name = [&](int atom) {
          const int v = leaf_value(A, atom);
          return v < 0 ? std::string("?")
                       : "'" + g.values[v].name + "' (" + std::string(dtype_name(g.meta(v).dtype)) +
                             ")";
        };
        const std::string xhat =
            st.mode == NormBwdStats::kNormalized ? "the saved normalized " + name(st.x)
            : st.mode == NormBwdStats::kSaved
                ? "x " + name(st.x) + " normalized by the saved statistics"
                : "x " + name(st.x) + " normalized by statistics recomputed from it";
        // The reason of a saved normalized value (the default partitioner's form) is kept over
        // the reasons of later role assignments (dy and xhat swapped).
        const bool saved_xs =
            st.mode == NormBwdStats::kNormalized && saved_by_forward(g, leaf_value(A, st.x));
        if (saved_xs || !why_saved)
          why =
              "dw = sum(dy * xhat) found (dy " + name(dy) + ", xhat = " + xhat +
              "), but no value of the graph equals dx = rstd * (g - ...) in terms of that xhat" +
              (st.mode == NormBwdStats::kNormalized
                   ? (saved_by_forward(g, leaf_value(A, st.x))
                          ? " nor of the xhat of another [rows, cols] leaf x read with dy in a row "
                            "sum (saved or recomputed statistics: the default partitioner's saved "
                            "x beside the saved normalized value)"
                          : " (the normalized value is not a graph input the forward saved, role "
                            "'saved', so no other x was tried for dx)")
                   : "") +
              ", with g = dy * w for a [C] weight w read with dy in a row sum, carried to a "
              "down-cast that only the region reads";
        if (saved_xs) {  // name the x candidates, and the leaves dx may read beside them
          std::string tried, other;
          const auto near = dx_atoms(A, dy);
          for (int a = 0; a < A.num_atoms(); ++a) {
            if (A.atom(a).kind != Atom::kLeaf || A.atom(a).cls != Cls::kElem || a == dy ||
                a == st.x)
              continue;
            std::string& list =
                std::find(near.begin(), near.end(), a) != near.end() ? tried : other;
            list += (list.empty() ? "" : ", ") + name(a);
          }
          why += "; x tried: " + (tried.empty() ? std::string("none") : tried);
          if (!other.empty())
            why += "; other [rows, cols] leaves of the graph, not read with dy in a row sum: " +
                   other +
                   " (a dx whose xhat term reads x through a second saved copy, e.g. in another "
                   "dtype, is not taken: the kernels read one x)";
        }
        why_saved |= saved_xs;
      }
      // db: another anchor summing dy.
      int db_node = -1;
      for (int a : anchors) {
        if (a == dw_node || used.count(a)) continue;
        const int c = A.colsum_atom(a);
        if (c >= 0 && same(A.atom(c).inner, DY)) {
          db_node = a;
          break;
        }
      }
      // dx: in terms of dw's xhat, or, when dw reads a saved normalized value S (the default
      // partitioner's form), of the xhat of another leaf x that a row sum reads with dy (dx then
      // reads x and its statistics, dw reads S: Params::xs).
      std::vector<Stats> dx_stats = {st};
      if (st.mode == NormBwdStats::kNormalized && saved_by_forward(g, leaf_value(A, st.x)))
        for (Stats& s2 : stats_candidates(A, dx_atoms(A, dy)))
          if (s2.mode != NormBwdStats::kNormalized && s2.x != dy && s2.x != st.x)
            dx_stats.push_back(s2);
      for (const Stats& sd : dx_stats) {
        const bool saved_xs = sd.x != st.x;
        std::vector<int> rstd_opts = {sd.rstd_atom};
        if (sd.mode == NormBwdStats::kNormalized) rstd_opts = rows;
        std::vector<bool> ln_opts = {sd.layernorm};
        if (!sd.ln_known) ln_opts = {true, false};
        for (int w : weights_with(dy)) {
          std::set<double> offsets = {0};
          auto offset_of = [&](const Poly& q) {  // q = w + c
            if (q.t.size() != 2) return;
            auto it = q.t.find(Mono{{w, 1}});
            auto c = q.t.find(Mono{});
            if (it != q.t.end() && it->second == 1 && c != q.t.end()) offsets.insert(c->second);
          };
          for (int a = 0; a < A.num_atoms(); ++a)
            if (A.atom(a).kind == Atom::kRound) offset_of(A.atom(a).inner);
          for (size_t v = 0; v < g.values.size(); ++v)
            if (A.value(static_cast<int>(v))) offset_of(*A.value(static_cast<int>(v)));
          for (double off : offsets) {
            Poly weff = Algebra::add(Poly::atom(w), Poly::constant(off));
            for (const Choice& we : choices(A, weff)) {
              auto gg = A.mul(DY, we.p);
              if (!gg) continue;
              for (const Choice& gc : choices(A, *gg)) {
                for (int r : rstd_opts) {
                  if (r < 0 && sd.mode == NormBwdStats::kNormalized) continue;
                  const Poly rstd = sd.mode == NormBwdStats::kNormalized ? Poly::atom(r) : sd.rstd;
                  for (bool ln : ln_opts) {
                    for (const DxForm& F : dx_forms(A, rstd, gc.p, sd.xhat, ln)) {
                      const Poly* E = &F.exact;
                      std::vector<int> cands = A.values_equal(*E);
                      for (auto [t, atom] : A.rounds_of(*E))
                        for (int v : A.values_equal(Poly::atom(atom))) cands.push_back(v);
                      std::sort(cands.begin(), cands.end(), [&](int a, int b) {
                        return g.values[a].producer < g.values[b].producer;
                      });
                      for (int v : cands) {
                        if (!A.absorbed(v)) continue;
                        auto [dx, dx_round] = extend(g, A, v, *E, DType::kFloat32);
                        if (dx < 0) continue;
                        const int dw_val = A.atom(cs).value;
                        const DType cs_t = A.atom(cs).dtype;
                        const DType first = cs_t == DType::kBFloat16 || cs_t == DType::kFloat16
                                                ? cs_t
                                                : DType::kFloat32;
                        auto [dw, dw_round] = extend(g, A, dw_val, Poly::atom(cs), first);
                        if (dw < 0) continue;
                        int db = -1;
                        DType db_round = DType::kFloat32;
                        if (db_node >= 0) {
                          const int dbs = A.colsum_atom(db_node);
                          const DType bt = A.atom(dbs).dtype;
                          auto e = extend(g, A, A.atom(dbs).value, Poly::atom(dbs),
                                          bt == DType::kBFloat16 || bt == DType::kFloat16
                                              ? bt
                                              : DType::kFloat32);
                          db = e.first;
                          db_round = e.second;
                          if (db < 0) continue;
                        }
                        Found f;
                        Params& p = f.p;
                        p.layernorm = ln;
                        p.stats = sd.mode;
                        p.x = leaf_value(A, sd.x);
                        p.xs = saved_xs ? leaf_value(A, st.x) : -1;
                        p.dy = leaf_value(A, dy);
                        p.w = leaf_value(A, w);
                        p.mean = leaf_value(A, sd.mean_atom);
                        p.rstd =
                            sd.mode == NormBwdStats::kRecompute
                                ? -1
                                : leaf_value(
                                      A, sd.mode == NormBwdStats::kNormalized ? r : sd.rstd_atom);
                        p.eps_value = leaf_value(A, sd.eps_atom);
                        p.eps = sd.eps;
                        p.correction = sd.correction;
                        p.w_offset = off;
                        p.w_round = we.round;
                        p.g_round = gc.round;
                        p.xhat_round = xh_pick->round;
                        p.dwt_round = dwt_pick->round;
                        p.dx = dx;
                        p.dx_round = dx_round;
                        p.recenter = F.recenter;
                        p.dx_part_round = F.part_round;
                        p.dw = dw;
                        p.dw_round = dw_round;
                        p.db = db;
                        p.db_round = db_round;
                        p.rows = A.rows();
                        p.cols = A.cols();
                        f.anchors = {dw_node};
                        if (db_node >= 0) f.anchors.push_back(db_node);
                        return f;
                      }
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return std::nullopt;
}

// The row statistics a row-sum anchor can combine with: row leaves and rsqrt atoms of the summand
// and of every element value that reads one of the anchor's rowsum atoms (dx itself).
std::vector<int> dx_only_atoms(const Graph& g, const Algebra& A, int node, const Poly& summand) {
  const Node& n = g.nodes[node];
  std::set<int> sums;
  for (int a : A.closure(*A.value(n.outputs[0])))
    if (A.atom(a).kind == Atom::kRowSum) sums.insert(a);
  std::set<int> atoms;
  for (int a : A.closure(summand)) atoms.insert(a);
  for (size_t v = 0; v < g.values.size(); ++v) {
    const int p = g.values[v].producer;
    if (p <= node || !A.absorbed(static_cast<int>(v)) || !A.value(static_cast<int>(v))) continue;
    if (A.classify(g.meta(static_cast<int>(v)).shape) != Cls::kElem) continue;
    const auto cl = A.closure(*A.value(static_cast<int>(v)));
    if (std::none_of(cl.begin(), cl.end(), [&](int a) { return sums.count(a) > 0; })) continue;
    for (int a : cl)
      if (A.atom(a).cls == Cls::kRow &&
          (A.atom(a).kind == Atom::kLeaf || A.atom(a).kind == Atom::kRsqrt))
        atoms.insert(a);
  }
  return {atoms.begin(), atoms.end()};
}

// Tries row reduction `node` as the sum(g * xhat) of a norm backward without affine parameters.
// `report` is set when the anchor looks like one (see the header, step 6); `why` says how far
// it got.
std::optional<Found> try_dx_only(const Graph& g, Algebra& A, int node, bool dw_declined,
                                 bool& report, std::string& why) {
  report = false;
  const Node& n = g.nodes[node];
  const int in = n.operands[0].value;
  if (!A.value(in) || !A.value(n.outputs[0]) || A.classify(g.meta(in).shape) != Cls::kElem)
    return std::nullopt;
  const Poly& summand = *A.value(in);
  std::vector<int> elem;
  for (int a : A.closure(summand))
    if (A.atom(a).kind == Atom::kLeaf && A.atom(a).cls == Cls::kElem) elem.push_back(a);
  if (elem.size() != 2) return std::nullopt;  // not sum(dy * xhat(x)): not reported
  const auto atoms = dx_only_atoms(g, A, node, summand);
  std::vector<int> rows;
  for (int a : atoms)
    if (A.atom(a).cls == Cls::kRow && A.atom(a).kind == Atom::kLeaf) rows.push_back(a);
  const bool has_stat = std::any_of(atoms.begin(), atoms.end(), [&](int a) {
    return A.atom(a).cls == Cls::kRow &&
           (A.atom(a).kind == Atom::kLeaf || A.atom(a).kind == Atom::kRsqrt);
  });
  if (!has_stat) return std::nullopt;  // no row statistic near it: not reported
  report = true;
  if (rows.size() > 8) {
    why = "dx only: " + std::to_string(rows.size()) +
          " row leaves around the row sum; a norm backward reads at most mean and rstd (limit 8)";
    return std::nullopt;
  }
  why =
      "dx only: the row sum is not sum(dy * xhat) for a LayerNorm or RMSNorm xhat of its two "
      "[rows, cols] leaves";
  for (int a : A.closure(summand))
    if (A.atom(a).kind == Atom::kLeaf && A.atom(a).cls == Cls::kCol) {
      // A weighted norm backward: when a dw column sum was declined, that reason explains it.
      report = !dw_declined;
      why = "dx only: the row sum's summand mentions the [C] value '" +
            g.values[A.atom(a).value].name +
            "': a weighted norm whose dw is not computed here (a frozen weight) is not a norm "
            "without affine parameters (w = 1)";
    }
  for (Stats st : stats_candidates(A, atoms)) {
    for (int dy : elem) {
      if (dy == st.x) continue;
      const Poly DY = Poly::atom(dy);
      auto t = A.mul(DY, st.xhat);
      if (!t) continue;
      // S2 = sum(g * xhat), or sum(g * xhat / rstd) (the RMSNorm decomposition sums g * x and
      // multiplies by rstd^3 afterwards).
      bool s2 = same(*t, summand);
      if (!s2 && st.rstd.t.size() == 1 && st.rstd.t.begin()->second == 1) {
        Poly inv;
        Mono m = st.rstd.t.begin()->first;
        for (auto& ae : m) ae.second = -ae.second;
        inv.t[m] = 1;
        auto u = A.mul(*t, inv);
        s2 = u && same(*u, summand);
      }
      if (!s2) continue;
      why =
          "dx only: sum(dy * xhat) found, but no value of the graph equals dx = rstd * (dy - "
          "[LayerNorm] mean(dy) - xhat * mean(dy * xhat)) (w = 1), carried to a down-cast that "
          "only the region reads";
      std::vector<int> rstd_opts = {st.rstd_atom};
      if (st.mode == NormBwdStats::kNormalized) rstd_opts = rows;
      std::vector<bool> ln_opts = {st.layernorm};
      if (!st.ln_known) ln_opts = {true, false};
      for (int r : rstd_opts) {
        if (r < 0 && st.mode == NormBwdStats::kNormalized) continue;
        const Poly rstd = st.mode == NormBwdStats::kNormalized ? Poly::atom(r) : st.rstd;
        for (bool ln : ln_opts) {
          auto E = expected_dx(A, rstd, DY, st.xhat, ln);
          if (!E) continue;
          std::vector<int> cands = A.values_equal(*E);
          for (auto [tt, atom] : A.rounds_of(*E))
            for (int v : A.values_equal(Poly::atom(atom))) cands.push_back(v);
          std::sort(cands.begin(), cands.end(),
                    [&](int a, int b) { return g.values[a].producer < g.values[b].producer; });
          for (int v : cands) {
            if (!A.absorbed(v)) continue;
            auto [dx, dx_round] = extend(g, A, v, *E, DType::kFloat32);
            if (dx < 0) continue;
            Found f;
            Params& p = f.p;
            p.layernorm = ln;
            p.stats = st.mode;
            p.x = leaf_value(A, st.x);
            p.dy = leaf_value(A, dy);
            p.mean = leaf_value(A, st.mean_atom);
            p.rstd = st.mode == NormBwdStats::kRecompute
                         ? -1
                         : leaf_value(A, st.mode == NormBwdStats::kNormalized ? r : st.rstd_atom);
            p.eps_value = leaf_value(A, st.eps_atom);
            p.eps = st.eps;
            p.correction = st.correction;
            p.dx = dx;
            p.dx_round = dx_round;
            p.rows = A.rows();
            p.cols = A.cols();
            f.anchors = {node};
            return f;
          }
        }
      }
    }
  }
  return std::nullopt;
}

// Checks the region of `outs` (private intermediates, convex); empty `why` when it is one.
std::vector<int> checked_region(const Graph& g, const Algebra& A, const std::vector<int>& outs,
                                std::string& why) {
  std::vector<int> nodes = region_nodes(g, A, outs);
  why.clear();
  if (nodes.empty()) {
    why = "the outputs found, but the nodes between them and their leaves do not form a region";
    return nodes;
  }
  if (!intermediates_private(g, nodes, outs)) {
    why = "an intermediate of the norm backward is read outside it (or returned)";
    for (int ni : nodes)
      for (int v : g.nodes[ni].outputs) {
        if (std::find(outs.begin(), outs.end(), v) != outs.end()) continue;
        for (int u : g.values[v].users)
          if (std::find(nodes.begin(), nodes.end(), u) == nodes.end())
            why = "intermediate '" + g.values[v].name +
                  "' has a reader outside the region: node '" + g.nodes[u].id + "'";
        if (g.values[v].graph_output)
          why = "intermediate '" + g.values[v].name + "' is a graph output";
      }
    return nodes;
  }
  if (!convex(g, nodes, outs))
    why = "a node outside the region reads an output before the region's last node";
  return nodes;
}

}  // namespace

namespace {

// Step 6: row-reduction anchors no region claims, grouped by row shape.
void match_dx_only(const Graph& g, Matches& out) {
  const bool dw_declined = !out.declined.empty();
  std::set<int> claimed;
  for (const Region& r : out.regions) claimed.insert(r.nodes.begin(), r.nodes.end());
  std::map<std::pair<int64_t, int64_t>, std::vector<int>> groups;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if ((n.op != Op::kSumDim && n.op != Op::kMeanDim) || n.operands.empty() ||
        !n.operands[0].is_tensor() || n.outputs.size() != 1 || claimed.count(static_cast<int>(i)))
      continue;
    const auto& s = g.meta(n.operands[0].value).shape;
    const int64_t rank = static_cast<int64_t>(s.size());
    if (rank < 2 || n.dims.size() != 1 || n.dims[0] != rank - 1) continue;
    const int64_t cols = s.back();
    const int64_t rows = cols > 0 ? g.meta(n.operands[0].value).numel() / cols : 0;
    if (rows >= 2 && cols >= 2) groups[{rows, cols}].push_back(static_cast<int>(i));
  }
  std::map<int, std::string> failed;  // anchor -> why (reported unless a region took it)
  for (const auto& [shape, anchors] : groups) {
    Algebra A(g, shape.first, shape.second);
    for (int a : anchors) {
      if (claimed.count(a)) continue;  // a region found at an earlier anchor took it
      bool report = false;
      std::string why;
      auto f = try_dx_only(g, A, a, dw_declined, report, why);
      if (f) {
        std::vector<int> outs = {f->p.dx};
        std::vector<int> nodes = checked_region(g, A, outs, why);
        if (why.empty())
          for (int ni : nodes)
            if (claimed.count(ni)) {
              why = "node '" + g.nodes[ni].id + "' belongs to another norm_bwd region";
              break;
            }
        if (!why.empty()) {
          why = "dx only: dx = '" + g.values[f->p.dx].name + "' found, but " + why;
        } else {
          claimed.insert(nodes.begin(), nodes.end());
          out.regions.push_back(make_region(g, std::move(nodes), std::move(*f).p));
          continue;
        }
      }
      if (report)
        failed[a] = "sum over the last dim of [" + std::to_string(shape.first) + ", " +
                    std::to_string(shape.second) + "]: " + why;
    }
  }
  for (const auto& [a, why] : failed)
    if (!claimed.count(a)) out.decline(a, why);
}

}  // namespace

void match(const Graph& g, Matches& out) {
  // Column-reduction anchors, grouped by row shape.
  std::map<std::pair<int64_t, int64_t>, std::vector<int>> groups;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.op != Op::kSumDim || n.operands.empty() || !n.operands[0].is_tensor()) continue;
    const auto& s = g.meta(n.operands[0].value).shape;
    if (s.size() < 2 || n.dims.size() != s.size() - 1) continue;
    bool leading = true;
    for (size_t d = 0; d < n.dims.size(); ++d) leading &= n.dims[d] == static_cast<int64_t>(d);
    const int64_t cols = s.back();
    const int64_t rows = cols > 0 ? g.meta(n.operands[0].value).numel() / cols : 0;
    if (leading && rows >= 2 && cols >= 2) groups[{rows, cols}].push_back(static_cast<int>(i));
  }
  for (const auto& [shape, anchors] : groups) {
    Algebra A(g, shape.first, shape.second);
    std::set<int> used;
    std::map<int, std::string> failed;  // anchor -> why (reported unless it became a db)
    for (int a : anchors) {
      if (used.count(a)) continue;
      std::string why;
      auto f = try_anchor(g, A, a, anchors, used, why);
      if (!f) {
        failed[a] = why;
        continue;
      }
      Params& p = f->p;
      std::vector<int> outs = {p.dx, p.dw};
      if (p.db >= 0) outs.push_back(p.db);
      std::vector<int> nodes = region_nodes(g, A, outs);
      if (nodes.empty()) {
        failed[a] =
            "dx, dw found, but the nodes between them and their leaves do not form a region";
        continue;
      }
      // Step 6: dx's epilogue add, its other operand computed outside the region.
      std::string add_why;
      if (const int add = match_dx_add(g, p, add_why); add >= 0) {
        const int other = other_tensor(g.nodes[add], p.dx);
        const int op = g.values[other].producer;
        if (op >= 0 && std::find(nodes.begin(), nodes.end(), op) != nodes.end()) {
          out.decline(add, "add '" + g.nodes[add].id +
                               "' after dx not fused into the norm backward: its other operand '" +
                               g.values[other].name + "' is computed inside the region");
        } else {
          nodes.push_back(add);
          std::sort(nodes.begin(), nodes.end());
          p.dx_add = other;
          p.dx = g.nodes[add].outputs[0];
          outs[0] = p.dx;
        }
      } else if (!add_why.empty()) {
        out.decline(single_user(g, p.dx), add_why);
      }
      if (!intermediates_private(g, nodes, outs)) {
        failed[a] = "an intermediate of the norm backward is read outside it (or returned)";
        for (int ni : nodes)
          for (int v : g.nodes[ni].outputs) {
            if (std::find(outs.begin(), outs.end(), v) != outs.end()) continue;
            for (int u : g.values[v].users)
              if (std::find(nodes.begin(), nodes.end(), u) == nodes.end())
                failed[a] = "intermediate '" + g.values[v].name +
                            "' has a reader outside the region: node '" + g.nodes[u].id + "'";
            if (g.values[v].graph_output)
              failed[a] = "intermediate '" + g.values[v].name + "' is a graph output";
          }
        continue;
      }
      if (!convex(g, nodes, outs)) {
        failed[a] = "a node outside the region reads dx, dw or db before the region's last node";
        continue;
      }
      for (int n : f->anchors) used.insert(n);
      out.regions.push_back(make_region(g, std::move(nodes), std::move(*f).p));
    }
    for (const auto& [a, why] : failed)
      if (!used.count(a))
        out.decline(a, "sum over the rows of [" + std::to_string(shape.first) + ", " +
                           std::to_string(shape.second) + "]: " + why);
  }
  match_dx_only(g, out);
}

}  // namespace replay::norm_bwd
