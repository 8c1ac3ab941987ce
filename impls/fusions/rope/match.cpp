// rope matcher. Candidates: every aten.neg of a slice or select of the last dim, and every
// aten.sub of products of the elements of pairs (other negs and subs are not RoPE and are not
// listed as declined). From a candidate the rotation is read back and forth; a decline names the
// step that did not fit.
// Forward:
//   rotate-half  neg(slice(x, -1, h, R)) -> cat([neg, slice(x, -1, 0, h)], -1)          = rot
//   interleaved  neg(slice(x, -1, 1, R, 2)) -> unsqueeze(-1) -> cat([., unsqueeze(slice(x, -1,
//                0, R, 2), -1)], -1) -> view(x's shape)                                  = rot
//   then         rot * sin (the only reader of rot), x * cos, their sum (alpha 1), an optional
//                float convert of the sum (Cohere's float32 math), and for partial rotary
//                (x = slice(x_full, -1, 0, R)) the cat([sum, slice(x_full, -1, R, D)], -1).
//   Meta pairs   sub(x_e * c, x_o * s) and x_e * s + x_o * c stacked (pairs_forward): the
//                interleaved rotation with a table per pair.
// Backward (aot_autograd's transposes): y = g * sin [-> convert]; rotT(y) through neg +
//   slice_scatter into zeros (select for pairs), summed with g * cos in the graph's association
//   (backward, find_sums); partial rotary: the tail scattered into zeros and added; Meta's pairs
//   through select_scatter (pairs_backward). Where the graph then stacks dq, dk and dv into one
//   tensor (a cat, or a sum of scatters into zeros), the region writes that tensor (try_joint,
//   joint.hpp).
// x (or g) may be an exact upcast of the head vectors that only the region reads: the kernel
// reads the source. cos and sin are read as the multiplies read them (a broadcast view of the
// table): the table's own chain (an input, an index by position ids, sin/cos of the inverse
// frequencies) stays outside, since a training forward returns the table for the backward. The
// rotations of one graph in the same style and direction form one region (q and k: one kernel;
// each has its own tables), unless a reader of one's output comes before the other's last node.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "impls/fusions/rope/params.hpp"
#include "workloads/ir/layout.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::rope {
namespace {

std::string node_str(const Graph& g, int n) {
  return "'" + g.nodes[n].id + "'";
}
std::string val_str(const Graph& g, int v) {
  return "'" + g.values[v].name + "'";
}

int rank(const Graph& g, int v) {
  return static_cast<int>(g.meta(v).shape.size());
}
int producer(const Graph& g, int v) {
  return v < 0 ? -1 : g.values[v].producer;
}

int64_t norm_dim(int64_t d, int r) {
  return d < 0 ? d + r : d;
}

// A slice of the last dim of its operand: the node, or -1.
struct LastSlice {
  int node = -1;
  int src = -1;
  int64_t start = 0, end = 0, step = 1;
};
LastSlice last_slice(const Graph& g, int v) {
  LastSlice s;
  const int p = producer(g, v);
  if (p < 0 || g.nodes[p].op != Op::kSlice) return s;
  const Node& n = g.nodes[p];
  const int src = n.operands.at(0).value;
  const int r = rank(g, src);
  if (r == 0 || norm_dim(n.dim, r) != r - 1) return s;
  const int64_t size = g.meta(src).shape.back();
  s.node = p;
  s.src = src;
  s.start = std::clamp<int64_t>(n.start < 0 ? n.start + size : n.start, 0, size);
  s.end = std::clamp<int64_t>(n.end < 0 ? n.end + size : n.end, 0, size);
  s.step = n.step;
  return s;
}

// `v` has the shape [.., R] of x or broadcasts to it (right-aligned, each dim equal or 1).
bool broadcasts_to(const std::vector<int64_t>& s, const std::vector<int64_t>& x) {
  if (s.size() > x.size()) return false;
  const size_t off = x.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] != 1 && s[i] != x[off + i]) return false;
  return true;
}

bool float_dtype(DType t) {
  return t == DType::kBFloat16 || t == DType::kFloat16 || t == DType::kFloat32;
}

struct Found {
  Rotation rot;
  Style style = Style::kRotateHalf;
  bool backward = false;
  int neg = -1;  ///< the candidate it was found from
  std::vector<int> nodes;
};

class Matcher {
 public:
  Matcher(const Graph& g, Matches& out) : g_(g), out_(out) {}

