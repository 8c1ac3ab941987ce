// pointwise matcher: what the other fusions leave of a graph's elementwise work, grouped into
// chains one generated kernel computes (params.hpp).
//
// Members: nodes no earlier fusion claimed whose op runs on the eager executor's generic
// pointwise kernel (member_decline says which qualify). Two members join one group when one
// reads the other's output over the same iteration space: the same numel, and either the same
// dense layout (shape and strides) or both row-major contiguous, directly or through reshape
// views (view, reshape, unsqueeze, squeeze) of row-major contiguous values, which the group takes
// as aliases. Every member of a group then visits its elements in one storage order, so a value
// one member computes is at the same iteration index for every member that reads it.
//
// A group runs as one step at its last node (the anchor): every outside reader of a value it
// writes must come after that node. Where one comes earlier (a reduction of an intermediate that
// a later member reads back, through an outside node), the group is cut before that reader and
// the rest grouped again. Groups that read a tensor in common over the same iteration space (the
// cos and the sin of one angle table) are joined where that order still holds: one kernel reads
// the tensor once. A group needs two compute members (one op is already one eager launch)
// and fits the kernel's limits (kMaxInputs tensors read, kMaxOutputs written, kMaxOps ops), or it
// is declined saying which.
//
// Column sums (a bias gradient: sum over every dim but the last of a value the chain computes,
// directly or through reshape views) join a linear group: its kernel sums the value as it
// writes it, so the value is not read back. The region then runs at the chain's last member,
// not at the sum (the dW / dX GEMMs that read the same value come between them in the graph).
#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <set>

#include "impls/fusions/pointwise/params.hpp"
#include "workloads/ops/op.hpp"
#include "workloads/ops/promote.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::pointwise {
namespace {

bool float_type(DType t) {
  return t == DType::kFloat32 || t == DType::kBFloat16 || t == DType::kFloat16;
}

bool member_type(DType t) {
  return float_type(t) || t == DType::kBool;
}

bool is_comparison(PointwiseFn f) {
  return f >= PointwiseFn::kEq && f <= PointwiseFn::kLogicalXor;
}

// A reshape-family view of a row-major contiguous value, itself row-major contiguous: the same
// elements in the same order (a group takes it as an alias).
bool transparent_view(const Graph& g, int ni) {
  const Node& n = g.nodes[ni];
  if (!is_reshape_family(n.op) || n.outputs.size() != 1 || n.operands.empty() ||
      !n.operands[0].is_tensor())
    return false;
  return g.meta(n.operands[0].value).is_contiguous() && g.meta(n.outputs[0]).is_contiguous();
}

// Whether members producing `a` and computing `b` visit their elements in one order.
bool same_order(const TensorMeta& a, const TensorMeta& b) {
  if (a.numel() != b.numel()) return false;
  if (a.is_contiguous() && b.is_contiguous()) return true;
  return a.shape == b.shape && a.stride == b.stride;
}

struct UnionFind {
  std::vector<int> p;
  explicit UnionFind(size_t n) : p(n) { std::iota(p.begin(), p.end(), 0); }
  int find(int x) { return p[x] == x ? x : p[x] = find(p[x]); }
  void join(int a, int b) { p[find(a)] = find(b); }
};

class Grouper {
 public:
  Grouper(const Graph& g, const std::vector<char>& claimed, Matches& out)
      : g_(g), claimed_(claimed), out_(out), member_(g.nodes.size(), 0), view_(g.nodes.size(), 0) {}

  void run() {
    const int nn = static_cast<int>(g_.nodes.size());
    for (int i = 0; i < nn; ++i) {
      if (claimed_[i]) continue;
      member_[i] = member_decline(g_, i).empty();
      view_[i] = !member_[i] && transparent_view(g_, i);
    }
    std::vector<int> all;
    for (int i = 0; i < nn; ++i)
      if (member_[i] || view_[i]) all.push_back(i);
    group(all);
    merge_siblings();
    for (const auto& set : sets_) emit(set);
    decline_neighbours();
  }

