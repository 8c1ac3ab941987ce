#include "impls/fusions/norm_bwd/algebra.hpp"

#include <algorithm>
#include <cmath>
#include <set>

namespace replay::norm_bwd {
namespace {

constexpr size_t kMaxTerms = 64;      // a norm backward's dx has < 10 terms
constexpr size_t kMaxAtoms = 12;      // atoms in one monomial
constexpr int kMaxExponent = 8;       // |exponent|
constexpr double kRelTol = 1e-9;      // coefficient comparison
constexpr double kCancelTol = 1e-12;  // a sum smaller than this (relative) cancelled

bool close(double a, double b) {
  return std::fabs(a - b) <= kRelTol * std::max(std::fabs(a), std::fabs(b));
}

bool narrow(DType t) {
  return t == DType::kBFloat16 || t == DType::kFloat16 || t == DType::kFloat8E4M3 ||
         t == DType::kFloat8E5M2;
}

std::optional<Mono> mono_mul(const Mono& a, const Mono& b) {
  Mono r;
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (j == b.size() || (i < a.size() && a[i].first < b[j].first)) {
      r.push_back(a[i++]);
    } else if (i == a.size() || b[j].first < a[i].first) {
      r.push_back(b[j++]);
    } else {
      const int e = a[i].second + b[j].second;
      if (std::abs(e) > kMaxExponent) return std::nullopt;
      if (e != 0) r.push_back({a[i].first, e});
      ++i, ++j;
    }
  }
  if (r.size() > kMaxAtoms) return std::nullopt;
  return r;
}

// Right-aligned broadcast of `in` into `out` as a value of class c would broadcast.
bool broadcasts_as(const std::vector<int64_t>& in, const std::vector<int64_t>& out, Cls c,
                   int64_t cols) {
  if (in.size() > out.size()) {  // leading 1s only
    for (size_t i = 0; i < in.size() - out.size(); ++i)
      if (in[i] != 1) return false;
  }
  const size_t n = out.size();
  auto at = [&](size_t i) {  // in, right-aligned to out
    const size_t off = n - std::min(n, in.size());
    return i < off ? int64_t(1) : in[in.size() - (n - i)];
  };
  for (size_t i = 0; i < n; ++i) {
    const bool last = i + 1 == n;
    const int64_t d = at(i);
    switch (c) {
      case Cls::kScalar:
        if (d != 1) return false;
        break;
      case Cls::kElem:
        if (d != out[i]) return false;
        break;
      case Cls::kRow:
        if (last ? d != 1 : d != out[i]) return false;
        break;
      case Cls::kCol:
        if (last ? d != cols : d != 1) return false;
        break;
      default:
        return false;
    }
  }
  return true;
}

Cls join(Cls a, Cls b) {
  if (a == Cls::kScalar) return b;
  if (b == Cls::kScalar) return a;
  if (a == b) return a;
  return Cls::kElem;  // row x col, or anything with elem
}

}  // namespace

Poly Poly::constant(double c) {
  Poly p;
  if (c != 0) p.t[{}] = c;
  return p;
}

Poly Poly::atom(int a) {
  Poly p;
  p.t[{{a, 1}}] = 1;
  return p;
}

bool same(const Poly& a, const Poly& b) {
  if (a.t.size() != b.t.size()) return false;
  for (auto i = a.t.begin(), j = b.t.begin(); i != a.t.end(); ++i, ++j)
    if (i->first != j->first || !close(i->second, j->second)) return false;
  return true;
}

std::string mono_key(const Poly& p) {
  std::string k;
  for (const auto& [m, c] : p.t) {
    for (const auto& [a, e] : m) k += std::to_string(a) + "^" + std::to_string(e) + "*";
    k += "|";
  }
  return k;
}

Poly Algebra::add(const Poly& a, const Poly& b, double alpha) {
  Poly r = a;
  for (const auto& [m, c] : b.t) {
    auto it = r.t.find(m);
    if (it == r.t.end()) {
      if (alpha * c != 0) r.t[m] = alpha * c;
      continue;
    }
    const double s = it->second + alpha * c;
    if (std::fabs(s) <= kCancelTol * std::max(std::fabs(it->second), std::fabs(alpha * c)))
      r.t.erase(it);
    else
      it->second = s;
  }
  return r;
}