  // The rotation around neg node `neg`, or a decline.
  bool rotation(int neg, Found& f) {
    const Node& nn = g_.nodes[neg];
    if (int u = single_user(g_, nn.outputs[0]); u >= 0 && g_.nodes[u].op == Op::kSliceScatter)
      return backward(neg, f);
    if (int u = single_user(g_, nn.outputs[0]); u >= 0 && g_.nodes[u].op == Op::kMul)
      return pairs_backward(neg, f);
    const int odd = nn.operands.at(0).value;
    const LastSlice s_odd = last_slice(g_, odd);
    if (s_odd.node < 0)
      return out_.decline(
          neg, "neg of " + val_str(g_, odd) + ", not a slice of the last dim of a head vector");
    const int x = s_odd.src;
    const std::vector<int64_t>& xs = g_.meta(x).shape;
    const int64_t R = xs.back();
    if (R < 2 || R % 2)
      return out_.decline(
          neg, "head vectors " + val_str(g_, x) + " of odd last dim " + std::to_string(R));
    const int u = single_user(g_, nn.outputs[0]);
    if (u < 0)
      return out_.decline(neg, "neg " + node_str(g_, neg) + " has readers besides the rotation");
    f.nodes = {s_odd.node, neg};
    int rot = -1;
    if (g_.nodes[u].op == Op::kCat) {
      // rotate-half: cat([-x[h:R], x[0:h]], -1)
      const Node& cat = g_.nodes[u];
      if (norm_dim(cat.dim, rank(g_, cat.outputs[0])) != rank(g_, x) - 1 ||
          cat.operands.size() != 2)
        return out_.decline(neg,
                            "cat " + node_str(g_, u) + " is not of two halves along the last dim");
      if (cat.operands[0].value != nn.outputs[0])
        return out_.decline(neg, "cat " + node_str(g_, u) +
                                     " puts the negated half second: cat(x1, -x2) is not "
                                     "rotate_half (cat(-x2, x1))");
      const LastSlice s_even = last_slice(g_, cat.operands[1].value);
      if (s_even.node < 0 || s_even.src != x)
        return out_.decline(neg, "cat " + node_str(g_, u) +
                                     ": its second half is not a slice of the same head vectors " +
                                     val_str(g_, x));
      const int64_t h = R / 2;
      if (s_odd.step != 1 || s_even.step != 1)
        return out_.decline(neg, "rotate-half slices with a step (" + std::to_string(s_odd.step) +
                                     ", " + std::to_string(s_even.step) + ")");
      if (s_odd.start == 0 && s_even.start == h)
        return out_.decline(neg,
                            "cat(-x1, x2): the first half is negated (the inverse rotation, "
                            "sin's sign flipped), not rotate_half");
      if (s_odd.start != h || s_odd.end != R || s_even.start != 0 || s_even.end != h)
        return out_.decline(neg, "rotate-half halves [" + std::to_string(s_even.start) + ", " +
                                     std::to_string(s_even.end) + ") and [" +
                                     std::to_string(s_odd.start) + ", " +
                                     std::to_string(s_odd.end) + ") do not split the rotary dim " +
                                     std::to_string(R) + " at " + std::to_string(h));
      f.style = Style::kRotateHalf;
      f.nodes.push_back(s_even.node);
      f.nodes.push_back(u);
      rot = cat.outputs[0];
    } else if (g_.nodes[u].op == Op::kUnsqueeze) {
      // interleaved: cat([unsqueeze(-x[1::2], -1), unsqueeze(x[0::2], -1)], -1).view(x.shape)
      const Node& un = g_.nodes[u];
      const int r1 = rank(g_, un.outputs[0]);
      if (norm_dim(un.dim, r1) != r1 - 1)
        return out_.decline(neg, "unsqueeze " + node_str(g_, u) + " is not of a new last dim");
      const int c = single_user(g_, un.outputs[0]);
      if (c < 0 || g_.nodes[c].op != Op::kCat || g_.nodes[c].operands.size() != 2 ||
          norm_dim(g_.nodes[c].dim, r1) != r1 - 1)
        return out_.decline(neg,
                            "the unsqueezed negation is not read by a cat of pairs along "
                            "the last dim");
      const Node& cat = g_.nodes[c];
      if (cat.operands[0].value != un.outputs[0])
        return out_.decline(neg, "cat " + node_str(g_, c) +
                                     " puts the negated element second: (x_even, -x_odd) is not "
                                     "the interleaved rotation (-x_odd, x_even)");
      const int p_even = producer(g_, cat.operands[1].value);
      if (p_even < 0 || g_.nodes[p_even].op != Op::kUnsqueeze ||
          norm_dim(g_.nodes[p_even].dim, r1) != r1 - 1)
        return out_.decline(neg, "cat " + node_str(g_, c) +
                                     ": its second operand is not an unsqueeze of a new last dim");
      const LastSlice s_even = last_slice(g_, g_.nodes[p_even].operands.at(0).value);
      if (s_even.node < 0 || s_even.src != x)
        return out_.decline(neg, "cat " + node_str(g_, c) +
                                     ": the pair's second element is not a slice of the same head "
                                     "vectors " +
                                     val_str(g_, x));
      if (s_odd.step != 2 || s_even.step != 2 || s_odd.start != 1 || s_even.start != 0 ||
          s_odd.end != R || s_even.end < R - 1)
        return out_.decline(
            neg, "interleaved slices x[" + std::to_string(s_even.start) +
                     "::" + std::to_string(s_even.step) + "] and x[" + std::to_string(s_odd.start) +
                     "::" + std::to_string(s_odd.step) +
                     "] are not the even and odd elements of the rotary dim " + std::to_string(R));
      const int vw = single_user(g_, cat.outputs[0]);
      if (vw < 0 || !is_flat_reshape(g_.nodes[vw].op) ||
          g_.meta(g_.nodes[vw].outputs[0]).shape != xs)
        return out_.decline(neg, "the pairs " + val_str(g_, cat.outputs[0]) +
                                     " are not viewed back to the head vectors' shape");
      if (single_user(g_, s_even.node >= 0 ? g_.nodes[s_even.node].outputs[0] : -1) != p_even)
        return out_.decline(neg, "the even slice has readers besides the rotation");
      f.style = Style::kInterleaved;
      f.nodes.insert(f.nodes.end(), {u, s_even.node, p_even, c, vw});
      rot = g_.nodes[vw].outputs[0];
    } else {
      return out_.decline(neg, "neg is read by " + node_str(g_, u) + " (" +
                                   std::string(g_.nodes[u].raw.value("op", "?")) +
                                   "), not a rotate-half cat, an interleaved unsqueeze or a "
                                   "backward's slice_scatter");
    }
    // rot * sin, then (x * cos) + that.
    const int ms = single_user(g_, rot);
    if (ms < 0 || g_.nodes[ms].op != Op::kMul)
      return out_.decline(
          neg, "the rotation " + val_str(g_, rot) + " is not read by one multiply (by sin)");
    const int sin = other_tensor(g_.nodes[ms], rot);
    if (sin < 0 || sin == rot || !broadcasts_to(g_.meta(sin).shape, xs))
      return out_.decline(neg, "rot is multiplied by " +
                                   (sin < 0 ? std::string("a scalar") : val_str(g_, sin)) +
                                   ", not a table broadcast to " + shape_str(xs));
    const int ad = single_user(g_, g_.nodes[ms].outputs[0]);
    if (ad < 0 || g_.nodes[ad].op != Op::kAdd || g_.nodes[ad].alpha != 1)
      return out_.decline(neg, "rot * sin is not read by one add (alpha 1)");
    const int mc_val = other_tensor(g_.nodes[ad], g_.nodes[ms].outputs[0]);
    const int mc = producer(g_, mc_val);
    if (mc < 0 || g_.nodes[mc].op != Op::kMul || single_user(g_, mc_val) != ad)
      return out_.decline(neg,
                          "the add " + node_str(g_, ad) +
                              " does not sum rot * sin with a product x * cos read only by it");
    const int cos = other_tensor(g_.nodes[mc], x);
    if (cos < 0 || cos == x || !broadcasts_to(g_.meta(cos).shape, xs))
      return out_.decline(neg, "the add's other product " + node_str(g_, mc) +
                                   " is not the rotated head vectors " + val_str(g_, x) +
                                   " times a table broadcast to " + shape_str(xs));
    if (g_.meta(g_.nodes[ad].outputs[0]).shape != xs)
      return out_.decline(neg, "x * cos + rot * sin has shape " +
                                   shape_str(g_.meta(g_.nodes[ad].outputs[0]).shape) +
                                   ", not the head vectors' " + shape_str(xs));
    f.nodes.insert(f.nodes.end(), {ms, mc, ad});
    Rotation& r = f.rot;
    r.cos = cos;
    r.sin = sin;
    r.rotary_dim = R;
    r.mul_cos_dtype = g_.meta(mc_val).dtype;
    r.mul_sin_dtype = g_.meta(g_.nodes[ms].outputs[0]).dtype;
    r.add_dtype = g_.meta(g_.nodes[ad].outputs[0]).dtype;
    int y = g_.nodes[ad].outputs[0];
    // An optional float convert of the sum (x.float() math, then back to the activations' dtype).
    if (int cv = single_user(g_, y); cv >= 0 && g_.nodes[cv].op == Op::kConvertElementType &&
                                     float_dtype(g_.meta(g_.nodes[cv].outputs[0]).dtype)) {
      f.nodes.push_back(cv);
      y = g_.nodes[cv].outputs[0];
      r.sum_cvt = g_.meta(y).dtype;
    }
    // Partial rotary: x = x_full[..., :R], out = cat([y, x_full[..., R:]], -1).
    int x_full = x;
    const LastSlice s_rot = last_slice(g_, x);
    const int tail_cat = single_user(g_, y);
    if (s_rot.node >= 0 && s_rot.start == 0 && s_rot.step == 1 && tail_cat >= 0 &&
        g_.nodes[tail_cat].op == Op::kCat && g_.nodes[tail_cat].operands.size() == 2 &&
        g_.nodes[tail_cat].operands[0].value == y &&
        norm_dim(g_.nodes[tail_cat].dim, rank(g_, y)) == rank(g_, y) - 1) {
      const int D = static_cast<int>(g_.meta(s_rot.src).shape.back());
      const LastSlice s_pass = last_slice(g_, g_.nodes[tail_cat].operands[1].value);
      if (s_pass.node < 0 || s_pass.src != s_rot.src || s_pass.step != 1)
        return out_.decline(neg, "partial rotary: the cat " + node_str(g_, tail_cat) + " appends " +
                                     val_str(g_, g_.nodes[tail_cat].operands[1].value) +
                                     ", not a slice of the same head vectors " +
                                     val_str(g_, s_rot.src));
      if (s_pass.start != R || s_pass.end != D)
        return out_.decline(neg, "partial rotary: the pass-through [" +
                                     std::to_string(s_pass.start) + ", " +
                                     std::to_string(s_pass.end) +
                                     ") does not follow the rotary "
                                     "dim " +
                                     std::to_string(R) + " of head dim " + std::to_string(D));
      f.nodes.insert(f.nodes.end(), {s_rot.node, s_pass.node, tail_cat});
      x_full = s_rot.src;
      y = g_.nodes[tail_cat].outputs[0];
    }
    return finish(neg, f, x_full, y);
  }

  // A zero tensor of `shape` (aten.full with 0, aten.zeros): what the backward scatters into.
  bool zeros(int v, const std::vector<int64_t>& shape) const {
    const int p = producer(g_, v);
    if (p < 0 || g_.meta(v).shape != shape) return false;
    const Node& n = g_.nodes[p];
    if (n.op == Op::kZeros) return true;
    return n.op == Op::kFull && !n.operands.empty() && n.operands[0].is_scalar() &&
           n.operands[0].scalar == 0;
  }