 private:
  // The member (and the views on the way) producing value `v` as a member reads it: back through
  // transparent views; -1 when a non-member produces it.
  int member_source(int v, std::vector<int>& views) const {
    for (int depth = 0; depth < 16; ++depth) {
      const int p = g_.values[v].producer;
      if (p < 0) return -1;
      if (member_[p]) return p;
      if (!view_[p]) return -1;
      views.push_back(p);
      v = g_.nodes[p].operands[0].value;
    }
    return -1;
  }

  // Connected components of `nodes` (members and views) under the joining rule, each processed.
  void group(const std::vector<int>& nodes) {
    if (nodes.empty()) return;
    std::set<int> in(nodes.begin(), nodes.end());
    UnionFind uf(g_.nodes.size());
    std::vector<char> joined(g_.nodes.size(), 0);
    for (int c : nodes) {
      if (!member_[c]) continue;
      const TensorMeta& cm = g_.meta(g_.nodes[c].outputs[0]);
      for (const Operand& o : g_.nodes[c].operands) {
        if (!o.is_tensor()) continue;
        std::vector<int> views;
        const int p = member_source(o.value, views);
        if (p < 0 || !in.count(p) ||
            std::any_of(views.begin(), views.end(), [&](int w) { return !in.count(w); }))
          continue;
        const TensorMeta& pm = g_.meta(g_.nodes[p].outputs[0]);
        if (!same_order(pm, cm)) continue;
        // through views: both ends row-major (the views keep that order)
        if (!views.empty() && !(pm.is_contiguous() && cm.is_contiguous())) continue;
        uf.join(p, c);
        for (int w : views) uf.join(w, c);
        joined[p] = joined[c] = 1;
        for (int w : views) joined[w] = 1;
      }
    }
    std::map<int, std::vector<int>> comps;
    for (int n : nodes) {
      if (joined[n])
        comps[uf.find(n)].push_back(n);
      else if (member_[n])  // a lone op: kept for merge_siblings (alone it is no region)
        sets_.push_back({n});
    }
    for (auto& [root, members] : comps) {
      std::sort(members.begin(), members.end());
      settle(members);
    }
  }

  int compute_count(const std::vector<int>& nodes) const {
    int k = 0;
    for (int n : nodes) k += member_[n];
    return k;
  }

  // The last member of `nodes` (the step runs there), and the first node outside them that reads
  // one of their values (the graph's size when none).
  std::pair<int, int> anchor_and_first_reader(const std::vector<int>& nodes) const {
    std::set<int> in(nodes.begin(), nodes.end());
    int anchor = -1;
    for (int n : nodes)
      if (member_[n]) anchor = std::max(anchor, n);
    int earliest = static_cast<int>(g_.nodes.size());
    for (int n : nodes)
      for (int v : g_.nodes[n].outputs)
        for (int u : g_.values[v].users)
          if (!in.count(u)) earliest = std::min(earliest, u);
    return {anchor, earliest};
  }

  // One component: cut it before the first outside reader of its values that comes before its
  // anchor (the rest is grouped again), else kept (sets_).
  void settle(std::vector<int> nodes) {
    if (compute_count(nodes) < 1) return;
    const auto [anchor, earliest] = anchor_and_first_reader(nodes);
    if (earliest < anchor) {
      std::vector<int> keep, rest;
      for (int n : nodes) (n < earliest ? keep : rest).push_back(n);
      group(keep);
      group(rest);
      return;
    }
    // Trailing views no member reads are not the group's (their outputs alias the member's).
    while (!nodes.empty() && !member_[nodes.back()]) nodes.pop_back();
    sets_.push_back(std::move(nodes));
  }

  // The values `nodes` read from outside them.
  std::set<int> reads(const std::vector<int>& nodes) const {
    std::set<int> in(nodes.begin(), nodes.end()), r;
    for (int n : nodes)
      for (const Operand& o : g_.nodes[n].operands)
        if (o.is_tensor() && !in.count(g_.values[o.value].producer)) r.insert(o.value);
    return r;
  }

