// pointwise cost and description. Bytes that must move: every tensor the chain reads from outside
// once and every value it writes once (the region's inputs and outputs); the intermediates stay
// in registers. A broadcast input is counted at its own size, as it is read. FLOPs: one per op
// and element (informational: a chain of elementwise ops is bound by its bytes). Column sums
// taken with the chain add only their results (the summed value is not read back; the float32
// partials, row blocks x C, are ~0.1 % of it and not counted).
#include "impls/fusions/pointwise/params.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::pointwise {

Cost cost(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  Cost c;
  c.bytes = region_io_bytes(g, r);
  c.flops = static_cast<double>(p.numel) * static_cast<double>(p.ops.size());
  return c;
}

nlohmann::json describe(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  nlohmann::json d = {{"numel", p.numel},
                      {"ops", p.ops},
                      {"order", p.linear ? "row-major" : "one dense layout"},
                      {"reads", value_names(g, r.inputs)},
                      {"writes", value_names(g, r.outputs)}};
  if (!p.sums.empty()) {
    d["column_sums"] = value_names(g, p.sums);
    d["sum_cols"] = p.sum_cols;
  }
  return d;
}

}  // namespace replay::pointwise
