// norm_bwd cost and description.
// Bytes that must move: x and dy read once, dx written once, w and the saved statistics read
// once, dw/db written once (= the region's external inputs and outputs; a recomputed rstd reads
// nothing more; a dx epilogue add reads its other operand once, rows*cols*|dx|; a saved
// normalized value read by the dw term (the default partitioner's form), rows*cols*|xs|). FLOPs per
// element: ~16 (xhat, g, two row sums, dx, two column sums; dx only, without the weight and the
// column sums: ~10) — memory-bound by two orders of magnitude on Hopper, so the SOL is the byte
// term.
#include "impls/fusions/norm_bwd/params.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::norm_bwd {

Cost cost(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  Cost c;
  c.bytes = region_io_bytes(g, r);
  c.flops = (p.dw >= 0 ? 16.0 : 10.0) * static_cast<double>(p.rows) * static_cast<double>(p.cols);
  return c;
}

namespace {

const char* stats_name(NormBwdStats s) {
  switch (s) {
    case NormBwdStats::kSaved:
      return "saved";
    case NormBwdStats::kRecompute:
      return "recomputed";
    case NormBwdStats::kNormalized:
      return "normalized_x";
  }
  return "?";
}

}  // namespace

nlohmann::json describe(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  auto name = [&](int v) -> nlohmann::json {
    return v < 0 ? nlohmann::json(nullptr) : nlohmann::json(g.values[v].name);
  };
  auto rnd = [](DType t) -> nlohmann::json {
    return t == DType::kFloat32 ? nlohmann::json(nullptr) : nlohmann::json(dtype_name(t));
  };
  nlohmann::json j = {{"kind", p.layernorm ? "layernorm" : "rmsnorm"},
                      {"stats", stats_name(p.stats)},
                      {"rows", p.rows},
                      {"cols", p.cols},
                      {"x", name(p.x)},
                      {"dy", name(p.dy)},
                      {"w", name(p.w)},
                      {"mean", name(p.mean)},
                      {"rstd", name(p.rstd)},
                      {"w_offset", p.w_offset},
                      {"round",
                       {{"w", rnd(p.w_round)},
                        {"g", rnd(p.g_round)},
                        {"xhat", rnd(p.xhat_round)},
                        {"dw_term", rnd(p.dwt_round)},
                        {"dx", rnd(p.dx_round)},
                        {"dx_terms", rnd(p.dx_part_round)},
                        {"dw", rnd(p.dw_round)},
                        {"db", rnd(p.db_round)}}},
                      {"dx", name(p.dx)},
                      {"dw", name(p.dw)},
                      {"db", name(p.db)}};
  if (p.dx_add >= 0) j["dx_add"] = name(p.dx_add);  // dx = rnd(rnd(dx_norm) + dx_add)
  if (p.xs >= 0) j["xs"] = name(p.xs);              // the dw term reads the saved normalized value
  if (p.recenter) j["recenter"] = true;             // dx's xhat term recentered (Cohere)
  if (p.stats == NormBwdStats::kRecompute) {
    j["eps"] = p.eps;
    j["eps_tensor"] = name(p.eps_value);
    j["correction"] = p.correction;
  }
  if (p.dw < 0) j["dx_only"] = true;  // no affine parameters: w = 1, no dw/db
  if (p.split_size > 0) j["split_size"] = p.split_size;
  return j;
}

}  // namespace replay::norm_bwd
