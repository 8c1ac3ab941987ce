#include "impls/reference/reference.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

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

}  // namespace

std::vector<HostTensor> reference_node(const Graph& g, const Node& n,
                                       const std::map<int, HostTensor>& vals) {
  std::vector<TensorMeta> out_meta;
  for (int v : n.outputs) out_meta.push_back(g.meta(v));
  RefArgs args{n, {}, out_meta};
  for (const auto& o : n.operands) {
    args.in.push_back(o.is_tensor() ? &vals.at(o.value) : nullptr);
    args.in_meta.push_back(o.is_tensor() ? &g.meta(o.value) : nullptr);
  }
  std::vector<HostTensor> out = op_def(n.op).reference(args);
  for (auto& t : out) round_inplace(t);
  return out;
}

std::map<int, HostTensor> run_reference(const Graph& g, const std::map<int, HostTensor>& inputs) {
  std::map<int, HostTensor> vals = inputs;
  for (int v : g.inputs)
    if (!vals.count(v)) throw std::invalid_argument("reference: missing input " + g.values[v].name);
  for (const Node& n : g.nodes) {
    auto outs = reference_node(g, n, vals);
    for (size_t k = 0; k < outs.size(); ++k) vals[n.outputs[k]] = std::move(outs[k]);
  }
  return vals;
}

}  // namespace replay
