// fp8_quantize cost and description.
// Bytes that must move: x read, and every value the region writes (the float8 tensors, one byte
// per element each, row-major or column-major; the scales, reciprocals and amaxes, 4 bytes per row
// or column). x is counted twice when a quantization is tensorwise or columnwise: its cast needs
// the global (or column) amax, known only after the last element of x is read, so no schedule
// casts during the amax pass; the second read is a DRAM read whenever x exceeds the L2 (H200: 50
// MiB; the realistic float8 linears' x is [8192, 4096] bfloat16, 64 MiB), and counting it keeps
// the bound attainable at every size. A group of rowwise quantizations only is counted with one
// read (a CTA that holds whole rows can cast them in the amax pass), as is a quantization from a
// given amax (its scale is known before x is read; with rowwise quantizations beside it the
// kernels still take two passes, a CTA holding whole rows could take one). FLOPs per element and
// quantization: abs, max, multiply, two clamps, the cast (~6); memory-bound by far.
#include "impls/fusions/fp8_quantize/params.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::fp8_quantize {
namespace {

int x_reads(const Params& p) {
  for (const Quantization& q : p.quants)
    if (q.granularity != Granularity::kRowwise && !q.given) return 2;
  return 1;
}

}  // namespace

Cost cost(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  Cost c;
  c.bytes = x_reads(p) * static_cast<double>(g.meta(p.x).nbytes()) + value_bytes(g, r.outputs);
  c.flops = 6.0 * static_cast<double>(p.quants.size()) * static_cast<double>(p.rows * p.cols);
  return c;
}

nlohmann::json describe(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  nlohmann::json qs = nlohmann::json::array();
  for (const Quantization& q : p.quants)
    qs.push_back({{"granularity", granularity_name(q.granularity)},
                  {"dtype", dtype_name(q.fp8)},
                  {"amax_of", q.given ? "given"
                              : q.abs ? "|x|"
                                      : "x"},
                  {"eps", q.eps},
                  {"fp8_max", q.fp8_max},
                  {"scale_pow2", q.pow2},
                  {"amax", g.values[q.amax].name},
                  {"scale", g.values[q.scale].name},
                  {"float8", value_names(g, q.q_outs)},
                  {"scale_out", value_names(g, q.scale_outs)},
                  {"reciprocal", value_names(g, q.recip_outs)},
                  {"amax_out", value_names(g, q.amax_outs)}});
  return {{"x", g.values[p.x].name},
          {"rows", p.rows},
          {"cols", p.cols},
          {"x_reads", x_reads(p)},
          {"quantizations", qs}};
}

}  // namespace replay::fp8_quantize