  // slice_scatter(zeros, src, last dim, start, end, step) read only by one add: the node, or -1.
  int scatter_into_zeros(int ss, int src, int64_t start, int64_t end, int64_t step) const {
    if (ss < 0 || g_.nodes[ss].op != Op::kSliceScatter) return -1;
    const Node& n = g_.nodes[ss];
    if (n.operands.size() != 2 || n.operands[1].value != src) return -1;
    const std::vector<int64_t>& shape = g_.meta(n.outputs[0]).shape;
    const int r = static_cast<int>(shape.size());
    const int64_t size = shape.back();
    const int64_t s0 = std::clamp<int64_t>(n.start < 0 ? n.start + size : n.start, 0, size);
    const int64_t e0 = std::clamp<int64_t>(n.end < 0 ? n.end + size : n.end, 0, size);
    if (norm_dim(n.dim, r) != r - 1 || s0 != start || e0 < end || n.step != step ||
        (step == 1 && e0 != end) || !zeros(n.operands[0].value, shape))
      return -1;
    return ss;
  }

  // A value and the multiply under it: mul -> [float convert]. The mul node (or -1) and the
  // convert's dtype (float32 when none).
  std::pair<int, DType> product_of(int v) const {
    int p = producer(g_, v);
    DType cvt = DType::kFloat32;
    if (p >= 0 && g_.nodes[p].op == Op::kConvertElementType &&
        single_user(g_, g_.nodes[p].operands.at(0).value) == p && float_dtype(g_.meta(v).dtype)) {
      cvt = g_.meta(v).dtype;
      p = producer(g_, g_.nodes[p].operands.at(0).value);
    }
    if (p < 0 || g_.nodes[p].op != Op::kMul) return {-1, cvt};
    return {p, cvt};
  }

  // How the backward sums the two scatters and g * cos (aot_autograd keeps the model code's
  // association): order 0 (Hugging Face) t = ss_n + ss_o, dx = t + mc; order 1 (litgpt)
  // (mc + ss_n) + ss_o; order 2 (mc + ss_o) + ss_n. The adds' nodes, ss_o, mc's value and the
  // add producing dx; ss_o = -1 when none of these fits.
  struct Sums {
    int order = 0;
    int ss_o = -1, mcv = -1, ad = -1;
    std::vector<int> adds;
  };
  Sums find_sums(int ss_n) const {
    Sums r;
    const int sn = g_.nodes[ss_n].outputs[0];
    const int u1 = single_user(g_, sn);
    if (u1 < 0 || g_.nodes[u1].op != Op::kAdd || g_.nodes[u1].alpha != 1) return r;
    const int other = other_tensor(g_.nodes[u1], sn);
    const int po = producer(g_, other);
    if (po < 0 || other == sn) return r;
    if (g_.nodes[po].op == Op::kSliceScatter) {  // order 0
      const int ad = single_user(g_, g_.nodes[u1].outputs[0]);
      if (ad < 0 || g_.nodes[ad].op != Op::kAdd || g_.nodes[ad].alpha != 1) return r;
      r.ss_o = po;
      r.mcv = other_tensor(g_.nodes[ad], g_.nodes[u1].outputs[0]);
      r.ad = ad;
      r.adds = {u1, ad};
      return r;
    }
    if (g_.nodes[po].op == Op::kAdd && g_.nodes[po].alpha == 1 &&
        single_user(g_, other) == u1) {  // order 2: (mc + ss_o) + ss_n
      for (const Operand& op : g_.nodes[po].operands) {
        const int q = producer(g_, op.value);
        if (q >= 0 && g_.nodes[q].op == Op::kSliceScatter) r.ss_o = q;
      }
      if (r.ss_o < 0) return r;
      r.mcv = other_tensor(g_.nodes[po], g_.nodes[r.ss_o].outputs[0]);
      r.order = 2;
      r.ad = u1;
      r.adds = {po, u1};
      return r;
    }
    // order 1: (mc + ss_n) + ss_o
    const int u2 = single_user(g_, g_.nodes[u1].outputs[0]);
    if (u2 < 0 || g_.nodes[u2].op != Op::kAdd || g_.nodes[u2].alpha != 1) return r;
    const int q = producer(g_, other_tensor(g_.nodes[u2], g_.nodes[u1].outputs[0]));
    if (q < 0 || g_.nodes[q].op != Op::kSliceScatter) return r;
    r.ss_o = q;
    r.mcv = other;
    r.order = 1;
    r.ad = u2;
    r.adds = {u1, u2};
    return r;
  }

