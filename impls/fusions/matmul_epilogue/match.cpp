// matmul_epilogue matcher: a GEMM and the pointwise epilogue after it (issue 26).
//
// Backward first (match_backward, TUNING.md "Backward epilogues"): an mm whose output g feeds an
// elementwise chain that also reads tensors the forward saved, computing g * act'(x) (GELU erf /
// tanh, SiLU) or a gated pair's d_gate and d_up, recognized by value and checked for the graph's
// roundings, with the bias gradient sum(d_pre, rows) after it. Otherwise the forward forms below;
// and when these take nothing, a weight-gradient mm whose tangent's bias gradient (a sum over its
// rows) the graph computes beside it (match_weight_grad: the sum rides on the GEMM). The forms:
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
// business). The GEMM outputs may be read outside (training forwards save them), so may a gated
// pair's activation (the default partitioner saves it) and views of these (left as aliases of
// what the fused step writes: Region::views); every other intermediate must be private to the
// region, and every outside reader of a region output must come after the region's last node (the
// fused step runs there). The operands are read where
// they are: a `t`/`permute` of a weight is a column-major operand, handed to cuBLASLt through
// its transpose flag (impls/eager/gemm.hpp), never copied.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "impls/fusions/matmul_epilogue/params.hpp"
#include "workloads/ops/op.hpp"
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

// An op the eager executor runs as one pointwise launch (elementwise, broadcasting): what a
// tabulated chain may hold (its table is computed by those launches, impls/eager/lower.hpp).
bool pointwise_op(Op op) {
  return op_def(op).eager.kernel == EagerLowering::kPointwise;
}

std::string leak(const Graph& g, const std::vector<int>& nodes, const std::vector<int>& exported);

