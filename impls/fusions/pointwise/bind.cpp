// pointwise binder: the region's captured nodes, in graph order, as a chain (codegen.hpp):
//   elementwise node     a step: its eager function (div's rounding mode folded in, as
//                        lower_pointwise does), its operands (a load of a region input through
//                        its broadcast strides, an earlier step, a number; a clamp bound given as
//                        None is -inf / +inf), its output dtype
//   view or alias node   no code: its output is the value of its operand (the matcher takes
//                        only views that keep the element order, and the canonical form's
//                        identities)
//   column sum node      (Params::sums) no step: a ColSum of the step computing its operand;
//                        its result is the eager column sum of the kernel's partials
// Every other region output is a store of the step computing it, in the layout the program gave
// it.
//   optimized: the generated kernel (NVRTC at bind time, jit.hpp): one launch;
//   baseline:  the same nodes through the eager executor's launches (lower_node), the
//              intermediates in workspaces: one launch per op.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <stdexcept>

#include "impls/cuda/cuda_check.hpp"
#include "impls/eager/lower.hpp"
#include "impls/fusions/pointwise/codegen.hpp"
#include "impls/fusions/pointwise/jit.hpp"
#include "impls/fusions/pointwise/params.hpp"
#include "workloads/ops/op.hpp"
#include "workloads/ops/promote.hpp"

