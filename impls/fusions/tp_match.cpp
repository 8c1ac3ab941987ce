// The split/cat forms of the functional collectives (tp_match.hpp).
#include "impls/fusions/tp_match.hpp"

#include <algorithm>

#include "workloads/plan/match_util.hpp"

namespace replay::tp {
namespace {

bool is_split(Op op) { return op == Op::kSplit || op == Op::kSplitWithSizes; }

// Whether split node `s` makes n equal chunks, each read only by node `cat`, which takes exactly
// them in order. "" or why not.
std::string chunks_into_cat(const Graph& g, int s, int64_t n, int cat) {
  const Node& sp = g.nodes[s];
  if (static_cast<int64_t>(sp.outputs.size()) != n)
    return "split '" + sp.id + "' makes " + std::to_string(sp.outputs.size()) +
           " chunks, not one per rank (" + std::to_string(n) + ")";
  for (int64_t c = 1; c < n; ++c)
    if (sp.sizes[c] != sp.sizes[0])
      return "split '" + sp.id + "' makes chunks of different sizes";
  const Node& ct = g.nodes[cat];
  if (ct.operands.size() != sp.outputs.size())
    return "cat '" + ct.id + "' joins " + std::to_string(ct.operands.size()) + " tensors, not the " +
           std::to_string(n) + " chunks of split '" + sp.id + "'";
  for (int64_t c = 0; c < n; ++c) {
    if (ct.operands[c].value != sp.outputs[c])
      return "cat '" + ct.id + "' does not take split '" + sp.id + "''s chunks in order";
    if (single_user(g, sp.outputs[c]) != cat)
      return "chunk " + std::to_string(c) + " of split '" + sp.id + "' is read elsewhere too (readers: " +
             readers_str(g, sp.outputs[c]) + ")";
  }
  return "";
}

// The cat of n slices of one tensor, equal consecutive ranges of one dim from 0 to its end, in
// order, each read only by the cat.
std::string slices_into_cat(const Graph& g, int cat, int64_t n, SplitCat& sc, int& source) {
  const Node& ct = g.nodes[cat];
  if (static_cast<int64_t>(ct.operands.size()) != n)
    return "cat '" + ct.id + "' joins " + std::to_string(ct.operands.size()) +
           " slices, not one per rank (" + std::to_string(n) + ")";
  std::vector<int> slices;
  int src = -1;
  int64_t dim = -1, len = -1;
  for (int64_t c = 0; c < n; ++c) {
    const int v = ct.operands[c].value;
    const int s = g.values[v].producer;
    if (s < 0 || g.nodes[s].op != Op::kSlice)
      return "input " + std::to_string(c) + " of cat '" + ct.id + "' is not a slice";
    const Node& sl = g.nodes[s];
    if (c == 0) {
      src = sl.operands[0].value;
      dim = sl.dim;
      len = sl.end - sl.start;
    }
    if (sl.operands[0].value != src || sl.dim != dim || sl.step != 1 || sl.start != c * len ||
        sl.end != (c + 1) * len)
      return "slice '" + sl.id + "' is not chunk " + std::to_string(c) + " of " + std::to_string(n) +
             " equal chunks of one tensor along one dim";
    if (single_user(g, v) != cat)
      return "slice '" + sl.id + "' is read elsewhere too (readers: " + readers_str(g, v) + ")";
    slices.push_back(s);
  }
  if (g.meta(src).shape[dim] != n * len)
    return "the slices of " + quoted_value(g, src) + " do not cover its dim " + std::to_string(dim);
  for (int u : g.values[src].users)
    if (std::find(slices.begin(), slices.end(), u) == slices.end() || g.values[src].graph_output)
      return "the sliced tensor " + quoted_value(g, src) + " is read elsewhere too (readers: " +
             readers_str(g, src) + ")";
  sc = SplitCat{-1, slices, cat, dim};
  source = src;
  return "";
}

}  // namespace

std::vector<int> split_cat_nodes(const SplitCat& sc) {
  std::vector<int> v = sc.slices;
  if (sc.split >= 0) v.push_back(sc.split);
  v.push_back(sc.cat);
  return v;
}

std::string gather_split_cat(const Graph& g, int w, int64_t n, SplitCat& sc) {
  if (!g.values[w].users.empty() && g.nodes[g.values[w].users[0]].op == Op::kSlice) {
    const int cat = single_user(g, g.nodes[g.values[w].users[0]].outputs[0]);
    if (cat < 0 || g.nodes[cat].op != Op::kCat)
      return "the slices of the gathered tensor " + quoted_value(g, w) + " are not joined by one cat";
    int src = -1;
    if (std::string why = slices_into_cat(g, cat, n, sc, src); !why.empty()) return why;
    if (src != w || sc.dim != 0)
      return "cat '" + g.nodes[cat].id + "' does not join slices of the gathered tensor along dim 0";
    sc.dim = g.nodes[cat].dim;
    return "";
  }
  const int s = single_user(g, w);
  if (s < 0 || !is_split(g.nodes[s].op))
    return "the gathered tensor " + quoted_value(g, w) + " is split and read elsewhere too (readers: " +
           readers_str(g, w) + ")";
  if (g.nodes[s].dim != 0)
    return "split '" + g.nodes[s].id + "' of the gathered tensor is along dim " +
           std::to_string(g.nodes[s].dim) + ", not along the ranks' dim 0";
  const int cat = single_user(g, g.nodes[s].outputs[0]);
  if (cat < 0 || g.nodes[cat].op != Op::kCat)
    return "the chunks of split '" + g.nodes[s].id + "' are not joined by one cat (readers of the first: " +
           readers_str(g, g.nodes[s].outputs[0]) + ")";
  if (std::string why = chunks_into_cat(g, s, n, cat); !why.empty()) return why;
  sc = SplitCat{s, {}, cat, g.nodes[cat].dim};
  return "";
}

std::string scatter_split_cat(const Graph& g, int v, int64_t n, SplitCat& sc, int& source) {
  const int cat = g.values[v].producer;
  if (cat < 0 || g.nodes[cat].op != Op::kCat) return "the input is not made by a cat";
  if (g.nodes[cat].dim != 0)
    return "cat '" + g.nodes[cat].id + "' joins along dim " + std::to_string(g.nodes[cat].dim) +
           ", not along the ranks' dim 0";
  const int first = g.nodes[cat].operands.empty() ? -1 : g.nodes[cat].operands[0].value;
  const int s = first < 0 ? -1 : g.values[first].producer;
  if (s >= 0 && g.nodes[s].op == Op::kSlice) return slices_into_cat(g, cat, n, sc, source);
  if (s < 0 || !is_split(g.nodes[s].op))
    return "cat '" + g.nodes[cat].id + "' does not join the chunks of a split or of slices";
  if (std::string why = chunks_into_cat(g, s, n, cat); !why.empty()) return why;
  sc = SplitCat{s, {}, cat, g.nodes[s].dim};
  source = g.nodes[s].operands[0].value;
  return "";
}

int64_t lead_blocks(const std::vector<int64_t>& shape, int64_t dim) {
  int64_t l = 1;
  for (int64_t d = 0; d < dim && d < static_cast<int64_t>(shape.size()); ++d) l *= shape[d];
  return l;
}

std::string operand_role(const Graph& g, int reader, int v) {
  const Node& n = g.nodes[reader];
  if (n.op == Op::kMm || n.op == Op::kScaledMm) {
    static const char* kRoles[] = {"self", "mat2", "scale_a", "scale_b"};
    for (size_t i = 0; i < n.operands.size() && i < 4; ++i)
      if (n.operands[i].value == v) return kRoles[i];
  }
  return "an operand";
}

}  // namespace replay::tp
