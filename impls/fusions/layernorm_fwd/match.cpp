// layernorm_fwd matcher: LayerNorm- and RMSNorm-shaped forward graphs, inference and training.
//
// LayerNorm (nanoGPT, F.layer_norm decomposed by Inductor's table):
//   x32 = convert(x)?; var, mean = var_mean(x32, [-1], correction=c, keepdim)  (c < C; 0 usual)
//   rstd = rsqrt(var + eps); y = (x32 - mean) * rstd; epilogue
// RMSNorm (Meta Llama, Hugging Face, litgpt, torchtitan, PR 165370's benchmark):
//   x32 = convert(x)?; ms = mean(pow(x32, 2) | x32 * x32, [-1], keepdim)
//   rstd = rsqrt(ms + eps); y = x32 * rstd (either operand order); epilogue
// eps: a Python scalar, or a float32 tensor of one element (a 0-dim graph input), either order.
// epilogue: up to 4 of {convert(dtype), mul by a [C] weight, add a [C] bias}, in graph order, the
// weight as either operand (Hugging Face writes `self.weight * h`); each weight optionally behind
// exact upcasts and one add of a scalar (x * (1 + w): litgpt add_unit_offset, Gemma).
// Exports: a training forward also returns what the backward saves, mean and rstd ([.., 1]
// float32) and, with some partitions, x32; these may be read outside the region (graph outputs,
// views of them, nodes after the region) and the kernels write them in the same pass. Every other
// intermediate must be used only inside the region.
// Residual prologue (issue 24; the fused add-norm of Apex, Liger-Kernel and vLLM): when the
// activations are h = aten.add.Tensor(x, residual) (alpha 1, both operands [.., C] tensors of h's
// shape and dtype), the add joins the region, which then reads x and residual and exports h when
// something reads it after the region (the residual stream, a graph output). An add that cannot
// be fused (mixed dtypes, a broadcast operand, alpha != 1, h read before the region's last node)
// stays outside, declined with its reason, and the region reads h.
#include <algorithm>