namespace replay::pointwise {
namespace {

bool is_comparison(PointwiseFn f) {
  return f >= PointwiseFn::kEq && f <= PointwiseFn::kLogicalXor;
}

PointwiseFn node_fn(const Node& n) {
  auto fn = static_cast<PointwiseFn>(op_def(n.op).eager.fn);
  if (fn == PointwiseFn::kDiv && n.mode == "trunc") fn = PointwiseFn::kDivTrunc;
  if (fn == PointwiseFn::kDiv && n.mode == "floor") fn = PointwiseFn::kDivFloor;
  return fn;
}

// lower_pointwise's rule: a 0-dim float operand of another dtype than the op's compute dtype
// that is no exact widening is cast to the compute dtype before the op (TensorIterator's
// fetch-and-cast).
bool rounds_first(const Graph& g, const Operand& o, DType compute) {
  if (!o.is_tensor() || !g.meta(o.value).shape.empty() || !is_floating(compute)) return false;
  const DType d = g.meta(o.value).dtype;
  const bool exact_widening =
      d == DType::kBool || (is_floating(d) && dtype_size(d) < dtype_size(compute));
  return d != compute && !exact_widening;
}

int alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int al = 1;
  while (al < 16 && (a % (2 * al)) == 0) al *= 2;
  return al;
}

// The chain of the region's captured nodes, its loads bound to the program's buffers.
struct Chain {
  KernelSpec spec;
  KernelArgs args;
  std::vector<int> sum_out;  ///< per spec.sums entry: the sum node's result value
  std::string unsupported;
};

Chain build(const Graph& g, const Region& r, BindContext& ctx) {
  Chain c;
  KernelSpec& s = c.spec;
  const auto& p = std::any_cast<const Params&>(r.params);
  s.numel = p.numel;
  std::map<int, int> step_of;                  // value -> the step computing it
  std::map<int, int> slot_of;                  // region input buffer (alias root) -> argument
  std::map<std::pair<int, int>, int> load_of;  // (input value, consumer node) -> load
  std::map<int, int> alias_src;  // an alias node's output of a region input -> that input
  auto fail = [&](const std::string& w) {
    c.unsupported = w;
    return c;
  };
  // The order value `v` is visited in: the row-major order of its shape (a linear chain), or the
  // members' one dense layout. Every value of the chain is at iteration index s in it.
  auto order = [&](int v) {
    if (p.linear) return TensorMeta{g.meta(v).shape, contiguous_strides(g.meta(v).shape)};
    return TensorMeta{p.order_shape, p.order_stride};
  };
  for (int ni : r.nodes) {
    const Node& n = g.nodes[ni];
    const EagerLowering low = op_def(n.op).eager;
    if (low.kernel == EagerLowering::kAlias) {  // same elements, same order
      if (n.operands.empty() || !n.operands[0].is_tensor()) continue;
      auto it = step_of.find(n.operands[0].value);
      for (int v : n.outputs) {
        if (it != step_of.end())
          step_of[v] = it->second;
        else  // an identity of an input the region absorbed (its clone)
          alias_src[v] = n.operands[0].value;
      }
      continue;
    }
    if (n.outputs.size() == 1 &&
        std::find(p.sums.begin(), p.sums.end(), n.outputs[0]) != p.sums.end()) {
      auto it = n.operands.empty() || !n.operands[0].is_tensor()
                    ? step_of.end()
                    : step_of.find(n.operands[0].value);
      if (it == step_of.end())
        return fail("column sum '" + n.id + "' sums a value no step of the chain computes");
      s.sums.push_back(ColSum{it->second, 0});
      c.sum_out.push_back(n.outputs.at(0));
      continue;
    }
    if (low.kernel != EagerLowering::kPointwise)
      return fail("node '" + n.id + "' (" + std::string(op_name(n.op)) + ") is not elementwise");
    const TensorMeta& om = g.meta(n.outputs.at(0));
    if (om.numel() != s.numel)
      return fail("node '" + n.id + "' has " + std::to_string(om.numel()) + " elements, not " +
                  std::to_string(s.numel));
    Step st;
    st.fn = node_fn(n);
    st.alpha = n.alpha;
    st.dtype = om.dtype;
    const DType compute = st.fn == PointwiseFn::kCopy ? om.dtype
                          : is_comparison(st.fn)      ? result_type(promote_operands(g, n.operands))
                                                      : om.dtype;
    for (size_t k = 0; k < n.operands.size(); ++k) {
      const Operand& o = n.operands[k];
      Arg a;
      if (o.none) {
        a.number = k == 1 ? -INFINITY : INFINITY;
      } else if (!o.is_tensor()) {
        a.number = o.scalar;
      } else if (auto it = step_of.find(o.value); it != step_of.end()) {
        a.kind = Arg::kStep;
        a.index = it->second;
        if (st.fn != PointwiseFn::kCopy && rounds_first(g, o, compute)) {
          Step cast;  // the eager executor's cast into a one-element temporary
          cast.fn = PointwiseFn::kCopy;
          cast.args = {a};
          cast.dtype = compute;
          s.steps.push_back(cast);
          a.index = static_cast<int>(s.steps.size()) - 1;
        }
      } else {
        // The buffer holding it: the input itself, or the input an absorbed identity (a clone,
        // an alias) or a reshape of a contiguous input passes on, read through that view.
        int root = o.value;
        while (alias_src.count(root)) root = alias_src[root];
        BoundTensor t = ctx.tensor(root);
        const TensorMeta& want = g.meta(o.value);
        if (t.layout.shape != want.shape) {
          if (!t.layout.is_contiguous() || t.layout.numel() != want.numel())
            return fail("node '" + n.id + "' reads '" + g.values[o.value].name +
                        "', a reshape of the non-contiguous input '" + g.values[root].name + "'");
          t.layout = TensorMeta{want.shape, contiguous_strides(want.shape), t.layout.dtype};
        }
        if (!slot_of.count(root)) {  // one argument per buffer, whatever views read it
          const int slot = static_cast<int>(slot_of.size());
          if (slot >= kMaxInputs)
            return fail("more than " + std::to_string(kMaxInputs) + " inputs");
          slot_of[root] = slot;
          c.args.in[slot] = t.ptr;
        }
        auto key = std::make_pair(o.value, ni);
        if (!load_of.count(key)) {
          Load l;
          l.slot = slot_of[root];
          l.dtype = t.layout.dtype;
          try {
            const TensorMeta ord = order(n.outputs[0]);
            l.geo = visit_geometry(t.layout.shape, t.layout.stride, ord.shape, ord.stride);
          } catch (const std::invalid_argument& e) {
            return fail("node '" + n.id + "' operand '" + g.values[o.value].name +
                        "': " + e.what());
          }
          l.round = st.fn != PointwiseFn::kCopy && rounds_first(g, o, compute);
          l.round_to = compute;
          load_of[key] = static_cast<int>(s.loads.size());
          s.loads.push_back(l);
          s.load_align.push_back(alignment(t.ptr));
        }
        a.kind = Arg::kLoad;
        a.index = load_of[key];
      }
      st.args.push_back(a);
    }
    s.steps.push_back(st);
    step_of[n.outputs[0]] = static_cast<int>(s.steps.size()) - 1;
  }
  const std::set<int> sum_outs(c.sum_out.begin(), c.sum_out.end());
  for (int v : r.outputs) {
    if (sum_outs.count(v)) continue;  // written by the partials' column sum
    auto it = step_of.find(v);
    if (it == step_of.end())
      return fail("output '" + g.values[v].name + "' is computed by no step of the chain");
    const int slot = static_cast<int>(s.stores.size());
    if (slot >= kMaxOutputs) return fail("more than " + std::to_string(kMaxOutputs) + " outputs");
    const BoundTensor t = ctx.tensor(v);
    const TensorMeta ord = order(v);
    Store st;
    st.step = it->second;
    st.slot = slot;
    st.dtype = t.layout.dtype;
    try {
      st.geo = visit_geometry(t.layout.shape, t.layout.stride, ord.shape, ord.stride);
    } catch (const std::invalid_argument& e) {
      return fail("output '" + g.values[v].name + "': " + e.what());
    }
    s.stores.push_back(st);
    s.store_align.push_back(alignment(t.ptr));
    c.args.out[slot] = t.ptr;
  }
  if (const char* e = std::getenv("REPLAY_POINTWISE_PAIRS"); e && std::string(e) == "0")
    s.bf16_pairs = false;
  if (!s.sums.empty()) {
    s.sum_cols = p.sum_cols;
    if (const char* e = std::getenv("REPLAY_POINTWISE_SUM_FORM")) {  // "MIN_BLOCKS,SMEM"
      int mb = 0, sm = 0;
      if (std::sscanf(e, "%d,%d", &mb, &sm) == 2 && mb >= 0 && mb <= 8) {
        s.sum_min_blocks = mb;
        s.sum_acc_smem = sm != 0;
      }
    }
    for (size_t k = 0; k < s.sums.size(); ++k) {
      s.sums[k].slot = static_cast<int>(s.stores.size() + k);
      if (s.sums[k].slot >= kMaxOutputs)
        return fail("more than " + std::to_string(kMaxOutputs) + " outputs and column sums");
    }
    if (!chunked(s))
      return fail("the column sums need every tensor's innermost run a multiple of 8");
  }
  return c;
}

// One launch per node: the eager executor's kernels, the intermediates in workspaces.
Binding bind_baseline(const Graph& g, const Region& r, BindContext& ctx) {
  Binding b;
  std::map<int, DeviceTensor> val;
  std::vector<EagerLaunch> launches;
  auto tensor_of = [&](int v) -> DeviceTensor {
    if (auto it = val.find(v); it != val.end()) return it->second;
    const BoundTensor t = ctx.tensor(v);  // a region input, or an output of the region
    return val[v] = device_tensor(t.ptr, t.layout);
  };
  std::set<int> outs(r.outputs.begin(), r.outputs.end());
  try {
    for (int ni : r.nodes) {
      const Node& n = g.nodes[ni];
      const EagerLowering low = op_def(n.op).eager;
      if (low.kernel == EagerLowering::kAlias) {
        if (n.operands.empty() || !n.operands[0].is_tensor()) continue;
        const DeviceTensor src = tensor_of(n.operands[0].value);
        for (int v : n.outputs) {
          const TensorMeta& m = g.meta(v);
          TensorMeta lay{m.shape, contiguous_strides(m.shape), m.dtype};
          if (m.shape.size() == static_cast<size_t>(src.ndim)) {  // an identity: src's strides
            bool same = true;
            for (int d = 0; d < src.ndim; ++d) same = same && src.shape[d] == m.shape[d];
            if (same) lay.stride.assign(src.stride, src.stride + src.ndim);
          }
          val[v] = device_tensor(src.ptr, lay);
        }
        continue;
      }
      std::vector<DeviceTensor> in;
      for (const Operand& o : n.operands)
        in.push_back(o.is_tensor() ? tensor_of(o.value) : DeviceTensor{});
      const int v = n.outputs.at(0);
      DeviceTensor out;
      if (outs.count(v)) {
        out = tensor_of(v);
      } else {
        TensorMeta m = g.meta(v);
        if (m.storage_elems() != m.numel()) m.stride = contiguous_strides(m.shape);
        out = val[v] = device_tensor(ctx.workspace(m.nbytes()), m);
      }
      launches.push_back(lower_node(g, n, in, {out}));
    }
  } catch (const std::exception& e) {
    b.unsupported = e.what();
    return b;
  }
  b.launch = [launches](const LaunchContext& c) {
    for (const auto& l : launches) l(c.stream);
  };
  return b;
}

SpecMutator g_mutator = nullptr;
SourceMutator g_source_mutator = nullptr;

}  // namespace

