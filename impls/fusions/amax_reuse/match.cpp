// amax_reuse matcher: the max-like reductions of one tensor (issue 27).
//
// Candidates: every aten.amax / aten.amin / aten.max.default / aten.min.default of the canonical
// graph. Each is traced back through aten.abs and exact upcasts (prims.convert_element_type to a
// wider float: torchao's `torch.abs(x).to(torch.float32)` then `torch.amax(torch.abs(.))`) to the
// tensor x they reduce; reductions of the same x, both of |x| or both of x, form a group:
//   x -> [abs] -> [convert(float32)] -> [abs] -> amax(., dims_1), amax(., dims_2), amin(...), ...
// A group of two or more is a region when x seen as [M, N] (dims of size 1 set aside) splits at
// one point into rows and columns such that each reduction is over the columns (rowwise), the
// rows (columnwise) or everything (tensorwise). The abs / convert nodes are claimed where only
// the region reads them; the fused step reads x and runs at the first reduction (Region::anchor),
// so a scale computed from the rowwise amax before the columnwise amax is reached still reads it
// in time. Declined, with the reason: a lone reduction (nothing to share a pass with), dims that
// are not rows, columns or all of one [M, N] view, and any sum or mean of the same tensor (not
// reused: a float sum regrouped rounds differently).
#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "impls/fusions/amax_reuse/params.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::amax_reuse {
namespace {

std::string vname(const Graph& g, int v) {
  return "'" + g.values[v].name + "'";
}

bool max_like(Op op) {
  return op == Op::kAmax || op == Op::kAmin || op == Op::kMax || op == Op::kMin;
}

bool sum_like(Op op) {
  return op == Op::kSum || op == Op::kSumDim || op == Op::kMean || op == Op::kMeanDim;
}

Extreme extreme_of(Op op) {
  return op == Op::kAmin || op == Op::kMin ? Extreme::kMin : Extreme::kMax;
}

const char* op_word(Op op) {
  switch (op) {
    case Op::kAmax:
      return "amax";
    case Op::kAmin:
      return "amin";
    case Op::kMax:
      return "max";
    case Op::kMin:
      return "min";
    default:
      return "reduction";
  }
}

// Every value of dtype `from` converts to `to` exactly (a float upcast, or no change).
bool exact_convert(DType from, DType to) {
  return from == to ||
         (is_floating(from) && is_floating(to) && promote_types(from, to) == std::optional(to));
}

// The elementwise step from a node's operand to its output that the group looks through: |.| or
// an exact float upcast. Returns false for anything else.
bool prologue_step(const Graph& g, const Node& n, bool& is_abs) {
  if (n.operands.size() != 1 || !n.operands[0].is_tensor()) return false;
  const DType in = g.meta(n.operands[0].value).dtype, out = g.meta(n.outputs[0]).dtype;
  if (!is_floating(in) || !is_floating(out)) return false;
  if (n.op == Op::kAbs) {
    is_abs = true;
    return true;
  }
  is_abs = false;
  return (n.op == Op::kConvertElementType || n.op == Op::kToCopy) && exact_convert(in, out);
}

struct Chain {
  int base = -1;           ///< the value before the first abs / upcast
  bool abs = false;        ///< an abs on the way
  std::vector<int> nodes;  ///< the abs / upcast nodes, from the reduction down
};

Chain chain_of(const Graph& g, int v) {
  Chain c;
  for (;;) {
    const int p = g.values[v].producer;
    bool is_abs = false;
    if (p < 0 || !prologue_step(g, g.nodes[p], is_abs)) break;
    c.abs |= is_abs;
    c.nodes.push_back(p);
    v = g.nodes[p].operands[0].value;
  }
  c.base = v;
  return c;
}

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// What x's dims a reduction takes, with dims of size 1 set aside: over all (kAll), over the
// trailing dims from `at` (kRows), over the leading dims up to `at` (kCols); false when neither.
bool classify(const std::vector<int64_t>& shape, const std::vector<int64_t>& dims, AmaxKind& kind,
              int& at, bool& empty) {
  std::vector<int> big;  // indices of the dims of size > 1
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1) big.push_back(static_cast<int>(d));
  std::vector<char> red(shape.size(), 0);
  for (int64_t d : dims) red[d] = 1;
  std::vector<char> r;  // reduced, over the big dims
  for (int d : big) r.push_back(red[d]);
  const int n = static_cast<int>(r.size());
  const int cnt = static_cast<int>(std::count(r.begin(), r.end(), 1));
  empty = cnt == 0 && n > 0;
  if (cnt == n) {
    kind = AmaxKind::kAll;
    at = -1;
    return !empty;
  }
  if (cnt == 0) return false;
  // Trailing: r = 0..0 1..1; leading: r = 1..1 0..0. `at` is a position among x's dims: the
  // first dim of the columns (every dim of size 1 before it counts with the rows).
  if (std::is_sorted(r.begin(), r.end())) {
    kind = AmaxKind::kRows;
    at = big[n - cnt];
    return true;
  }
  if (std::is_sorted(r.rbegin(), r.rend())) {
    kind = AmaxKind::kCols;
    at = big[cnt];
    return true;
  }
  return false;
}

struct Candidate {
  int node = -1;
  Chain chain;
};

}  // namespace