  // The backward around neg node `neg` (read by a slice_scatter), or a decline:
  //   rotate-half  y = g * sin; t = scatter(-y[0:h], h:R) + scatter(y[h:R], 0:h)
  //   interleaved  y = g * sin viewed [.., R/2, 2]; t = scatter(-y[.., 0], 1::2) +
  //                scatter(y[.., 1], 0::2)
  //   then         dx = t + g * cos [-> float convert]; partial rotary: g = g_full[..., :R],
  //                out = scatter(dx, 0:R) + scatter([convert] g_full[..., R:], R:D)
  bool backward(int neg, Found& f) {
    const Node& nn = g_.nodes[neg];
    const int a = nn.operands.at(0).value;
    const int pa = producer(g_, a);
    const int ss_n = single_user(g_, nn.outputs[0]);
    int y = -1, o = -1, R = 0;
    std::vector<int> nodes = {neg, ss_n};
    const Sums sums = find_sums(ss_n);
    const int ss_o = sums.ss_o;
    if (pa >= 0 && g_.nodes[pa].op == Op::kSelect) {  // interleaved
      const Node& sel = g_.nodes[pa];
      const int pairs = sel.operands.at(0).value;
      const std::vector<int64_t>& ps = g_.meta(pairs).shape;
      const int pr = static_cast<int>(ps.size());
      const int pv = producer(g_, pairs);
      if (pr < 2 || ps.back() != 2 || norm_dim(sel.dim, pr) != pr - 1 || sel.offset != 0 ||
          pv < 0 || !is_flat_reshape(g_.nodes[pv].op))
        return out_.decline(neg, "backward: neg of " + val_str(g_, a) +
                                     ", not the even elements of pairs (select(view(y, [.., R/2, "
                                     "2]), -1, 0))");
      y = g_.nodes[pv].operands.at(0).value;
      R = static_cast<int>(g_.meta(y).shape.back());
      if (g_.meta(y).shape.size() + 1 != ps.size() || ps[pr - 2] * 2 != R)
        return out_.decline(neg, "backward: the pairs " + val_str(g_, pairs) +
                                     " are not a [.., R/2, 2] view of " + val_str(g_, y));
      if (scatter_into_zeros(ss_n, nn.outputs[0], 1, R - 1, 2) < 0)
        return out_.decline(neg,
                            "backward: -y_even is not scattered into zeros at the odd "
                            "positions (1::2) of the rotary dim");
      for (int u : g_.values[pairs].users)
        if (u != pa && g_.nodes[u].op == Op::kSelect && norm_dim(g_.nodes[u].dim, pr) == pr - 1 &&
            g_.nodes[u].offset == 1)
          o = g_.nodes[u].outputs[0], nodes.push_back(u);
      if (o < 0)
        return out_.decline(neg,
                            "backward: no select of the odd elements of " + val_str(g_, pairs));
      if (scatter_into_zeros(ss_o, o, 0, R - 1, 2) < 0)
        return out_.decline(neg,
                            "backward: y_odd is not scattered into zeros at the even "
                            "positions (0::2) and added to the scattered -y_even");
      nodes.insert(nodes.end(), {pa, pv, ss_o});
      f.style = Style::kInterleaved;
    } else {  // rotate-half
      const LastSlice s_a = last_slice(g_, a);
      if (s_a.node < 0)
        return out_.decline(neg, "backward: neg of " + val_str(g_, a) +
                                     ", not a slice or a select of the last dim");
      y = s_a.src;
      R = static_cast<int>(g_.meta(y).shape.back());
      const int h = R / 2;
      if (R % 2 || s_a.step != 1 || s_a.start != 0 || s_a.end != h)
        return out_.decline(neg, "backward: the negated half [" + std::to_string(s_a.start) + ", " +
                                     std::to_string(s_a.end) +
                                     ") is not the first half "
                                     "of the rotary dim " +
                                     std::to_string(R));
      if (scatter_into_zeros(ss_n, nn.outputs[0], h, R, 1) < 0)
        return out_.decline(neg, "backward: -y[0:h] is not scattered into zeros at [h, R) = [" +
                                     std::to_string(h) + ", " + std::to_string(R) + ")");
      const LastSlice s_o = ss_o >= 0 && g_.nodes[ss_o].op == Op::kSliceScatter
                                ? last_slice(g_, g_.nodes[ss_o].operands.at(1).value)
                                : LastSlice{};
      if (s_o.node < 0 || s_o.src != y || s_o.start != h || s_o.end != R || s_o.step != 1 ||
          scatter_into_zeros(ss_o, g_.nodes[s_o.node].outputs[0], 0, h, 1) < 0)
        return out_.decline(neg,
                            "backward: y[h:R] is not scattered into zeros at [0, h) and "
                            "added to the scattered -y[0:h]");
      nodes.insert(nodes.end(), {s_a.node, s_o.node, ss_o});
      f.style = Style::kRotateHalf;
    }
    if (single_user(g_, g_.nodes[ss_o].outputs[0]) != sums.adds[0] &&
        single_user(g_, g_.nodes[ss_o].outputs[0]) != sums.adds[1])
      return out_.decline(neg, "backward: the scattered y is read besides the sums");
    // y = g * sin [-> convert]
    const auto [ms, ms_cvt] = product_of(y);
    if (ms < 0)
      return out_.decline(neg, "backward: " + val_str(g_, y) + " is not a product (g * sin)");
    // dx = the scatters + g * cos [-> convert]
    const int ad = sums.ad, mcv = sums.mcv;
    const auto [mc, mc_cvt] =
        mcv >= 0 ? product_of(mcv) : std::pair<int, DType>{-1, DType::kFloat32};
    if (mc < 0 || single_user(g_, mcv) != (sums.order == 0 ? ad : sums.adds[0]))
      return out_.decline(neg, "backward: the add " + node_str(g_, ad) +
                                   " does not sum the rotation with a product g * cos read only "
                                   "by it");
    if (g_.meta(g_.nodes[sums.adds[0]].outputs[0]).dtype != g_.meta(g_.nodes[ad].outputs[0]).dtype)
      return out_.decline(neg, "backward: the two adds round to different dtypes");
    // g: the operand both products read
    int gv = -1;
    for (const Operand& p : g_.nodes[ms].operands)
      for (const Operand& q : g_.nodes[mc].operands)
        if (p.is_tensor() && p.value == q.value) gv = p.value;
    const std::vector<int64_t>& ys = g_.meta(y).shape;
    if (gv < 0 || g_.meta(gv).shape != ys)
      return out_.decline(neg, "backward: the products " + node_str(g_, ms) + " and " +
                                   node_str(g_, mc) + " do not read the same gradient of shape " +
                                   shape_str(ys));
    const int sin = other_tensor(g_.nodes[ms], gv), cos = other_tensor(g_.nodes[mc], gv);
    if (sin < 0 || cos < 0 || sin == gv || cos == gv || !broadcasts_to(g_.meta(sin).shape, ys) ||
        !broadcasts_to(g_.meta(cos).shape, ys))
      return out_.decline(
          neg, "backward: the gradient is not multiplied by tables broadcast to " + shape_str(ys));
    if (g_.meta(g_.nodes[ad].outputs[0]).shape != ys)
      return out_.decline(neg, "backward: the sum is not of the gradient's shape");
    nodes.insert(nodes.end(), {sums.adds[0], ms, mc, ad});
    f.rot.sum_order = sums.order;
    for (int mul : {ms, mc})
      if (int cv = single_user(g_, g_.nodes[mul].outputs[0]);
          cv >= 0 && g_.nodes[cv].op == Op::kConvertElementType)
        nodes.push_back(cv);
    Rotation& r = f.rot;
    r.cos = cos;
    r.sin = sin;
    r.rotary_dim = R;
    r.mul_cos_dtype = g_.meta(g_.nodes[mc].outputs[0]).dtype;
    r.mul_sin_dtype = g_.meta(g_.nodes[ms].outputs[0]).dtype;
    r.mul_cos_cvt = mc_cvt;
    r.mul_sin_cvt = ms_cvt;
    r.add_dtype = g_.meta(g_.nodes[ad].outputs[0]).dtype;
    int out = g_.nodes[ad].outputs[0];
    if (int cv = single_user(g_, out); cv >= 0 && g_.nodes[cv].op == Op::kConvertElementType &&
                                       float_dtype(g_.meta(g_.nodes[cv].outputs[0]).dtype)) {
      nodes.push_back(cv);
      out = g_.nodes[cv].outputs[0];
      r.sum_cvt = g_.meta(out).dtype;
    }
    // Partial rotary: g = g_full[..., :R]; out = scatter(dx, 0:R) + scatter([convert]
    // g_full[..., R:], R:D). With R = D (Phi-3's min-cut backward) the slice of g and the scatter
    // of dx are gone (identities) and an empty tail is still scattered and added: + 0.
    // (An exact upcast of g is looked through: litgpt slices the bfloat16 gradient, then widens.)
    int g_in = gv, up = -1;
    if (int p = producer(g_, gv);
        p >= 0 && g_.nodes[p].op == Op::kConvertElementType &&
        float_dtype(g_.meta(g_.nodes[p].operands.at(0).value).dtype) &&
        exact_widening(g_.meta(g_.nodes[p].operands.at(0).value).dtype, g_.meta(gv).dtype)) {
      up = p;
      g_in = g_.nodes[p].operands.at(0).value;
    }
    int g_full = g_in, ss_dx = -1, sum = -1;
    const LastSlice s_g = last_slice(g_, g_in);
    if (s_g.node >= 0 && s_g.start == 0 && s_g.step == 1) {
      ss_dx = scatter_into_zeros(single_user(g_, out), out, 0, R, 1);
      if (ss_dx >= 0) {
        sum = single_user(g_, g_.nodes[ss_dx].outputs[0]);
        g_full = s_g.src;
      }
    } else {
      sum = single_user(g_, out);
    }
    const int summand = ss_dx >= 0 ? g_.nodes[ss_dx].outputs[0] : out;
    const int ss_p = sum >= 0 && g_.nodes[sum].op == Op::kAdd && g_.nodes[sum].alpha == 1
                         ? producer(g_, other_tensor(g_.nodes[sum], summand))
                         : -1;
    if (ss_p >= 0 && g_.nodes[ss_p].op == Op::kSliceScatter) {
      const int D = static_cast<int>(g_.meta(g_full).shape.back());
      int pass = g_.nodes[ss_p].operands.at(1).value;
      std::vector<int> tail = {sum, ss_p};
      if (ss_dx >= 0) tail.insert(tail.end(), {s_g.node, ss_dx});
      if (up >= 0) tail.push_back(up);
      if (int pc = producer(g_, pass); pc >= 0 && g_.nodes[pc].op == Op::kConvertElementType &&
                                       float_dtype(g_.meta(pass).dtype)) {
        r.tail_cvt = g_.meta(pass).dtype;
        tail.push_back(pc);
        pass = g_.nodes[pc].operands.at(0).value;
      }
      const LastSlice s_p = last_slice(g_, pass);
      if (s_p.node < 0 || s_p.src != g_full || s_p.start != R || s_p.end != D || s_p.step != 1 ||
          scatter_into_zeros(ss_p, g_.nodes[ss_p].operands.at(1).value, R, D, 1) < 0)
        return out_.decline(neg, "backward, partial rotary: the sum " + node_str(g_, sum) +
                                     " does not add the gradient's pass-through [" +
                                     std::to_string(R) + ", " + std::to_string(D) +
                                     ") scattered into zeros");
      tail.push_back(s_p.node);
      nodes.insert(nodes.end(), tail.begin(), tail.end());
      out = g_.nodes[sum].outputs[0];
      r.zero_add = true;
    } else {
      g_full = gv;
    }
    f.nodes = std::move(nodes);
    f.backward = true;
    return finish(neg, f, g_full, out);
  }