  // The order key of a set: "" for row-major members, else the one dense layout's.
  std::string order_key(const std::vector<int>& nodes) const {
    for (int n : nodes)
      if (member_[n] && !g_.meta(g_.nodes[n].outputs[0]).is_contiguous()) {
        const TensorMeta& m = g_.meta(g_.nodes[n].outputs[0]);
        return shape_str(m.shape) + shape_str(m.stride);
      }
    return "";
  }

  int64_t numel_of(const std::vector<int>& nodes) const {
    for (int n : nodes)
      if (member_[n]) return g_.meta(g_.nodes[n].outputs[0]).numel();
    return -1;
  }

  // Sibling chains (they read a tensor in common over the same iteration space, as the cos and
  // sin of one angle table) become one kernel, reading it once, where the joined set still runs
  // before every outside reader of its values and fits the kernel's limits (horizontal fusion, as
  // Inductor fuses siblings).
  void merge_siblings() {
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < sets_.size() && !changed; ++i)
        for (size_t j = i + 1; j < sets_.size() && !changed; ++j) {
          const auto& a = sets_[i];
          const auto& b = sets_[j];
          if (numel_of(a) != numel_of(b) || order_key(a) != order_key(b)) continue;
          const std::set<int> ra = reads(a), rb = reads(b);
          if (std::none_of(ra.begin(), ra.end(), [&](int v) { return rb.count(v) > 0; })) continue;
          std::vector<int> u(a);
          u.insert(u.end(), b.begin(), b.end());
          std::sort(u.begin(), u.end());
          const auto [anchor, earliest] = anchor_and_first_reader(u);
          if (earliest < anchor) continue;
          const Region r = make_region(g_, u, std::any());
          if (static_cast<int>(r.inputs.size()) > kMaxInputs ||
              static_cast<int>(r.outputs.size()) > kMaxOutputs || compute_count(u) > kMaxOps)
            continue;
          sets_[i] = std::move(u);
          sets_.erase(sets_.begin() + static_cast<long>(j));
          changed = true;
        }
    }
  }

  // Why sum node `si`, reading value `v` of a linear chain of `numel` elements, cannot be one of
  // its column sums ("" when it can): a sum over every dim but the last of a row-major value whose
  // last dim C is a multiple of 8 (the kernel's chunks of 8 columns), float results, the same C
  // as the sums taken before.
  std::string sum_decline(int si, int v, int64_t numel, int64_t cols) const {
    const Node& sn = g_.nodes[si];
    const TensorMeta& ms = g_.meta(v);
    if (sn.operands.empty() || !sn.operands[0].is_tensor() || sn.operands[0].value != v)
      return "it does not sum the chain's value as its first operand";
    const int64_t nd = static_cast<int64_t>(ms.shape.size());
    std::vector<int64_t> lead;
    for (int64_t d = 0; d + 1 < nd; ++d) lead.push_back(d);
    std::vector<int64_t> dims = sn.dims;
    for (int64_t& d : dims)
      if (d < 0) d += nd;
    std::sort(dims.begin(), dims.end());
    if (nd < 2 || dims != lead)
      return "it sums " + ms.str() + " over dims " + shape_str(sn.dims) +
             ", not over every dim but the last";
    if (!ms.is_contiguous() || ms.numel() != numel) return "the summed value is not row-major";
    if (ms.shape.back() % 8 != 0)
      return "its last dim " + std::to_string(ms.shape.back()) +
             " is not a multiple of 8 (the kernel sums chunks of 8 columns)";
    if (cols != 0 && ms.shape.back() != cols)
      return "the chain already sums columns of " + std::to_string(cols) + ", this one " +
             std::to_string(ms.shape.back());
    const DType od = g_.meta(sn.outputs[0]).dtype;
    if (!float_type(od)) return "its result is " + std::string(dtype_name(od));
    if (dtype_size(od) < dtype_size(ms.dtype))
      return "it sums " + std::string(dtype_name(ms.dtype)) + " values into " +
             std::string(dtype_name(od)) +
             " (a narrower dtype= casts each value first; the kernel sums them as computed)";
    return "";
  }

  // Takes the column sums of a linear group's values into `nodes` and `p` (Params::sums), with
  // the reshape views between them; says why a sum of one of its values cannot be taken.
  void take_sums(std::vector<int>& nodes, Params& p) {
    const std::set<int> in(nodes.begin(), nodes.end());
    std::set<int> add;
    std::function<void(int, std::vector<int>)> walk = [&](int v, std::vector<int> views) {
      for (int u : g_.values[v].users) {
        if (in.count(u) || add.count(u) || claimed_[u] || grouped_.count(u)) continue;
        const Node& un = g_.nodes[u];
        if (view_[u] && views.size() < 4) {
          std::vector<int> w = views;
          w.push_back(u);
          walk(un.outputs[0], w);
          continue;
        }
        if (un.op != Op::kSumDim || un.outputs.size() != 1) continue;
        std::string why = sum_decline(u, v, p.numel, p.sum_cols);
        if (why.empty() && static_cast<int>(p.sums.size()) >= kMaxSums)
          why = "the kernel takes at most " + std::to_string(kMaxSums) + " column sums";
        if (!why.empty()) {
          out_.decline(u, "column sum not fused into the pointwise chain: " + why);
          continue;
        }
        p.sum_cols = g_.meta(v).shape.back();
        p.sums.push_back(un.outputs[0]);
        add.insert(u);
        add.insert(views.begin(), views.end());
      }
    };
    for (int n : nodes)
      for (int v : g_.nodes[n].outputs) walk(v, {});
    nodes.insert(nodes.end(), add.begin(), add.end());
    std::sort(nodes.begin(), nodes.end());
    std::sort(p.sums.begin(), p.sums.end());
  }

  // A kept set as a region, if it has two compute members and fits the kernel's limits; its
  // column sums with it where the region then still fits (else the chain alone, the sums eager,
  // said in `declined`).
  void emit(const std::vector<int>& chain, bool with_sums = true) {
    if (compute_count(chain) < 2) return;
    const int anchor = anchor_and_first_reader(chain).first;
    std::vector<int> nodes = chain;
    Params p;
    p.numel = g_.meta(g_.nodes[anchor].outputs[0]).numel();
    p.linear = true;
    for (int n : nodes) {
      if (!member_[n]) continue;
      p.ops.emplace_back(op_name(g_.nodes[n].op));
      p.linear = p.linear && g_.meta(g_.nodes[n].outputs[0]).is_contiguous();
    }
    if (!p.linear) {
      p.order_shape = g_.meta(g_.nodes[anchor].outputs[0]).shape;
      p.order_stride = g_.meta(g_.nodes[anchor].outputs[0]).stride;
    } else if (with_sums) {
      take_sums(nodes, p);
    }
    Region r = make_region(g_, nodes, std::any());
    if (!p.sums.empty()) r.anchor = anchor;  // the chain's last member, before the GEMMs
    std::vector<int> roots;
    const std::vector<int> views = outside_views(g_, r.nodes, roots);
    if (!views.empty()) set_region_views(r, g_, views, roots);
    const int first = nodes.front();
    if (!p.sums.empty() && (static_cast<int>(r.inputs.size()) > kMaxInputs ||
                            static_cast<int>(r.outputs.size()) > kMaxOutputs)) {
      for (int v : p.sums)
        out_.decline(g_.values[v].producer,
                     "column sum not fused into the pointwise chain: with it the chain would "
                     "read " +
                         std::to_string(r.inputs.size()) + " and write " +
                         std::to_string(r.outputs.size()) + " tensors (at most " +
                         std::to_string(kMaxInputs) + " and " + std::to_string(kMaxOutputs) + ")");
      return emit(chain, false);
    }
    if (static_cast<int>(r.inputs.size()) > kMaxInputs)
      return (void)out_.decline(first, "a pointwise chain of " + std::to_string(p.ops.size()) +
                                           " ops reads " + std::to_string(r.inputs.size()) +
                                           " tensors (the generated kernel takes at most " +
                                           std::to_string(kMaxInputs) + ")");
    if (static_cast<int>(r.outputs.size()) > kMaxOutputs)
      return (void)out_.decline(first, "a pointwise chain of " + std::to_string(p.ops.size()) +
                                           " ops writes " + std::to_string(r.outputs.size()) +
                                           " tensors (the generated kernel writes at most " +
                                           std::to_string(kMaxOutputs) + ")");
    if (static_cast<int>(p.ops.size()) > kMaxOps)
      return (void)out_.decline(first, "a pointwise chain of " + std::to_string(p.ops.size()) +
                                           " ops (the generated kernel takes at most " +
                                           std::to_string(kMaxOps) + ")");
    r.params = p;
    out_.regions.push_back(std::move(r));
    for (int n : nodes) grouped_.insert(n);
  }

  // "Why did this not fuse": an unclaimed elementwise node that reads or feeds a grouped member
  // but cannot be one says why (a float64 step, alpha 0.5, an integer compute type).
  void decline_neighbours() {
    std::set<int> said;
    for (int m : grouped_) {
      const Node& n = g_.nodes[m];
      std::vector<int> around;
      for (const Operand& o : n.operands)
        if (o.is_tensor() && g_.values[o.value].producer >= 0)
          around.push_back(g_.values[o.value].producer);
      for (int v : n.outputs)
        around.insert(around.end(), g_.values[v].users.begin(), g_.values[v].users.end());
      for (int a : around) {
        if (claimed_[a] || member_[a] || view_[a] || said.count(a)) continue;
        if (op_def(g_.nodes[a].op).eager.kernel != EagerLowering::kPointwise) continue;
        said.insert(a);
        out_.decline(a,
                     "not in the pointwise chain beside '" + n.id + "': " + member_decline(g_, a));
      }
    }
  }

  const Graph& g_;
  const std::vector<char>& claimed_;
  Matches& out_;
  std::vector<char> member_, view_;
  std::set<int> grouped_;
  std::vector<std::vector<int>> sets_;  // the groups kept, node indices sorted
};

}  // namespace