Poly Algebra::scale(const Poly& a, double c) {
  if (c == 0) return {};
  Poly r = a;
  for (auto& [m, v] : r.t) v *= c;
  return r;
}

std::optional<Poly> Algebra::mul(const Poly& a, const Poly& b) const {
  if (a.t.size() * b.t.size() > kMaxTerms * 4) return std::nullopt;
  Poly r;
  for (const auto& [ma, ca] : a.t)
    for (const auto& [mb, cb] : b.t) {
      auto m = mono_mul(ma, mb);
      if (!m) return std::nullopt;
      Poly t;
      t.t[*m] = ca * cb;
      r = add(r, t);
    }
  if (r.t.size() > kMaxTerms) return std::nullopt;
  return r;
}

Cls Algebra::cls(const Poly& p) const {
  Cls c = Cls::kScalar;
  for (const auto& [m, v] : p.t)
    for (const auto& [a, e] : m) c = join(c, atoms_[a].cls);
  return c;
}

Cls Algebra::classify(const std::vector<int64_t>& shape) const {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const int64_t last = shape.empty() ? 1 : shape.back();
  if (numel == 1) return Cls::kScalar;
  if (last == cols_ && numel == rows_ * cols_ && shape.size() >= 2) return Cls::kElem;
  if (last == cols_ && numel == cols_) return Cls::kCol;
  if (last == 1 && numel == rows_ && shape.size() >= 2) return Cls::kRow;
  if (numel == rows_) return Cls::kRowFlat;
  return Cls::kNone;
}

int Algebra::intern(Atom a) {
  if (a.kind == Atom::kRound || a.kind == Atom::kRsqrt) {
    auto& bucket = by_key_[std::to_string(a.kind) + mono_key(a.inner)];
    for (int i : bucket)
      if (atoms_[i].kind == a.kind && atoms_[i].dtype == a.dtype && same(atoms_[i].inner, a.inner))
        return i;
    bucket.push_back(static_cast<int>(atoms_.size()));
  }
  atoms_.push_back(std::move(a));
  return static_cast<int>(atoms_.size()) - 1;
}

int Algebra::find_round(const Poly& p, DType t) const {
  auto it = by_key_.find(std::to_string(Atom::kRound) + mono_key(p));
  if (it == by_key_.end()) return -1;
  for (int i : it->second)
    if (atoms_[i].kind == Atom::kRound && atoms_[i].dtype == t && same(atoms_[i].inner, p))
      return i;
  return -1;
}

std::vector<std::pair<DType, int>> Algebra::rounds_of(const Poly& p) const {
  std::vector<std::pair<DType, int>> r;
  auto it = by_key_.find(std::to_string(Atom::kRound) + mono_key(p));
  if (it == by_key_.end()) return r;
  for (int i : it->second)
    if (atoms_[i].kind == Atom::kRound && same(atoms_[i].inner, p))
      r.push_back({atoms_[i].dtype, i});
  return r;
}

std::optional<Poly> Algebra::round(const Poly& p, DType t) {
  if (!narrow(t)) return p;  // float32 roundings are the fp32 math's own
  if (p.t.empty()) return p;
  if (p.t.size() == 1 && p.t.begin()->first.empty()) {  // a constant
    const double c = p.t.begin()->second;
    return Poly::constant(round_to(t, c));
  }
  if (p.t.size() == 1 && p.t.begin()->second == 1 && p.t.begin()->first.size() == 1 &&
      p.t.begin()->first[0].second == 1) {
    const DType have = atoms_[p.t.begin()->first[0].first].dtype;
    const bool fits = have == t || ((have == DType::kFloat8E4M3 || have == DType::kFloat8E5M2) &&
                                    (t == DType::kBFloat16 || t == DType::kFloat16));
    if (fits) return p;
  }
  const Cls c = cls(p);
  Atom a;
  a.kind = Atom::kRound;
  a.cls = c;
  a.dtype = t;
  a.inner = p;
  return Poly::atom(intern(std::move(a)));
}

