// scaled_mm matcher: aten._scaled_mm with the reshapes around it and the reciprocals of its scales
// (issue 27).
//
// Candidates: every aten._scaled_mm.default of the canonical graph. A region is
//   [view]       self = view(x) of a contiguous x [.., K], read only here (claimed: the GEMM reads
//                x as the [M, K] it is)
//   [recip]      scale_a / scale_b = [views] reciprocal([views] s) of a float32 s (torchao's
//                `w_scale.t().reciprocal()` is reciprocal(permute(s_b [N, 1])); its
//                rowwise_with_gw_hp recipe broadcasts a one-element scale to [1, N] by a view and
//                an expand after the reciprocal), each claimed when its view chain is read only
//                here; computed by the region, and written where the graph reads the reciprocal
//                elsewhere too (a forward saves it). Not where s also multiplies a tensor
//                (x.float() * s: the quantization that made the operand, whose fusion,
//                fp8_quantize, writes the reciprocals with the float8 tensor); nor a reciprocal
//                an earlier node reads
//   _scaled_mm   self [M, K] row-major, mat2 [K, N] column-major (cuBLASLt's TN layout, read in
//                place: never a copy of the fusion's own; a column-major self is taken where the
//                captured graph clones it contiguous, the canonical form having folded the
//                clone away: the region makes the graph's copy, see Params::copy_self),
//                scales tensorwise (one element each) or rowwise ([M, 1], [1, N]), optional
//                bias [N], scale_result None
//   [view]       out [M, N] -> [.., N] (nn.Linear's view back to [B, T, N]), the only reader
// What cuBLASLt's float8 kernels cannot read in place is declined with the reason (the eager
// executor then copies it into their layout). Every claimed value other than the result and an
// exported reciprocal is private to the region, and every outside reader of a region output
// comes after the region's last node: where a claimed view or reciprocal would break that (a
// reciprocal both GEMMs of a backward read, the first GEMM's output view after the second GEMM),
// it is left to the eager executor and the region is the rest.
#include <algorithm>
#include <set>
#include <string>

