// amax_reuse cost and description.
// Bytes that must move: x read once and every result written once (= the region's external input
// and outputs); the claimed |.| and upcasts are never materialized. For a rowwise and a tensorwise
// amax of a bf16 [16384, 8192] x: 268 MB read, 64 KB + 4 B written. FLOPs: one comparison per
// element per extreme (informational; the SOL is the byte term by three orders of magnitude).
#include "impls/fusions/amax_reuse/params.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::amax_reuse {

Cost cost(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  bool ext[2] = {false, false};
  for (const Reduction& red : p.reductions) ext[static_cast<int>(red.extreme)] = true;
  Cost c;
  c.bytes = region_io_bytes(g, r);
  c.flops = static_cast<double>(p.M * p.N) * ((ext[0] ? 1 : 0) + (ext[1] ? 1 : 0));
  return c;
}

nlohmann::json describe(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  nlohmann::json reds = nlohmann::json::array();
  for (const Reduction& red : p.reductions) {
    nlohmann::json j = {{"out", g.values[red.out].name},
                        {"op", std::string(op_name(g.nodes[g.values[red.out].producer].op))},
                        {"extreme", red.extreme == Extreme::kMax ? "max" : "min"},
                        {"dims", red.dims},
                        {"over", kind_name(red.kind)},
                        {"dtype", dtype_name(g.meta(red.out).dtype)}};
    if (red.from >= 0) j["from"] = g.values[p.reductions[red.from].out].name;
    reds.push_back(j);
  }
  return {{"x", g.values[p.x].name},
          {"x_meta", g.meta(p.x).str()},
          {"abs", p.abs},
          {"rows", p.M},
          {"cols", p.N},
          {"split", p.split},
          {"prologue", value_names(g, p.prologue)},
          {"reductions", reds},
          {"optimized",
           "one pass over x: every reduction from one read (rows by a warp each, the whole from "
           "the row maxima, columns from per-CTA partials); baseline: one pass per reduction"}};
}

}  // namespace replay::amax_reuse
