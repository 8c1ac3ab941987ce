// matmul_rs matcher (issue 31). Candidates: every reduce_scatter_tensor of the canonical graph.
// A region is
//   [view]          the activation [.., K] as [M, K], read only by the GEMM
//   mm              self [M, K] (or its view), mat2 = the weight shard [K, N];
//   _scaled_mm      or the float8 GEMM with its scales read as they are
//   [view]          the partial product [M, N] as [M_0, .., N], its only reader
//   [split, cat]    the split/cat form of a scatter along dim d > 0 (tp_match.hpp), as DTensor's
//                   Partial -> Shard(d) (sequence parallelism) captures
//   reduce_scatter  of the partial product (or its view), the only reader, over the whole world
//                   (dim 0, the only dim the functional op scatters along)
//   wait_tensor     its only reader (matched explicitly: the canonical form keeps it)
// Declined, with the reason: a group other than the world; a cat that is not the split/cat form,
// or one along the last dim (N: not rows); a partial product something else reads; an operand
// that is not a GEMM's output.
#include <string>

#include "impls/fusions/matmul_rs/params.hpp"
#include "impls/fusions/tp_match.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::matmul_rs {
namespace {

bool match_one(const Graph& g, int rs, Matches& out) {
  const Node& n = g.nodes[rs];
  Params p;
  p.reduce_scatter = rs;
  p.world_size = n.group_size;
  p.reduce_op = n.mode;
  if (n.group_size != g.world_size)
    return out.decline(rs, "group_size " + std::to_string(n.group_size) +
                               " is not the trace's world_size " + std::to_string(g.world_size) +
                               ": only a reduce-scatter over the whole world is fused");
  if (n.mode != "sum" && n.mode != "avg")
    return out.decline(rs, "reduce_op '" + n.mode +
                               "': a row-parallel linear's partial products are summed (sum or "
                               "avg)");
  const int scattered = n.outputs[0];
  p.wait = single_user(g, scattered);
  if (p.wait < 0 || g.nodes[p.wait].op != Op::kWaitTensor)
    return out.decline(rs, "the reduce_scatter's output " + quoted_value(g, scattered) +
                               " is not read by exactly one wait_tensor (readers: " +
                               readers_str(g, scattered) + ")");
  p.out = g.nodes[p.wait].outputs[0];
  int v = n.operands[0].value;
  int q = g.values[v].producer;
  int first_reader = rs;  // the partial product's (or its view's) only reader
  std::vector<int> nodes;
  if (q >= 0 && g.nodes[q].op == Op::kCat) {
    tp::SplitCat sc;
    int src = -1;
    if (std::string why = tp::scatter_split_cat(g, v, n.group_size, sc, src); !why.empty())
      return out.decline(rs, "the reduce_scatter's input " + quoted_value(g, v) + " is made by cat '" +
                                 g.nodes[q].id +
                                 "', not the split/cat form of a scatter along a dim other than 0: " +
                                 why);
    const TensorMeta& sm = g.meta(src);
    if (sc.dim == static_cast<int64_t>(sm.shape.size()) - 1)
      return out.decline(rs, "node '" + g.nodes[tp::split_cat_nodes(sc)[0]].id + "' cuts " + quoted_value(g, src) +
                                 " " + sm.str() + " along its last dim (N): not a scatter of rows");
    if (!sm.is_contiguous())
      return out.decline(rs, "the partial product " + quoted_value(g, src) + " " + sm.str() +
                                 " is not contiguous");
    p.split = sc.split;
    p.cat = sc.cat;
    p.scatter_dim = sc.dim;
    p.lead = tp::lead_blocks(sm.shape, sc.dim);
    nodes = tp::split_cat_nodes(sc);
    first_reader = sc.split;  // the slices' source: checked by scatter_split_cat (-1 here)
    v = src;
    q = g.values[v].producer;
  }
  // Through an optional view, the GEMM that made the partial product.
  int view = -1, pv = v;
  if (q >= 0 && is_flat_reshape(g.nodes[q].op)) {
    const int src = g.nodes[q].operands[0].value;
    const int sp = g.values[src].producer;
    if (sp >= 0 && (g.nodes[sp].op == Op::kMm || g.nodes[sp].op == Op::kScaledMm)) {
      view = q;
      pv = src;
      q = sp;
    }
  }
  if (q < 0 || (g.nodes[q].op != Op::kMm && g.nodes[q].op != Op::kScaledMm))
    return out.decline(rs, "the reduce_scatter's input " + quoted_value(g, v) +
                               " is not the output of aten.mm or aten._scaled_mm");
  for (const auto& [value, reader] : {std::pair{v, first_reader}, std::pair{pv, view}})
    if (reader >= 0 && single_user(g, value) != reader)
      return out.decline(rs, "the partial product " + quoted_value(g, value) +
                                 " is read elsewhere too (readers: " + readers_str(g, value) +
                                 "): a fused matmul reduce-scatter keeps it private");
  p.out_view = view;
  const Node& mm = g.nodes[q];
  p.mm = q;
  p.mm_out = mm.outputs[0];
  p.scaled = mm.op == Op::kScaledMm;
  p.a = mm.operands[0].value;
  p.b = mm.operands[1].value;
  if (p.scaled) {
    p.scale_a = mm.operands[2].value;
    p.scale_b = mm.operands[3].value;
    if (mm.operands.size() > 4 && mm.operands[4].is_tensor())
      return out.decline(rs, "_scaled_mm '" + mm.id + "' has a bias: not matched yet");
  }
  const TensorMeta& ma = g.meta(p.a);
  p.M = ma.shape[0];
  p.K = ma.shape[1];
  p.N = g.meta(p.b).shape[1];
  if (const int iv = g.values[p.a].producer;
      iv >= 0 && is_flat_reshape(g.nodes[iv].op) && single_user(g, p.a) == p.mm &&
      g.meta(g.nodes[iv].operands[0].value).is_contiguous()) {
    p.in_view = iv;
    p.a = g.nodes[iv].operands[0].value;
  }
  nodes.insert(nodes.end(), {p.mm, p.reduce_scatter, p.wait});
  if (p.in_view >= 0) nodes.push_back(p.in_view);
  if (p.out_view >= 0) nodes.push_back(p.out_view);
  if (!intermediates_private(g, nodes, {p.out}))
    return out.decline(rs,
                       "a value between the GEMM and the reduce_scatter's result is read "
                       "outside the region");
  out.regions.push_back(make_region(g, nodes, p));
  return true;
}

}  // namespace

void match(const Graph& g, Matches& out) {
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i)
    if (g.nodes[i].op == Op::kReduceScatterTensor) match_one(g, i, out);
}

}  // namespace replay::matmul_rs
