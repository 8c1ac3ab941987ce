#include "workloads/plan/canonical.hpp"

#include <algorithm>
#include <numeric>

#include "workloads/ops/op.hpp"
#include "workloads/ops/promote.hpp"
#include "workloads/plan/fusion_spec.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay {
namespace {

bool identity_permutation(const std::vector<int64_t>& dims) {
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] != static_cast<int64_t>(i)) return false;
  return true;
}

// `n`'s output equals its operand value by value (rule "identity"): the operand, else -1.
int identity_source(const Graph& g, const Node& n) {
  if (n.outputs.size() != 1) return -1;
  const int x = sole_tensor(n);
  if (x < 0) return -1;
  const TensorMeta& in = g.meta(x);
  const TensorMeta& out = g.meta(n.outputs[0]);
  if (in.dtype != out.dtype || in.shape != out.shape) return -1;
  switch (n.op) {
    case Op::kAlias:
    case Op::kClone:
    case Op::kConvertElementType:
    case Op::kToCopy:
    case Op::kView:
    case Op::kUnsafeView:
    case Op::kReshape:
    case Op::kExpand:
      return x;
    case Op::kPermute:
    case Op::kT:
    case Op::kTranspose:
      return identity_permutation(n.dims) ? x : -1;
    case Op::kSlice:
      return n.start == 0 && n.step == 1 && n.end >= in.shape.at(n.dim) ? x : -1;
    case Op::kSqueeze:
    case Op::kSqueezeDim:
    case Op::kSqueezeDims:
      return n.dims.empty() ? x : -1;
    default:
      return -1;
  }
}

// Rule "round trip": convert(convert(x, wide), dtype(x)) with an exact first convert, or a chain
// of reshape-family views ending in x's own shape. `nodes` are the rewired nodes so far.
int round_trip_source(const Graph& g, const std::vector<Node>& nodes, const std::vector<char>& kept,
                      const Node& n) {
  if (n.outputs.size() != 1) return -1;
  const int u = sole_tensor(n);
  if (u < 0) return -1;
  const TensorMeta& out = g.meta(n.outputs[0]);
  auto producer = [&](int v) -> const Node* {
    const int p = g.values[v].producer;
    return p >= 0 && kept[p] ? &nodes[p] : nullptr;
  };
  if (n.op == Op::kConvertElementType || n.op == Op::kToCopy) {
    const Node* p = producer(u);
    if (!p || (p->op != Op::kConvertElementType && p->op != Op::kToCopy)) return -1;
    const int x = sole_tensor(*p);
    if (x < 0) return -1;
    const DType from = g.meta(x).dtype, wide = g.meta(u).dtype;
    return exact_widening(from, wide) && from == out.dtype && g.meta(x).shape == out.shape ? x : -1;
  }
  if (!is_reshape_family(n.op)) return -1;
  int cur = u;
  for (int depth = 0; depth < 16; ++depth) {
    const Node* p = producer(cur);
    if (!p || !is_reshape_family(p->op)) return -1;
    cur = sole_tensor(*p);
    if (cur < 0) return -1;
    if (g.meta(cur).shape == out.shape && g.meta(cur).dtype == out.dtype) return cur;
  }
  return -1;
}

bool commutative(const Node& n) {
  switch (n.op) {
    case Op::kAdd:
      return n.alpha == 1;
    case Op::kMul:
    case Op::kEq:
    case Op::kNe:
    case Op::kLogicalAnd:
    case Op::kLogicalOr:
    case Op::kLogicalXor:
      return true;
    default:
      return false;
  }
}

// Operand order of a commutative node: more elements first, then the later value.
bool should_swap(const Graph& g, const Node& n) {
  if (n.operands.size() != 2 || !n.operands[0].is_tensor() || !n.operands[1].is_tensor())
    return false;
  const int a = n.operands[0].value, b = n.operands[1].value;
  const int64_t na = g.meta(a).numel(), nb = g.meta(b).numel();
  if (na != nb) return nb > na;
  return b > a;
}

}  // namespace

int sole_tensor(const Node& n) {
  int v = -1;
  for (const auto& o : n.operands) {
    if (!o.is_tensor()) continue;
    if (v >= 0) return -1;
    v = o.value;
  }
  return v;
}

std::string_view canon_rule_name(CanonRule r) {
  switch (r) {
    case CanonRule::kIdentity:
      return "identity";
    case CanonRule::kRoundTrip:
      return "round trip";
    case CanonRule::kDead:
      return "dead";
  }
  return "?";
}

