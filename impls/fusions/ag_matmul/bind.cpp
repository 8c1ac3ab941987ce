// ag_matmul binder, the `baseline` variant (vanilla tensor parallelism, what PyTorch runs without
// async TP): one NCCL all-gather of the shards into a workspace, the split/cat's reordering of
// the ranks' blocks (a 2-D copy, where the gather is along a dim > 0), then the graph's own GEMMs
// (mm / _scaled_mm through cuBLASLt, impls/eager/gemm.hpp lower_gemm: bf16/fp16/fp32, float8
// with tensorwise or rowwise scales) on the gathered [M, K], writing the region's results. Needs
// this rank's NCCL communicator (BindContext::dist); without one (a single process, or ranks
// sharing a GPU) the variant says why. The chunked pipelines ("optimized", "nccl_chunked") are
// bind_pipeline.cpp's.
#include <algorithm>
#include <string>
#include <vector>

#include "impls/cuda/cuda_check.hpp"
#include "impls/eager/collective.hpp"
#include "impls/eager/gemm.hpp"
#include "impls/fusions/ag_matmul/params.hpp"
#include "impls/fusions/binding.hpp"
#include "impls/fusions/tp_pipeline.hpp"

namespace replay::ag_matmul {
namespace {

DeviceTensor rows_of(void* ptr, int64_t M, int64_t N, DType t) {
  return device_tensor(ptr, TensorMeta{{M, N}, {N, 1}, t});
}

// Operand i of GEMM `ge` as bound. The weight is read as the matcher resolved it (Gemm::b, or
// the graph input it is the transpose of): where the region claims the weight's transposes, the
// GEMM's own operand is made inside the region and has no buffer.
DeviceTensor operand(const Graph& g, const Gemm& ge, size_t i, BindContext& ctx) {
  const Operand& o = g.nodes[g.values[ge.mm_out].producer].operands[i];
  if (!o.is_tensor()) return {};
  if (i == 1) {
    const BoundTensor w = tp::bound_weight(ctx, ge.b, ge.b_transpose_of);
    return device_tensor(w.ptr, w.layout);
  }
  const BoundTensor t = ctx.tensor(o.value);
  return device_tensor(t.ptr, t.layout);
}

Binding bind_baseline(const Graph& g, const Region& r, BindContext& ctx) {
  const auto& p = std::any_cast<const Params&>(r.params);
  const DistContext* d = ctx.dist();
  if (std::string why = tp::nccl_baseline_unsupported(d, p.world_size, "all-gather"); !why.empty())
    return {{}, why};
  const BoundTensor x = ctx.tensor(p.x);
  if (!x.layout.is_contiguous())
    return {{},
            "the shard '" + g.values[p.x].name + "' " + x.layout.str() +
                " is not contiguous (NCCL gathers flat buffers)"};
  const DType dt = x.layout.dtype;
  const size_t shard_bytes = static_cast<size_t>(x.layout.numel()) * dtype_size(dt);
  const size_t all_bytes = shard_bytes * static_cast<size_t>(p.world_size);
  void* received = ctx.workspace(all_bytes);  // rank-major, as NCCL gathers
  // The gathered [M, K] in the graph's order: a buffer the graph reads, the workspace itself (a
  // gather along dim 0), or a second workspace for the split/cat's reordering.
  std::vector<void*> exported;
  for (int o : gathered_outputs(p, r)) {
    const BoundTensor t = ctx.tensor(o);
    if (!t.layout.is_contiguous())
      return {{}, "the gathered activation '" + g.values[o].name + "' " + t.layout.str() +
                      " is not contiguous"};
    exported.push_back(t.ptr);
  }
  void* gathered = p.lead == 1 ? received : exported.empty() ? ctx.workspace(all_bytes) : exported[0];
  std::vector<EagerLaunch> gemms;
  for (const Gemm& ge : p.gemms) {
    std::vector<DeviceTensor> in;
    for (size_t i = 0; i < g.nodes[g.values[ge.mm_out].producer].operands.size(); ++i)
      in.push_back(i == 0 ? rows_of(gathered, p.M, p.K, dt) : operand(g, ge, i, ctx));
    const BoundTensor out = ctx.tensor(ge.out);
    DeviceTensor y;
    if (ge.out_view < 0)
      y = device_tensor(out.ptr, out.layout);
    else if (out.layout.is_contiguous())
      y = rows_of(out.ptr, p.M, ge.N, out.layout.dtype);
    else
      return {{}, "the result '" + g.values[ge.out].name + "' " + out.layout.str() +
                      " is not contiguous (the GEMM writes it as a row-major [M, N])"};
    gemms.push_back(lower_gemm(g.nodes[g.values[ge.mm_out].producer], in, {y}));
  }
  const std::string what = "ncclAllGather of node '" + g.nodes[g.values[p.ag_out].producer].id + "'";
  const void* send = x.ptr;
  const int64_t n = p.world_size, lead = p.lead;
  const size_t block = shard_bytes / static_cast<size_t>(lead);
  return {[d, send, received, gathered, exported, shard_bytes, all_bytes, block, n, lead, what,
           gemms](const LaunchContext& c) {
            nccl_all_gather_bytes(*d, send, received, shard_bytes, c.stream, what);
            if (lead > 1)  // cat along dim d of the ranks' chunks: block l of rank q to (l, q)
              for (int64_t q = 0; q < n; ++q)
                REPLAY_CUDA(cudaMemcpy2DAsync(static_cast<char*>(gathered) + q * block, n * block,
                                              static_cast<const char*>(received) + q * lead * block,
                                              block, block, lead, cudaMemcpyDeviceToDevice,
                                              c.stream));
            for (size_t i = 0; i < exported.size(); ++i)
              if (exported[i] != gathered)
                REPLAY_CUDA(cudaMemcpyAsync(exported[i], gathered, all_bytes,
                                            cudaMemcpyDeviceToDevice, c.stream));
            for (const EagerLaunch& gm : gemms) gm(c.stream);
          },
          ""};
}

}  // namespace

std::vector<int> gathered_outputs(const Params& p, const Region& r) {
  std::vector<int> v;
  for (int o : r.outputs)
    if (std::find(p.gathered_values.begin(), p.gathered_values.end(), o) !=
        p.gathered_values.end())
      v.push_back(o);
  return v;
}

Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  if (v.name != "baseline") return bind_pipeline(g, r, v, ctx);
  return bind_baseline(g, r, ctx);
}

}  // namespace replay::ag_matmul