std::optional<Poly> Algebra::rowsum(const Poly& p) {
  Poly r;
  for (const auto& [m, c] : p.t) {
    Mono row, elem;
    for (const auto& ae : m) {
      const Cls k = atoms_[ae.first].cls;
      (k == Cls::kElem || k == Cls::kCol ? elem : row).push_back(ae);
    }
    Poly term;
    if (elem.empty()) {
      term.t[row] = c * static_cast<double>(cols_);
    } else {
      int s;
      auto it = rowsums_.find(elem);
      if (it != rowsums_.end()) {
        s = it->second;
      } else {
        Atom a;
        a.kind = Atom::kRowSum;
        a.cls = Cls::kRow;
        a.inner.t[elem] = 1;
        s = intern(std::move(a));
        rowsums_[elem] = s;
      }
      auto mm = mono_mul(row, Mono{{s, 1}});
      if (!mm) return std::nullopt;
      term.t[*mm] = c;
    }
    r = add(r, term);
  }
  if (r.t.size() > kMaxTerms) return std::nullopt;
  return r;
}

std::vector<int> Algebra::closure(const Poly& p) const {
  std::set<int> seen;
  std::vector<const Poly*> todo = {&p};
  while (!todo.empty()) {
    const Poly* q = todo.back();
    todo.pop_back();
    for (const auto& [m, c] : q->t)
      for (const auto& [a, e] : m)
        if (seen.insert(a).second && atoms_[a].kind != Atom::kLeaf)
          todo.push_back(&atoms_[a].inner);
  }
  return {seen.begin(), seen.end()};
}

int Algebra::colsum_atom(int node) const {
  auto it = colsums_.find(node);
  return it == colsums_.end() ? -1 : it->second;
}

std::vector<int> Algebra::values_equal(const Poly& p) const {
  std::vector<int> r;
  auto it = elem_vals_.find(mono_key(p));
  if (it == elem_vals_.end()) return r;
  for (int v : it->second)
    if (same(*vals_[v].p, p)) r.push_back(v);
  return r;
}

bool Algebra::sums_leaves(const Poly& p) const {
  std::set<int> leaves;
  for (const auto& [m, c] : p.t) {
    if (m.size() != 1 || m[0].second != 1) return false;
    const Atom& a = atoms_[m[0].first];
    if (a.cls != Cls::kElem) return false;
    if (a.kind == Atom::kLeaf) {
      leaves.insert(m[0].first);
    } else if (a.kind == Atom::kRound && p.t.size() == 1) {
      return sums_leaves(a.inner);  // rnd(a + b)
    } else {
      return false;
    }
  }
  return leaves.size() >= 2;
}

void Algebra::leaf(int v) {
  Cls c = classify(g_.meta(v).shape);
  vals_[v].absorbed = false;
  if (c == Cls::kNone) {
    vals_[v].p.reset();
    return;
  }
  Atom a;
  a.kind = Atom::kLeaf;
  a.cls = c == Cls::kRowFlat ? Cls::kRow : c;
  a.dtype = g_.meta(v).dtype;
  a.value = v;
  vals_[v].p = Poly::atom(intern(std::move(a)));
}

namespace {

bool is_view(Op op) {
  return op == Op::kView || op == Op::kUnsafeView || op == Op::kReshape || op == Op::kUnsqueeze ||
         op == Op::kSqueeze || op == Op::kSqueezeDim || op == Op::kSqueezeDims;
}

bool is_identity(Op op) {
  return op == Op::kConvertElementType || op == Op::kToCopy || op == Op::kClone || op == Op::kAlias;
}

// An integer exponent in [-kMaxExponent, kMaxExponent], or nullopt.
std::optional<int> int_exponent(double e) {
  if (e != std::floor(e) || std::fabs(e) > kMaxExponent) return std::nullopt;
  return static_cast<int>(e);
}

}  // namespace