void set_spec_mutator(SpecMutator m) {
  g_mutator = m;
}

void set_source_mutator(SourceMutator m) {
  g_source_mutator = m;
}

// build, its failures (a value without a buffer, a layout it cannot visit) as the reason.
Chain build_or_why(const Graph& g, const Region& r, BindContext& ctx) {
  try {
    return build(g, r, ctx);
  } catch (const std::exception& e) {
    Chain c;
    c.unsupported = e.what();
    return c;
  }
}

KernelSpec chain_spec(const Graph& g, const Region& r, BindContext& ctx, KernelArgs& args,
                      std::string& why) {
  Chain c = build_or_why(g, r, ctx);
  why = c.unsupported;
  args = c.args;
  return c.spec;
}

Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  if (v.role != Role::kOptimized) return bind_baseline(g, r, ctx);
  Binding b;
  Chain c = build_or_why(g, r, ctx);
  if (!c.unsupported.empty()) {
    b.unsupported = c.unsupported;
    return b;
  }
  if (g_mutator) g_mutator(c.spec);
  const void* kernel = nullptr;
  try {
    std::string source = generate(c.spec);
    if (g_source_mutator) g_source_mutator(source);
    kernel = load_kernel(source);
  } catch (const std::exception& e) {
    b.unsupported = std::string("the generated kernel: ") + e.what();
    return b;
  }
  const int64_t numel = c.spec.numel;
  if (c.spec.sums.empty()) {
    const int per_thread = chunked(c.spec) ? kChunk : 1;
    const KernelArgs args = c.args;
    b.launch = [kernel, args, numel, per_thread](const LaunchContext& lc) {
      launch(kernel, args, numel, per_thread, lc.stream);
    };
    return b;
  }
  // The column-sum form: float32 partials [row blocks, C] per sum, then one eager column sum of
  // them into the sum's result (its dtype, its layout: [C] or keepdim [1, C]).
  const int64_t C = c.spec.sum_cols, rows = numel / C;
  const int64_t strips = (C / kChunk + kSumLanes - 1) / kSumLanes;
  std::vector<EagerLaunch> finals;
  int64_t row_blocks = 0;
  try {
    row_blocks = colsum_row_blocks(kernel, rows, strips);
    for (size_t k = 0; k < c.spec.sums.size(); ++k) {
      const TensorMeta pm{{row_blocks, C}, {C, 1}, DType::kFloat32};
      void* part = ctx.workspace(pm.nbytes());
      c.args.out[c.spec.sums[k].slot] = part;
      const BoundTensor t = ctx.tensor(c.sum_out[k]);
      if (t.layout.numel() != C)
        throw std::runtime_error("column sum result '" + g.values[c.sum_out[k]].name + "' has " +
                                 std::to_string(t.layout.numel()) + " elements, not " +
                                 std::to_string(C));
      const TensorMeta om{
          {C}, {t.layout.stride.empty() ? 1 : t.layout.stride.back()}, t.layout.dtype};
      finals.push_back(prepare_reduction(ReduceFn::kSum, device_tensor(part, pm), {0},
                                         device_tensor(t.ptr, om), nullptr, 0));
    }
  } catch (const std::exception& e) {
    b.unsupported = std::string("the column sums: ") + e.what();
    return b;
  }
  const KernelArgs args = c.args;
  b.launch = [kernel, args, strips, row_blocks, finals](const LaunchContext& lc) {
    launch_colsum(kernel, args, strips, row_blocks, lc.stream);
    for (const auto& f : finals) f(lc.stream);
  };
  return b;
}

}  // namespace replay::pointwise
