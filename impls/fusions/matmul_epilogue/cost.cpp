// matmul_epilogue cost and description.
// Bytes that must move: each operand read once, the bias once, each region output written once
// (the result, and the GEMM outputs a training forward saves) = the region's external inputs and
// outputs. FLOPs: 2 M N K per GEMM, by matmul class (Cost::matmul_flops: "bf16", "fp32", ...,
// against the run's measured peak of that class; the epilogue's ~10 FLOP per element is noise
// beside it, counted in neither). At 4096-class shapes the FLOP term bounds the SOL; at the small
// shapes of the golden traces the bytes do.
#include "impls/fusions/matmul_epilogue/params.hpp"
#include "workloads/ops/matmul.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::matmul_epilogue {

Cost cost(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  Cost c;
  c.bytes = region_io_bytes(g, r);
  // The bias gradient's sum reads the GEMM operand's elements (T beside its transpose view): once.
  if (p.wgrad.on && p.wgrad.summed != p.gemm.a && p.wgrad.summed != p.gemm.b)
    c.bytes -= value_bytes(g, {p.wgrad.summed});
  for (const Gemm* gm : {&p.gemm, &p.up}) {
    if (gm->out < 0) continue;
    const Node& n = g.nodes[g.values[gm->out].producer];
    c.flops += matmul_flops(g, n);
    c.matmul_flops[matmul_class(g, n)] += matmul_flops(g, n);
  }
  return c;
}

namespace {
nlohmann::json gemm_json(const Graph& g, const Gemm& m) {
  nlohmann::json j = {{"node", g.nodes[g.values[m.out].producer].id},
                      {"a", g.values[m.a].name},
                      {"a_layout", g.meta(m.a).str()},
                      {"b", g.values[m.b].name},
                      {"b_layout", g.meta(m.b).stride.size() == 2 && g.meta(m.b).stride[0] == 1
                                       ? "column-major (a transposed [N, K] weight: cuBLASLt's "
                                         "transpose flag)"
                                       : "row-major [K, N]"},
                      {"out", g.values[m.out].name},
                      {"exported", m.exported}};
  if (m.bias >= 0) j["bias"] = g.values[m.bias].name;
  return j;
}

// What the optimized variant runs for these params (the plan says which epilogue and why).
std::string optimized_plan(const Params& p) {
  std::string s;
  const bool bias = p.gemm.bias >= 0;
  const bool more = p.add_bias >= 0 || p.has_act_step || p.up.node >= 0;
  if (p.residual >= 0)  // the matcher takes a residual after an mm only (no addmm bias)
    s = std::string("one cuBLASLt matmul") + (bias ? " with CUBLASLT_EPILOGUE_BIAS" : "") +
        " writing the GEMM output in the graph's dtype, then one kernel adding the residual. Not "
        "cuBLASLt's C with beta = 1: it does not round the product before adding C as the graph "
        "does (H200: rel_l2 2.7e-3 against a bound of 5.1e-4)";
  else if (p.split_halves)
    s = "one cuBLASLt GEMM over the fused gate/up weight (as the model stores it), then one fused "
        "pointwise kernel reading each half of its output once: act(gate) * up";
  else if (p.up.node >= 0)
    s = "two cuBLASLt GEMMs (gate, up) writing their outputs in the graph's dtype, then one fused "
        "pointwise kernel reading each once: act(gate) * up. Not one GEMM over concatenated "
        "weights: W_gate and W_up are separate tensors, so that would copy both per replay";
  else if (bias && !more)
    s = "one cuBLASLt matmul with CUBLASLT_EPILOGUE_BIAS, output dtype direct";
  else
    s = std::string("one cuBLASLt matmul") + (bias ? " with CUBLASLT_EPILOGUE_BIAS" : "") +
        " writing the pre-activation in the graph's dtype, then one fused pointwise kernel "
        "reading it once";
  if (p.has_act_step && (p.act == Act::kGeluErf || p.act == Act::kGeluTanh))
    s += std::string(". No CUBLASLT_EPILOGUE_GELU(_AUX)_BIAS: ") +
         (p.act == Act::kGeluErf ? "cuBLASLt's GELU is the tanh approximation, the graph's the "
                                   "erf form; and "
                                 : "") +
         "the graph applies GELU to the pre-activation rounded to " +
         std::string(dtype_name(p.gemm_dtype)) +
         ", cuBLASLt to its float32 value (TUNING.md: its arithmetic fails the numerics "
         "bounds in a CPU simulation)";
  if (p.add_bias >= 0)
    s += ". The bias of mm + add is added after the graph's rounding of the mm output (not "
         "CUBLASLT_EPILOGUE_BIAS, which rounds once)";
  return s;
}

nlohmann::json describe_backward(const Graph& g, const Params& p) {
  const Backward& b = p.bwd;
  nlohmann::json d = {{"M", p.M},
                      {"N", p.N},
                      {"K", p.K},
                      {"dtype", dtype_name(p.gemm_dtype)},
                      {"gemm", gemm_json(g, p.gemm)},
                      {"out", g.values[p.out].name}};
  nlohmann::json ops = nlohmann::json::array();
  for (int ni : b.chain) ops.push_back(g.nodes[ni].id);
  nlohmann::json epi = nlohmann::json::array();
  if (b.gated) {
    epi.push_back(
        {{"op", std::string("backward: d_up = g * ") + act_name(b.act) + "(gate)"},
         {"gate", g.values[b.x].name},
         {"value", g.values[b.dup].name},
         {"act_round", b.act_saved >= 0 ? std::string("saved: ") + g.values[b.act_saved].name
                                        : std::string(dtype_name(b.act_round))},
         {"round", dtype_name(b.dup_round)}});
    epi.push_back(
        {{"op", std::string("backward: d_gate = g * up * ") + act_name(b.act) + "'(gate)"},
         {"up", g.values[b.up].name},
         {"value", g.values[b.dx].name},
         {"h_round", dtype_name(b.h_round)},
         {"round", dtype_name(b.dx_round)},
         {"nodes", ops}});
  } else {
    epi.push_back({{"op", std::string("backward: g * ") + act_name(b.act) + "'(x)"},
                   {"x", g.values[b.x].name},
                   {"value", g.values[b.dx].name},
                   {"round", dtype_name(b.dx_round)},
                   {"nodes", ops}});
  }
  if (b.dbias >= 0)
    epi.push_back({{"op", "bias gradient: column sum over rows"},
                   {"value", g.values[b.dbias].name},
                   {"round", dtype_name(b.dbias_dtype)}});
  d["epilogue"] = epi;
  d["optimized"] =
      std::string(
          "one cuBLASLt GEMM writing g in the graph's dtype, then one fused kernel reading "
          "g and each saved tensor once and writing ") +
      (b.gated ? "d_gate and d_up" : "the activation's gradient") +
      (b.dbias >= 0 ? ", with the bias gradient's float32 column partials (a second tiny kernel "
                      "adds them in a fixed order: deterministic); not CUBLASLT_EPILOGUE_BGRADB, "
                      "which sums a GEMM operand, not this kernel's result"
                    : "") +
      ". Not CUBLASLT_EPILOGUE_DGELU: the graph rounds g to " +
      std::string(dtype_name(p.gemm_dtype)) +
      " before the derivative, and cuBLASLt's DGELU is the tanh form of GELU only";
  return d;
}

nlohmann::json describe_weight_grad(const Graph& g, const Params& p) {
  const WeightGradBias& w = p.wgrad;
  const std::string op = w.of_a ? "CUBLASLT_EPILOGUE_BGRADB" : "CUBLASLT_EPILOGUE_BGRADA";
  nlohmann::json d = {{"M", p.M},
                      {"N", p.N},
                      {"K", p.K},
                      {"dtype", dtype_name(p.gemm_dtype)},
                      {"gemm", gemm_json(g, p.gemm)},
                      {"out", g.values[p.out].name}};
  d["epilogue"] =
      nlohmann::json::array({{{"op", std::string("bias gradient: sum over K of the GEMM's ") +
                                         (w.of_a ? "a" : "b") + " (the tangent's rows)"},
                              {"summed", g.values[w.summed].name},
                              {"value", g.values[w.dbias].name},
                              {"round", dtype_name(g.meta(w.dbias).dtype)}}});
  d["optimized"] =
      "the faster, timed at bind (results.json's GEMM choices), of one cuBLASLt "
      "matmul with " +
      op +
      " (the bias gradient summed by the GEMM over the operand it reads, no second "
      "pass over the tangent; candidates without split-K only: one order of the sum, "
      "the same bits run to run) and the baseline's GEMM then column-sum kernel";
  return d;
}

}  // namespace