// Result of pointwise op n over the polynomials of its operands (each first rounded to the output
// dtype where its dtype differs, as TensorIterator casts operands to the common dtype).
std::optional<Poly> Algebra::pointwise(const Node& n) {
  const TensorMeta& om = g_.meta(n.outputs[0]);
  const Cls oc = classify(om.shape);
  if (oc == Cls::kNone || oc == Cls::kRowFlat || !is_floating(om.dtype)) return std::nullopt;
  std::vector<Poly> ops;
  for (const Operand& o : n.operands) {
    if (o.none) return std::nullopt;
    if (!o.is_tensor()) {
      ops.push_back(Poly::constant(o.scalar));
      continue;
    }
    const TensorMeta& m = g_.meta(o.value);
    const Cls c = classify(m.shape);
    if (!vals_[o.value].p || !broadcasts_as(m.shape, om.shape, c, cols_)) return std::nullopt;
    auto r = m.dtype == om.dtype ? vals_[o.value].p : round(*vals_[o.value].p, om.dtype);
    if (!r) return std::nullopt;
    ops.push_back(*r);
  }
  auto pow = [&](const Poly& p, int e) -> std::optional<Poly> {
    if (e < 0 && (p.t.size() != 1)) return std::nullopt;  // only a monomial has an inverse
    if (e < 0) {
      const auto& [m, c] = *p.t.begin();
      Mono inv = m;
      for (auto& ae : inv) ae.second = -ae.second;
      std::optional<Poly> r = Poly::constant(1);
      Poly b;
      b.t[inv] = 1 / c;
      for (int i = 0; i < -e && r; ++i) r = mul(*r, b);
      return r;
    }
    std::optional<Poly> r = Poly::constant(1);
    for (int i = 0; i < e && r; ++i) r = mul(*r, p);
    return r;
  };
  std::optional<Poly> r;
  switch (n.op) {
    case Op::kNeg:
      r = scale(ops[0], -1);
      break;
    case Op::kAdd:
    case Op::kAddScalar:
      r = add(ops[0], ops[1], n.alpha);
      break;
    case Op::kSub:
    case Op::kSubScalar:
      r = add(ops[0], ops[1], -n.alpha);
      break;
    case Op::kRsubScalar:
      r = add(ops[1], ops[0], -n.alpha);
      break;
    case Op::kMul:
    case Op::kMulScalar:
      r = mul(ops[0], ops[1]);
      break;
    case Op::kDiv:
    case Op::kDivScalar: {
      if (!n.mode.empty()) return std::nullopt;
      auto inv = pow(ops[1], -1);
      if (!inv) return std::nullopt;
      r = mul(ops[0], *inv);
      break;
    }
    case Op::kPowTensorScalar: {
      auto e = int_exponent(n.operands[1].scalar);
      if (!e) return std::nullopt;
      r = pow(ops[0], *e);
      break;
    }
    case Op::kReciprocal:
      r = pow(ops[0], -1);
      break;
    case Op::kRsqrt: {
      const Cls c = cls(ops[0]);
      if (c != Cls::kRow && c != Cls::kScalar) return std::nullopt;
      Atom a;
      a.kind = Atom::kRsqrt;
      a.cls = c;
      a.inner = ops[0];
      r = Poly::atom(intern(std::move(a)));
      break;
    }
    default:
      return std::nullopt;
  }
  if (!r || r->t.size() > kMaxTerms) return std::nullopt;
  return round(*r, om.dtype);
}