#include "impls/fusions/scaled_mm/params.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::scaled_mm {
namespace {

// Ops that only re-index one tensor (a scale vector seen as [N, 1] or [1, N]).
bool is_view_op(Op op) {
  switch (op) {
    case Op::kView:
    case Op::kUnsafeView:
    case Op::kReshape:
    case Op::kPermute:
    case Op::kT:
    case Op::kTranspose:
    case Op::kSqueeze:
    case Op::kSqueezeDim:
    case Op::kSqueezeDims:
    case Op::kUnsqueeze:
    case Op::kExpand:
    case Op::kAlias:
      return true;
    default:
      return false;
  }
}

std::string vname(const Graph& g, int v) {
  return "'" + g.values[v].name + "'";
}

bool is_float8(DType t) {
  return t == DType::kFloat8E4M3 || t == DType::kFloat8E5M2;
}

// A float32 tensor of n elements laid out along one stride (at most one dim longer than 1).
bool is_vector(const TensorMeta& m, int64_t n) {
  if (m.dtype != DType::kFloat32 || m.numel() != n) return false;
  int long_dims = 0;
  for (int64_t s : m.shape) long_dims += s > 1;
  return long_dims <= 1;
}

// Scale `value` of _scaled_mm node `mm` (n elements): value = [views] reciprocal([views] s),
// claimed when every view is read only on this path. s is a float32 vector of n elements or one
// element: torchao's rowwise_with_gw_hp recipe broadcasts a tensorwise weight scale to [1, N]
// after its reciprocal (`reciprocal().reshape(1, 1).expand(1, N).contiguous()`; the canonical
// form folds the clone away). A reciprocal several GEMMs read (a backward's two GEMMs scaled by
// the same grad_output scale) goes with the first of them.
Scale read_scale(const Graph& g, int value, int mm, int64_t n) {
  Scale s;
  s.value = s.source = value;
  if (g.meta(value).dtype != DType::kFloat32) return s;
  std::vector<int> nodes;
  int v = value, reader = mm;
  for (int depth = 0; depth < 3; ++depth) {  // views after the reciprocal
    const int q = g.values[v].producer;
    if (q < 0 || !is_view_op(g.nodes[q].op)) break;
    if (single_user(g, v) != reader) return s;
    nodes.push_back(q);
    reader = q;
    v = g.nodes[q].operands[0].value;
  }
  const int p = g.values[v].producer;
  if (p < 0 || g.nodes[p].op != Op::kReciprocal || g.meta(v).dtype != DType::kFloat32) return s;
  const auto& users = g.values[v].users;
  if (nodes.empty() ? *std::min_element(users.begin(), users.end()) != mm
                    : single_user(g, v) != reader)
    return s;
  nodes.push_back(p);
  int src = g.nodes[p].operands[0].value;
  reader = p;
  for (int depth = 0; depth < 3; ++depth) {  // views in front of it
    const int q = g.values[src].producer;
    if (q < 0 || !is_view_op(g.nodes[q].op) || single_user(g, src) != reader) break;
    const int up = g.nodes[q].operands[0].value;
    if (g.meta(up).numel() != g.meta(src).numel()) break;
    nodes.push_back(q);
    reader = q;
    src = up;
  }
  if (!is_vector(g.meta(src), n) && !is_vector(g.meta(src), 1)) return s;
  // A scale that also multiplies a tensor (x.float() * scale: the quantization that made the
  // float8 operand) belongs to that quantization: fp8_quantize, earlier in the registry, claims
  // its reciprocals and writes them in its own kernel; the GEMM reads them as they are.
  for (int u : g.values[src].users)
    if (g.nodes[u].op == Op::kMul) {
      s.quantization = true;
      return s;
    }
  s.reciprocal = true;
  s.source = src;
  std::sort(nodes.begin(), nodes.end());
  s.nodes = nodes;
  return s;
}

bool read_outside(const Graph& g, int v, const std::set<int>& in) {
  if (g.values[v].graph_output) return true;
  return std::any_of(g.values[v].users.begin(), g.values[v].users.end(),
                     [&](int u) { return !in.count(u); });
}

// The region of params `p` with the optional parts chosen; "" and `region` filled when every
// claimed value is private or written, and every outside reader of a written value comes after the
// region's last node; else why not.
std::string try_region(const Graph& g, Params p, int in_view, int out_view, bool recip_a,
                       bool recip_b, Region& region) {
  std::vector<int> nodes{p.node};
  if (in_view >= 0) nodes.push_back(in_view);
  if (out_view >= 0) nodes.push_back(out_view);
  if (in_view < 0) {
    p.a = p.a_view >= 0 ? p.a_view : p.a;
    p.a_view = -1;
  }
  if (out_view < 0) p.out = p.mm_out;
  auto take = [&](Scale& s, bool claim) {
    if (!claim || !s.reciprocal) {
      s = Scale{s.value, s.value, false, false, {}, s.quantization};
      return;
    }
    nodes.insert(nodes.end(), s.nodes.begin(), s.nodes.end());
  };
  take(p.scale_a, recip_a);
  take(p.scale_b, recip_b);
  const std::set<int> in(nodes.begin(), nodes.end());
  std::vector<int> exported{p.out};
  for (Scale* s : {&p.scale_a, &p.scale_b}) {
    s->exported = s->reciprocal && read_outside(g, s->value, in);
    if (s->exported) exported.push_back(s->value);
  }
  for (int ni : nodes)
    for (int v : g.nodes[ni].outputs) {
      if (std::find(exported.begin(), exported.end(), v) != exported.end()) continue;
      if (read_outside(g, v, in))
        return "intermediate " + vname(g, v) + " is read outside the region";
    }
  const int anchor = *std::max_element(nodes.begin(), nodes.end());
  for (int e : exported)
    for (int u : g.values[e].users)
      if (!in.count(u) && u < anchor)
        return "region output " + vname(g, e) + " is read by node '" + g.nodes[u].id +
               "' before the region's last node '" + g.nodes[anchor].id + "'";
  region = make_region(g, nodes, p);
  return "";
}

void match_one(const Graph& g, int ni, Matches& out) {
  const Node& n = g.nodes[ni];
  if (n.operands.size() < 4) return;
  if (n.operands.size() > 5 && n.operands[5].is_tensor()) {
    out.decline(ni, "scale_result " + vname(g, n.operands[5].value) +
                        " is given: a float8 output scale is not supported (only bfloat16, float16 "
                        "and float32 outputs, scale_result None)");
    return;
  }
  Params p;
  p.node = ni;
  p.a = n.operands[0].value;
  p.b = n.operands[1].value;
  p.mm_out = p.out = n.outputs[0];
  const TensorMeta &ma = g.meta(p.a), &mb = g.meta(p.b);
  if (ma.shape.size() != 2 || mb.shape.size() != 2) {
    out.decline(ni, "operands are not 2-D");
    return;
  }
  p.M = ma.shape[0];
  p.K = ma.shape[1];
  p.N = mb.shape[1];
  p.a_dtype = ma.dtype;
  p.b_dtype = mb.dtype;
  p.out_dtype = g.meta(p.mm_out).dtype;
  p.fast_accum = n.flag;
  if (n.operands.size() > 4 && n.operands[4].is_tensor()) {
    p.bias = n.operands[4].value;
    p.bias_dtype = g.meta(p.bias).dtype;
  }
  const int sa = n.operands[2].value, sb = n.operands[3].value;
  const TensorMeta &msa = g.meta(sa), &msb = g.meta(sb);
  const bool tensorwise = msa.numel() == 1 && msb.numel() == 1;
  p.rowwise =
      msa.shape == std::vector<int64_t>{p.M, 1} && msb.shape == std::vector<int64_t>{1, p.N};
  if ((!tensorwise && !p.rowwise) || msa.dtype != DType::kFloat32 || msb.dtype != DType::kFloat32) {
    out.decline(ni, "scales " + vname(g, sa) + " " + msa.str() + " and " + vname(g, sb) + " " +
                        msb.str() +
                        ": neither tensorwise (one float32 element each) nor rowwise ([" +
                        std::to_string(p.M) + ", 1] and [1, " + std::to_string(p.N) + "])");
    return;
  }
  if (p.rowwise && p.M == 1 && p.N == 1) p.rowwise = false;
  // A column-major self: on the captured graph, the contiguous clone the canonical form removed
  // (the binder checks that the clone is there).
  p.copy_self = !(ma.stride[1] == 1 && (p.M == 1 || ma.stride[0] >= p.K)) && ma.stride[0] == 1 &&
                ma.stride[1] >= p.M && p.K > 1;
  if (std::string why = layout_unsupported(g, p); !why.empty()) {
    out.decline(ni, why);
    return;
  }
  // self as the view of a contiguous [.., K] read only here.
  int in_view = -1;
  if (const int q = g.values[p.a].producer;
      q >= 0 && !p.copy_self && is_flat_reshape(g.nodes[q].op) && single_user(g, p.a) == ni &&
      g.meta(g.nodes[q].operands[0].value).is_contiguous() &&
      g.meta(g.nodes[q].operands[0].value).shape.back() == p.K && ma.is_contiguous()) {
    in_view = q;
    p.a_view = p.a;
    p.a = g.nodes[q].operands[0].value;
  }
  // The output viewed back to [.., N], its only reader.
  int out_view = -1;
  if (const int u = single_user(g, p.mm_out); u >= 0 && is_flat_reshape(g.nodes[u].op)) {
    const TensorMeta& mv = g.meta(g.nodes[u].outputs[0]);
    if (mv.is_contiguous() && !mv.shape.empty() && mv.shape.back() == p.N &&
        mv.numel() == p.M * p.N && g.meta(p.mm_out).is_contiguous()) {
      out_view = u;
      p.out = g.nodes[u].outputs[0];
    }
  }
  p.scale_a = read_scale(g, sa, ni, p.rowwise ? p.M : 1);
  p.scale_b = sa == sb ? Scale{sb, sb, false, false, {}, false}
                       : read_scale(g, sb, ni, p.rowwise ? p.N : 1);
  // The most the region can claim: both reciprocals, then one, then none; each with the views
  // around the GEMM, then without the output's.
  const std::pair<bool, bool> recips[] = {
      {true, true}, {true, false}, {false, true}, {false, false}};
  for (const auto& [ra, rb] : recips) {
    for (int ov : {out_view, -1}) {
      Region r;
      if (try_region(g, p, in_view, ov, ra, rb, r).empty()) {
        out.regions.push_back(std::move(r));
        return;
      }
      if (out_view < 0) break;
    }
  }
  out.decline(ni, "no region around the _scaled_mm keeps its values private");  // not reached
}

}  // namespace

