// scaled_mm cost and description.
// Bytes that must move: the region's external inputs and outputs once each (the float8 operands,
// one byte per element; the scales; the bias; the result and any reciprocal the region writes
// for the rest of the graph). FLOPs: 2 M N K of the GEMM, by its matmul class
// ("float8_tensorwise" or "float8_rowwise", matmul_class(), against the run's measured float8
// peak of that class); the reciprocals' M + N divisions are noise beside it. At 8192 x 4096 x 4096
// (the realistic float8 linear) the FLOP term bounds the SOL; at the golden traces' [16, 64] x
// [64, 32] the bytes do.
#include "impls/fusions/scaled_mm/params.hpp"
#include "workloads/ops/matmul.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::scaled_mm {

Cost cost(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  Cost c;
  c.bytes = region_io_bytes(g, r);
  const Node& n = g.nodes[g.values[p.mm_out].producer];
  c.flops = matmul_flops(g, n);
  c.matmul_flops[matmul_class(g, n)] += c.flops;
  return c;
}

namespace {

nlohmann::json scale_json(const Graph& g, const Scale& s) {
  nlohmann::json j = {{"value", g.values[s.value].name}};
  if (s.reciprocal) {
    j["computed"] = "reciprocal of '" + g.values[s.source].name + "' " + g.meta(s.source).str() +
                    " by the region" + (s.exported ? ", written for the rest of the graph" : "");
  } else if (s.quantization) {
    j["computed"] =
        "read as it is: the reciprocal of the quantization scale that made the "
        "operand, written by that quantization (fp8_quantize)";
  } else {
    j["computed"] = "read as it is";
  }
  return j;
}

}  // namespace

nlohmann::json describe(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  const int self = p.a_view >= 0 ? p.a_view : p.a;
  // A rowwise scale read as it is but not unit-stride (a broadcast: the graph's contiguous clone
  // of an expand, folded away by the canonical form) is copied by the same small kernel.
  auto strided = [&](const Scale& s) {
    if (!p.rowwise || s.reciprocal) return false;
    const TensorMeta& m = g.meta(s.value);
    for (size_t d = 0; d < m.shape.size(); ++d)
      if (m.shape[d] > 1) return m.stride[d] != 1;
    return false;
  };
  const bool recips = p.scale_a.reciprocal || p.scale_b.reciprocal;
  const bool copies = strided(p.scale_a) || strided(p.scale_b);
  nlohmann::json d = {
      {"node", g.nodes[g.values[p.mm_out].producer].id},
      {"M", p.M},
      {"N", p.N},
      {"K", p.K},
      {"scaling", p.rowwise ? "rowwise" : "tensorwise"},
      {"a", g.values[self].name},
      {"a_dtype", dtype_name(p.a_dtype)},
      {"b", g.values[p.b].name},
      {"b_dtype", dtype_name(p.b_dtype)},
      {"b_layout", "column-major (TN: read in place through cuBLASLt's transpose flag)"},
      {"scale_a", scale_json(g, p.scale_a)},
      {"scale_b", scale_json(g, p.scale_b)},
      {"out_dtype", dtype_name(p.out_dtype)},
      {"use_fast_accum", p.fast_accum},
      {"out", g.values[p.out].name},
      {"optimized",
       std::string(recips && copies ? "one kernel computing the scales' reciprocals and making "
                                      "a broadcast scale unit-stride, then "
                   : recips         ? "one kernel computing the scales' reciprocals, then "
                   : copies ? "one kernel making a broadcast scale unit-stride (the graph's "
                              "contiguous copy), then "
                            : "") +
           "one cuBLASLt float8 matmul (TN, " +
           (p.rowwise ? "CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F scales"
                      : "CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER scales") +
           (p.bias >= 0 ? ", CUBLASLT_EPILOGUE_BIAS" : "") + ", " +
           std::string(dtype_name(p.out_dtype)) +
           " output direct) writing the result in place; the algorithm timed once among the "
           "heuristic's deterministic candidates (no in-place or output-type split-K)"},
      {"baseline",
       "dequantize: each float8 operand cast to bfloat16 (exact), a bfloat16 cuBLASLt GEMM into "
       "float32, then one kernel applying the scales (and bias) in float32 and rounding once"}};
  if (p.bias >= 0) d["bias"] = g.values[p.bias].name;
  if (p.copy_self)
    d["a_copy"] = "'" + g.values[self].name +
                  "' is column-major: the graph's contiguous clone of it (folded away by the "
                  "canonical form) is made by the region into a row-major buffer (TN)";
  if (p.a_view >= 0) d["a_view"] = "'" + g.values[p.a].name + "' read as [M, K] (view claimed)";
  if (p.out != p.mm_out)
    d["out_view"] = "'" + g.values[p.mm_out].name + "' written as '" + g.values[p.out].name +
                    "' (view claimed)";
  return d;
}

}  // namespace replay::scaled_mm