void match(const Graph& g, Matches& out) {
  // Groups of reductions of one x (both of |x|, or both of x), in graph order.
  std::map<std::pair<int, bool>, std::vector<Candidate>> groups;
  std::vector<std::pair<int, bool>> order;
  for (int ni = 0; ni < static_cast<int>(g.nodes.size()); ++ni) {
    const Node& n = g.nodes[ni];
    if (!max_like(n.op)) continue;
    Candidate c{ni, chain_of(g, n.operands[0].value)};
    const auto key = std::make_pair(c.chain.base, c.chain.abs);
    if (!groups.count(key)) order.push_back(key);
    groups[key].push_back(std::move(c));
  }
  // Sums and means of a tensor the groups reduce: declined by name (never reused).
  std::map<int, std::vector<std::pair<int, bool>>> reduced_values;  // value -> groups reading it
  for (const auto& key : order)
    for (const Candidate& c : groups[key]) {
      reduced_values[g.nodes[c.node].operands[0].value].push_back(key);
      reduced_values[c.chain.base].push_back(key);
      for (int p : c.chain.nodes) reduced_values[g.nodes[p].outputs[0]].push_back(key);
    }
  for (int ni = 0; ni < static_cast<int>(g.nodes.size()); ++ni) {
    const Node& n = g.nodes[ni];
    if (!sum_like(n.op) || !n.operands[0].is_tensor()) continue;
    const int v = n.operands[0].value;
    if (!reduced_values.count(v)) continue;
    out.decline(ni, std::string(op_name(n.op)) + " of " + vname(g, v) +
                        " beside max-like reductions of the same tensor is not reused: a float "
                        "sum regrouped (B from A) rounds differently from the graph's; only "
                        "amax, amin and max are computed from one another");
  }

  for (const auto& key : order) {
    const std::vector<Candidate>& cs = groups[key];
    const int x0 = key.first;
    const std::string what = std::string(key.second ? "|" : "") + g.values[x0].name +
                             (key.second ? "|" : "") + " (" + g.meta(x0).str() + ")";
    if (cs.size() < 2) {
      out.decline(cs[0].node,
                  std::string("the only max-like reduction of ") + what +
                      ": no other amax/amin/max of the same tensor shares a pass with it (the "
                      "others in the graph, if any, reduce other tensors)");
      continue;
    }
    // Claim the abs / upcast nodes only the region reads.
    std::set<int> nodes;
    for (const Candidate& c : cs) nodes.insert(c.node);
    std::set<int> chain_nodes;
    for (const Candidate& c : cs) chain_nodes.insert(c.chain.nodes.begin(), c.chain.nodes.end());
    for (bool grew = true; grew;) {
      grew = false;
      for (int p : chain_nodes) {
        if (nodes.count(p)) continue;
        const Value& v = g.values[g.nodes[p].outputs[0]];
        if (v.graph_output) continue;
        if (std::all_of(v.users.begin(), v.users.end(), [&](int u) { return nodes.count(u); })) {
          nodes.insert(p);
          grew = true;
        }
      }
    }
    Region r = make_region(g, std::vector<int>(nodes.begin(), nodes.end()), std::any());
    if (r.inputs.size() != 1) {  // chains reach x through values read outside: claim none
      std::set<int> srcs;
      for (const Candidate& c : cs) srcs.insert(g.nodes[c.node].operands[0].value);
      if (srcs.size() != 1) {
        out.decline(cs[0].node, "the max-like reductions of " + what +
                                    " reach it through different values, some of them read "
                                    "outside the region (one tensor must be read)");
        continue;
      }
      nodes.clear();
      for (const Candidate& c : cs) nodes.insert(c.node);
      r = make_region(g, std::vector<int>(nodes.begin(), nodes.end()), std::any());
    }
    Params p;
    p.x = r.inputs.at(0);
    p.abs = key.second;
    for (int n : nodes)
      if (!max_like(g.nodes[n].op)) p.prologue.push_back(g.nodes[n].outputs[0]);
    const std::vector<int64_t>& shape = g.meta(p.x).shape;
    int split = -1;
    std::string why;
    for (const Candidate& c : cs) {
      const Node& n = g.nodes[c.node];
      Reduction red;
      red.out = n.outputs[0];
      red.extreme = extreme_of(n.op);
      red.dims = n.dims;
      int at = -1;
      bool empty = false;
      if (!classify(shape, n.dims, red.kind, at, empty)) {
        why = empty ? std::string(op_word(n.op)) + " '" + n.id + "' reduces only dims of size 1 " +
                          "of " + shape_str(shape) + " (a copy, not a reduction)"
                    : std::string(op_word(n.op)) + " '" + n.id + "' over dims " + dims_str(n.dims) +
                          " of " + shape_str(shape) +
                          " reduces neither its leading nor its trailing dims";
        break;
      }
      if (at >= 0) {
        if (split >= 0 && split != at) {
          why = "reductions over dims " + dims_str(p.reductions[0].dims) + " and " +
                dims_str(n.dims) + " of " + shape_str(shape) +
                " do not split it at one point into rows and columns";
          break;
        }
        split = at;
      }
      p.reductions.push_back(std::move(red));
    }
    if (!why.empty()) {
      out.decline(cs[0].node, "max-like reductions of " + what + " not fused: " + why);
      continue;
    }
    if (split < 0) split = std::max<int>(0, static_cast<int>(shape.size()) - 1);  // all: any split
    p.split = split;
    p.M = 1;
    p.N = 1;
    for (int d = 0; d < static_cast<int>(shape.size()); ++d) (d < split ? p.M : p.N) *= shape[d];
    // Which reduction each is computed from in the one pass (B ⊃ A, the same extreme).
    for (auto& red : p.reductions) {
      if (red.kind != AmaxKind::kAll) continue;
      for (size_t j = 0; j < p.reductions.size(); ++j)
        if (p.reductions[j].kind == AmaxKind::kRows && p.reductions[j].extreme == red.extreme) {
          red.from = static_cast<int>(j);
          break;
        }
    }
    r.params = std::move(p);
    r.anchor = cs[0].node;  // the first reduction: x is computed, no output read yet
    out.regions.push_back(std::move(r));
  }
}

}  // namespace replay::amax_reuse
