// ag_matmul matcher (issue 31). Candidates: every all_gather_into_tensor of the canonical graph.
// A region is
//   all_gather    x_shard [.., K] over a group of world_size ranks (dim 0, the only dim the
//                 functional op gathers along)
//   wait_tensor   its only reader (the async handle resolved; matched explicitly: the canonical
//                 form keeps it, and the wait still runs as captured where the region does not)
//   [split, cat]  the split/cat form of a gather along dim d > 0 (tp_match.hpp), as DTensor's
//                 Shard(d) -> Replicate (sequence parallelism) captures
//   [view]        the gathered [.., K] as [M, K]
//   mm ...        every mm / _scaled_mm whose self is the gathered [M, K] (one per weight shard
//                 [K, N_j]: Llama's w1 and w3 read the same gathered activation), float8 scales read
//                 as they are; a weight given as the transpose of a graph input (nn.Linear's
//                 [N, K] weight) is claimed with its permute
//   [view]        each result back to [.., N_j], its only reader
// The gathered tensor may be read outside the region as well (a training forward returns it for
// the weight gradient; the backward's weight-gradient GEMM reads it as mat2): the region then
// writes it. The fused step runs at the first node after every input is ready (the all-gather in
// a captured forward), so every outside reader of a result must come after that.
// Declined, with the reason: a group other than the world; a wait or a split chunk read elsewhere;
// a gather along the last dim (K, the GEMMs' reduction dim); a gathered tensor no GEMM reads as
// its self (the scales' gather of a rowwise float8 GEMM, a gathered bf16 quantized before its
// GEMM); a result read before the fused step can run.
#include <algorithm>
#include <set>
#include <string>