// The pointwise chain of `src` alone: the nodes after it that read only `src`, chain values and
// Python scalars (its closure, graph order). Taken: the longest prefix that computes a known
// activation (GELU erf/tanh, SiLU) in float32 and ends in one value read after it; else, when the
// closure holds only converts, the longest such prefix as a cast; else, when `src` and the
// closure's last value are 16-bit floats and nothing else of it is read outside, the whole
// closure as a table (Act::kTable: whatever the function, and whatever it rounds between its
// ops, it is a function of src's 16 bits; bind.cpp computes it with the eager executor's own
// launches, so the region gives eager's bits). Otherwise nothing, and why.
// `wide`: the closure takes every pointwise op, not only chain_op's (the table attempt alone;
// find_chain below).
Chain find_chain_in(const Graph& g, int src, bool wide) {
  std::vector<int> closure;
  std::set<int> vals{src};
  const int start = g.values[src].producer + 1;
  for (int i = start; i < static_cast<int>(g.nodes.size()) && closure.size() < 32; ++i) {
    const Node& n = g.nodes[i];
    if (!(chain_op(n.op) || (wide && pointwise_op(n.op))) || n.outputs.size() != 1) continue;
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
    const bool private_chain = why.empty();
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
      act = std::all_of(pre.begin(), pre.end(), [&](int ni) { return chain_op(g.nodes[ni].op); })
                ? classify(g, pre, src)
                : std::nullopt;
      if (!act)
        why = "the pointwise chain after the GEMM (" + std::to_string(pre.size()) +
              " ops ending in " + vname(g, sink) +
              ") is none of GELU (erf), GELU (tanh), SiLU or a cast";
      else if (*act == Act::kNone && !casts_only)
        why = "the pointwise chain after the GEMM ending in " + vname(g, sink) +
              " computes the identity through math ops, not casts";
    }
    if (!why.empty() && private_chain && k == closure.size() && is_16bit_float(g.meta(src).dtype) &&
        is_16bit_float(g.meta(sink).dtype)) {
      act = Act::kTable;  // the whole closure, a function of src's 16 bits
      why.clear();
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

// The chain as find_chain_in takes it over the ops of the fixed activations; when that finds no
// activation (nothing, or a cast), the whole closure over every pointwise op as a table if it can
// be one (squared ReLU's relu): an unrelated pointwise reader of src (a returned abs(x)) then
// cannot keep a GELU from being classified.
Chain find_chain(const Graph& g, int src) {
  Chain narrow = find_chain_in(g, src, false);
  if (!narrow.nodes.empty() && narrow.act != Act::kNone) return narrow;
  Chain wide = find_chain_in(g, src, true);
  return !wide.nodes.empty() && wide.act == Act::kTable ? wide : narrow;
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
    const bool upcast =
        n.op == Op::kConvertElementType &&
        promote_types(g.meta(n.operands[0].value).dtype, n.dtype) == std::optional<DType>(n.dtype);
    const bool reshape = is_flat_reshape(n.op) && g.meta(n.outputs[0]).shape.back() == N;
    if (!upcast && !reshape) return false;
    // A reshape may be read outside too (the default partitioner returns it): it then stays an
    // alias of the up projection the fused step writes (Region::views).
    if (reshape ? std::find(users.begin(), users.end(), reader) == users.end()
                : single_user(g, w) != reader)
      return false;
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
      int m = -1;  // the one mul reading the activation (saved too: written as Params::act_out)
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
      p.act_src = gate;
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

// --- the backward epilogue ---------------------------------------------------------------------

// An elementwise node over [M, N] elements: a chain op or a flat reshape, one output of mn
// elements.
bool elementwise(const Graph& g, int ni, int64_t mn) {
  const Node& n = g.nodes[ni];
  return (chain_op(n.op) || is_flat_reshape(n.op)) && n.outputs.size() == 1 &&
         g.meta(n.outputs[0]).numel() == mn;
}

// The values of the nodes `nodes` (graph order) at `val` (the GEMM output and the saved tensors);
// with `rounded`, each node's result is rounded to its dtype as the graph does. False when a node
// has no value.
bool eval_chain(const Graph& g, const std::vector<int>& nodes, std::map<int, double>& val,
                bool rounded) {
  for (int ni : nodes) {
    const Node& n = g.nodes[ni];
    std::optional<double> v;
    if (is_flat_reshape(n.op)) {
      auto it = val.find(n.operands[0].value);
      if (it != val.end()) v = it->second;
    } else {
      v = eval_node(n, val);
    }
    if (!v) return false;
    const DType t = g.meta(n.outputs[0]).dtype;  // 16-bit roundings (float32 is the kernel's)
    val[n.outputs[0]] =
        rounded && t != DType::kFloat32 && t != DType::kFloat64 ? round_to(t, *v) : *v;
  }
  return true;
}

bool near(double got, double want) {
  return std::abs(got - want) <= 1e-9 * std::max(1.0, std::abs(want));
}

const Act kGradActs[] = {Act::kGeluErf, Act::kGeluTanh, Act::kSilu};
const double kGradG[] = {-1.75, 0.5, 2.25};
const double kGradUp[] = {-0.625, 1.375};
const double kGradX[] = {-7,   -4.5, -3, -2.2, -1.3, -0.7, -0.25, -0.01, 0,
                         0.03, 0.4,  1,  1.7,  2.6,  3.9,  5.5,   8.25};

// A deterministic pseudo-random value in [-4, 4) rounded to dtype t (a sample the graph could
// hold), for the rounding check.
double sample(uint64_t& state, DType t) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  const double u = static_cast<double>(state >> 11) / 9007199254740992.0;
  return round_to(t, -4 + 8 * u);
}

// The backward epilogue of the GEMM `p.gemm` (an mm): the elementwise nodes that read its output
// g (and what they read, back to the saved tensors), computing g * act'(x) (one saved tensor,
// one result) or the gated pair d_up = g * act(gate), d_gate = g * up * act'(gate) (two saved
// tensors, two results), with the graph's roundings at the places the kernel rounds; and a
// bias gradient sum(d_pre, rows) after the plain form. Fills p.bwd, p.out and `nodes` and
// returns true; otherwise `why` says why (empty when the mm has no such chain at all). `tried`:
// the chain's nodes; `saved_ok`: its saved tensors were all [M, N] float tensors.
bool match_backward(const Graph& g, int root, Params& p, std::vector<int>& nodes, std::string& why,
                    std::vector<int>& tried, bool& saved_ok) {
  if (p.gemm.bias >= 0) return false;
  const int64_t mn = p.M * p.N;
  const int gv = p.gemm.out;
  std::set<int> S, produced;
  std::set<int> dep{gv};  // values depending on g
  for (int i = root + 1; i < static_cast<int>(g.nodes.size()) && S.size() < 64; ++i) {
    if (!elementwise(g, i, mn)) continue;
    bool reads = false;
    for (const Operand& o : g.nodes[i].operands)
      reads = reads || (o.is_tensor() && dep.count(o.value));
    if (!reads) continue;
    S.insert(i);
    dep.insert(g.nodes[i].outputs[0]);
  }
  if (S.empty()) return false;
  // Back to the saved tensors: elementwise producers whose every reader is in the region.
  for (bool grew = true; grew && S.size() < 96;) {
    grew = false;
    for (int ni : std::vector<int>(S.begin(), S.end()))
      for (const Operand& o : g.nodes[ni].operands) {
        if (!o.is_tensor() || o.value == gv) continue;
        const int pr = g.values[o.value].producer;
        if (pr < 0 || pr == root || S.count(pr) || !elementwise(g, pr, mn) ||
            g.values[o.value].graph_output)
          continue;
        const auto& us = g.values[o.value].users;
        if (std::all_of(us.begin(), us.end(), [&](int u) { return S.count(u) > 0; })) {
          S.insert(pr);
          grew = true;
        }
      }
  }
  std::vector<int> chain(S.begin(), S.end());
  tried = chain;
  for (int ni : chain) produced.insert(g.nodes[ni].outputs[0]);
  std::vector<int> saved, outs;
  for (int ni : chain) {
    for (const Operand& o : g.nodes[ni].operands)
      if (o.is_tensor() && o.value != gv && !produced.count(o.value) &&
          std::find(saved.begin(), saved.end(), o.value) == saved.end())
        saved.push_back(o.value);
    const int v = g.nodes[ni].outputs[0];
    const auto& us = g.values[v].users;
    if (g.values[v].graph_output ||
        std::any_of(us.begin(), us.end(), [&](int u) { return !S.count(u); }))
      outs.push_back(v);
  }
  if (saved.empty()) return false;  // a forward chain of g alone (the forward matcher's)
  for (int v : saved) {
    const TensorMeta& m = g.meta(v);
    if (m.numel() != mn || !gemm_dtype_ok(m.dtype)) {
      why = "the chain after the GEMM reads " + vname(g, v) + " " + m.str() + ", not a [" +
            std::to_string(p.M) + ", " + std::to_string(p.N) + "] float tensor";
      return false;
    }
  }
  // Roles of the saved tensors: plain {x}; gated {gate, up}, or {gate, up, act(gate)} where the
  // forward saved the activation too (the default partitioner).
  saved_ok = true;
  const bool gated = saved.size() >= 2;
  if (saved.size() > 3 || outs.size() != (gated ? 2u : 1u)) {
    auto names = [&](const std::vector<int>& vs) {
      std::string l;
      for (int v : vs) l += (l.empty() ? "" : ", ") + vname(g, v);
      return l;
    };
    why = "the chain after the GEMM reads " + std::to_string(saved.size()) + " saved tensors (" +
          names(saved) + ") and its values " + names(outs) +
          " are read outside it (fused: 1 and 1, an activation's derivative; 2 or 3 and 2, a gated "
          "pair's d_gate and d_up): an intermediate read outside is not written by the fused step";
    return false;
  }
  auto at = [&](double gval, const std::vector<double>& xs, std::map<int, double>& val,
                bool rounded) {
    val.clear();
    val[gv] = gval;
    for (size_t i = 0; i < saved.size(); ++i) val[saved[i]] = xs[i];
    return eval_chain(g, chain, val, rounded);
  };
  // The model: d_up and d_gate (or d_pre) from g and the saved values in role order, with the
  // kernel's roundings ar (act), hr (g * up) and the results' dtypes; `rounds` false: none.
  Backward b;
  b.on = true;
  b.gated = gated;
  auto model = [&](Act act, double gs, const std::vector<double>& r, DType ar, DType hr,
                   bool rounds, double& dx, double& dup) {
    auto rd = [&](DType t, double v) { return rounds ? round_to(t, v) : v; };
    if (!gated) {
      dx = rd(b.dx_round, gs * act_grad_reference(act, r[0]));
      return;
    }
    const double a = r.size() == 3 ? r[2] : rd(ar, act_reference(act, r[0]));
    dup = rd(b.dup_round, gs * a);
    dx = rd(b.dx_round, rd(hr, gs * r[1]) * act_grad_reference(act, r[0]));
  };
  std::vector<int> perm(saved.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int>(i);
  std::map<int, double> val;
  bool found = false;
  do {
    for (Act act : kGradActs) {
      for (int oi = 0; oi < (gated ? 2 : 1) && !found; ++oi) {
        const int odx = outs[oi], odup = gated ? outs[1 - oi] : -1;
        bool ok = true;
        for (double gs : kGradG)
          for (double x : kGradX)
            for (double u : kGradUp) {
              if (!ok) break;
              std::vector<double> r{x, u, 0.8125 - u};  // role values: x / gate, up, act
              r.resize(saved.size());
              std::vector<double> xs(saved.size());
              for (size_t k = 0; k < perm.size(); ++k) xs[perm[k]] = r[k];
              if (!at(gs, xs, val, false)) return false;
              double dx = 0, dup = 0;
              model(act, gs, r, DType::kFloat32, DType::kFloat32, false, dx, dup);
              ok = near(val[odx], dx) && (!gated || near(val[odup], dup));
            }
        if (ok) {
          found = true;
          b.act = act;
          b.x = saved[perm[0]];
          b.dx = odx;
          if (gated) {
            b.up = saved[perm[1]];
            b.dup = odup;
          }
          if (saved.size() == 3) b.act_saved = saved[perm[2]];
        }
      }
      if (found) break;
    }
  } while (!found && std::next_permutation(perm.begin(), perm.end()));
  if (!found) {
    why = gated ? "the chain after the GEMM is not a gated activation's backward (d_gate = g * "
                  "up * act'(gate), d_up = g * act(gate) for GELU erf/tanh or SiLU)"
                : "the chain after the GEMM is not g * act'(x) for GELU (erf, tanh) or SiLU";
    return false;
  }
  // Where it rounds: the kernel rounds the results and, gated, act(gate) and g * up, each to
  // float32 (not at all) or the GEMM's dtype; the graph's per-node roundings (16-bit ones: the
  // kernel computes in float32) must give the same values at random points the tensors could
  // hold.
  b.dx_round = g.meta(b.dx).dtype;
  if (gated) b.dup_round = g.meta(b.dup).dtype;
  const DType dt = p.gemm_dtype;
  bool rounds_ok = false;
  for (DType ar : {DType::kFloat32, dt}) {
    for (DType hr : {DType::kFloat32, dt}) {
      if (rounds_ok || (!gated && (ar != DType::kFloat32 || hr != DType::kFloat32))) continue;
      uint64_t state = 12345;
      bool ok = true;
      for (int i = 0; i < 256 && ok; ++i) {
        const double gs = sample(state, dt);
        std::vector<double> xs;
        for (int v : saved) xs.push_back(sample(state, g.meta(v).dtype));
        if (!at(gs, xs, val, true)) return false;
        std::vector<double> r(saved.size());
        for (size_t k = 0; k < perm.size(); ++k) r[k] = xs[perm[k]];
        double dx = 0, dup = 0;
        model(b.act, gs, r, ar, hr, true, dx, dup);
        ok = near(val[b.dx], dx) && (!gated || near(val[b.dup], dup));
      }
      if (ok) {
        rounds_ok = true;
        b.act_round = ar;
        b.h_round = hr;
      }
    }
  }
  if (!rounds_ok) {
    std::string first;
    for (int ni : chain) {
      const int v = g.nodes[ni].outputs[0];
      if (first.empty() && g.meta(v).dtype != DType::kFloat32 && !is_flat_reshape(g.nodes[ni].op) &&
          std::find(outs.begin(), outs.end(), v) == outs.end())
        first = vname(g, v);
    }
    why = "the backward chain after the GEMM rounds " + (first.empty() ? "" : first + " ") +
          "between its ops where the fused kernel computes in float32 (" + act_name(b.act) +
          "'s backward in " + std::string(dtype_name(dt)) +
          " op by op: one float32 evaluation does not reproduce it)";
    return false;
  }
  b.chain = chain;
  nodes.insert(nodes.end(), chain.begin(), chain.end());
  // The bias gradient: sum(d_pre, rows) of the plain form, of d_pre or its one [M, N] reshape.
  if (!gated) {
    for (int ri : g.values[b.dx].users) {
      int src = b.dx, reshape = -1;
      if (is_flat_reshape(g.nodes[ri].op)) {
        reshape = ri;
        src = g.nodes[ri].outputs[0];
      }
      for (int si : g.values[src].users) {
        const Node& sn = g.nodes[si];
        if (sn.op != Op::kSumDim || sn.outputs.size() != 1) continue;
        const TensorMeta& ms = g.meta(src);
        std::vector<int64_t> lead;
        for (int64_t d = 0; d + 1 < static_cast<int64_t>(ms.shape.size()); ++d) lead.push_back(d);
        const TensorMeta& mo = g.meta(sn.outputs[0]);
        if (ms.shape.empty() || ms.shape.back() != p.N || sn.dims != lead || mo.numel() != p.N ||
            !gemm_dtype_ok(mo.dtype)) {
          why = "bias gradient not fused: " + vname(g, sn.outputs[0]) + " sums " + vname(g, src) +
                " " + ms.str() + " over dims other than its rows (needs every dim but the last)";
          continue;
        }
        // The reshape's value becomes the result written; d_pre itself must then be private.
        if (reshape >= 0) {
          const auto& us = g.values[b.dx].users;
          if (g.values[b.dx].graph_output || us.size() != 1) {
            why = "bias gradient not fused: " + vname(g, b.dx) +
                  " is read beside its reshape, and the fused step writes one of them";
            continue;
          }
          nodes.push_back(reshape);
          b.dx = src;
        }
        nodes.push_back(si);
        b.dbias = sn.outputs[0];
        b.dbias_dtype = mo.dtype;
        break;
      }
      if (b.dbias >= 0) break;
    }
  }
  p.bwd = b;
  p.out = b.dx;
  return true;
}

// Takes the backward region of match_backward: its results private but for the outputs, run at
// its first node where every input is ready (the gated pair's d_up is read by the dW / dX GEMMs
// before the graph computes d_gate), before every outside reader of a result.
void add_backward(const Graph& g, int root, Params& p, std::vector<int> nodes, Matches& out) {
  const Backward& b = p.bwd;
  std::vector<int> exported{p.gemm.out, b.dx};
  if (b.dup >= 0) exported.push_back(b.dup);
  if (b.dbias >= 0) exported.push_back(b.dbias);
  for (int v : {b.dx, b.dup}) {
    if (v >= 0 && !g.meta(v).is_contiguous()) {
      out.decline(root, "backward epilogue not fused: the result " + vname(g, v) + " " +
                            g.meta(v).str() + " is not contiguous");
      return;
    }
  }
  if (std::string l = leak(g, nodes, exported); !l.empty()) {
    out.decline(root, "backward epilogue not fused: " + l);
    return;
  }
  std::sort(nodes.begin(), nodes.end());
  std::set<int> in(nodes.begin(), nodes.end());
  p.gemm.exported =
      g.values[p.gemm.out].graph_output ||
      std::any_of(g.values[p.gemm.out].users.begin(), g.values[p.gemm.out].users.end(),
                  [&](int u) { return !in.count(u); });
  Region r = make_region(g, nodes, p);
  int ready = -1;
  for (int v : r.inputs) ready = std::max(ready, g.values[v].producer);
  const int anchor = *std::lower_bound(nodes.begin(), nodes.end(), ready + 1);
  for (int e : r.outputs)
    for (int u : g.values[e].users)
      if (!in.count(u) && u < anchor) {
        out.decline(root, "backward epilogue not fused: result " + vname(g, e) +
                              " is read by node '" + g.nodes[u].id +
                              "' before every input of the region is ready");
        return;
      }
  r.anchor = anchor;
  out.regions.push_back(std::move(r));
}

// --- the bias gradient on the dW GEMM --------------------------------------------------------

// The value `v` comes from through flat reshapes of contiguous tensors (the same elements in the
// same order): the first value back whose producer is no such reshape.
int flat_base(const Graph& g, int v) {
  for (int hops = 0; hops < 16; ++hops) {
    const int pr = g.values[v].producer;
    if (pr < 0 || !is_flat_reshape(g.nodes[pr].op) || !g.meta(v).is_contiguous() ||
        g.nodes[pr].operands.empty() || !g.nodes[pr].operands[0].is_tensor())
      break;
    const int src = g.nodes[pr].operands[0].value;
    if (!g.meta(src).is_contiguous()) break;
    v = src;
  }
  return v;
}

// The 2-D value the GEMM operand `v` is the transpose view of (`t`, permute [1, 0], transpose
// 0 1: each a permutation [1, 0] of a 2-D tensor), or -1.
int transposed_source(const Graph& g, int v) {
  const int pr = g.values[v].producer;
  if (pr < 0) return -1;
  const Node& n = g.nodes[pr];
  if ((n.op != Op::kT && n.op != Op::kPermute && n.op != Op::kTranspose) || n.operands.empty() ||
      !n.operands[0].is_tensor())
    return -1;
  const int src = n.operands[0].value;
  if (g.meta(src).shape.size() != 2 || n.dims != std::vector<int64_t>{1, 0}) return -1;
  return src;
}

// The sum over the rows of T's elements ([K, F] contiguous): an aten.sum over every dim but the
// last of T or of a flat reshape of what T reshapes (the 3-D tangent summed over [0, 1] beside
// its [B T, F] view), F values. Its node, or -1.
int row_sum_of(const Graph& g, int t, int64_t F) {
  const int base = flat_base(g, t);
  std::vector<int> same{base};  // values holding T's elements in T's order, last dim F or not
  for (size_t i = 0; i < same.size() && same.size() < 32; ++i)
    for (int u : g.values[same[i]].users)
      if (is_flat_reshape(g.nodes[u].op) && g.nodes[u].outputs.size() == 1 &&
          g.meta(g.nodes[u].outputs[0]).is_contiguous() &&
          std::find(same.begin(), same.end(), g.nodes[u].outputs[0]) == same.end())
        same.push_back(g.nodes[u].outputs[0]);
  for (int s : same) {
    const TensorMeta& ms = g.meta(s);
    if (ms.shape.size() < 2 || ms.shape.back() != F || !ms.is_contiguous()) continue;
    std::vector<int64_t> lead;
    for (int64_t d = 0; d + 1 < static_cast<int64_t>(ms.shape.size()); ++d) lead.push_back(d);
    for (int u : g.values[s].users) {
      const Node& n = g.nodes[u];
      if (n.op == Op::kSumDim && n.outputs.size() == 1 && n.operands[0].value == s &&
          n.dims == lead && g.meta(n.outputs[0]).numel() == F)
        return u;
    }
  }
  return -1;
}

// A plain mm that is a weight gradient (K = tokens) of a tangent T whose bias gradient the graph
// sums beside it: nn.Linear's mm(T^T, X) with sum(T, rows) [F = M], GPT-2 Conv1D's mm(X^T, T)
// [F = N]. The region {mm, sum} writes both, the sum through cuBLASLt's BGRADB / BGRADA. Not
// taken: a T that a pointwise op computes (the chain's fused kernel sums it as it writes it:
// this fusion's backward epilogue, the pointwise fusion's column sums), a sum already in a region,
// a sum whose dtype is not the GEMM's. True when a region was added.
bool match_weight_grad(const Graph& g, int root, Matches& out) {
  Params p;
  if (!read_gemm(g, root, p.gemm, p.M, p.N, p.K, p.gemm_dtype).empty() || p.gemm.bias >= 0 ||
      p.gemm_dtype == DType::kFloat32)
    return false;
  for (bool of_a : {true, false}) {
    const int t = of_a ? transposed_source(g, p.gemm.a) : p.gemm.b;
    const int64_t F = of_a ? p.M : p.N;
    if (t < 0) continue;
    const TensorMeta& mt = g.meta(t);
    if (mt.shape.size() != 2 || mt.shape[0] != p.K || mt.shape[1] != F || !mt.is_contiguous())
      continue;
    const int si = row_sum_of(g, t, F);
    if (si < 0) continue;
    const int sv = g.nodes[si].outputs[0];
    const std::string what = "bias gradient " + vname(g, sv) + " not fused with the dW GEMM: ";
    const bool taken = std::any_of(out.regions.begin(), out.regions.end(), [&](const Region& r) {
      return std::find(r.nodes.begin(), r.nodes.end(), si) != r.nodes.end();
    });
    if (taken) continue;  // the backward epilogue of the chain computing T sums it
    const int base = flat_base(g, t);
    const int bp = g.values[base].producer;
    if (bp >= 0 && pointwise_op(g.nodes[bp].op)) {
      out.decline(root, what + vname(g, base) + " is computed by the pointwise node '" +
                            g.nodes[bp].id +
                            "', whose fused kernel adds its column sums as it writes it");
      continue;
    }
    if (g.meta(sv).dtype != p.gemm_dtype) {
      out.decline(root, what + "it is " + std::string(dtype_name(g.meta(sv).dtype)) +
                            ", cuBLASLt's bias gradient is written here in the GEMM's dtype " +
                            std::string(dtype_name(p.gemm_dtype)));
      continue;
    }
    p.wgrad = {true, of_a, g.nodes[si].operands[0].value, sv};
    p.out = p.gemm.out;
    std::vector<int> nodes{root, si};
    std::sort(nodes.begin(), nodes.end());
    const std::set<int> in(nodes.begin(), nodes.end());
    const auto& us = g.values[p.gemm.out].users;
    p.gemm.exported = g.values[p.gemm.out].graph_output ||
                      std::any_of(us.begin(), us.end(), [&](int u) { return !in.count(u); });
    Region r = make_region(g, nodes, p);
    // Run at the first node where every input is ready; no reader of a result before it.
    int ready = -1;
    for (int v : r.inputs) ready = std::max(ready, g.values[v].producer);
    const int anchor = *std::lower_bound(nodes.begin(), nodes.end(), ready + 1);
    for (int e : r.outputs)
      for (int u : g.values[e].users)
        if (!in.count(u) && u < anchor)
          return out.decline(root, what + "its result " + vname(g, e) + " is read by node '" +
                                       g.nodes[u].id + "' before every input is ready");
    r.anchor = anchor;
    out.regions.push_back(std::move(r));
    return true;
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
    p.act_src = cur;
    p.act_round = g.meta(g.nodes[chain.nodes.back()].outputs[0]).dtype;
    for (int ni : chain.nodes) p.act_values.push_back(g.nodes[ni].outputs[0]);
    tail.insert(tail.end(), chain.nodes.begin(), chain.nodes.end());
    cur = g.nodes[chain.nodes.back()].outputs[0];
  }
  if (p.add_bias < 0 && p.residual < 0 && !p.has_act_step && !split) tail.clear();
  // Gating: cur * up, up another GEMM's [M, N] output. The activation may be read outside too
  // (the default partitioner saves it): the fused step then writes it as well (Params::act_out).
  // Its other readers must come after the gating mul (the fused step runs there); otherwise the
  // activation is fused alone, as when it has no such mul.
  int gate_mul = -1;  // the one aten.mul reading the activation
  for (int u : g.values[cur].users)
    if (g.nodes[u].op == Op::kMul && u != gate_mul) gate_mul = gate_mul < 0 ? u : -2;
  const auto& act_readers = g.values[cur].users;
  if (!split && p.has_act_step && gate_mul >= 0 &&
      std::all_of(act_readers.begin(), act_readers.end(), [&](int u) { return u >= gate_mul; })) {
    const int m = gate_mul;
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
  if ((p.up.node >= 0 || p.split_halves) && !p.act_values.empty()) {
    // The activation of a gated pair, read outside (saved for the backward): written too.
    const int a = p.act_values.back();
    const auto& us = g.values[a].users;
    if (g.values[a].graph_output || std::any_of(us.begin(), us.end(), [&](int u) {
          return std::find(nodes.begin(), nodes.end(), u) == nodes.end();
        })) {
      p.act_out = a;
      exported.push_back(a);
    }
  }
  // Views of what the step writes, read outside (the default partitioner returns view(mm)): left
  // as aliases of its buffers (Region::views); a view of anything else leaks an intermediate.
  std::vector<int> view_roots;
  const std::vector<int> views = outside_views(g, nodes, view_roots);
  for (int v : view_roots)
    if (std::find(exported.begin(), exported.end(), v) == exported.end()) {
      out.decline(root, "intermediate " + vname(g, v) +
                            " is read outside the region through a view, and the fused step "
                            "does not write it");
      return;
    }
  for (int vn : views)
    exported.insert(exported.end(), g.nodes[vn].outputs.begin(), g.nodes[vn].outputs.end());
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
  auto viewed = [&](int v) {
    return std::find(view_roots.begin(), view_roots.end(), v) != view_roots.end();
  };
  p.gemm.exported =
      g.values[p.gemm.out].graph_output || viewed(p.gemm.out) ||
      std::any_of(g.values[p.gemm.out].users.begin(), g.values[p.gemm.out].users.end(),
                  [&](int u) { return !in.count(u); });
  if (p.up.node >= 0) {
    p.up.exported = g.values[p.up.out].graph_output || viewed(p.up.out) ||
                    std::any_of(g.values[p.up.out].users.begin(), g.values[p.up.out].users.end(),
                                [&](int u) { return !in.count(u); });
    claimed_up.insert(p.up.node);
  }
  Region r = make_region(g, nodes, p);
  set_region_views(r, g, views, view_roots);
  out.regions.push_back(std::move(r));
}

}  // namespace

double act_grad_reference(Act act, double x) {
  switch (act) {
    case Act::kNone:
      return 1;
    case Act::kGeluErf:
      return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
             x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    case Act::kGeluTanh: {
      const double k = std::sqrt(2 / M_PI);
      const double t = std::tanh(k * (x + 0.044715 * x * x * x));
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
    }
    case Act::kSilu: {
      const double s = 1 / (1 + std::exp(-x));
      return s * (1 + x * (1 - s));
    }
    case Act::kTable:
      break;
  }
  return std::nan("");
}

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
    case Act::kTable:
      break;
  }
  return std::nan("");
}

void match(const Graph& g, Matches& out) {
  std::set<int> claimed_up;  // up projections already taken by a gated region
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    const Op op = g.nodes[i].op;
    if ((op != Op::kMm && op != Op::kAddmm) || claimed_up.count(i)) continue;
    // The backward epilogue first; else the forward forms, and when these take nothing either,
    // why the backward one was not taken.
    Params p;
    std::vector<int> nodes{i}, tried;
    std::string why;
    bool saved_ok = false;  // the chain's saved tensors were all [M, N]
    if (read_gemm(g, i, p.gemm, p.M, p.N, p.K, p.gemm_dtype).empty() &&
        match_backward(g, i, p, nodes, why, tried, saved_ok)) {
      add_backward(g, i, p, nodes, out);
      if (!why.empty()) out.decline(i, "backward epilogue: " + why);  // its bias gradient
      continue;
    }
    // Said when the chain looked like an activation's backward (erf, tanh, exp or sigmoid in it,
    // or 6 or more ops over [M, N] saved tensors: GPT-2's saves the tanh) and no forward form
    // with an activation, gating or residual took the GEMM instead.
    const size_t before = out.regions.size();
    match_gemm(g, i, claimed_up, out);
    if (out.regions.size() == before && op == Op::kMm) match_weight_grad(g, i, out);
    bool forward = false;
    if (out.regions.size() > before) {
      const auto& f = std::any_cast<const Params&>(out.regions.back().params);
      forward = (f.has_act_step && f.act != Act::kNone) || f.up.node >= 0 || f.split_halves ||
                f.residual >= 0;
    }
    const bool act_like = std::any_of(tried.begin(), tried.end(),
                                      [&](int n) {
                                        const Op op = g.nodes[n].op;
                                        return op == Op::kErf || op == Op::kTanh ||
                                               op == Op::kExp || op == Op::kSigmoid;
                                      }) ||
                          (saved_ok && tried.size() >= 6);
    if (!why.empty() && act_like && !forward) out.decline(i, "backward epilogue not fused: " + why);
  }
}

}  // namespace replay::matmul_epilogue