std::string member_decline(const Graph& g, int ni) {
  const Node& n = g.nodes[ni];
  const EagerLowering low = op_def(n.op).eager;
  if (low.kernel != EagerLowering::kPointwise) return "not an elementwise op";
  const auto fn = static_cast<PointwiseFn>(low.fn);
  if (fn == PointwiseFn::kFill || fn == PointwiseFn::kIota || fn == PointwiseFn::kDropout)
    return std::string(op_name(n.op)) + " creates or draws its values (left to eager)";
  if (n.outputs.size() != 1) return "more than one output";
  const TensorMeta& om = g.meta(n.outputs[0]);
  if (!member_type(om.dtype))
    return "its output is " + std::string(dtype_name(om.dtype)) +
           " (the generated kernel computes float32, bfloat16, float16 and bool values)";
  if (!om.non_overlapping_and_dense()) return "its output layout is not dense";
  if (om.numel() == 0) return "it has no elements";
  for (const Operand& o : n.operands)
    if (o.is_tensor() && !member_type(g.meta(o.value).dtype))
      return "it reads '" + g.values[o.value].name + "', " +
             std::string(dtype_name(g.meta(o.value).dtype)) +
             " (the generated kernel reads float32, bfloat16, float16 and bool)";
  if (fn != PointwiseFn::kCopy) {
    const DType compute =
        is_comparison(fn) ? result_type(promote_operands(g, n.operands)) : om.dtype;
    if (!float_type(compute))
      return "it computes in " + std::string(dtype_name(compute)) +
             " (the generated kernel computes in float32)";
  }
  if ((fn == PointwiseFn::kAdd || fn == PointwiseFn::kSub || fn == PointwiseFn::kRsub) &&
      n.alpha != 1 && n.alpha != -1)
    return "alpha " + std::to_string(n.alpha) +
           ": the eager kernel may contract alpha * y into an FMA, which one rounding per op "
           "does not reproduce";
  return "";
}

void match_rest(const Graph& g, const std::vector<char>& claimed, Matches& out) {
  Grouper(g, claimed, out).run();
}

}  // namespace replay::pointwise