#include "impls/fusions/ag_matmul/params.hpp"
#include "impls/fusions/tp_match.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::ag_matmul {
namespace {

bool is_gemm(Op op) { return op == Op::kMm || op == Op::kScaledMm; }

// How the readers of `v` use it, for a decline: "'mm' as mat2, the graph output".
std::string uses_str(const Graph& g, int v) {
  std::string s;
  for (int u : g.values[v].users)
    s += (s.empty() ? "'" : ", '") + g.nodes[u].id + "' as " + tp::operand_role(g, u, v);
  if (g.values[v].graph_output) s += (s.empty() ? "" : ", ") + std::string("the graph output");
  return s.empty() ? "none" : s;
}

// The GEMM `u` reading the gathered [M, K] as self; its weight's transpose claimed when the weight
// is a permute / t of a graph input read only here.
Gemm read_gemm(const Graph& g, int u, std::vector<int>& nodes) {
  const Node& mm = g.nodes[u];
  Gemm ge;
  ge.mm = u;
  ge.mm_out = mm.outputs[0];
  ge.scaled = mm.op == Op::kScaledMm;
  ge.b = mm.operands[1].value;
  ge.N = g.meta(ge.b).shape[1];
  if (ge.scaled) {
    ge.scale_a = mm.operands[2].value;
    ge.scale_b = mm.operands[3].value;
  }
  ge.out = mm.outputs[0];
  nodes.push_back(u);
  if (const int v = single_user(g, ge.out);
      v >= 0 && is_flat_reshape(g.nodes[v].op) &&
      g.meta(g.nodes[v].outputs[0]).shape.back() == ge.N) {
    ge.out_view = v;
    ge.out = g.nodes[v].outputs[0];
    nodes.push_back(v);
  }
  // A weight that is a graph input through transposes only (permute [1, 0] / t, each read once:
  // nn.Linear's w.t(), and the backward's w.t().t()): the fused step reads the input itself,
  // swapping its strides for an odd count, so the region waits for none of those views.
  std::vector<int> chain;
  int w = ge.b;
  for (int reader = u;;) {
    const int t = g.values[w].producer;
    if (t < 0 || single_user(g, w) != reader ||
        !(g.nodes[t].op == Op::kT ||
          (g.nodes[t].op == Op::kPermute && g.nodes[t].dims == std::vector<int64_t>{1, 0})))
      break;
    chain.push_back(t);
    reader = t;
    w = g.nodes[t].operands[0].value;
  }
  if (!chain.empty() && g.values[w].graph_input && g.meta(w).shape.size() == 2) {
    nodes.insert(nodes.end(), chain.begin(), chain.end());
    if (chain.size() % 2 == 1)
      ge.b_transpose_of = w;
    else
      ge.b = w;
  }
  return ge;
}

bool match_one(const Graph& g, int ag, Matches& out) {
  const Node& n = g.nodes[ag];
  Params p;
  p.all_gather = ag;
  p.ag_out = n.outputs[0];
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
  std::vector<int> nodes{p.all_gather, p.wait};
  p.gathered = g.nodes[p.wait].outputs[0];
  for (int u : g.values[p.gathered].users)
    if (g.nodes[u].op == Op::kSplit || g.nodes[u].op == Op::kSplitWithSizes ||
        g.nodes[u].op == Op::kSlice) {
      tp::SplitCat sc;
      if (std::string why = tp::gather_split_cat(g, p.gathered, n.group_size, sc); !why.empty())
        return out.decline(ag, "not the split/cat form of a gather along a dim other than 0: " + why);
      p.split = sc.split;
      p.cat = sc.cat;
      p.gather_dim = sc.dim;
      for (int k : tp::split_cat_nodes(sc)) nodes.push_back(k);
      p.gathered = g.nodes[sc.cat].outputs[0];
      break;
    }
  const TensorMeta& xs = g.meta(p.x);
  if (xs.shape.size() < 2 || !xs.is_contiguous())
    return out.decline(ag, "the shard " + quoted_value(g, p.x) + " " + xs.str() +
                               " is not a contiguous tensor of 2 dims or more");
  if (p.gather_dim == static_cast<int64_t>(xs.shape.size()) - 1)
    return out.decline(ag, "the gather is along the last dim of " + quoted_value(g, p.x) + " " +
                               xs.str() +
                               " (K, the GEMM's reduction dim): not a gather of rows");
  const TensorMeta& gm = g.meta(p.gathered);
  if (!gm.is_contiguous())
    return out.decline(ag, "the gathered tensor " + quoted_value(g, p.gathered) + " " + gm.str() +
                               " is not contiguous");
  p.lead = tp::lead_blocks(xs.shape, p.gather_dim);
  p.K = xs.shape.back();
  p.M = gm.numel() / p.K;
  // Down to the GEMMs' [M, K] through views (a 3-D [1, T, K] first where the leading dims are
  // 1: the split/cat is then left out and the gather along dim 1 is a view).
  p.gathered_2d = p.gathered;
  p.gathered_values = {p.gathered};
  while (g.meta(p.gathered_2d).shape != std::vector<int64_t>{p.M, p.K}) {
    int next = -1;
    for (int u : g.values[p.gathered_2d].users)
      if (is_flat_reshape(g.nodes[u].op) && g.meta(g.nodes[u].outputs[0]).is_contiguous() &&
          g.meta(g.nodes[u].outputs[0]).shape.back() == p.K) {
        next = u;
        break;
      }
    if (next < 0 || p.in_views.size() > 8)
      return out.decline(ag, "the gathered tensor " + quoted_value(g, p.gathered_2d) + " " +
                                 g.meta(p.gathered_2d).str() +
                                 " is not viewed as the [M, K] of a GEMM (read by " +
                                 uses_str(g, p.gathered_2d) + ")");
    p.in_views.push_back(next);
    nodes.push_back(next);
    p.gathered_2d = g.nodes[next].outputs[0];
    p.gathered_values.push_back(p.gathered_2d);
  }
  std::string skipped;
  for (int u : g.values[p.gathered_2d].users) {
    const Node& mm = g.nodes[u];
    if (!is_gemm(mm.op) || mm.operands[0].value != p.gathered_2d) continue;
    if (mm.op == Op::kScaledMm && mm.operands.size() > 4 && mm.operands[4].is_tensor()) {
      skipped = "; _scaled_mm '" + mm.id + "' has a bias (not fused: it reads the gathered tensor)";
      continue;
    }
    p.gemms.push_back(read_gemm(g, u, nodes));
  }
  if (p.gemms.empty())
    return out.decline(ag, "the gathered tensor " + quoted_value(g, p.gathered_2d) +
                               " is the self of no aten.mm / aten._scaled_mm (read by " +
                               uses_str(g, p.gathered_2d) + ")" + skipped);
  std::sort(p.gemms.begin(), p.gemms.end(),
            [](const Gemm& a, const Gemm& b) { return a.mm < b.mm; });
  std::vector<int> exported = p.gathered_values;
  for (const Gemm& ge : p.gemms) exported.push_back(ge.out);
  if (!intermediates_private(g, nodes, exported))
    return out.decline(ag, "a value between the all_gather and the GEMMs' results (the wait's "
                           "output, a split chunk, a GEMM's output under its view) is read "
                           "outside the region");
  const std::set<int> in(nodes.begin(), nodes.end());
  Region r = make_region(g, nodes, p);
  int ready = -1;
  for (int v : r.inputs) ready = std::max(ready, g.values[v].producer);
  const int anchor = *std::lower_bound(r.nodes.begin(), r.nodes.end(), ready + 1);
  for (int e : r.outputs)
    for (int u : g.values[e].users)
      if (!in.count(u) && u < anchor)
        return out.decline(ag, "the region's result " + quoted_value(g, e) + " is read by node '" +
                                   g.nodes[u].id + "' before every input of the region is ready "
                                   "(the last is made by node '" + g.nodes[std::max(ready, 0)].id + "')");
  r.anchor = anchor;
  out.regions.push_back(std::move(r));
  return true;
}

}  // namespace

void match(const Graph& g, Matches& out) {
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i)
    if (g.nodes[i].op == Op::kAllGatherIntoTensor) match_one(g, i, out);
}

}  // namespace replay::ag_matmul