CanonicalGraph canonicalize(const Graph& g) {
  CanonicalGraph c;
  const int nv = static_cast<int>(g.values.size());
  const int nn = static_cast<int>(g.nodes.size());
  c.replaced_by.resize(nv);
  std::iota(c.replaced_by.begin(), c.replaced_by.end(), 0);
  c.canon_node.assign(nn, -1);
  c.rule.assign(nn, CanonRule::kIdentity);
  auto resolve = [&](int v) {
    while (c.replaced_by[v] != v) v = c.replaced_by[v];
    return v;
  };

  // Inputs that are the same tensor as an earlier input (Value::same_as): read the earlier one.
  for (int v : g.inputs)
    if (g.values[v].same_as >= 0) c.replaced_by[v] = g.values[v].same_as;
  // Inputs that are an earlier input widened (Value::widened_from): computed from it by a convert
  // node at the head of the graph (no captured node; orig_node -1), as the min-cut partitioner's
  // backward recomputes `x.float()` from the saved x.
  std::vector<Node> widened;
  for (int v : g.inputs) {
    if (g.values[v].widened_from < 0) continue;
    Node n;
    n.id = g.values[v].name;
    n.op = Op::kConvertElementType;
    n.dtype = g.values[v].meta.dtype;
    Operand o;
    o.value = g.values[v].widened_from;
    n.operands = {o};
    n.outputs = {v};
    widened.push_back(std::move(n));
  }

  // Identity and round-trip nodes: rewire their readers to the source; order commutative operands.
  std::vector<Node> nodes = g.nodes;
  std::vector<char> kept(nn, 1);
  for (int i = 0; i < nn; ++i) {
    Node& n = nodes[i];
    for (auto& o : n.operands)
      if (o.is_tensor()) o.value = resolve(o.value);
    int src = identity_source(g, n);
    CanonRule why = CanonRule::kIdentity;
    if (src < 0) {
      src = round_trip_source(g, nodes, kept, n);
      why = CanonRule::kRoundTrip;
    }
    if (src >= 0) {
      c.replaced_by[n.outputs[0]] = src;
      kept[i] = 0;
      c.rule[i] = why;
      continue;
    }
    if (commutative(n) && should_swap(g, n)) {
      std::swap(n.operands[0], n.operands[1]);
      ++c.reordered;
    }
  }

  // Graph outputs through the replacements (a value returned twice, or an input returned, is one).
  std::vector<char> is_output(nv, 0);
  std::vector<int> outputs;
  for (int v : g.outputs) {
    const int r = resolve(v);
    if (!is_output[r]) outputs.push_back(r);
    is_output[r] = 1;
  }

  // Dead nodes, last to first.
  std::vector<int> reads(nv, 0);
  for (int i = 0; i < nn; ++i)
    if (kept[i])
      for (const auto& o : nodes[i].operands)
        if (o.is_tensor()) ++reads[o.value];
  for (const Node& w : widened) ++reads[w.operands[0].value];
  for (int i = nn - 1; i >= 0; --i) {
    if (!kept[i]) continue;
    bool live = false;
    for (int v : nodes[i].outputs) live |= reads[v] > 0 || is_output[v];
    if (live) continue;
    kept[i] = 0;
    c.rule[i] = CanonRule::kDead;
    for (const auto& o : nodes[i].operands)
      if (o.is_tensor()) --reads[o.value];
  }

  // The canonical graph: kept nodes in captured order; values with producers, users and flags
  // recomputed (a removed node's outputs stay, orphaned).
  Graph& cg = c.graph;
  cg.name = g.name;
  cg.file = g.file;
  cg.source = g.source;
  cg.world_size = g.world_size;
  for (int v : g.inputs)
    if (g.values[v].widened_from < 0) cg.inputs.push_back(v);
  cg.golden = g.golden;
  cg.values = g.values;
  for (auto& v : cg.values) {
    v.users.clear();
    v.graph_output = false;
    v.producer = -1;
  }
  for (Node& w : widened) {  // read or returned: the input was (the dead pass keeps them)
    const int ci = static_cast<int>(cg.nodes.size());
    c.orig_node.push_back(-1);
    cg.values[w.operands[0].value].users.push_back(ci);
    cg.values[w.outputs[0]].producer = ci;
    cg.values[w.outputs[0]].graph_input = false;
    cg.nodes.push_back(std::move(w));
  }
  for (int i = 0; i < nn; ++i) {
    if (!kept[i]) {
      c.removed.push_back(i);
      continue;
    }
    const int ci = static_cast<int>(cg.nodes.size());
    c.canon_node[i] = ci;
    c.orig_node.push_back(i);
    for (const auto& o : nodes[i].operands)
      if (o.is_tensor()) cg.values[o.value].users.push_back(ci);
    for (int v : nodes[i].outputs) cg.values[v].producer = ci;
    cg.nodes.push_back(std::move(nodes[i]));
  }
  for (int v = 0; v < nv; ++v) c.replaced_by[v] = resolve(v);
  for (int v : outputs) cg.values[v].graph_output = true;
  cg.outputs = std::move(outputs);
  return c;
}