nlohmann::json describe(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  if (p.bwd.on) return describe_backward(g, p);
  if (p.wgrad.on) return describe_weight_grad(g, p);
  nlohmann::json d = {{"M", p.M},
                      {"N", p.N},
                      {"K", p.K},
                      {"dtype", dtype_name(p.gemm_dtype)},
                      {"gemm", gemm_json(g, p.gemm)},
                      {"out", g.values[p.out].name},
                      {"optimized", optimized_plan(p)}};
  nlohmann::json epi = nlohmann::json::array();
  if (p.gemm.bias >= 0)
    epi.push_back({{"op", "bias (addmm)"}, {"value", g.values[p.gemm.bias].name}});
  if (p.add_bias >= 0)
    epi.push_back({{"op", "bias (add)"},
                   {"value", g.values[p.add_bias].name},
                   {"round", dtype_name(p.add_round)}});
  if (p.residual >= 0)
    epi.push_back({{"op", "residual add"}, {"value", g.values[p.residual].name}});
  if (p.has_act_step) {
    nlohmann::json ops = nlohmann::json::array();
    for (int v : p.act_values) ops.push_back(g.nodes[g.values[v].producer].id);
    epi.push_back({{"op", p.act == Act::kNone ? "cast" : act_name(p.act)},
                   {"round", dtype_name(p.act_round)},
                   {"nodes", ops}});
    if (p.act_out >= 0) epi.back()["written"] = g.values[p.act_out].name;  // saved for backward
  }
  if (p.split_halves)
    epi.push_back(
        {{"op", std::string("gate: mul by the other half of the GEMM output (gate half ") +
                    std::to_string(p.gate_half) + ")"},
         {"round", dtype_name(p.gate_round)}});
  if (p.up.node >= 0) {
    epi.push_back({{"op", "gate: mul by the up projection"}, {"round", dtype_name(p.gate_round)}});
    d["up"] = gemm_json(g, p.up);
    d["shared_input"] = p.shared_input;
  }
  d["epilogue"] = epi;
  return d;
}

}  // namespace replay::matmul_epilogue