  // Shared by both directions: an exact upcast of the head vectors only the region reads is
  // absorbed; dtypes, rank and privacy checked.
  bool finish(int neg, Found& f, int x_full, int y) {
    Rotation& r = f.rot;
    // An exact upcast of the head vectors that only the region reads: the kernel reads its source.
    if (int p = producer(g_, x_full); p >= 0 && g_.nodes[p].op == Op::kConvertElementType) {
      const int src = g_.nodes[p].operands.at(0).value;
      const DType from = g_.meta(src).dtype, to = g_.meta(x_full).dtype;
      bool only_region = !g_.values[x_full].graph_output;
      std::set<int> in(f.nodes.begin(), f.nodes.end());
      for (int w : g_.values[x_full].users) only_region &= in.count(w) > 0;
      if (only_region && float_dtype(from) && exact_widening(from, to)) {
        f.nodes.push_back(p);
        x_full = src;
      }
    }
    r.x = x_full;
    r.out = y;
    r.head_dim = g_.meta(x_full).shape.back();
    for (int v : {r.x, r.cos, r.sin, r.out})
      if (!float_dtype(g_.meta(v).dtype))
        return out_.decline(neg, val_str(g_, v) + " is " +
                                     std::string(dtype_name(g_.meta(v).dtype)) +
                                     " (the kernel takes bfloat16, float16, float32)");
    for (DType t : {r.mul_cos_dtype, r.mul_sin_dtype, r.add_dtype})
      if (!float_dtype(t))
        return out_.decline(neg, "an intermediate is " + std::string(dtype_name(t)) +
                                     " (the kernel rounds to bfloat16, float16, float32)");
    if (rank(g_, r.out) - 1 > kRopeMaxLead)
      return out_.decline(neg, "head vectors of rank " + std::to_string(rank(g_, r.out)) +
                                   " (at most " + std::to_string(kRopeMaxLead + 1) + ")");
    if (!intermediates_private(g_, f.nodes, {r.out}))
      return out_.decline(neg, "an intermediate of the rotation is read outside it (or returned)");
    return true;
  }
  // The even (index 0) or odd (1) elements of pairs: select(view(x, [.., R/2, 2]), -1, index).
  // The pairs' source x (-1 when `v` is not that) and the view's node.
  struct PairSel {
    int x = -1, pairs = -1, view = -1, node = -1;
  };
  PairSel pair_select(int v, int64_t index) const {
    PairSel r;
    const int p = producer(g_, v);
    if (p < 0 || g_.nodes[p].op != Op::kSelect) return r;
    const Node& sel = g_.nodes[p];
    const int pairs = sel.operands.at(0).value;
    const std::vector<int64_t>& ps = g_.meta(pairs).shape;
    const int pr = static_cast<int>(ps.size());
    const int pv = producer(g_, pairs);
    if (pr < 2 || ps.back() != 2 || norm_dim(sel.dim, pr) != pr - 1 || sel.offset != index ||
        pv < 0 || !is_flat_reshape(g_.nodes[pv].op))
      return r;
    const int x = g_.nodes[pv].operands.at(0).value;
    const std::vector<int64_t>& xs = g_.meta(x).shape;
    if (xs.size() + 1 != ps.size() || ps[pr - 2] * 2 != xs.back()) return r;
    return {x, pairs, pv, p};
  }

  // The multiply reading `v` and `table` (either order) that only `reader` reads, or -1.
  int mul_of(int v, int table) const {
    for (int u : g_.values[v].users)
      if (g_.nodes[u].op == Op::kMul && other_tensor(g_.nodes[u], v) == table) return u;
    return -1;
  }

  // The select of index `index` of `pairs` other than `not_node`, or -1.
  int other_select(int pairs, int64_t index) const {
    const int pr = rank(g_, pairs);
    for (int u : g_.values[pairs].users)
      if (g_.nodes[u].op == Op::kSelect && norm_dim(g_.nodes[u].dim, pr) == pr - 1 &&
          g_.nodes[u].offset == index)
        return u;
    return -1;
  }

  // Meta Llama's apply_rotary_emb on real pairs (freqs_cis as cos and sin, one entry per pair),
  // from its aten.sub: out_even = x_e * c - x_o * s, out_odd = x_e * s + x_o * c, stacked by
  // unsqueeze + cat and viewed back to [.., D] (+ a float convert). The interleaved rotation with
  // a per-pair table: out[2i] = x[2i] c + (-x[2i+1]) s is x_e c - x_o s bit for bit.
  bool pairs_forward(int sb, Found& f) {
    const Node& sn = g_.nodes[sb];
    if (sn.alpha != 1 || sn.operands.size() != 2 || !sn.operands[0].is_tensor() ||
        !sn.operands[1].is_tensor())
      return out_.decline(sb, "sub is not of two tensors (alpha 1)");
    const int m1 = producer(g_, sn.operands[0].value), m2 = producer(g_, sn.operands[1].value);
    if (m1 < 0 || m2 < 0 || g_.nodes[m1].op != Op::kMul || g_.nodes[m2].op != Op::kMul)
      return out_.decline(sb, "sub is not of two products (x_even * cos - x_odd * sin)");
    PairSel xe, xo;
    int cos = -1, sin = -1;
    for (const Operand& o : g_.nodes[m1].operands)
      if (PairSel p = pair_select(o.value, 0); p.x >= 0) {
        xe = p;
        cos = other_tensor(g_.nodes[m1], o.value);
      }
    for (const Operand& o : g_.nodes[m2].operands)
      if (PairSel p = pair_select(o.value, 1); p.x >= 0) {
        xo = p;
        sin = other_tensor(g_.nodes[m2], o.value);
      }
    if (xe.x < 0 || xo.x < 0 || xe.pairs != xo.pairs || cos < 0 || sin < 0)
      return out_.decline(sb,
                          "sub is not x_even * cos - x_odd * sin of the same pairs "
                          "(select(view(x, [.., R/2, 2]), -1, 0 / 1))");
    const int x = xe.x;
    const std::vector<int64_t> half =
        g_.meta(xe.node >= 0 ? g_.nodes[xe.node].outputs[0] : x).shape;
    if (!broadcasts_to(g_.meta(cos).shape, half) || !broadcasts_to(g_.meta(sin).shape, half))
      return out_.decline(sb, "cos / sin do not broadcast to the pairs' " + shape_str(half));
    const int m3 = mul_of(g_.nodes[xe.node].outputs[0], sin);
    const int m4 = mul_of(g_.nodes[xo.node].outputs[0], cos);
    const int ad = m3 >= 0 ? single_user(g_, g_.nodes[m3].outputs[0]) : -1;
    if (m4 < 0 || ad < 0 || g_.nodes[ad].op != Op::kAdd || g_.nodes[ad].alpha != 1 ||
        other_tensor(g_.nodes[ad], g_.nodes[m3].outputs[0]) != g_.nodes[m4].outputs[0] ||
        single_user(g_, g_.nodes[m4].outputs[0]) != ad)
      return out_.decline(sb, "no x_even * sin + x_odd * cos beside the sub");
    // stack: cat([unsqueeze(sub, -1), unsqueeze(add, -1)], -1).view(x.shape)
    const int r1 = rank(g_, x) + 1;
    const int us = single_user(g_, sn.outputs[0]), ua = single_user(g_, g_.nodes[ad].outputs[0]);
    const int cat = us >= 0 ? single_user(g_, g_.nodes[us].outputs[0]) : -1;
    const int vw = cat >= 0 ? single_user(g_, g_.nodes[cat].outputs[0]) : -1;
    if (us < 0 || ua < 0 || g_.nodes[us].op != Op::kUnsqueeze ||
        g_.nodes[ua].op != Op::kUnsqueeze || norm_dim(g_.nodes[us].dim, r1) != r1 - 1 ||
        norm_dim(g_.nodes[ua].dim, r1) != r1 - 1 || cat < 0 || g_.nodes[cat].op != Op::kCat ||
        g_.nodes[cat].operands.size() != 2 ||
        g_.nodes[cat].operands[0].value != g_.nodes[us].outputs[0] ||
        g_.nodes[cat].operands[1].value != g_.nodes[ua].outputs[0] ||
        norm_dim(g_.nodes[cat].dim, r1) != r1 - 1 || vw < 0 || !is_flat_reshape(g_.nodes[vw].op) ||
        g_.meta(g_.nodes[vw].outputs[0]).shape != g_.meta(x).shape)
      return out_.decline(sb,
                          "the even and odd results are not stacked as pairs "
                          "(cat([sub, add] unsqueezed, -1)) and viewed back to " +
                              shape_str(g_.meta(x).shape));
    Rotation& r = f.rot;
    r.mul_cos_dtype = g_.meta(g_.nodes[m1].outputs[0]).dtype;
    r.mul_sin_dtype = g_.meta(g_.nodes[m2].outputs[0]).dtype;
    r.add_dtype = g_.meta(sn.outputs[0]).dtype;
    if (g_.meta(g_.nodes[m4].outputs[0]).dtype != r.mul_cos_dtype ||
        g_.meta(g_.nodes[m3].outputs[0]).dtype != r.mul_sin_dtype ||
        g_.meta(g_.nodes[ad].outputs[0]).dtype != r.add_dtype)
      return out_.decline(sb, "the even and odd halves round to different dtypes");
    r.cos = cos;
    r.sin = sin;
    r.rotary_dim = g_.meta(x).shape.back();
    r.pair_table = true;
    f.style = Style::kInterleaved;
    f.nodes = {sb, m1, m2, m3, m4, ad, xe.node, xo.node, xe.view, us, ua, cat, vw};
    int y = g_.nodes[vw].outputs[0];
    if (int cv = single_user(g_, y); cv >= 0 && g_.nodes[cv].op == Op::kConvertElementType &&
                                     float_dtype(g_.meta(g_.nodes[cv].outputs[0]).dtype)) {
      f.nodes.push_back(cv);
      y = g_.nodes[cv].outputs[0];
      r.sum_cvt = g_.meta(y).dtype;
    }
    return finish(sb, f, x, y);
  }