int captured_node(const CanonicalGraph& c, int n) {
  if (c.orig_node.at(n) >= 0) return c.orig_node[n];
  int first = -1;
  for (int u : c.graph.values[c.graph.nodes.at(n).outputs.at(0)].users)
    if (c.orig_node[u] >= 0 && (first < 0 || c.orig_node[u] < first)) first = c.orig_node[u];
  return first;
}

std::string map_region(const Graph& g, const CanonicalGraph& c, Region& r) {
  const int nn = static_cast<int>(g.nodes.size());
  std::vector<char> in(nn, 0);
  int anchor = -1;
  if (r.anchor >= 0 && std::find(r.nodes.begin(), r.nodes.end(), r.anchor) == r.nodes.end())
    return "the anchor the matcher chose is not one of the region's nodes";
  const int early = r.anchor >= 0 ? c.orig_node.at(r.anchor) : -1;  // the matcher's choice
  for (int n : r.nodes) {
    const int o = c.orig_node.at(n);
    if (o < 0) continue;  // a widened input's convert: the captured graph reads the input
    in[o] = 1;
    anchor = std::max(anchor, o);
  }
  auto from_region = [&](int v) {
    const int p = g.values[v].producer;
    return p >= 0 && in[p];
  };
  std::vector<char> written(g.values.size(), 0);  // by the fused step (or its views' aliases)
  for (int v : r.outputs) written[v] = 1;
  for (int n : r.views)  // canonical indices still; values are the captured graph's
    for (int v : c.graph.nodes.at(n).outputs) written[v] = 1;
  std::vector<int> absorbed, tail_candidates;
  // Forward: removed nodes reading the region's values.
  for (int k : c.removed) {
    const Node& n = g.nodes[k];
    bool any = false, all = true;
    for (const auto& o : n.operands) {
      if (!o.is_tensor()) continue;
      const bool mine = from_region(o.value);
      any |= mine;
      all &= mine;
    }
    if (!any) continue;
    if (c.rule[k] == CanonRule::kDead && !all)
      return "dead node '" + n.id + "' reads a value of the region beside values from outside it";
    in[k] = 1;
    absorbed.push_back(k);
    // An identity's value is the value it resolves to: a tail when the fused step writes that.
    if (c.rule[k] != CanonRule::kDead && written[c.replaced_by[n.outputs.at(0)]])
      tail_candidates.push_back(k);
  }
  // Backward: removed identity nodes whose every reader the region claims (a clone of an input).
  for (auto it = c.removed.rbegin(); it != c.removed.rend(); ++it) {
    const int k = *it;
    if (in[k] || c.rule[k] == CanonRule::kDead) continue;
    const Value& out = g.values[g.nodes[k].outputs.at(0)];
    if (out.graph_output || out.users.empty()) continue;
    if (std::all_of(out.users.begin(), out.users.end(), [&](int u) { return in[u] != 0; })) {
      in[k] = 1;
      absorbed.push_back(k);
    }
  }
  // Tails: absorbed identity nodes something outside the region reads, and those they read.
  std::vector<char> needed(nn, 0);
  for (auto it = tail_candidates.rbegin(); it != tail_candidates.rend(); ++it) {
    const Value& out = g.values[g.nodes[*it].outputs.at(0)];
    bool need = out.graph_output;
    for (int u : out.users) need |= !in[u] || needed[u];
    needed[*it] = need;
  }
  std::vector<TailAlias> tail;
  for (int k : tail_candidates)
    if (needed[k]) tail.push_back({k, c.replaced_by[g.nodes[k].outputs.at(0)]});
  for (int k : absorbed) {
    if (needed[k] || c.rule[k] == CanonRule::kDead) continue;
    const Value& out = g.values[g.nodes[k].outputs.at(0)];
    bool outside = out.graph_output;
    for (int u : out.users) outside |= !in[u];
    if (outside)
      return "node '" + g.nodes[k].id + "' (" + std::string(op_name(g.nodes[k].op)) +
             ") is read outside the region, but the value it passes on is private to it";
  }
  std::vector<int> nodes;
  for (int i = 0; i < nn; ++i)
    if (in[i]) nodes.push_back(i);
  std::sort(absorbed.begin(), absorbed.end());
  r.nodes = std::move(nodes);
  for (int& v : r.views) {
    v = c.orig_node.at(v);
    if (v < 0) return "a view the region leaves as an alias is not a node of the captured graph";
  }
  r.anchor = early >= 0 ? early : anchor;
  r.absorbed = std::move(absorbed);
  r.tail = std::move(tail);
  return "";
}

}  // namespace replay
