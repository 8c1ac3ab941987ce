// layernorm_fwd matcher: LayerNorm- and RMSNorm-shaped forward graphs.
//
// LayerNorm (nanoGPT, F.layer_norm decomposed by Inductor's table):
//   x32 = convert(x)?; var, mean = var_mean(x32, [-1], correction=c, keepdim)  (c < C; 0 usual)
//   rstd = rsqrt(var + eps); y = (x32 - mean) * rstd; epilogue
// RMSNorm (Llama / torchtitan):
//   x32 = convert(x)?; ms = mean(pow(x32, 2) | x32 * x32, [-1], keepdim)
//   rstd = rsqrt(ms + eps); y = x32 * rstd; epilogue
// epilogue: up to 4 of {convert(dtype), mul by a [C] weight, add a [C] bias}, in graph order, each
// weight optionally behind its own convert. Every intermediate must be used only inside the region.
#include <algorithm>

#include "impls/fusions/layernorm_fwd/params.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::layernorm_fwd {
namespace {

// add(v, eps) -> rsqrt: returns {eps, rsqrt node} or {0, -1}.
std::pair<double, int> match_eps_rsqrt(const Graph& g, int v, std::vector<int>& nodes) {
  int add = single_user(g, v);
  if (add < 0 || g.nodes[add].op != Op::kAdd) return {0, -1};
  const Node& a = g.nodes[add];
  if (a.operands.size() != 2 || a.operands[0].value != v || a.operands[1].is_tensor())
    return {0, -1};
  int rs = single_user(g, a.outputs[0]);
  if (rs < 0 || g.nodes[rs].op != Op::kRsqrt) return {0, -1};
  nodes.push_back(add);
  nodes.push_back(rs);
  return {a.alpha * a.operands[1].scalar, rs};
}

bool is_row_reduction(const Graph& g, const Node& n) {
  const auto& shape = g.meta(n.operands[0].value).shape;
  return !shape.empty() && n.keepdim && n.dims.size() == 1 &&
         n.dims[0] == static_cast<int64_t>(shape.size()) - 1 &&
         g.meta(n.operands[0].value).dtype == DType::kFloat32;
}

void try_match(const Graph& g, int root, std::vector<Region>& out) {
  const Node& r = g.nodes[root];
  std::vector<int> nodes = {root};
  int src = r.operands[0].value;  // fp32 activations
  int normalized = -1;            // value: (x - mean) * rstd, or x * rstd
  double eps = 0, correction = 0;
  NormKind kind = NormKind::kLayerNorm;
  if (r.op == Op::kVarMean) {
    if (!is_row_reduction(g, r)) return;
    correction = r.correction;
    auto [e, rs] = match_eps_rsqrt(g, r.outputs[0], nodes);
    if (rs < 0) return;
    int sub = single_user(g, r.outputs[1]);
    if (sub < 0 || g.nodes[sub].op != Op::kSub || g.nodes[sub].operands[0].value != src ||
        g.nodes[sub].operands[1].value != r.outputs[1] || g.nodes[sub].alpha != 1)
      return;
    int mul = single_user(g, g.nodes[sub].outputs[0]);
    int rstd = g.nodes[rs].outputs[0];
    if (mul < 0 || g.nodes[mul].op != Op::kMul || single_user(g, rstd) != mul ||
        other_tensor(g.nodes[mul], rstd) != g.nodes[sub].outputs[0])
      return;
    nodes.insert(nodes.end(), {sub, mul});
    normalized = g.nodes[mul].outputs[0];
    eps = e;
    kind = NormKind::kLayerNorm;
  } else if (r.op == Op::kMeanDim) {
    if (!is_row_reduction(g, r)) return;
    int sq_val = r.operands[0].value;
    int sq = g.values[sq_val].producer;
    if (sq < 0 || single_user(g, sq_val) != root) return;
    const Node& s = g.nodes[sq];
    if (s.op == Op::kPowTensorScalar && s.operands[1].scalar == 2) {
      src = s.operands[0].value;
    } else if (s.op == Op::kMul && s.operands[0].value >= 0 &&
               s.operands[0].value == s.operands[1].value) {
      src = s.operands[0].value;
    } else {
      return;
    }
    nodes.insert(nodes.begin(), sq);
    auto [e, rs] = match_eps_rsqrt(g, r.outputs[0], nodes);
    if (rs < 0) return;
    int mul = single_user(g, g.nodes[rs].outputs[0]);
    if (mul < 0 || g.nodes[mul].op != Op::kMul ||
        other_tensor(g.nodes[mul], g.nodes[rs].outputs[0]) != src)
      return;
    nodes.push_back(mul);
    normalized = g.nodes[mul].outputs[0];
    eps = e;
    kind = NormKind::kRMSNorm;
  } else {
    return;
  }
  if (g.meta(src).dtype != DType::kFloat32) return;
  const TensorMeta& xm = g.meta(src);
  const int64_t cols = xm.shape.back();

  // The upcast of the activations joins the region when nothing else reads its result.
  int x = src;
  int conv = g.values[src].producer;
  if (conv >= 0 && g.nodes[conv].op == Op::kConvertElementType) {
    std::vector<int> with = nodes;
    with.push_back(conv);
    const auto& users = g.values[src].users;
    if (!g.values[src].graph_output && std::all_of(users.begin(), users.end(), [&](int u) {
          return std::find(with.begin(), with.end(), u) != with.end();
        })) {
      nodes.push_back(conv);
      x = g.nodes[conv].operands[0].value;
    }
  }

  // Epilogue chain.
  std::vector<EpilogueStep> epilogue;
  int cur = normalized;
  for (int k = 0; k < kNormMaxEpilogue; ++k) {
    int u = single_user(g, cur);
    if (u < 0) break;
    const Node& n = g.nodes[u];
    const TensorMeta& om = g.meta(n.outputs[0]);
    if (om.shape != xm.shape) break;
    if (n.op == Op::kConvertElementType) {
      epilogue.push_back({EpilogueOp::kRound, n.dtype, -1});
    } else if ((n.op == Op::kMul || n.op == Op::kAdd) && n.alpha == 1) {
      int w = other_tensor(n, cur);
      if (w < 0 || w == cur || g.meta(w).numel() != cols || g.meta(w).shape.back() != cols) break;
      int wsrc = w;
      int wc = g.values[w].producer;
      if (wc >= 0 && g.nodes[wc].op == Op::kConvertElementType && single_user(g, w) == u) {
        nodes.push_back(wc);
        wsrc = g.nodes[wc].operands[0].value;
      }
      epilogue.push_back({n.op == Op::kMul ? EpilogueOp::kMul : EpilogueOp::kAdd, om.dtype, wsrc});
    } else {
      break;
    }
    nodes.push_back(u);
    cur = n.outputs[0];
  }
  if (!intermediates_private(g, nodes, {cur})) return;

  Params p;
  p.kind = kind;
  p.x = x;
  p.out = cur;
  p.rows = xm.numel() / std::max<int64_t>(cols, 1);
  p.cols = cols;
  p.eps = eps;
  p.correction = correction;
  p.epilogue = std::move(epilogue);
  out.push_back(make_region(g, std::move(nodes), std::move(p)));
}

}  // namespace

void match(const Graph& g, std::vector<Region>& out) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Op op = g.nodes[i].op;
    if (op == Op::kVarMean || op == Op::kMeanDim) try_match(g, static_cast<int>(i), out);
  }
}

}  // namespace replay::layernorm_fwd