// Output k of node n, or nullopt when n is not algebra (the output becomes a leaf).
std::optional<Poly> Algebra::eval(const Node& n, int k) {
  const int out = n.outputs[k];
  const TensorMeta& om = g_.meta(out);
  const Cls oc = classify(om.shape);
  if (oc == Cls::kNone) return std::nullopt;
  // Integer and bool values truncate (x -> int32 -> float32 is not x): never algebra, so a
  // graph that casts through them is matched on the integer leaf, which the binder declines.
  if (!is_floating(om.dtype)) return std::nullopt;
  auto in = [&](int i) -> const std::optional<Poly>& { return vals_[n.operands[i].value].p; };
  const bool one_tensor = !n.operands.empty() && n.operands[0].is_tensor();
  if (is_identity(n.op)) {
    if (!one_tensor || !in(0) || classify(g_.meta(n.operands[0].value).shape) != oc)
      return std::nullopt;
    return round(*in(0), om.dtype);
  }
  if (is_view(n.op) || n.op == Op::kExpand) {
    if (!one_tensor || !in(0)) return std::nullopt;
    const auto& is = g_.meta(n.operands[0].value).shape;
    const Cls ic = classify(is);
    const auto flat = [](Cls c) { return c == Cls::kRowFlat ? Cls::kRow : c; };
    if (n.op == Op::kExpand) {
      if (ic == Cls::kRowFlat || oc == Cls::kRowFlat) return std::nullopt;
      if (!broadcasts_as(is, om.shape, ic, cols_)) return std::nullopt;
      if (ic != oc && oc != Cls::kElem && ic != Cls::kScalar) return std::nullopt;
      return in(0);
    }
    if (flat(ic) != flat(oc)) return std::nullopt;
    return in(0);
  }
  switch (n.op) {
    case Op::kFull:
    case Op::kScalarTensor:
    case Op::kZeros:
    case Op::kOnes:
      if (oc == Cls::kRowFlat) return std::nullopt;
      return round(Poly::constant(n.operands[0].scalar), om.dtype);
    case Op::kSumDim:
    case Op::kMeanDim:
    case Op::kVarMean:
    case Op::kVar: {
      if (!one_tensor || !in(0)) return std::nullopt;
      const auto& is = g_.meta(n.operands[0].value).shape;
      const int64_t rank = static_cast<int64_t>(is.size());
      if (classify(is) != Cls::kElem || rank < 2) return std::nullopt;
      const bool last_only = n.dims.size() == 1 && n.dims[0] == rank - 1;
      bool leading = static_cast<int64_t>(n.dims.size()) == rank - 1;
      for (size_t i = 0; leading && i < n.dims.size(); ++i) leading = n.dims[i] == int64_t(i);
      if (n.op == Op::kSumDim && leading && oc == Cls::kCol) {
        Atom a;
        a.kind = Atom::kColSum;
        a.cls = Cls::kCol;
        a.dtype = om.dtype;
        a.value = out;
        a.inner = *in(0);
        const int id = intern(std::move(a));
        colsums_[static_cast<int>(&n - g_.nodes.data())] = id;
        return Poly::atom(id);
      }
      if (!last_only || (oc != Cls::kRow && oc != Cls::kRowFlat)) return std::nullopt;
      auto s1 = rowsum(*in(0));
      if (!s1) return std::nullopt;
      const double c = static_cast<double>(cols_);
      std::optional<Poly> r;
      if (n.op == Op::kSumDim) r = s1;
      if (n.op == Op::kMeanDim || (n.op == Op::kVarMean && k == 1)) r = scale(*s1, 1 / c);
      if (n.op == Op::kVar || (n.op == Op::kVarMean && k == 0)) {
        if (!(n.correction < c)) return std::nullopt;
        auto sq = mul(*in(0), *in(0));
        auto s2 = sq ? rowsum(*sq) : std::nullopt;
        auto s1s1 = mul(*s1, *s1);
        if (!s2 || !s1s1) return std::nullopt;
        r = scale(add(*s2, *s1s1, -1 / c), 1 / (c - n.correction));
      }
      if (!r) return std::nullopt;
      return round(*r, om.dtype);
    }
    default:
      break;
  }
  if (n.outputs.size() != 1) return std::nullopt;
  // Elementwise arithmetic (kConvertElementType..kMinimum is the pointwise family).
  if (static_cast<size_t>(n.op) > static_cast<size_t>(Op::kMinimum)) return std::nullopt;
  return pointwise(n);
}

Algebra::Algebra(const Graph& g, int64_t rows, int64_t cols) : g_(g), rows_(rows), cols_(cols) {
  vals_.resize(g.values.size());
  for (int v : g.inputs) leaf(v);
  for (const Node& n : g.nodes) {
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const int v = n.outputs[k];
      std::optional<Poly> p;
      try {
        p = eval(n, static_cast<int>(k));
      } catch (const std::exception&) {
        p.reset();
      }
      if (!p) {
        leaf(v);
        continue;
      }
      // A sum of several element leaves (dy summed from several matmuls, x recomputed as a
      // residual add) is an input of a norm backward, not part of it: the region reads it. A
      // multiple of one leaf (2 * x) stays algebra.
      if (classify(g.meta(v).shape) == Cls::kElem && sums_leaves(*p)) {
        leaf(v);
        continue;
      }
      vals_[v].p = std::move(p);
      vals_[v].absorbed = true;
    }
  }
  for (size_t v = 0; v < vals_.size(); ++v)
    if (vals_[v].p && classify(g.meta(static_cast<int>(v)).shape) == Cls::kElem)
      elem_vals_[mono_key(*vals_[v].p)].push_back(static_cast<int>(v));
}

}  // namespace replay::norm_bwd
