// ag_matmul binder for the chunked pipelines (pipeline.hpp): "optimized" (CUDA IPC peer copies on
// the copy engines, a signal per chunk, per-chunk GEMMs as the rows arrive) and "nccl_chunked"
// (NCCL send/recv per chunk, the same GEMMs; works across hosts). Both need a multi-process run
// (BindContext::dist()); nccl_chunked also an NCCL communicator, which ranks sharing one GPU do
// not get. Binding is collective for "optimized" (the IPC handles are exchanged): every rank binds
// its regions in the same order, and the checks before the exchange depend only on the graph and
// the run, so all ranks decline or all proceed.
#include <memory>

#include "impls/fusions/ag_matmul/params.hpp"
#include "impls/fusions/ag_matmul/pipeline.hpp"
#include "impls/fusions/binding.hpp"

namespace replay::ag_matmul {

/// The GEMMs' values in the form tp::bind_chunk_gemm takes.
tp::GemmValues gemm_values(const Graph& g, const Params& p, const Gemm& ge) {
  tp::GemmValues gv{g.values[ge.mm_out].producer, ge.b, ge.scale_a, ge.scale_b, ge.out, ge.scaled, p.M, p.K, ge.N};
  gv.b_transpose_of = ge.b_transpose_of;
  return gv;
}

Binding bind_pipeline(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  const auto& p = std::any_cast<const Params&>(r.params);
  const std::string variant = "variant '" + std::string(v.name) + "': ";
  const std::optional<tp::Transport> transport = tp::pipeline_transport(v.name);
  if (!transport) return {{}, "ag_matmul has no variant '" + std::string(v.name) + "'"};
  const tp::Transport t = *transport;
  const DistContext* dist = ctx.dist();
  if (std::string why = tp::dist_unsupported(dist, p.world_size, t); !why.empty())
    return {{}, variant + why};
  PipelineOperands op;
  op.M = p.M;
  op.lead = p.lead;
  void* x = nullptr;
  if (std::string why = tp::contiguous_ptr(g, ctx, p.x, p.M / p.world_size * p.K, x); !why.empty())
    return {{}, variant + "the shard " + why};
  op.x = x;
  for (size_t j = 0; j < p.gemms.size(); ++j) {
    const Gemm& ge = p.gemms[j];
    void* out = nullptr;
    if (std::string why = tp::contiguous_ptr(g, ctx, ge.out, p.M * ge.N, out); !why.empty())
      return {{}, variant + "the result " + why};
    tp::ChunkGemm cg;
    if (std::string why = tp::bind_chunk_gemm(g, ctx, gemm_values(g, p, ge), g.meta(p.x).dtype, cg);
        !why.empty())
      return {{}, variant + why};
    if (j == 0) {
      op.gemm = cg;
      op.out = out;
    } else {
      op.more.push_back({cg, out});
    }
  }
  for (int o : gathered_outputs(p, r)) {
    void* buf = nullptr;
    if (std::string why = tp::contiguous_ptr(g, ctx, o, p.M * p.K, buf); !why.empty())
      return {{}, variant + "the gathered activation " + why};
    op.gathered.push_back(buf);
  }
  if (std::string why = Pipeline::unsupported(dist, t, op); !why.empty())
    return {{}, variant + why};
  auto pipe = std::make_shared<Pipeline>(*dist, t, op);
  return {[pipe](const LaunchContext& lc) { pipe->launch(lc.stream); }, ""};
}

}  // namespace replay::ag_matmul