#include "impls/fusions/layernorm_fwd/params.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::layernorm_fwd {
namespace {

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The one node reading `v` when it has exactly one reader; `v` may also be a graph output (the
// region then exports it). -1 otherwise.
int sole_reader(const Graph& g, int v) {
  return g.values[v].users.size() == 1 ? g.values[v].users[0] : -1;
}

// The one node reading `v` that `is` accepts, or -1 when none or several do. Other readers are
// allowed here (the caller decides whether `v` may be exported).
template <typename Pred>
int user_where(const Graph& g, int v, Pred is) {
  int found = -1;
  for (int u : g.values[v].users) {
    if (u == found || !is(g.nodes[u])) continue;
    if (found >= 0) return -1;
    found = u;
  }
  return found;
}

// True when every value of dtype `from` converts to `to` exactly (an upcast, or no change).
bool exact_convert(DType from, DType to) {
  return from == to ||
         (is_floating(from) && is_floating(to) && promote_types(from, to) == std::optional(to));
}

struct EpsMatch {
  double eps = 0;
  int eps_value = -1;  ///< a tensor eps
  int rsqrt = -1;      ///< the rsqrt node; -1: no match
};

// add(v, eps) -> rsqrt, with eps a Python scalar or a float32 tensor of one element, in either
// operand order; v and the sum must be read only by these nodes.
EpsMatch match_eps_rsqrt(const Graph& g, int v, std::vector<int>& nodes) {
  EpsMatch m;
  const int add = single_user(g, v);
  if (add < 0 || g.nodes[add].op != Op::kAdd) return m;
  const Node& a = g.nodes[add];
  if (a.operands.size() != 2 || g.meta(a.outputs[0]).shape != g.meta(v).shape) return m;
  const bool v_first = a.operands[0].value == v;
  const Operand& e = a.operands[v_first ? 1 : 0];
  if (e.value == v || (!v_first && a.alpha != 1)) return m;  // v + v; eps + alpha * v
  double eps = 0;
  if (e.is_tensor()) {
    if (a.alpha != 1 || g.meta(e.value).numel() != 1 || g.meta(e.value).dtype != DType::kFloat32)
      return m;
  } else if (e.is_scalar()) {
    eps = v_first ? a.alpha * e.scalar : e.scalar;
  } else {
    return m;
  }
  const int rs = single_user(g, a.outputs[0]);
  if (rs < 0 || g.nodes[rs].op != Op::kRsqrt) return m;
  nodes.push_back(add);
  nodes.push_back(rs);
  m.eps = eps;
  m.eps_value = e.is_tensor() ? e.value : -1;
  m.rsqrt = rs;
  return m;
}

bool is_row_reduction(const Graph& g, const Node& n) {
  const auto& shape = g.meta(n.operands[0].value).shape;
  return !shape.empty() && n.keepdim && n.dims.size() == 1 &&
         n.dims[0] == static_cast<int64_t>(shape.size()) - 1 &&
         g.meta(n.operands[0].value).dtype == DType::kFloat32;
}

// The [C] operand `w` of epilogue node `reader`, traced back through single-use exact upcasts and
// at most one add of a Python scalar (the weight's offset) to the tensor the kernel reads; the
// nodes passed are appended to `nodes`. A value passed that is also a graph output (the default
// partitioner saves Gemma's fp32 1 + w) is exported: `exports` lists it, before or after the
// offset.
struct WeightSrc {
  int value = -1;
  double offset = 0;
  DType offset_dtype = DType::kFloat32;
  std::vector<std::pair<int, bool>> exports;  ///< (value, after the offset)
};
WeightSrc trace_weight(const Graph& g, int w, int reader, std::vector<int>& nodes) {
  WeightSrc ws;
  ws.value = w;
  bool has_offset = false;
  std::vector<int> passed;  // values traced through, nearest the reader first
  for (int depth = 0; depth < 4; ++depth) {
    const int p = g.values[ws.value].producer;
    if (p < 0 || sole_reader(g, ws.value) != reader) break;
    const Node& n = g.nodes[p];
    if (n.op == Op::kConvertElementType &&
        exact_convert(g.meta(n.operands[0].value).dtype, n.dtype)) {
      ws.value = n.operands[0].value;
    } else if (n.op == Op::kAdd && !has_offset && n.operands.size() == 2 &&
               n.operands[0].is_tensor() != n.operands[1].is_tensor()) {
      const bool tensor_first = n.operands[0].is_tensor();
      const Operand& s = n.operands[tensor_first ? 1 : 0];
      if (!s.is_scalar() || (!tensor_first && n.alpha != 1)) break;  // s + alpha * w
      ws.offset = tensor_first ? n.alpha * s.scalar : s.scalar;
      ws.offset_dtype = g.meta(n.outputs[0]).dtype;
      ws.value = n.operands[tensor_first ? 0 : 1].value;
      has_offset = true;
    } else {
      break;
    }
    passed.push_back(n.outputs[0]);
    nodes.push_back(p);
    reader = p;
  }
  // Values passed before (nearer the reader than) the offset add hold w + offset.
  bool after_offset = has_offset;
  for (int v : passed) {
    if (g.values[v].graph_output) ws.exports.emplace_back(v, after_offset);
    const int p = g.values[v].producer;
    if (g.nodes[p].op == Op::kAdd) after_offset = false;
  }
  return ws;
}

// Read outside the region (a graph output, or a node not in it).
bool read_outside(const Graph& g, int v, const std::vector<int>& nodes) {
  if (g.values[v].graph_output) return true;
  for (int u : g.values[v].users)
    if (!contains(nodes, u)) return true;
  return false;
}

// Every reader of `v` outside the region comes after the region's last node, where the fused
// step runs (harness/replay/gpu_program.cpp places it there).
bool read_after_region(const Graph& g, int v, const std::vector<int>& nodes) {
  const int last = *std::max_element(nodes.begin(), nodes.end());
  for (int u : g.values[v].users)
    if (!contains(nodes, u) && u < last) return false;
  return true;
}

// Value `a` equals `x32` value by value once promoted to float32: `a` is x32, or the input of an
// exact upcast producing x32 (model code that upcasts x for its statistics only and lets type
// promotion upcast it again where it normalizes: T5, Hugging Face's Qwen3/Gemma-3 forms).
bool same_as_upcast(const Graph& g, int a, int x32) {
  if (a == x32) return true;
  const int conv = g.values[x32].producer;
  return conv >= 0 && g.nodes[conv].op == Op::kConvertElementType &&
         g.nodes[conv].operands[0].value == a && exact_convert(g.meta(a).dtype, DType::kFloat32);
}

std::string value_desc(const Graph& g, int v) {
  const int p = g.values[v].producer;
  return "'" + g.values[v].name + "'" +
         (p >= 0 ? " (" + std::string(op_name(g.nodes[p].op)) + ")" : " (graph input)");
}

struct ResidualMatch {
  int add = -1;  ///< the add node; -1: none fused
  int x = -1, residual = -1;
  std::string why;  ///< an add that was considered and not fused: why
};

// The residual add producing `h`, the norm's input, when it can be fused as the region's
// prologue; `nodes` is the region without it.
ResidualMatch match_residual(const Graph& g, int h, const std::vector<int>& nodes) {
  ResidualMatch m;
  const int add = g.values[h].producer;
  if (add < 0 || g.nodes[add].op != Op::kAdd) return m;
  const Node& n = g.nodes[add];
  const std::string what = "residual add '" + n.id + "' not fused into the norm: ";
  if (n.operands.size() != 2 || !n.operands[0].is_tensor() || !n.operands[1].is_tensor()) {
    m.why = what + "an operand is not a tensor";
    return m;
  }
  const TensorMeta& hm = g.meta(h);
  for (const Operand& o : n.operands) {
    const TensorMeta& om = g.meta(o.value);
    if (om.shape != hm.shape) {
      m.why = what + "operand '" + g.values[o.value].name + "' is " + shape_str(om.shape) +
              ", not the sum's " + shape_str(hm.shape) + " (a broadcast add)";
      return m;
    }
    if (om.dtype != hm.dtype) {
      m.why = what + "operand '" + g.values[o.value].name + "' is " +
              std::string(dtype_name(om.dtype)) + " and the sum " +
              std::string(dtype_name(hm.dtype)) + " (mixed dtypes)";
      return m;
    }
  }
  if (n.alpha != 1) {
    m.why = what + "alpha is " + std::to_string(n.alpha) + ", not 1";
    return m;
  }
  std::vector<int> with = nodes;
  with.push_back(add);
  for (int u : g.values[h].users)
    if (!contains(with, u) && u < *std::max_element(nodes.begin(), nodes.end())) {
      m.why = what + "the sum is read before the region's last node, by node '" + g.nodes[u].id +
              "' (" + std::string(op_name(g.nodes[u].op)) + ")";
      return m;
    }
  // The add commutes (fp32 math, one rounding), and the canonical form may have swapped its
  // operands: x is the one the graph made first (the captured order of `x + residual`).
  m.add = add;
  m.x = std::min(n.operands[0].value, n.operands[1].value);
  m.residual = std::max(n.operands[0].value, n.operands[1].value);
  return m;
}

// The first intermediate of `nodes` (other than `exported`) read outside them, described.
std::string private_violation(const Graph& g, const std::vector<int>& nodes,
                              const std::vector<int>& exported) {
  for (int ni : nodes)
    for (int v : g.nodes[ni].outputs) {
      if (contains(exported, v)) continue;
      if (g.values[v].graph_output)
        return "intermediate " + value_desc(g, v) + " is a graph output the kernel does not write";
      for (int u : g.values[v].users)
        if (!contains(nodes, u))
          return "intermediate " + value_desc(g, v) + " has a reader outside the region: node '" +
                 g.nodes[u].id + "' (" + std::string(op_name(g.nodes[u].op)) + ")";
    }
  return "";
}

bool try_match(const Graph& g, int root, Matches& out) {
  const Node& r = g.nodes[root];
  std::vector<int> nodes = {root};
  int src = r.operands[0].value;  // fp32 activations
  int normalized = -1;            // value: (x - mean) * rstd, or x * rstd
  int mean = -1, rstd = -1;
  std::vector<int> centered_values;  // x - mean (LayerNorm): exported where read outside
  EpsMatch em;
  double correction = 0;
  NormKind kind = NormKind::kLayerNorm;
  const std::string what = std::string(op_name(r.op));
  if (!is_row_reduction(g, r))
    return out.decline(root, what + " is not a keepdim float32 reduction over the last dim only");
  if (r.op == Op::kVarMean) {
    correction = r.correction;
    em = match_eps_rsqrt(g, r.outputs[0], nodes);
    if (em.rsqrt < 0)
      return out.decline(root, "the variance is not read only by `+ eps` then rsqrt");
    mean = r.outputs[1];
    rstd = g.nodes[em.rsqrt].outputs[0];
    const int sub = user_where(g, mean, [&](const Node& n) {
      return n.op == Op::kSub && same_as_upcast(g, n.operands[0].value, src) &&
             n.operands[1].value == mean && n.alpha == 1;
    });
    if (sub < 0) return out.decline(root, "no single `x - mean` reads the mean");
    const int centered = g.nodes[sub].outputs[0];
    const int mul = sole_reader(g, centered);
    if (mul < 0 || g.nodes[mul].op != Op::kMul || other_tensor(g.nodes[mul], centered) != rstd)
      return out.decline(root, "`x - mean` is not read only by a multiply with rstd");
    centered_values.push_back(centered);
    nodes.insert(nodes.end(), {sub, mul});
    normalized = g.nodes[mul].outputs[0];
    kind = NormKind::kLayerNorm;
  } else {  // mean.dim: RMSNorm, or the two-pass LayerNorm mean((x - mean(x))^2)
    int sq_val = r.operands[0].value;
    int sq = g.values[sq_val].producer;
    if (sq < 0 || single_user(g, sq_val) != root)
      return out.decline(root, "the averaged value is not a square read only by this mean");
    const Node& s = g.nodes[sq];
    if (s.op == Op::kPowTensorScalar && s.operands[1].scalar == 2) {
      src = s.operands[0].value;
    } else if (s.op == Op::kMul && s.operands[0].value >= 0 &&
               s.operands[0].value == s.operands[1].value) {
      src = s.operands[0].value;
    } else {
      return out.decline(root, "the averaged value is not x^2 (pow 2 or x * x)");
    }
    nodes.insert(nodes.begin(), sq);
    // Two-pass LayerNorm (Cohere): src = x32 - mean(x32), the mean a keepdim row mean of x32.
    bool two_pass = false;
    const int cp = g.values[src].producer;
    if (cp >= 0 && g.nodes[cp].op == Op::kSub && g.nodes[cp].alpha == 1 &&
        g.nodes[cp].operands[1].is_tensor()) {
      const int m = g.nodes[cp].operands[1].value;
      const int mp = g.values[m].producer;
      if (mp >= 0 && g.nodes[mp].op == Op::kMeanDim && is_row_reduction(g, g.nodes[mp]) &&
          same_as_upcast(g, g.nodes[cp].operands[0].value, g.nodes[mp].operands[0].value)) {
        const int centered = src;
        two_pass = true;
        src = g.nodes[mp].operands[0].value;
        mean = m;
        kind = NormKind::kLayerNorm;
        em = match_eps_rsqrt(g, r.outputs[0], nodes);
        if (em.rsqrt < 0)
          return out.decline(root, "the variance is not read only by `+ eps` then rsqrt");
        rstd = g.nodes[em.rsqrt].outputs[0];
        // The normalize reads `x - mean` again: the same value or a second, identical sub.
        const int mul = user_where(g, rstd, [&](const Node& n) {
          if (n.op != Op::kMul) return false;
          const int o = other_tensor(n, rstd);
          if (o == centered) return true;
          const int op = o >= 0 ? g.values[o].producer : -1;
          return op >= 0 && g.nodes[op].op == Op::kSub && g.nodes[op].alpha == 1 &&
                 g.nodes[op].operands[1].value == mean &&
                 same_as_upcast(g, g.nodes[op].operands[0].value, src);
        });
        if (mul < 0) return out.decline(root, "rstd is not read by a multiply with x - mean");
        const int other = other_tensor(g.nodes[mul], rstd);
        nodes.insert(nodes.begin(), {mp, cp});
        centered_values.push_back(centered);
        if (other != centered) {
          nodes.push_back(g.values[other].producer);
          centered_values.push_back(other);
        }
        nodes.push_back(mul);
        normalized = g.nodes[mul].outputs[0];
      }
    }
    if (!two_pass) {
      em = match_eps_rsqrt(g, r.outputs[0], nodes);
      if (em.rsqrt < 0)
        return out.decline(root, "the mean square is not read only by `+ eps` then rsqrt");
      rstd = g.nodes[em.rsqrt].outputs[0];
      const int mul = user_where(g, rstd, [&](const Node& n) {
        return n.op == Op::kMul && same_as_upcast(g, other_tensor(n, rstd), src);
      });
      if (mul < 0) return out.decline(root, "rstd is not read by exactly one multiply with x");
      nodes.push_back(mul);
      normalized = g.nodes[mul].outputs[0];
      kind = NormKind::kRMSNorm;
    }
  }
  if (g.meta(src).dtype != DType::kFloat32)
    return out.decline(root, "the statistics are computed in " +
                                 std::string(dtype_name(g.meta(src).dtype)) + ", not float32");
  const TensorMeta& xm = g.meta(src);
  const int64_t cols = xm.shape.back();
  if (g.meta(normalized).shape != xm.shape)
    return out.decline(root, "the normalized value's shape " + shape_str(g.meta(normalized).shape) +
                                 " differs from x's " + shape_str(xm.shape));
  if (g.meta(normalized).dtype != DType::kFloat32)
    return out.decline(root, "the normalized value is not float32");

  // Epilogue chain. A link the graph also returns (the default partitioner saves the fp32
  // normalized value, or Llama's bf16 one) is exported at its stage.
  std::vector<EpilogueStep> epilogue;
  std::vector<RowExport> row_exports;
  std::vector<WeightExport> weight_exports;
  int cur = normalized;
  for (int k = 0; k < kNormMaxEpilogue; ++k) {
    int u = sole_reader(g, cur);
    if (u < 0) break;
    const Node& n = g.nodes[u];
    const TensorMeta& om = g.meta(n.outputs[0]);
    if (om.shape != xm.shape) break;
    if (n.op == Op::kConvertElementType) {
      epilogue.push_back({EpilogueOp::kRound, n.dtype, -1});
    } else if ((n.op == Op::kMul || n.op == Op::kAdd) && n.alpha == 1) {
      int w = other_tensor(n, cur);
      if (w < 0 || w == cur || g.meta(w).numel() != cols || g.meta(w).shape.back() != cols) break;
      const WeightSrc ws = trace_weight(g, w, u, nodes);
      for (auto [v, after_offset] : ws.exports)
        weight_exports.push_back({v, static_cast<int>(epilogue.size()), after_offset});
      epilogue.push_back({n.op == Op::kMul ? EpilogueOp::kMul : EpilogueOp::kAdd, om.dtype,
                          ws.value, ws.offset, ws.offset_dtype});
    } else {
      break;
    }
    // cur's stage: the last step's result, or (no step yet) kStageNormalized.
    if (g.values[cur].graph_output)
      row_exports.push_back({cur, static_cast<int>(epilogue.size()) - 2});
    nodes.push_back(u);
    cur = n.outputs[0];
  }
  static_assert(kStageNormalized == -1, "the stage of the normalized value precedes step 0");
  std::vector<RowExport> centered_exports;  // first in the chain
  for (int c : centered_values)
    if (read_outside(g, c, nodes)) centered_exports.push_back({c, kStageCentered});
  row_exports.insert(row_exports.begin(), centered_exports.begin(), centered_exports.end());
  if (row_exports.size() > static_cast<size_t>(kNormMaxExports))
    return out.decline(root, std::to_string(row_exports.size()) +
                                 " intermediates of the row are exported (the kernels write at "
                                 "most " +
                                 std::to_string(kNormMaxExports) + ")");
  if (weight_exports.size() > static_cast<size_t>(kNormMaxWeights))
    return out.decline(root, "more than " + std::to_string(kNormMaxWeights) +
                                 " values of the weights' chains are exported");

  // The upcast of the activations joins the region; when something outside reads x32, the region
  // exports it, provided that reader runs after the region (else the region reads x32 instead).
  int x = src, x32 = -1;
  const int conv = g.values[src].producer;
  if (conv >= 0 && g.nodes[conv].op == Op::kConvertElementType) {
    std::vector<int> with = nodes;
    with.push_back(conv);
    if (read_after_region(g, src, with)) {
      nodes = std::move(with);
      x = g.nodes[conv].operands[0].value;
      x32 = src;
    }
  }

  // The residual add before the norm joins the region as its prologue; h may be exported.
  int residual = -1, h = -1;
  DType h_round = DType::kFloat32;
  if (const ResidualMatch rm = match_residual(g, x, nodes); rm.add >= 0) {
    nodes.push_back(rm.add);
    h = x;
    h_round = g.meta(h).dtype;
    x = rm.x;
    residual = rm.residual;
  } else if (!rm.why.empty()) {
    out.decline(g.values[x].producer, rm.why);
  }

  // The saved statistics (and x32, h) may be exported, the rest must stay private.
  std::vector<int> exported = {cur};
  for (int v : {mean, rstd, x32, h})
    if (v >= 0) exported.push_back(v);
  for (const RowExport& e : row_exports) exported.push_back(e.value);
  for (const WeightExport& e : weight_exports) exported.push_back(e.value);
  if (std::string why = private_violation(g, nodes, exported); !why.empty())
    return out.decline(root, why);
  for (int v : exported)
    if (!read_after_region(g, v, nodes))
      return out.decline(
          root, "exported value " + value_desc(g, v) + " is read before the region's last node");

  Params p;
  p.kind = kind;
  p.x = x;
  p.out = cur;
  p.rows = xm.numel() / std::max<int64_t>(cols, 1);
  p.cols = cols;
  p.eps = em.eps;
  p.eps_value = em.eps_value;
  p.correction = correction;
  p.epilogue = std::move(epilogue);
  p.mean = mean >= 0 && read_outside(g, mean, nodes) ? mean : -1;
  p.rstd = read_outside(g, rstd, nodes) ? rstd : -1;
  p.x32 = x32 >= 0 && read_outside(g, x32, nodes) ? x32 : -1;
  p.residual = residual;
  p.h = h >= 0 && read_outside(g, h, nodes) ? h : -1;
  p.h_round = h_round;
  p.row_exports = std::move(row_exports);
  p.weight_exports = std::move(weight_exports);
  out.regions.push_back(make_region(g, std::move(nodes), std::move(p)));
  return true;
}

}  // namespace

void match(const Graph& g, Matches& out) {
  const size_t regions0 = out.regions.size(), declined0 = out.declined.size();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Op op = g.nodes[i].op;
    if (op == Op::kVarMean || op == Op::kMeanDim) try_match(g, static_cast<int>(i), out);
  }
  // A candidate root that another candidate's region claims is fused, not declined: the row mean
  // of a two-pass LayerNorm (Cohere: mean((x - mean(x))^2)) is tried as a root first and found
  // not to average a square, then joins the region matched from the variance's mean.
  std::vector<int> claimed;
  for (size_t r = regions0; r < out.regions.size(); ++r)
    claimed.insert(claimed.end(), out.regions[r].nodes.begin(), out.regions[r].nodes.end());
  out.declined.erase(std::remove_if(out.declined.begin() + static_cast<long>(declined0),
                                    out.declined.end(),
                                    [&](const Decline& d) { return contains(claimed, d.node); }),
                     out.declined.end());
}

}  // namespace replay::layernorm_fwd
