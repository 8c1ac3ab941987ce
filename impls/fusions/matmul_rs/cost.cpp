// matmul_rs cost and description. Bytes: the region's inputs (the activation, the weight shard,
// the scales) and its result once each. FLOPs: the GEMM's 2 M N K, by matmul class.
// Communication: a ring reduce-scatter sends (n - 1) / n of the partial product per rank
// (nccl-tests' reduce-scatter bus factor, harness/measure/overlap.hpp).
#include "impls/fusions/matmul_rs/params.hpp"
#include "workloads/ops/matmul.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::matmul_rs {

Cost cost(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  Cost c = gemm_region_cost(g, r, g.values[p.mm_out].producer);  // the node in graph g
  const double n = static_cast<double>(p.world_size);
  c.comm_bytes = value_bytes(g, {p.out}) * (n - 1);  // the scattered input is n times p.out
  return c;
}

nlohmann::json describe(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  nlohmann::json j = {{"world_size", p.world_size},
                      {"M", p.M},
                      {"K", p.K},
                      {"N", p.N},
                      {"gemm", p.scaled ? "_scaled_mm" : "mm"},
                      {"reduce_op", p.reduce_op},
                      {"activation", g.values[p.a].name + " " + g.meta(p.a).str()},
                      {"weight", g.values[p.b].name + " " + g.meta(p.b).str()},
                      {"scatter_dim", p.scatter_dim},
                      {"blocks_per_shard", p.lead}};
  if (p.scaled) {
    j["scale_a"] = g.values[p.scale_a].name + " " + g.meta(p.scale_a).str();
    j["scale_b"] = g.values[p.scale_b].name + " " + g.meta(p.scale_b).str();
  }
  return j;
}

}  // namespace replay::matmul_rs
