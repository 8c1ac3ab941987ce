// ag_matmul cost and description. Bytes: the region's inputs (the shard, the weight, the scales)
// and its result once each. FLOPs: the gathered GEMM's 2 M N K, by matmul class. Communication:
// each rank sends its shard to the n - 1 others over a ring, (n - 1) / n of the gathered bytes
// (nccl-tests' all-gather bus factor, harness/measure/overlap.hpp).
#include "impls/fusions/ag_matmul/params.hpp"
#include "workloads/ops/matmul.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::ag_matmul {

Cost cost(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  Cost c = gemm_region_cost(g, r, p.mm);
  const double n = static_cast<double>(p.world_size);
  c.comm_bytes = value_bytes(g, {g.nodes[p.all_gather].outputs[0]}) * (n - 1) / n;
  return c;
}

nlohmann::json describe(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  nlohmann::json j = {{"world_size", p.world_size},
                      {"M", p.M},
                      {"K", p.K},
                      {"N", p.N},
                      {"gemm", p.scaled ? "_scaled_mm" : "mm"},
                      {"shard", g.values[p.x].name + " " + g.meta(p.x).str()},
                      {"weight", g.values[p.b].name + " " + g.meta(p.b).str()},
                      {"gather_dim", 0}};
  if (p.scaled) {
    j["scale_a"] = g.values[p.scale_a].name + " " + g.meta(p.scale_a).str();
    j["scale_b"] = g.values[p.scale_b].name + " " + g.meta(p.scale_b).str();
  }
  return j;
}

}  // namespace replay::ag_matmul
