// layernorm_fwd cost and description.
// Bytes that must move: x read once, y written once, each [C] weight read once
// (= the region's external inputs and outputs). FLOPs per element: LayerNorm ~8 (sum, square-sum,
// subtract, scale, affine), RMSNorm ~5; memory-bound by 2-3 orders of magnitude on Hopper, so the
// SOL is the byte term.
#include "impls/fusions/layernorm_fwd/params.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::layernorm_fwd {

Cost cost(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  std::vector<int> io = r.inputs;
  io.insert(io.end(), r.outputs.begin(), r.outputs.end());
  const double per_elem = p.kind == NormKind::kLayerNorm ? 8 : 5;
  Cost c;
  c.bytes = value_bytes(g, io);
  c.flops = (per_elem + 2.0 * static_cast<double>(p.epilogue.size())) *
            static_cast<double>(p.rows * p.cols);
  return c;
}

nlohmann::json describe(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  nlohmann::json epi = nlohmann::json::array();
  for (const auto& s : p.epilogue) {
    if (s.op == EpilogueOp::kRound) {
      epi.push_back({{"op", "round"}, {"dtype", dtype_name(s.dtype)}});
    } else {
      epi.push_back({{"op", s.op == EpilogueOp::kMul ? "mul" : "add"},
                     {"value", g.values[s.weight].name},
                     {"dtype", dtype_name(s.dtype)}});
    }
  }
  return {{"kind", p.kind == NormKind::kLayerNorm ? "layernorm" : "rmsnorm"},
          {"x", g.values[p.x].name},
          {"rows", p.rows},
          {"cols", p.cols},
          {"eps", p.eps},
          {"correction", p.correction},
          {"epilogue", epi},
          {"out", g.values[p.out].name}};
}

}  // namespace replay::layernorm_fwd
