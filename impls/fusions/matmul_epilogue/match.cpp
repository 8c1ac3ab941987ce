// matmul_epilogue matcher: a GEMM and the pointwise epilogue after it (issue 26).
//
// Candidates: every aten.mm / aten.addmm of the canonical graph. A region is
//   z = mm(a, b) | addmm(bias, a, b)            2-D, one dtype (bf16, f16, f32); addmm with
//                                                beta = alpha = 1 and a [N] (or [1, N]) bias
//   [view]                                       z as [.., N] (a `view`/`reshape` of the 3-D
//                                                activations' result), same elements
//   [add(., bias)]                               mm only: a [N] bias added by an aten.add
//   | [add(., residual)]                         or a residual of z's shape and dtype (then the
//                                                region ends there)
//   [f(.)]                                       a chain of pointwise ops of that one value and
//                                                Python scalars (converts, mul, add, erf, tanh,
//                                                exp, neg, div, pow, sigmoid, ...), computed in
//                                                float32, its last node's dtype the rounding; f is
//                                                recognized by evaluating the chain at sample
//                                                points: GELU (erf), GELU (tanh), SiLU, or a cast
//   [mul(., up)]                                 gating: up a second GEMM's [M, N] output (through
//                                                a view and an exact upcast)
//   | split(z) -> f(half) * other half           gating within one GEMM over fused gate/up
//                                                weights (Phi-3's gate_up_proj)
// and is taken when it has at least a bias or a step after the GEMM (a plain mm is eager's
// business). The GEMM outputs may be read outside (training forwards save them); every other
// intermediate must be private to the region, and every outside reader of a region output must
// come after the region's last node (the fused step runs there). The operands are read where
// they are: a `t`/`permute` of a weight is a column-major operand, handed to cuBLASLt through
// its transpose flag (impls/eager/gemm.hpp), never copied.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "impls/fusions/matmul_epilogue/params.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::matmul_epilogue {
namespace {

bool gemm_dtype_ok(DType t) {
  return t == DType::kBFloat16 || t == DType::kFloat16 || t == DType::kFloat32;
}

std::string vname(const Graph& g, int v) {
  return "'" + g.values[v].name + "'";
}

// A [N] vector, or [1, .., 1, N].
bool is_row_vector(const TensorMeta& m, int64_t N) {
  if (m.shape.empty() || m.shape.back() != N) return false;
  for (size_t i = 0; i + 1 < m.shape.size(); ++i)
    if (m.shape[i] != 1) return false;
  return true;
}

// Reads the GEMM at canonical node `ni` into `gm`; the reason it cannot be fused, or "".
std::string read_gemm(const Graph& g, int ni, Gemm& gm, int64_t& M, int64_t& N, int64_t& K,
                      DType& dt) {
  const Node& n = g.nodes[ni];
  const bool addmm = n.op == Op::kAddmm;
  gm.node = ni;
  gm.a = n.operands[addmm ? 1 : 0].value;
  gm.b = n.operands[addmm ? 2 : 1].value;
  gm.bias = addmm ? n.operands[0].value : -1;
  gm.out = n.outputs[0];
  const TensorMeta &ma = g.meta(gm.a), &mb = g.meta(gm.b), &mo = g.meta(gm.out);
  if (ma.shape.size() != 2 || mb.shape.size() != 2) return "operands are not 2-D";
  M = ma.shape[0];
  K = ma.shape[1];
  N = mb.shape[1];
  dt = mo.dtype;
  if (!gemm_dtype_ok(dt))
    return std::string("a ") + std::string(dtype_name(dt)) +
           " GEMM (cuBLASLt epilogues here: bfloat16, float16, float32)";
  if (ma.dtype != dt || mb.dtype != dt)
    return "operands " + ma.str() + " and " + mb.str() + " beside a " +
           std::string(dtype_name(dt)) + " output";
  if (addmm) {
    if (n.beta != 1 || n.alpha != 1)
      return "addmm with beta " + std::to_string(n.beta) + ", alpha " + std::to_string(n.alpha) +
             " (fused: nn.Linear's beta = alpha = 1)";
    if (gm.bias < 0) return "addmm's self is not a tensor";
    const TensorMeta& mbias = g.meta(gm.bias);
    if (!is_row_vector(mbias, N) || mbias.dtype != dt)
      return "bias " + vname(g, gm.bias) + " is " + mbias.str() + ", needs a [" +
             std::to_string(N) + "] vector of the output's dtype " + std::string(dtype_name(dt));
  }
  return "";
}

// --- the activation chain, evaluated ------------------------------------------------------------

bool chain_op(Op op) {
  switch (op) {
    case Op::kConvertElementType:
    case Op::kToCopy:
    case Op::kNeg:
    case Op::kExp:
    case Op::kTanh:
    case Op::kSigmoid:
    case Op::kErf:
    case Op::kReciprocal:
    case Op::kPowTensorScalar:
    case Op::kAdd:
    case Op::kAddScalar:
    case Op::kSub:
    case Op::kSubScalar:
    case Op::kRsubScalar:
    case Op::kMul:
    case Op::kMulScalar:
    case Op::kDiv:
    case Op::kDivScalar:
      return true;
    default:
      return false;
  }
}

// Node `n` of the chain at the operand values `val` (double, no roundings); nullopt when it has
// no value.
std::optional<double> eval_node(const Node& n, const std::map<int, double>& val) {
  auto opnd = [&](size_t i) -> std::optional<double> {
    if (i >= n.operands.size()) return std::nullopt;
    const Operand& o = n.operands[i];
    if (o.is_tensor()) {
      auto it = val.find(o.value);
      return it == val.end() ? std::nullopt : std::optional<double>(it->second);
    }
    if (o.is_scalar()) return o.scalar;
    return std::nullopt;
  };
  const auto x = opnd(0);
  if (!x) return std::nullopt;
  switch (n.op) {
    case Op::kConvertElementType:
    case Op::kToCopy:
      return *x;
    case Op::kNeg:
      return -*x;
    case Op::kExp:
      return std::exp(*x);
    case Op::kTanh:
      return std::tanh(*x);
    case Op::kSigmoid:
      return 1 / (1 + std::exp(-*x));
    case Op::kErf:
      return std::erf(*x);
    case Op::kReciprocal:
      return 1 / *x;
    default:
      break;
  }
  const auto y = opnd(1);
  if (!y) return std::nullopt;
  switch (n.op) {
    case Op::kPowTensorScalar:
      return std::pow(*x, *y);
    case Op::kAdd:
    case Op::kAddScalar:
      return *x + n.alpha * *y;
    case Op::kSub:
    case Op::kSubScalar:
      return *x - n.alpha * *y;
    case Op::kRsubScalar:
      return *y - n.alpha * *x;
    case Op::kMul:
    case Op::kMulScalar:
      return *x * *y;
    case Op::kDiv:
    case Op::kDivScalar:
      return *x / *y;
    default:
      return std::nullopt;
  }
}

// Which activation the chain `nodes` (graph order) computes from `src` to its last node's output.
std::optional<Act> classify(const Graph& g, const std::vector<int>& nodes, int src) {
  static const double kPoints[] = {-7,   -4.5, -3, -2.2, -1.3, -0.7, -0.25, -0.01, 0,
                                   0.03, 0.4,  1,  1.7,  2.6,  3.9,  5.5,   8.25};
  static const Act kActs[] = {Act::kNone, Act::kGeluErf, Act::kGeluTanh, Act::kSilu};
  std::vector<double> got;
  for (double x : kPoints) {
    std::map<int, double> val{{src, x}};
    for (int ni : nodes) {
      const auto v = eval_node(g.nodes[ni], val);
      if (!v) return std::nullopt;
      val[g.nodes[ni].outputs[0]] = *v;
    }
    got.push_back(val[g.nodes[nodes.back()].outputs[0]]);
  }
  for (Act a : kActs) {
    bool ok = true;
    for (size_t i = 0; i < got.size() && ok; ++i) {
      const double want = act_reference(a, kPoints[i]);
      ok = std::abs(got[i] - want) <= 1e-9 * std::max(1.0, std::abs(want));
    }
    if (ok) return a;
  }
  return std::nullopt;
}

struct Chain {
  std::vector<int> nodes;  // graph order; empty: none taken
  Act act = Act::kNone;
  std::string why_not;  // why the pointwise ops after the GEMM were not taken
};

std::string leak(const Graph& g, const std::vector<int>& nodes, const std::vector<int>& exported);

// The pointwise chain of `src` alone: the nodes after it that read only `src`, chain values and
// Python scalars (its closure, graph order). Taken: the longest prefix that computes a known
// activation (GELU erf/tanh, SiLU) in float32 and ends in one value read after it; else, when the
// closure holds only converts, the longest such prefix as a cast. Otherwise nothing, and why.
Chain find_chain(const Graph& g, int src) {
  std::vector<int> closure;
  std::set<int> vals{src};
  const int start = g.values[src].producer + 1;
  for (int i = start; i < static_cast<int>(g.nodes.size()) && closure.size() < 32; ++i) {
    const Node& n = g.nodes[i];
    if (!chain_op(n.op) || n.outputs.size() != 1) continue;
    bool reads = false, only = true;
    for (const Operand& o : n.operands) {
      if (o.is_tensor()) {
        reads = true;
        only = only && vals.count(o.value);
      } else if (!o.is_scalar()) {
        only = false;
      }
    }
    if (!reads || !only) continue;
    closure.push_back(i);
    vals.insert(n.outputs[0]);
  }
  Chain best;
  if (closure.empty()) return best;
  const bool casts_only = std::all_of(closure.begin(), closure.end(), [&](int ni) {
    return g.nodes[ni].op == Op::kConvertElementType || g.nodes[ni].op == Op::kToCopy;
  });
  for (size_t k = closure.size(); k >= 1; --k) {
    std::vector<int> pre(closure.begin(), closure.begin() + static_cast<long>(k));
    const int sink = g.nodes[pre.back()].outputs[0];
    std::string why = leak(g, pre, {sink});
    if (why.empty())
      for (size_t j = 0; j + 1 < pre.size() && why.empty(); ++j) {
        const int v = g.nodes[pre[j]].outputs[0];
        if (g.meta(v).dtype != DType::kFloat32)
          why = "the pointwise chain after the GEMM rounds " + vname(g, v) + " to " +
                std::string(dtype_name(g.meta(v).dtype)) +
                " between its ops (the fused kernel computes in float32, rounding once at the end)";
      }
    std::optional<Act> act;
    if (why.empty()) {
      act = classify(g, pre, src);
      if (!act)
        why = "the pointwise chain after the GEMM (" + std::to_string(pre.size()) +
              " ops ending in " + vname(g, sink) +
              ") is none of GELU (erf), GELU (tanh), SiLU or a cast";
      else if (*act == Act::kNone && !casts_only)
        why = "the pointwise chain after the GEMM ending in " + vname(g, sink) +
              " computes the identity through math ops, not casts";
    }
    if (why.empty()) {
      best.nodes = pre;
      best.act = *act;
      best.why_not.clear();
      return best;
    }
    if (best.why_not.empty()) best.why_not = why;
  }
  return best;
}

// The reshape of `v` to [.., N] of the same (contiguous) elements: its node, or -1.
int reshape_of(const Graph& g, int v, int64_t N) {
  int u = -1;  // the one reshape reading v (v may have other readers: it is then exported)
  for (int r : g.values[v].users) {
    if (!is_flat_reshape(g.nodes[r].op) || r == u) continue;
    if (u >= 0) return -1;
    u = r;
  }
  if (u < 0) return -1;
  const TensorMeta& m = g.meta(g.nodes[u].outputs[0]);
  if (m.shape.empty() || m.shape.back() != N || m.numel() != g.meta(v).numel() ||
      !m.is_contiguous())
    return -1;
  return u;
}

// The outside reader of a value the nodes produce, other than `exported`: "value 'x' is read by
// node 'y'" / "is a graph output"; "" when all are private.
std::string leak(const Graph& g, const std::vector<int>& nodes, const std::vector<int>& exported) {
  std::set<int> in(nodes.begin(), nodes.end());
  for (int ni : nodes)
    for (int v : g.nodes[ni].outputs) {
      if (std::find(exported.begin(), exported.end(), v) != exported.end()) continue;
      if (g.values[v].graph_output)
        return "intermediate " + vname(g, v) + " is a graph output the fused step does not write";
      for (int u : g.values[v].users)
        if (!in.count(u))
          return "intermediate " + vname(g, v) + " is also read by node '" + g.nodes[u].id + "' (" +
                 std::string(op_name(g.nodes[u].op)) +
                 ") outside the region, and the fused step does not write it";
    }
  return "";
}

// The other operand of gating mul `mul` traced back to a GEMM: through an exact upcast and a
// reshape, each read only here. Fills `up` and appends the nodes passed; false when it is not one.
bool trace_up(const Graph& g, int w, int mul, int64_t M, int64_t N, DType dt, Gemm& up,
              std::vector<int>& nodes) {
  int reader = mul;
  for (int depth = 0; depth < 3; ++depth) {
    const int p = g.values[w].producer;
    if (p < 0) return false;
    const Node& n = g.nodes[p];
    const auto& users = g.values[w].users;
    if (n.op == Op::kMm || n.op == Op::kAddmm) {  // its output may be exported
      if (std::find(users.begin(), users.end(), reader) == users.end()) return false;
      int64_t m2 = 0, n2 = 0, k2 = 0;
      DType d2{};
      if (!read_gemm(g, p, up, m2, n2, k2, d2).empty() || m2 != M || n2 != N || d2 != dt)
        return false;
      nodes.push_back(p);
      return true;
    }
    if (single_user(g, w) != reader) return false;
    const bool upcast =
        n.op == Op::kConvertElementType &&
        promote_types(g.meta(n.operands[0].value).dtype, n.dtype) == std::optional<DType>(n.dtype);
    const bool reshape = is_flat_reshape(n.op) && g.meta(n.outputs[0]).shape.back() == N;
    if (!upcast && !reshape) return false;
    nodes.push_back(p);
    w = n.operands[0].value;
    reader = p;
  }
  return false;
}

// Phi-3's fused gate_up_proj: `v` ([.., N], the GEMM output or its reshape) split in two halves
// along its last dim (aten.split / split_with_sizes), act(half i) * half 1-i (the up half through
// an exact upcast at most). Fills p (split_halves, gate_half, act, out) and appends the nodes.
bool match_split(const Graph& g, int v, Params& p, std::vector<int>& nodes) {
  if (p.gemm.bias >= 0 || p.N % 2 != 0) return false;
  const auto& shape = g.meta(v).shape;
  for (int si : g.values[v].users) {
    const Node& s = g.nodes[si];
    if ((s.op != Op::kSplit && s.op != Op::kSplitWithSizes) || s.outputs.size() != 2) continue;
    std::vector<int64_t> half = shape;
    half.back() = p.N / 2;
    if (g.meta(s.outputs[0]).shape != half || g.meta(s.outputs[1]).shape != half) continue;
    for (int gh = 0; gh < 2; ++gh) {
      const int gate = s.outputs[gh], upv = s.outputs[1 - gh];
      Chain c = find_chain(g, gate);
      if (c.nodes.empty() || c.act == Act::kNone) continue;
      const int sink = g.nodes[c.nodes.back()].outputs[0];
      int m = -1;  // the one mul reading the activation (it may be saved too: declined later)
      for (int u : g.values[sink].users)
        if (g.nodes[u].op == Op::kMul && u != m) m = m < 0 ? u : -2;
      if (m < 0) continue;
      int w = other_tensor(g.nodes[m], sink);
      std::vector<int> up_nodes;
      if (w >= 0 && w != upv) {  // through an exact upcast of the up half
        const int pc = g.values[w].producer;
        if (pc < 0 || g.nodes[pc].op != Op::kConvertElementType ||
            g.nodes[pc].operands[0].value != upv ||
            promote_types(g.meta(upv).dtype, g.nodes[pc].dtype) !=
                std::optional<DType>(g.nodes[pc].dtype))
          continue;
        up_nodes.push_back(pc);
      } else if (w != upv) {
        continue;
      }
      p.split_halves = true;
      p.gate_half = gh;
      p.has_act_step = true;
      p.act = c.act;
      p.act_round = g.meta(sink).dtype;
      for (int ni : c.nodes) p.act_values.push_back(g.nodes[ni].outputs[0]);
      p.gate_round = g.meta(g.nodes[m].outputs[0]).dtype;
      p.out = g.nodes[m].outputs[0];
      nodes.push_back(si);
      nodes.insert(nodes.end(), c.nodes.begin(), c.nodes.end());
      nodes.insert(nodes.end(), up_nodes.begin(), up_nodes.end());
      nodes.push_back(m);
      return true;
    }
  }
  return false;
}

void match_gemm(const Graph& g, int root, std::set<int>& claimed_up, Matches& out) {
  Params p;
  const std::string bad = read_gemm(g, root, p.gemm, p.M, p.N, p.K, p.gemm_dtype);
  if (!bad.empty()) {
    out.decline(root, bad);
    return;
  }
  std::vector<int> nodes{root};
  int v = p.gemm.out;
  // z as [.., N] (3-D activations), taken only with a step after it.
  int reshape = reshape_of(g, v, p.N);
  int cur = reshape >= 0 ? g.nodes[reshape].outputs[0] : v;
  std::vector<int> tail;  // the reshape, when a step follows
  if (reshape >= 0) tail.push_back(reshape);
  // Fused gate/up weights: z split in two halves along N, act(one) * the other.
  if (p.gemm.bias >= 0 || p.N % 2 != 0)
    for (int si : g.values[cur].users)
      if ((g.nodes[si].op == Op::kSplit || g.nodes[si].op == Op::kSplitWithSizes) &&
          g.nodes[si].outputs.size() == 2)
        out.decline(root,
                    "gating over the split halves of " + vname(g, cur) + " not fused: " +
                        (p.gemm.bias >= 0 ? std::string("the GEMM adds a bias (addmm)")
                                          : "its last dim " + std::to_string(p.N) + " is odd"));
  const bool split = match_split(g, cur, p, tail);
  if (split) cur = p.out;
  // mm + add of a [N] bias.
  if (!split && p.gemm.bias < 0) {
    int u = -1;  // the one aten.add reading cur
    for (int r : g.values[cur].users)
      if (g.nodes[r].op == Op::kAdd && r != u) u = u < 0 ? r : -2;
    if (u >= 0 && g.nodes[u].operands.size() == 2) {
      const Node& a = g.nodes[u];
      const int other = other_tensor(a, cur);
      const bool cur_first = a.operands[0].value == cur;
      const TensorMeta& mc = g.meta(cur);
      if (other >= 0 && other != cur && a.alpha == 1 && g.meta(other).shape == mc.shape &&
          g.meta(other).dtype == p.gemm_dtype && g.meta(a.outputs[0]).dtype == p.gemm_dtype) {
        p.residual = other;  // a residual of z's own shape and dtype
        tail.push_back(u);
        cur = a.outputs[0];
      } else if (other >= 0 && other != cur) {
        const TensorMeta& mb = g.meta(other);
        if (!is_row_vector(mb, p.N) || (!cur_first && a.alpha != 1) ||
            (cur_first && a.alpha != 1)) {
          out.decline(root, "the add after the GEMM reads " + vname(g, other) + " " + mb.str() +
                                " with alpha " + std::to_string(a.alpha) + ": neither a [" +
                                std::to_string(p.N) +
                                "] bias nor a residual of the GEMM's shape and dtype");
        } else {
          p.add_bias = other;
          p.add_round = g.meta(a.outputs[0]).dtype;
          tail.push_back(u);
          cur = a.outputs[0];
        }
      }
    }
  }
  // The activation / cast chain; one that cannot be taken is declined with its reason, and the GEMM
  // (with its bias) is still fused alone. Nothing after a residual add.
  Chain chain = p.residual < 0 && !split ? find_chain(g, cur) : Chain{};
  if (chain.nodes.empty() && !chain.why_not.empty())
    out.decline(root, "epilogue not fused: " + chain.why_not);
  if (!chain.nodes.empty()) {
    p.has_act_step = true;
    p.act = chain.act;
    p.act_round = g.meta(g.nodes[chain.nodes.back()].outputs[0]).dtype;
    for (int ni : chain.nodes) p.act_values.push_back(g.nodes[ni].outputs[0]);
    tail.insert(tail.end(), chain.nodes.begin(), chain.nodes.end());
    cur = g.nodes[chain.nodes.back()].outputs[0];
  }
  if (p.add_bias < 0 && p.residual < 0 && !p.has_act_step && !split) tail.clear();
  // Gating: cur * up, up another GEMM's [M, N] output.
  if (!split && p.has_act_step && !g.values[cur].graph_output && g.values[cur].users.size() == 1) {
    const int m = g.values[cur].users[0];
    const Node& mul = g.nodes[m];
    const int w = mul.op == Op::kMul ? other_tensor(mul, cur) : -1;
    std::vector<int> up_nodes;
    const bool taken = w >= 0 && w != cur && g.meta(mul.outputs[0]).numel() == p.M * p.N &&
                       trace_up(g, w, m, p.M, p.N, p.gemm_dtype, p.up, up_nodes) &&
                       !claimed_up.count(p.up.node) && p.up.node != root;
    if (!taken && w >= 0 && w != cur) {
      p.up = {};
      out.decline(root, "gating not fused: the other factor " + vname(g, w) + " of " +
                            vname(g, mul.outputs[0]) + " is not a [" + std::to_string(p.M) + ", " +
                            std::to_string(p.N) + "] " + std::string(dtype_name(p.gemm_dtype)) +
                            " GEMM output reached through exact upcasts and reshapes, or its GEMM "
                            "is fused elsewhere; the activation is fused alone");
    }
    if (taken) {
      p.gate_round = g.meta(mul.outputs[0]).dtype;
      p.shared_input = p.up.a == p.gemm.a;
      tail.insert(tail.end(), up_nodes.begin(), up_nodes.end());
      tail.push_back(m);
      cur = mul.outputs[0];
    }
  }
  if (p.gemm.bias < 0 && p.add_bias < 0 && p.residual < 0 && !p.has_act_step) {
    return;  // a plain mm: nothing to fuse (a chain that was not taken said why)
  }
  if (tail.empty()) {  // addmm alone: z itself is the result
    p.out = p.gemm.out;
  } else {
    nodes.insert(nodes.end(), tail.begin(), tail.end());
    p.out = cur;
  }
  const int64_t out_cols = p.split_halves ? p.N / 2 : p.N;
  if (!g.meta(p.out).is_contiguous() || g.meta(p.out).numel() != p.M * out_cols) {
    out.decline(root, "the result " + vname(g, p.out) + " " + g.meta(p.out).str() +
                          " is not a contiguous [" + std::to_string(p.M) + ", " +
                          std::to_string(out_cols) + "]");
    return;
  }
  std::vector<int> exported{p.gemm.out, p.out};
  if (p.up.node >= 0) exported.push_back(p.up.out);
  if (std::string l = leak(g, nodes, exported); !l.empty()) {
    out.decline(root, l);
    return;
  }
  const int anchor = *std::max_element(nodes.begin(), nodes.end());
  std::set<int> in(nodes.begin(), nodes.end());
  for (int e : exported)
    for (int u : g.values[e].users)
      if (!in.count(u) && u < anchor) {
        out.decline(root, "region output " + vname(g, e) + " is read by node '" + g.nodes[u].id +
                              "' before the region's last node '" + g.nodes[anchor].id + "'");
        return;
      }
  p.gemm.exported =
      g.values[p.gemm.out].graph_output ||
      std::any_of(g.values[p.gemm.out].users.begin(), g.values[p.gemm.out].users.end(),
                  [&](int u) { return !in.count(u); });
  if (p.up.node >= 0) {
    p.up.exported = g.values[p.up.out].graph_output ||
                    std::any_of(g.values[p.up.out].users.begin(), g.values[p.up.out].users.end(),
                                [&](int u) { return !in.count(u); });
    claimed_up.insert(p.up.node);
  }
  out.regions.push_back(make_region(g, nodes, p));
}

}  // namespace

double act_reference(Act act, double x) {
  switch (act) {
    case Act::kNone:
      return x;
    case Act::kGeluErf:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Act::kGeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case Act::kSilu:
      return x / (1 + std::exp(-x));
  }
  return x;
}

void match(const Graph& g, Matches& out) {
  std::set<int> claimed_up;  // up projections already taken by a gated region
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    const Op op = g.nodes[i].op;
    if ((op == Op::kMm || op == Op::kAddmm) && !claimed_up.count(i))
      match_gemm(g, i, claimed_up, out);
  }
}

}  // namespace replay::matmul_epilogue