  // Its backward, from the neg of the gradient's even elements:
  //   dx_odd = g_o * c + (-g_e) * s, dx_even = g_o * s + g_e * c, select_scattered into zeros at
  //   index 1 / 0 of the pairs, summed, viewed back to [.., D] (+ a float convert).
  bool pairs_backward(int neg, Found& f) {
    const Node& nn = g_.nodes[neg];
    const PairSel ge = pair_select(nn.operands.at(0).value, 0);
    if (ge.x < 0)
      return out_.decline(neg, "backward (pairs): neg of " + val_str(g_, nn.operands.at(0).value) +
                                   ", not the even elements of pairs");
    const int m10 = single_user(g_, nn.outputs[0]);
    const int sin = other_tensor(g_.nodes[m10], nn.outputs[0]);
    const int go_node = other_select(ge.pairs, 1);
    if (go_node < 0 || sin < 0)
      return out_.decline(neg, "backward (pairs): no odd elements, or -g_even not times a table");
    const int go = g_.nodes[go_node].outputs[0], gev = g_.nodes[ge.node].outputs[0];
    const int a2 = single_user(g_, g_.nodes[m10].outputs[0]);
    const int m8v = a2 >= 0 && g_.nodes[a2].op == Op::kAdd && g_.nodes[a2].alpha == 1
                        ? other_tensor(g_.nodes[a2], g_.nodes[m10].outputs[0])
                        : -1;
    const int m8 = producer(g_, m8v);
    const int cos = m8 >= 0 && g_.nodes[m8].op == Op::kMul ? other_tensor(g_.nodes[m8], go) : -1;
    const int m9 = mul_of(go, sin), m11 = mul_of(gev, cos);
    const int a3 = m9 >= 0 ? single_user(g_, g_.nodes[m9].outputs[0]) : -1;
    if (cos < 0 || cos == go || m9 < 0 || m11 < 0 || a3 < 0 || g_.nodes[a3].op != Op::kAdd ||
        g_.nodes[a3].alpha != 1 ||
        other_tensor(g_.nodes[a3], g_.nodes[m9].outputs[0]) != g_.nodes[m11].outputs[0])
      return out_.decline(neg,
                          "backward (pairs): not dx_odd = g_odd * cos + (-g_even) * sin and "
                          "dx_even = g_odd * sin + g_even * cos");
    const std::vector<int64_t> half = g_.meta(gev).shape;
    if (!broadcasts_to(g_.meta(cos).shape, half) || !broadcasts_to(g_.meta(sin).shape, half))
      return out_.decline(neg,
                          "backward (pairs): cos / sin do not broadcast to " + shape_str(half));
    // select_scatter(zeros, dx_odd, -1, 1) + select_scatter(zeros, dx_even, -1, 0), viewed
    const std::vector<int64_t>& ps = g_.meta(ge.pairs).shape;
    const int pr = static_cast<int>(ps.size());
    auto scatter = [&](int src, int64_t index) {
      const int u = single_user(g_, src);
      if (u < 0 || g_.nodes[u].op != Op::kSelectScatter) return -1;
      const Node& n = g_.nodes[u];
      if (n.operands.size() != 2 || n.operands[1].value != src || norm_dim(n.dim, pr) != pr - 1 ||
          n.offset != index || !zeros(n.operands[0].value, ps))
        return -1;
      return u;
    };
    const int s_odd = scatter(g_.nodes[a2].outputs[0], 1),
              s_even = scatter(g_.nodes[a3].outputs[0], 0);
    const int sum = s_odd >= 0 ? single_user(g_, g_.nodes[s_odd].outputs[0]) : -1;
    const int vw = sum >= 0 ? single_user(g_, g_.nodes[sum].outputs[0]) : -1;
    if (s_even < 0 || sum < 0 || g_.nodes[sum].op != Op::kAdd || g_.nodes[sum].alpha != 1 ||
        other_tensor(g_.nodes[sum], g_.nodes[s_odd].outputs[0]) != g_.nodes[s_even].outputs[0] ||
        vw < 0 || !is_flat_reshape(g_.nodes[vw].op) ||
        g_.meta(g_.nodes[vw].outputs[0]).shape != g_.meta(ge.x).shape)
      return out_.decline(neg,
                          "backward (pairs): dx_odd and dx_even are not select_scattered "
                          "into zeros, summed and viewed back to " +
                              shape_str(g_.meta(ge.x).shape));
    Rotation& r = f.rot;
    r.mul_cos_dtype = g_.meta(m8v).dtype;
    r.mul_sin_dtype = g_.meta(g_.nodes[m10].outputs[0]).dtype;
    r.add_dtype = g_.meta(g_.nodes[a2].outputs[0]).dtype;
    if (g_.meta(g_.nodes[m11].outputs[0]).dtype != r.mul_cos_dtype ||
        g_.meta(g_.nodes[m9].outputs[0]).dtype != r.mul_sin_dtype ||
        g_.meta(g_.nodes[a3].outputs[0]).dtype != r.add_dtype ||
        g_.meta(g_.nodes[sum].outputs[0]).dtype != r.add_dtype)
      return out_.decline(neg, "backward (pairs): the halves round to different dtypes");
    r.cos = cos;
    r.sin = sin;
    r.rotary_dim = g_.meta(ge.x).shape.back();
    r.pair_table = true;
    f.style = Style::kInterleaved;
    f.backward = true;
    f.nodes = {neg, ge.node, go_node, ge.view, m8, m9, m10, m11, a2, a3, s_odd, s_even, sum, vw};
    int y = g_.nodes[vw].outputs[0];
    if (int cv = single_user(g_, y); cv >= 0 && g_.nodes[cv].op == Op::kConvertElementType &&
                                     float_dtype(g_.meta(g_.nodes[cv].outputs[0]).dtype)) {
      f.nodes.push_back(cv);
      y = g_.nodes[cv].outputs[0];
      r.sum_cvt = g_.meta(y).dtype;
    }
    return finish(neg, f, ge.x, y);
  }

  // A RoPE candidate: a neg of a slice or select of the last dim (a half or the elements of
  // pairs), or a sub of two products one of which reads such a select (Meta's real pairs). Other
  // negs and subs (a centered x, a GELU backward) are not considered, nor listed as declined.
  bool candidate(int n) const {
    const Node& nd = g_.nodes[n];
    auto last_dim_part = [&](int v) {
      const int p = producer(g_, v);
      if (p < 0 || (g_.nodes[p].op != Op::kSlice && g_.nodes[p].op != Op::kSelect)) return false;
      const int src = g_.nodes[p].operands.at(0).value;
      const int r = rank(g_, src);
      return r > 0 && norm_dim(g_.nodes[p].dim, r) == r - 1;
    };
    if (nd.op == Op::kNeg) return last_dim_part(nd.operands.at(0).value);
    if (nd.op != Op::kSub) return false;
    for (const Operand& o : nd.operands) {
      const int m = o.is_tensor() ? producer(g_, o.value) : -1;
      if (m < 0 || g_.nodes[m].op != Op::kMul) continue;
      for (const Operand& q : g_.nodes[m].operands)
        if (q.is_tensor() && g_.nodes[m].op == Op::kMul && producer(g_, q.value) >= 0 &&
            g_.nodes[producer(g_, q.value)].op == Op::kSelect && last_dim_part(q.value))
          return true;
    }
    return false;
  }

