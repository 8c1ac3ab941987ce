// ag_matmul matcher (issue 31). Candidates: every all_gather_into_tensor of the canonical graph.
// A region is
//   all_gather    x_shard [m, .., K] over a group of world_size ranks (dim 0, the only dim the
//                 functional op gathers along)
//   wait_tensor   its only reader (the async handle resolved; matched explicitly: the canonical
//                 form keeps it, and the wait still runs as captured where the region does not)
//   [view]        the gathered [n m, .., K] as [M, K], the wait's only reader
//   mm            self = the gathered [M, K] (or its view), mat2 = the weight shard [K, N];
//   _scaled_mm    or the float8 GEMM with its scales read as they are
//   [view]        the result back to [.., N], its only reader
// Declined, with the reason: a group other than the world; a gathered tensor something else reads
// (it must stay private to be chunked); the split/cat form that gathers along a dim other than 0
// (all_gather on dim 0, then split into world_size chunks and cat along dim d: not matched yet);
// a gathered tensor that is not the GEMM's self (it would be the weight: not column-parallel).
#include <string>

#include "impls/fusions/ag_matmul/params.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::ag_matmul {
namespace {

bool match_one(const Graph& g, int ag, Matches& out) {
  const Node& n = g.nodes[ag];
  Params p;
  p.all_gather = ag;
  p.x = n.operands[0].value;
  p.world_size = n.group_size;
  if (n.group_size != g.world_size)
    return out.decline(ag, "group_size " + std::to_string(n.group_size) +
                               " is not the trace's world_size " + std::to_string(g.world_size) +
                               ": only an all-gather over the whole world is fused");
  const int gathered = n.outputs[0];
  p.wait = single_user(g, gathered);
  if (p.wait < 0 || g.nodes[p.wait].op != Op::kWaitTensor)
    return out.decline(ag, "the all_gather's output " + quoted_value(g, gathered) +
                               " is not read by exactly one wait_tensor (readers: " +
                               readers_str(g, gathered) + ")");
  int v = g.nodes[p.wait].outputs[0];
  int reader = single_user(g, v);
  for (int u : g.values[v].users)
    if (g.nodes[u].op == Op::kSplit || g.nodes[u].op == Op::kSplitWithSizes ||
        g.nodes[u].op == Op::kCat)
      return out.decline(ag, "the gathered tensor " + quoted_value(g, v) + " is split by node '" +
                                 g.nodes[u].id +
                                 "': the split/cat form of a gather along a dim other than 0 is "
                                 "not matched yet (only dim 0 is)");
  if (reader < 0)
    return out.decline(ag, "the gathered tensor " + quoted_value(g, v) +
                               " is read elsewhere too (readers: " + readers_str(g, v) +
                               "): a fused all-gather matmul keeps it private");
  if (is_flat_reshape(g.nodes[reader].op) && g.meta(v).is_contiguous()) {
    p.in_view = reader;
    v = g.nodes[reader].outputs[0];
    reader = single_user(g, v);
    if (reader < 0)
      return out.decline(ag, "the gathered tensor's view " + quoted_value(g, v) +
                                 " is read elsewhere too (readers: " + readers_str(g, v) + ")");
  }
  const Node& mm = g.nodes[reader];
  if (mm.op != Op::kMm && mm.op != Op::kScaledMm)
    return out.decline(ag, "the gathered tensor " + quoted_value(g, v) + " is read by node '" +
                               mm.id + "', not by aten.mm or aten._scaled_mm");
  if (mm.operands[0].value != v)
    return out.decline(ag, "the gathered tensor " + quoted_value(g, v) + " is mat2 of node '" +
                               mm.id + "', not its self: not the column-parallel form");
  const TensorMeta& ma = g.meta(v);
  if (ma.shape.size() != 2 || !ma.is_contiguous())
    return out.decline(ag, "the GEMM's self " + quoted_value(g, v) + " " + ma.str() +
                               " is not a row-major [M, K]");
  p.mm = reader;
  p.scaled = mm.op == Op::kScaledMm;
  p.b = mm.operands[1].value;
  if (p.scaled) {
    p.scale_a = mm.operands[2].value;
    p.scale_b = mm.operands[3].value;
    if (mm.operands.size() > 4 && mm.operands[4].is_tensor())
      return out.decline(ag, "_scaled_mm '" + mm.id + "' has a bias: not matched yet");
  }
  p.M = ma.shape[0];
  p.K = ma.shape[1];
  p.N = g.meta(p.b).shape[1];
  p.out = mm.outputs[0];
  if (const int u = single_user(g, p.out); u >= 0 && is_flat_reshape(g.nodes[u].op) &&
                                           g.meta(g.nodes[u].outputs[0]).shape.back() == p.N) {
    p.out_view = u;
    p.out = g.nodes[u].outputs[0];
  }
  std::vector<int> nodes{p.all_gather, p.wait, p.mm};
  if (p.in_view >= 0) nodes.push_back(p.in_view);
  if (p.out_view >= 0) nodes.push_back(p.out_view);
  if (!intermediates_private(g, nodes, {p.out}))
    return out.decline(ag,
                       "a value between the all_gather and the GEMM's result is read outside "
                       "the region");
  out.regions.push_back(make_region(g, nodes, p));
  return true;
}

}  // namespace

void match(const Graph& g, Matches& out) {
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i)
    if (g.nodes[i].op == Op::kAllGatherIntoTensor) match_one(g, i, out);
}

}  // namespace replay::ag_matmul