std::string layout_unsupported(const Graph& g, const Params& p) {
  const int self = p.a_view >= 0 ? p.a_view : p.a;
  const TensorMeta &ma = g.meta(self), &mb = g.meta(p.b);
  if (!is_float8(p.a_dtype) || !is_float8(p.b_dtype))
    return "operands " + ma.str() + " and " + mb.str() + " are not both float8";
  if (p.a_dtype == DType::kFloat8E5M2 && p.b_dtype == DType::kFloat8E5M2)
    return "float8_e5m2 x float8_e5m2: cuBLASLt has no float8 kernel for two e5m2 operands";
  if (p.K == 0 || p.K % 16 != 0 || p.N % 16 != 0)
    return "K = " + std::to_string(p.K) + ", N = " + std::to_string(p.N) +
           ": cuBLASLt's float8 kernels need both positive multiples of 16";
  // Hopper's float8 kernels take the TN layout only: self row-major, mat2 column-major.
  if (!p.copy_self && !(ma.stride[1] == 1 && (p.M == 1 || ma.stride[0] >= p.K)))
    return "self " + vname(g, self) + " " + ma.str() + " strides " + shape_str(ma.stride) +
           " is not row-major: cuBLASLt's float8 kernels take only the TN layout (self "
           "row-major, mat2 column-major); it would need a copy (the eager executor makes one)";
  if (!(mb.stride[0] == 1 && mb.stride[1] >= p.K))
    return "mat2 " + vname(g, p.b) + " " + mb.str() + " strides " + shape_str(mb.stride) +
           " is not column-major (the transpose of a row-major [N, K]): cuBLASLt's float8 "
           "kernels take only the TN layout; it would need a copy (the eager executor makes one)";
  const int64_t lda = p.M == 1 || p.copy_self ? p.K : ma.stride[0], ldb = mb.stride[1];
  if (lda % 16 != 0 || ldb % 16 != 0)
    return "leading dimensions " + std::to_string(lda) + " and " + std::to_string(ldb) +
           " are not both multiples of 16 bytes (cuBLASLt's float8 kernels)";
  const DType od = p.out_dtype;
  if (od != DType::kBFloat16 && od != DType::kFloat16 && od != DType::kFloat32)
    return "out_dtype " + std::string(dtype_name(od)) +
           " (the float8 GEMM here writes bfloat16, float16 or float32)";
  if (p.bias >= 0 &&
      !((p.bias_dtype == DType::kBFloat16 && (od == DType::kBFloat16 || od == DType::kFloat32)) ||
        (p.bias_dtype == DType::kFloat16 && od == DType::kFloat16)))
    return "a " + std::string(dtype_name(p.bias_dtype)) + " bias with a " +
           std::string(dtype_name(od)) +
           " output: cuBLASLt's float8 bias epilogue takes bfloat16 with a bfloat16 or float32 "
           "output, float16 with float16";
  return "";
}

void match(const Graph& g, Matches& out) {
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i)
    if (g.nodes[i].op == Op::kScaledMm) match_one(g, i, out);
}

}  // namespace replay::scaled_mm
