// The norm_bwd matcher's normal form: every value of a graph written as a polynomial over
// "atoms" for one row shape [R, C], so that the many ways model code and decompositions write a
// norm backward (commuted operands, mul by 1/C or div by C, pow(x, 1) * 2 or x + x, alias and
// expand chains, sub vs add of a negative, with or without converts) reduce to one form that can
// be compared with the textbook formula.
//
// Atoms (each with a shape class: element [R, C], row [R, 1], column [C] or scalar):
//   leaf     a value the region reads (a graph input, or a value whose producer is not algebra)
//   round    a value rounded to a narrow dtype (bf16/fp16) where the graph materializes it:
//            rnd_t(inner); float32 and wider roundings are the fp32 math's own noise, identity here
//   rowsum   sum over the last dim of an element monomial; factors constant along the row are
//            pulled out (sum(g * x * rstd) = rstd * sum(g * x)), so any grouping compares equal
//   rsqrt    rsqrt of a row polynomial (a recomputed rstd)
//   colsum   sum over every dim but the last (the dw/db reductions), with its inner polynomial
// Coefficients are doubles compared with a relative tolerance (1e-9); exponents are integers,
// negative for division by a monomial. Anything else (division by a sum, sqrt, exp, ...) is not
// algebra: its result becomes a leaf. So is a linear combination of element leaves (dy summed
// from several matmuls, x recomputed as a residual add): the region then reads that value.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "workloads/ir/graph.hpp"

namespace replay::norm_bwd {

enum class Cls : uint8_t { kNone, kScalar, kRow, kCol, kElem, kRowFlat };

using Mono = std::vector<std::pair<int, int>>;  ///< (atom, exponent), sorted by atom, exp != 0

struct Poly {
  std::map<Mono, double> t;  ///< monomial -> coefficient (nonzero)
  static Poly constant(double c);
  static Poly atom(int a);
  bool is_zero() const { return t.empty(); }
};

struct Atom {
  enum Kind : uint8_t { kLeaf, kRound, kRowSum, kRsqrt, kColSum };
  Kind kind = kLeaf;
  Cls cls = Cls::kNone;           ///< kScalar, kRow, kCol or kElem
  DType dtype = DType::kFloat32;  ///< the dtype its values are exactly representable in
  int value = -1;                 ///< kLeaf: the value read; kColSum: the sum's output value
  Poly inner;                     ///< kRound, kRsqrt, kColSum: the operand; kRowSum: monomial
};

class Algebra {
 public:
  /// Evaluates every value of `g` for rows of [rows, cols] (rows, cols >= 2), in graph order.
  Algebra(const Graph& g, int64_t rows, int64_t cols);

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  /// The polynomial of value v; std::nullopt when its shape has no class for [rows, cols].
  const std::optional<Poly>& value(int v) const { return vals_[v].p; }
  /// True when v's producer is part of the algebra (v is not a leaf of its own).
  bool absorbed(int v) const { return vals_[v].absorbed; }
  const Atom& atom(int a) const { return atoms_[a]; }
  int num_atoms() const { return static_cast<int>(atoms_.size()); }
  /// The colsum atom a node produced, or -1.
  int colsum_atom(int node) const;

  // Arithmetic (fails with std::nullopt beyond the size limits).
  std::optional<Poly> mul(const Poly& a, const Poly& b) const;
  static Poly add(const Poly& a, const Poly& b, double alpha = 1);
  static Poly scale(const Poly& a, double c);
  /// Sum over the last dim, in the canonical form (creates rowsum atoms).
  std::optional<Poly> rowsum(const Poly& p);
  /// The round atom rnd_t(p) when one exists (the graph rounded p to t somewhere), else -1.
  int find_round(const Poly& p, DType t) const;
  /// Every narrow dtype p is rounded to somewhere in the graph.
  std::vector<std::pair<DType, int>> rounds_of(const Poly& p) const;
  /// Element-class values whose polynomial equals p, in graph order.
  std::vector<int> values_equal(const Poly& p) const;
  /// Atoms p mentions, through the inner polynomials of round/rsqrt/colsum/rowsum atoms.
  std::vector<int> closure(const Poly& p) const;
  Cls cls(const Poly& p) const;
  /// The class of a shape for [rows, cols].
  Cls classify(const std::vector<int64_t>& shape) const;

 private:
  struct Val {
    std::optional<Poly> p;
    bool absorbed = false;
  };
  void leaf(int v);
  /// p is a linear combination of two or more element leaves (or a rounding of one).
  bool sums_leaves(const Poly& p) const;
  std::optional<Poly> eval(const Node& n, int k);
  std::optional<Poly> pointwise(const Node& n);
  std::optional<Poly> round(const Poly& p, DType t);
  int intern(Atom a);

  const Graph& g_;
  int64_t rows_, cols_;
  std::vector<Val> vals_;
  std::vector<Atom> atoms_;
  std::unordered_map<std::string, std::vector<int>> by_key_;     // round/rsqrt atoms by shape key
  std::map<Mono, int> rowsums_;                                  // rowsum atom by monomial
  std::unordered_map<std::string, std::vector<int>> elem_vals_;  // element values by key
  std::map<int, int> colsums_;                                   // node -> colsum atom
};

/// Equal up to a relative 1e-9 in every coefficient.
bool same(const Poly& a, const Poly& b);
/// A key of p's monomials (not its coefficients): equal polynomials have equal keys.
std::string mono_key(const Poly& p);

}  // namespace replay::norm_bwd
