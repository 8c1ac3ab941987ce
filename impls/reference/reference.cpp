#include "impls/reference/reference.hpp"

#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>

#include "workloads/ir/error.hpp"
#include "workloads/ops/eigen_ref.hpp"
#include "workloads/ops/op.hpp"

namespace replay {
namespace {

// Elementwise, split over threads (OpenMP when the build has it): the same result on any count.
void round_inplace(HostTensor& t) {
  if (t.meta.dtype == DType::kFloat64) return;
  const auto n = static_cast<int64_t>(t.data.size());
  double* d = t.data.data();
  if (t.meta.dtype == DType::kFloat32) {  // materialized as PyTorch does: rounded to float32
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<double>(static_cast<float>(d[i]));
    return;
  }
  const DType dt = t.meta.dtype;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) d[i] = round_to(dt, d[i]);
}

// The row's reference of `n` on `vals`, not rounded; outputs of dtype `as` when given. A
// collective reads every rank's operand from `group` (rank `rank`'s own is vals' one); without
// one, a group of one.
std::vector<HostTensor> evaluate(const Graph& g, const Node& n,
                                 const std::map<int, HostTensor>& vals,
                                 std::optional<DType> as = std::nullopt,
                                 const std::vector<const HostTensor*>* group = nullptr,
                                 int rank = 0) {
  std::vector<TensorMeta> out_meta;
  for (int v : n.outputs) {
    out_meta.push_back(g.meta(v));
    if (as) out_meta.back().dtype = *as;
  }
  RefArgs args{n, {}, out_meta};
  for (const auto& o : n.operands) {
    args.in.push_back(o.is_tensor() ? &vals.at(o.value) : nullptr);
    args.in_meta.push_back(o.is_tensor() ? &g.meta(o.value) : nullptr);
  }
  if (op_def(n.op).kind == OpKind::kCollective) {
    args.group = group ? *group : std::vector<const HostTensor*>{args.in.at(0)};
    args.rank = rank;
  }
  return op_def(n.op).reference(args);
}

// reference_node, for rank `rank` of `group` where `n` is a collective.
std::vector<HostTensor> reference_node_of(const Graph& g, const Node& n,
                                          const std::map<int, HostTensor>& vals,
                                          const std::vector<const HostTensor*>* group, int rank) {
  std::vector<HostTensor> out;
  try {
    out = evaluate(g, n, vals, std::nullopt, group, rank);
  } catch (const TraceError& e) {  // a bad value (an index out of range): name the trace file
    if (!e.file().empty()) throw;
    throw TraceError(g.file, e.node(), e.detail());
  }
  for (auto& t : out) round_inplace(t);
  return out;
}

}  // namespace

std::vector<HostTensor> reference_node(const Graph& g, const Node& n,
                                       const std::map<int, HostTensor>& vals) {
  return reference_node_of(g, n, vals, nullptr, 0);
}

std::vector<std::map<int, HostTensor>> run_reference_ranks(
    const Graph& g, std::vector<std::map<int, HostTensor>>&& inputs) {
  const size_t ranks = static_cast<size_t>(g.world_size);
  if (inputs.size() != ranks)
    throw std::invalid_argument("reference: " + std::to_string(inputs.size()) +
                                " ranks' inputs for a world_size " + std::to_string(g.world_size) +
                                " trace");
  std::vector<std::map<int, HostTensor>> vals = std::move(inputs);
  for (size_t r = 0; r < ranks; ++r)
    for (int v : g.inputs)
      if (!vals[r].count(v))
        throw std::invalid_argument("reference: rank " + std::to_string(r) + " lacks input " +
                                    g.values[v].name);
  std::vector<const HostTensor*> group(ranks);
  for (const Node& n : g.nodes) {
    const bool collective = op_def(n.op).kind == OpKind::kCollective;
    if (collective)
      for (size_t r = 0; r < ranks; ++r) group[r] = &vals[r].at(n.operands.at(0).value);
    // Every rank's outputs before any is stored: a collective reads only earlier values, so the
    // order does not matter, but it keeps the lockstep plain.
    std::vector<std::vector<HostTensor>> outs(ranks);
    for (size_t r = 0; r < ranks; ++r)
      outs[r] =
          reference_node_of(g, n, vals[r], collective ? &group : nullptr, static_cast<int>(r));
    for (size_t r = 0; r < ranks; ++r)
      for (size_t k = 0; k < outs[r].size(); ++k) vals[r][n.outputs[k]] = std::move(outs[r][k]);
  }
  return vals;
}

std::map<int, HostTensor> run_reference(const Graph& g, std::map<int, HostTensor>&& inputs) {
  std::map<int, HostTensor> vals = std::move(inputs);
  for (int v : g.inputs)
    if (!vals.count(v)) throw std::invalid_argument("reference: missing input " + g.values[v].name);
  for (const Node& n : g.nodes) {
    auto outs = reference_node(g, n, vals);
    for (size_t k = 0; k < outs.size(); ++k) vals[n.outputs[k]] = std::move(outs[k]);
  }
  return vals;
}

std::map<int, HostTensor> run_reference(const Graph& g, const std::map<int, HostTensor>& inputs) {
  std::map<int, HostTensor> copy;
  for (const auto& kv : inputs) {  // copied by all threads (first touch of the pages)
    const HostTensor& t = kv.second;
    HostTensor c;
    c.meta = t.meta;
    c.data.resize(t.data.size());  // uninitialized (HostData): written below
    parallel_copy(c.data.data(), t.data.data(), static_cast<int64_t>(t.data.size()));
    copy.emplace(kv.first, std::move(c));
  }
  return run_reference(g, std::move(copy));
}

std::optional<HostTensor> addend_magnitude(const Graph& g, const std::map<int, HostTensor>& ref,
                                           int v) {
  std::vector<const Node*> chain;  // from the addition's consumer to v's producer
  int w = v;
  for (;;) {
    const int p = g.values[w].producer;
    if (p < 0) return std::nullopt;
    const Node& n = g.nodes[p];
    if (is_addition(n.op)) break;
    w = carried_value(n);
    if (w < 0) return std::nullopt;
    chain.push_back(&n);
  }
  const Node& add = g.nodes[g.values[w].producer];
  const TensorMeta& meta = g.meta(w);
  // rsub: b - alpha a; add / sub: a +- alpha b.
  const size_t scaled = add.op == Op::kRsubScalar ? 0 : 1;
  Eigen::ArrayXd m;
  for (size_t i = 0; i < 2 && i < add.operands.size(); ++i) {
    const auto& o = add.operands[i];
    const double k = i == scaled ? std::fabs(add.alpha) : 1.0;
    Eigen::ArrayXd a =
        o.is_tensor() ? Eigen::ArrayXd(k * ref::broadcast_to(ref.at(o.value), meta.shape).abs())
                      : Eigen::ArrayXd::Constant(static_cast<Eigen::Index>(meta.numel()),
                                                 k * std::fabs(o.scalar));
    m = i == 0 ? std::move(a) : Eigen::ArrayXd(m.max(a));
  }
  HostTensor t =
      ref::from_array(m, TensorMeta{meta.shape, contiguous_strides(meta.shape), DType::kFloat64});
  // The views and copies after the addition, applied to the magnitudes (float64: no rounding).
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    std::map<int, HostTensor> one;
    one.emplace(carried_value(**it), std::move(t));
    t = std::move(evaluate(g, **it, one, DType::kFloat64).at(0));
  }
  return t;
}

}  // namespace replay
