// layernorm_fwd cost and description.
// Bytes that must move: x read once, y written once, each [C] weight (and a tensor eps) read once,
// and in a training forward what the region exports for the backward written once: mean and rstd
// (4 bytes per row each) and the upcast x when it is exported (4 bytes per element, more than y)
// (= the region's external inputs and outputs). A default-partitioner forward also saves
// intermediates of the row (x - mean, the fp32 normalized value, an epilogue step's result:
// rows*C*sizeof(its dtype) each, written once; e.g. Gemma's fp32 normalized value beside the bf16
// y adds 4 bytes per element to x's 2 and y's 2) and [C] weights as the epilogue uses them (Gemma's
// fp32 1 + w, C*4). A residual prologue adds the residual read and,
// when h is returned, h written (each as many bytes as x): the fused add's whole saving is that h
// is not read back (eager: x, residual read, h written, then h read again by the norm). FLOPs per
// element: LayerNorm ~8 (sum, square-sum, subtract, scale, affine), RMSNorm ~5; memory-bound by 2-3
// orders of magnitude on Hopper, so the SOL is the byte term.
#include "impls/fusions/layernorm_fwd/params.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::layernorm_fwd {

Cost cost(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  const double per_elem = p.kind == NormKind::kLayerNorm ? 8 : 5;
  Cost c;
  c.bytes = region_io_bytes(g, r);
  c.flops = (per_elem + 2.0 * static_cast<double>(p.epilogue.size()) + (p.residual >= 0 ? 1 : 0)) *
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
      nlohmann::json st = {{"op", s.op == EpilogueOp::kMul ? "mul" : "add"},
                           {"value", g.values[s.weight].name},
                           {"dtype", dtype_name(s.dtype)}};
      if (s.offset != 0) {  // the operand is round(offset_dtype, weight + offset)
        st["offset"] = s.offset;
        st["offset_dtype"] = dtype_name(s.offset_dtype);
      }
      epi.push_back(st);
    }
  }
  nlohmann::json d = {{"kind", p.kind == NormKind::kLayerNorm ? "layernorm" : "rmsnorm"},
                      {"x", g.values[p.x].name},
                      {"rows", p.rows},
                      {"cols", p.cols},
                      {"eps", p.eps},
                      {"correction", p.correction},
                      {"epilogue", epi},
                      {"out", g.values[p.out].name}};
  if (p.eps_value >= 0) d["eps"] = g.values[p.eps_value].name;  // read from the tensor
  if (p.residual >= 0) {  // h = x + residual, the fused prologue
    d["residual"] = g.values[p.residual].name;
    d["h"] = p.h >= 0 ? nlohmann::json(g.values[p.h].name) : nlohmann::json(nullptr);
    d["h_round"] = dtype_name(p.h_round);
  }
  nlohmann::json saved = nlohmann::json::object();  // what a training forward exports
  if (p.mean >= 0) saved["mean"] = g.values[p.mean].name;
  if (p.rstd >= 0) saved["rstd"] = g.values[p.rstd].name;
  if (p.x32 >= 0) saved["x32"] = g.values[p.x32].name;
  if (!p.row_exports.empty()) {  // intermediates of the row, e.g. the fp32 normalized value
    nlohmann::json rows = nlohmann::json::array();
    for (const RowExport& e : p.row_exports)
      rows.push_back(
          {{"value", g.values[e.value].name},
           {"stage", e.stage == kStageCentered     ? std::string("centered")
                     : e.stage == kStageNormalized ? std::string("normalized")
                                                   : "epilogue " + std::to_string(e.stage)},
           {"dtype", dtype_name(g.meta(e.value).dtype)}});
    saved["rows"] = rows;
  }
  if (!p.weight_exports.empty()) {  // [C] weights as the epilogue uses them, e.g. Gemma's 1 + w
    nlohmann::json ws = nlohmann::json::array();
    for (const WeightExport& e : p.weight_exports)
      ws.push_back({{"value", g.values[e.value].name},
                    {"step", e.step},
                    {"offset", e.offset},
                    {"dtype", dtype_name(g.meta(e.value).dtype)}});
    saved["weights"] = ws;
  }
  if (!saved.empty()) d["saved"] = saved;
  return d;
}

}  // namespace replay::layernorm_fwd