  // An op that passes a tensor on with another shape or layout of the same values: permute,
  // clone, view / reshape.
  static bool layout_op(Op op) {
    return op == Op::kPermute || op == Op::kClone || is_flat_reshape(op);
  }

  // The step that undoes layout node `n` (input a -> output b), seen from b; none for a clone.
  std::optional<LayoutStep> undo(int n) const {
    const Node& nd = g_.nodes[n];
    LayoutStep s;
    if (nd.op == Op::kClone) return std::nullopt;
    if (nd.op == Op::kPermute) {
      s.kind = LayoutStep::Kind::kPermute;
      s.dims = nd.dims;
    } else {
      s.kind = LayoutStep::Kind::kView;
      s.shape = g_.meta(nd.operands.at(0).value).shape;
    }
    return s;
  }

  // One part of a stacking: the value stacked, where along the stacking dim, and the node that
  // reads it (the cat, or its slice_scatter).
  struct StackPart {
    int value = -1;
    int64_t start = 0, size = 0;
    int reader = -1;
  };
  // How the graph stacks the gradients into one tensor: a cat (GPT-NeoX, litgpt), or a sum of
  // slice_scatters into zeros over disjoint ranges of one dim (Phi-3's split of a fused qkv,
  // whose backward scatters dq and dk into a zero [B, T, (H + 2G) D] and adds; the ranges nothing
  // scatters into, dv's here, stay zero).
  struct Stack {
    int out = -1;  ///< the stacked value (the cat's output, or the root add's)
    int dim = 0;
    std::vector<StackPart> parts;                   ///< in graph order of the operands
    std::vector<std::pair<int64_t, int64_t>> gaps;  ///< [start, size) ranges left zero
    std::vector<int> nodes;                         ///< the cat, or the scatters and adds
    bool scatter = false;                           ///< a sum of scatters: every part gets + 0
  };

  Stack cat_stack(int cat) const {
    Stack st;
    const Node& cn = g_.nodes[cat];
    st.out = cn.outputs[0];
    st.dim = static_cast<int>(norm_dim(cn.dim, rank(g_, st.out)));
    st.nodes = {cat};
    int64_t start = 0;
    for (const Operand& op : cn.operands) {
      if (!op.is_tensor()) return Stack{};
      const int64_t size = g_.meta(op.value).shape.at(st.dim);
      st.parts.push_back({op.value, start, size, cat});
      start += size;
    }
    return st;
  }

  // The sum of scatters above slice_scatter `ss` (see Stack), or an empty Stack: every leaf of the
  // add tree a scatter of a non-empty value into +0 zeros (aten.full 0 or aten.zeros) along one
  // dim with step 1, ranges disjoint, every add (alpha 1) and scatter of one dtype and shape, each
  // read once. x + 0 is x exactly but for -0, which becomes +0: each part is written with + 0.
  Stack scatter_stack(int ss) const {
    const int dt_value = g_.nodes[ss].outputs[0];
    const DType dt = g_.meta(dt_value).dtype;
    const std::vector<int64_t> shape = g_.meta(dt_value).shape;
    auto is_add = [&](int n) {
      const Node& a = g_.nodes[n];
      return a.op == Op::kAdd && a.alpha == 1 && a.operands.size() == 2 &&
             a.operands[0].is_tensor() && a.operands[1].is_tensor() &&
             g_.meta(a.outputs[0]).dtype == dt && g_.meta(a.outputs[0]).shape == shape;
    };
    int root = ss;
    for (int u; (u = single_user(g_, g_.nodes[root].outputs[0])) >= 0 && is_add(u);) root = u;
    if (root == ss) return Stack{};
    Stack st;
    st.out = g_.nodes[root].outputs[0];
    st.scatter = true;
    std::vector<int> todo = {root};
    st.dim = -1;
    while (!todo.empty()) {
      const int n = todo.back();
      todo.pop_back();
      st.nodes.push_back(n);
      const Node& nd = g_.nodes[n];
      if (nd.op == Op::kAdd) {
        for (const Operand& o : nd.operands) {
          const int pn = producer(g_, o.value);
          if (pn < 0 || single_user(g_, o.value) != n) return Stack{};
          if (!is_add(pn) && g_.nodes[pn].op != Op::kSliceScatter) return Stack{};
          todo.push_back(pn);
        }
        continue;
      }
      if (nd.op != Op::kSliceScatter || nd.operands.size() != 2 || nd.step != 1 ||
          g_.meta(nd.outputs[0]).dtype != dt || g_.meta(nd.outputs[0]).shape != shape)
        return Stack{};
      const int z = producer(g_, nd.operands[0].value);
      if (!zeros(nd.operands[0].value, shape) ||
          (g_.nodes[z].op == Op::kFull && std::signbit(g_.nodes[z].operands[0].scalar)))
        return Stack{};
      const int d = static_cast<int>(norm_dim(nd.dim, static_cast<int64_t>(shape.size())));
      if (st.dim >= 0 && d != st.dim) return Stack{};
      st.dim = d;
      const int64_t size = shape[d];
      const int64_t s0 = std::clamp<int64_t>(nd.start < 0 ? nd.start + size : nd.start, 0, size);
      const int64_t e0 = std::clamp<int64_t>(nd.end < 0 ? nd.end + size : nd.end, 0, size);
      const int src = nd.operands[1].value;
      if (e0 <= s0 || g_.meta(src).shape.at(d) != e0 - s0) return Stack{};
      st.parts.push_back({src, s0, e0 - s0, n});
    }
    std::sort(st.nodes.begin(), st.nodes.end());
    std::vector<StackPart> by_start = st.parts;
    std::sort(by_start.begin(), by_start.end(),
              [](const StackPart& a, const StackPart& b) { return a.start < b.start; });
    int64_t at = 0;
    for (const StackPart& pt : by_start) {
      if (pt.start < at) return Stack{};  // overlapping ranges: a real sum, not a stacking
      if (pt.start > at) st.gaps.push_back({at, pt.start - at});
      at = pt.start + pt.size;
    }
    if (at < shape[st.dim]) st.gaps.push_back({at, shape[st.dim] - at});
    std::sort(st.parts.begin(), st.parts.end(),
              [](const StackPart& a, const StackPart& b) { return a.reader < b.reader; });
    return st;
  }

