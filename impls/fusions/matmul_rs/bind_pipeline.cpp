// matmul_rs binder for the chunked pipelines (pipeline.hpp): "optimized" (per-chunk GEMMs, each
// partial pulled by its owner through CUDA IPC on the copy engines, a signal per chunk, the
// partials summed in float32 in rank order) and "nccl_chunked" (NCCL send/recv per chunk, the same
// GEMMs and sum; works across hosts). Both need a multi-process run (BindContext::dist());
// nccl_chunked also an NCCL communicator. Binding "optimized" is collective (see
// ag_matmul/bind_pipeline.cpp).
#include <memory>

#include "impls/fusions/binding.hpp"
#include "impls/fusions/matmul_rs/params.hpp"
#include "impls/fusions/matmul_rs/pipeline.hpp"

namespace replay::matmul_rs {

Binding bind_pipeline(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  const auto& p = std::any_cast<const Params&>(r.params);
  const std::string variant = "variant '" + std::string(v.name) + "': ";
  const std::optional<tp::Transport> transport = tp::pipeline_transport(v.name);
  if (!transport) return {{}, "matmul_rs has no variant '" + std::string(v.name) + "'"};
  const tp::Transport t = *transport;
  const DistContext* dist = ctx.dist();
  if (std::string why = tp::dist_unsupported(dist, p.world_size, t); !why.empty())
    return {{}, variant + why};
  if (p.reduce_op != "sum" && p.reduce_op != "avg")
    return {{}, variant + "reduce op '" + p.reduce_op + "' (only sum and avg)"};
  PipelineOperands op;
  op.M = p.M;
  op.avg = p.reduce_op == "avg";
  op.lead = p.lead;
  void* a = nullptr;
  if (std::string why = tp::contiguous_ptr(g, ctx, p.a, p.M * p.K, a); !why.empty())
    return {{}, variant + "the activation " + why};
  op.a = a;
  if (std::string why = tp::contiguous_ptr(g, ctx, p.out, p.M / p.world_size * p.N, op.out);
      !why.empty())
    return {{}, variant + "the result " + why};
  const int gemm_out = p.mm_out;
  const tp::GemmValues gv{g.values[p.mm_out].producer, p.b, p.scale_a, p.scale_b, gemm_out, p.scaled, p.M, p.K, p.N};
  if (std::string why = tp::bind_chunk_gemm(g, ctx, gv, g.meta(p.a).dtype, op.gemm); !why.empty())
    return {{}, variant + why};
  if (std::string why = Pipeline::unsupported(dist, t, op); !why.empty())
    return {{}, variant + why};
  auto pipe = std::make_shared<Pipeline>(*dist, t, op);
  return {[pipe](const LaunchContext& lc) { pipe->launch(lc.stream); }, ""};
}

}  // namespace replay::matmul_rs
