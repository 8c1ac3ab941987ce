// ag_matmul cost and description. Bytes: the region's inputs (the shard, the weights, the scales)
// and its results (and the gathered activation where the graph reads it) once each. FLOPs: every
// gathered GEMM's 2 M N K, by matmul class. Communication: each rank sends its shard to the n - 1
// others over a ring, (n - 1) / n of the gathered bytes (nccl-tests' all-gather bus factor,
// harness/measure/overlap.hpp).
#include "impls/fusions/ag_matmul/params.hpp"
#include "workloads/ops/matmul.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::ag_matmul {

Cost cost(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  // Node indices of the graph given (captured or canonical) through the values' producers.
  Cost c = gemm_region_cost(g, r, g.values[p.gemms[0].mm_out].producer);
  for (size_t j = 1; j < p.gemms.size(); ++j) {
    const Node& mm = g.nodes[g.values[p.gemms[j].mm_out].producer];
    const double f = matmul_flops(g, mm);
    c.flops += f;
    c.matmul_flops[matmul_class(g, mm)] += f;
  }
  const double n = static_cast<double>(p.world_size);
  c.comm_bytes = value_bytes(g, {p.ag_out}) * (n - 1) / n;
  return c;
}

nlohmann::json describe(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  nlohmann::json gemms = nlohmann::json::array();
  for (const Gemm& ge : p.gemms) {
    nlohmann::json j = {{"node", g.nodes[g.values[ge.mm_out].producer].id},
                        {"gemm", ge.scaled ? "_scaled_mm" : "mm"},
                        {"N", ge.N},
                        {"weight", g.values[ge.b].name + " " + g.meta(ge.b).str()}};
    if (ge.scaled) {
      j["scale_a"] = g.values[ge.scale_a].name + " " + g.meta(ge.scale_a).str();
      j["scale_b"] = g.values[ge.scale_b].name + " " + g.meta(ge.scale_b).str();
    }
    gemms.push_back(j);
  }
  const bool exported = !gathered_outputs(p, r).empty();
  return {{"world_size", p.world_size},
          {"M", p.M},
          {"K", p.K},
          {"shard", g.values[p.x].name + " " + g.meta(p.x).str()},
          {"gather_dim", p.gather_dim},
          {"blocks_per_shard", p.lead},
          {"gathered_written", exported},
          {"gemms", gemms}};
}

}  // namespace replay::ag_matmul