  // A backward group whose outputs the graph stacks into one tensor (Stack: a cat of dq, dk and
  // others, or a sum of their scatters into zeros, through permutes, clones and views on either
  // side): the region writes that tensor instead, copying the stack's other parts (dv) in and
  // zeroing its gaps. Nothing changes when the graph does not, when a view cannot be undone on the
  // joint tensor's layout, or when the jobs would exceed kRopeMaxJobs.
  void try_joint(std::set<int>& nodes, Params& p) const {
    const size_t nrot = p.rotations.size();
    int stack_node = -1;                         // the cat, or the first scatter reached
    std::vector<int> ends(nrot);                 // the stack part each rotation becomes
    std::vector<std::vector<int>> chains(nrot);  // its layout nodes, from the rotation on
    for (size_t i = 0; i < nrot; ++i) {
      int v = p.rotations[i].out;
      for (;;) {
        const int u = single_user(g_, v);
        if (u < 0) return;
        if (g_.nodes[u].op == Op::kCat || g_.nodes[u].op == Op::kSliceScatter) {
          if (stack_node < 0) stack_node = u;
          break;
        }
        if (!layout_op(g_.nodes[u].op)) return;
        chains[i].push_back(u);
        v = g_.nodes[u].outputs[0];
      }
      ends[i] = v;
    }
    if (stack_node < 0) return;
    const Stack st =
        g_.nodes[stack_node].op == Op::kCat ? cat_stack(stack_node) : scatter_stack(stack_node);
    if (st.out < 0 || st.parts.empty()) return;
    for (size_t i = 0; i < nrot; ++i)  // every rotation is a part of this one stack
      if (std::none_of(st.parts.begin(), st.parts.end(),
                       [&](const StackPart& pt) { return pt.value == ends[i]; }))
        return;
    const DType dt = g_.meta(st.out).dtype;
    // after the stack: its layout nodes up to the joint value
    std::vector<int> after;
    int joint = st.out;
    for (int u; (u = single_user(g_, joint)) >= 0 && layout_op(g_.nodes[u].op);) {
      after.push_back(u);
      joint = g_.nodes[u].outputs[0];
    }
    std::vector<LayoutStep> base;
    for (auto it = after.rbegin(); it != after.rend(); ++it)
      if (auto s = undo(*it)) base.push_back(*s);
    auto part_step = [&](int64_t start, int64_t size) {
      LayoutStep part;
      part.kind = LayoutStep::Kind::kPart;
      part.dim = st.dim;
      part.start = start;
      part.size = size;
      return part;
    };
    // each part: its place in the stack, then its own layout nodes undone down to its job's value
    std::vector<std::vector<LayoutStep>> rot_steps(nrot), copy_steps;
    std::vector<Rotation> copies;
    std::set<int> added(after.begin(), after.end());
    added.insert(st.nodes.begin(), st.nodes.end());
    for (const StackPart& pt : st.parts) {
      const int v = pt.value;
      if (v < 0 || g_.meta(v).dtype != dt) return;
      std::vector<LayoutStep> steps = base;
      steps.push_back(part_step(pt.start, pt.size));
      const auto e = std::find(ends.begin(), ends.end(), v);
      if (e != ends.end()) {
        const size_t i = static_cast<size_t>(e - ends.begin());
        for (auto it = chains[i].rbegin(); it != chains[i].rend(); ++it)
          if (auto s = undo(*it)) steps.push_back(*s);
        added.insert(chains[i].begin(), chains[i].end());
        rot_steps[i] = std::move(steps);
        continue;
      }
      // a copy part: walk back through the layout nodes that only lead to the stack
      int origin = v, next = pt.reader;
      for (;;) {
        if (single_user(g_, origin) != next) break;  // read elsewhere: a region input from here
        const int pn = producer(g_, origin);
        if (pn < 0 || !layout_op(g_.nodes[pn].op)) break;
        if (auto s = undo(pn)) steps.push_back(*s);
        added.insert(pn);
        next = pn;
        origin = g_.nodes[pn].operands.at(0).value;
      }
      if (!float_dtype(g_.meta(origin).dtype) || g_.meta(origin).dtype != dt) return;
      Rotation c;
      c.x = origin;
      c.head_dim = g_.meta(origin).shape.back();
      c.rotary_dim = 0;
      c.zero_add = st.scatter;
      copies.push_back(c);
      copy_steps.push_back(std::move(steps));
    }
    if (nrot + copies.size() > static_cast<size_t>(kRopeMaxJobs)) return;
    // every job's layout must follow from the joint value's (dense, as the program allocates it)
    StridedLayout jl;
    jl.shape = g_.meta(joint).shape;
    jl.stride = contiguous_strides(jl.shape);
    if (g_.meta(joint).storage_elems() == g_.meta(joint).numel()) jl.stride = g_.meta(joint).stride;
    for (size_t i = 0; i < nrot; ++i) {
      const auto l = apply_steps(jl, rot_steps[i]);
      if (!l || l->shape != g_.meta(p.rotations[i].out).shape) return;
    }
    for (size_t i = 0; i < copies.size(); ++i) {
      const auto l = apply_steps(jl, copy_steps[i]);
      if (!l || l->shape != g_.meta(copies[i].x).shape) return;
    }
    std::vector<std::vector<LayoutStep>> zero_steps;
    for (const auto& [start, size] : st.gaps) {
      std::vector<LayoutStep> steps = base;
      steps.push_back(part_step(start, size));
      if (!apply_steps(jl, steps)) return;
      zero_steps.push_back(std::move(steps));
    }
    std::set<int> all = nodes;
    all.insert(added.begin(), added.end());
    if (!intermediates_private(g_, std::vector<int>(all.begin(), all.end()), {joint})) return;
    nodes = std::move(all);
    p.joint.value = joint;
    p.joint.steps = std::move(rot_steps);
    p.joint.zero_steps = std::move(zero_steps);
    if (st.scatter)
      for (Rotation& r : p.rotations) r.zero_add = true;
    for (size_t i = 0; i < copies.size(); ++i) {
      p.rotations.push_back(copies[i]);
      p.joint.steps.push_back(std::move(copy_steps[i]));
    }
  }

  void run() {
    std::vector<Found> found;
    for (int n = 0; n < static_cast<int>(g_.nodes.size()); ++n) {
      if (!candidate(n)) continue;
      Found f;
      f.neg = n;
      if (g_.nodes[n].op == Op::kSub ? pairs_forward(n, f) : rotation(n, f))
        found.push_back(std::move(f));
    }
    // Greedy groups in graph order: a rotation joins the last group of its style (each job has
    // its own tables: GPT-J's default partition gives q and k separate copies of one table) while
    // the group stays valid (no reader of an output before the group's last node) and below
    // kRopeMaxJobs; else it opens a new group.
    std::vector<std::vector<size_t>> groups;
    std::map<int, size_t> open;  // style, direction -> group index
    for (size_t i = 0; i < found.size(); ++i) {
      const int style = static_cast<int>(found[i].style) * 2 + found[i].backward;
      auto it = open.find(style);
      if (it != open.end() && groups[it->second].size() < static_cast<size_t>(kRopeMaxJobs)) {
        std::vector<size_t> grown = groups[it->second];
        grown.push_back(i);
        if (valid(found, grown).empty()) {
          groups[it->second] = std::move(grown);
          continue;
        }
      }
      open[style] = groups.size();
      groups.push_back({i});
    }
    for (const auto& grp : groups) {
      const std::string why = valid(found, grp);
      if (!why.empty()) {
        out_.decline(found[grp[0]].neg, why);
        continue;
      }
      std::set<int> nodes;
      Params p;
      p.style = found[grp[0]].style;
      p.backward = found[grp[0]].backward;
      for (size_t i : grp) {
        nodes.insert(found[i].nodes.begin(), found[i].nodes.end());
        p.rotations.push_back(found[i].rot);
      }
      if (p.backward) try_joint(nodes, p);
      // The backward's zero tensors, where only the region reads them.
      for (int n : std::set<int>(nodes)) {
        for (const Operand& op : g_.nodes[n].operands) {
          const int z = producer(g_, op.value);
          if (z < 0 || (g_.nodes[z].op != Op::kFull && g_.nodes[z].op != Op::kZeros)) continue;
          bool inside = !g_.values[op.value].graph_output;
          for (int u : g_.values[op.value].users) inside &= nodes.count(u) > 0;
          if (inside) nodes.insert(z);
        }
      }
      out_.regions.push_back(
          make_region(g_, std::vector<int>(nodes.begin(), nodes.end()), std::move(p)));
    }
  }

 private:
  // Why the rotations `grp` cannot be one region (the fused step runs at its last node): a reader
  // of an output outside the region before that node; "" when they can.
  std::string valid(const std::vector<Found>& found, const std::vector<size_t>& grp) const {
    std::set<int> nodes;
    for (size_t i : grp) nodes.insert(found[i].nodes.begin(), found[i].nodes.end());
    const int anchor = *nodes.rbegin();
    for (size_t i : grp)
      for (int u : g_.values[found[i].rot.out].users)
        if (!nodes.count(u) && u < anchor)
          return "output " + val_str(g_, found[i].rot.out) + " is read by " + node_str(g_, u) +
                 " before the region's last node " + node_str(g_, anchor);
    return "";
  }

  const Graph& g_;
  Matches& out_;
};

}  // namespace

std::string_view style_name(Style s) {
  return s == Style::kRotateHalf ? "rotate_half" : "interleaved";
}

void match(const Graph& g, Matches& out) {
  Matcher(g, out).run();
}

}  // namespace replay::rope
