// ag_matmul binder, the `baseline` variant (vanilla tensor parallelism, what PyTorch runs without
// async TP): one NCCL all-gather of the shards into a workspace [M, K], then one cuBLASLt GEMM on
// it, the graph's own mm / _scaled_mm (impls/eager/gemm.hpp lower_gemm: bf16/fp16/fp32, float8
// with tensorwise or rowwise scales) writing the region's result. Needs this rank's NCCL
// communicator (BindContext::dist); without one (a single process, or ranks sharing a GPU) the
// variant says why. The chunked pipelines ("optimized", "nccl_chunked") are bind_pipeline.cpp's.
#include <string>
#include <vector>

#include "impls/eager/collective.hpp"
#include "impls/eager/gemm.hpp"
#include "impls/fusions/ag_matmul/params.hpp"
#include "impls/fusions/binding.hpp"

namespace replay::ag_matmul {
namespace {

DeviceTensor rows_of(void* ptr, int64_t M, int64_t N, DType t) {
  return device_tensor(ptr, TensorMeta{{M, N}, {N, 1}, t});
}

Binding bind_baseline(const Graph& g, const Region& r, BindContext& ctx) {
  const auto& p = std::any_cast<const Params&>(r.params);
  const DistContext* d = ctx.dist();
  if (!d) return {{}, "the NCCL baseline needs one process per rank (a multi-process run)"};
  if (!d->comm) return {{}, "no NCCL communicator: " + d->no_nccl_why};
  if (d->world_size != p.world_size)
    return {{},
            "the all-gather spans " + std::to_string(p.world_size) + " ranks, the run " +
                std::to_string(d->world_size)};
  const BoundTensor x = ctx.tensor(p.x);
  if (!x.layout.is_contiguous())
    return {{},
            "the shard '" + g.values[p.x].name + "' " + x.layout.str() +
                " is not contiguous (NCCL gathers flat buffers)"};
  const DType dt = x.layout.dtype;
  const size_t shard_bytes = static_cast<size_t>(x.layout.numel()) * dtype_size(dt);
  void* gathered = ctx.workspace(shard_bytes * static_cast<size_t>(p.world_size));
  const Node& mm = g.nodes[p.mm];
  std::vector<DeviceTensor> in;
  for (size_t i = 0; i < mm.operands.size(); ++i) {
    const Operand& o = mm.operands[i];
    if (i == 0)
      in.push_back(rows_of(gathered, p.M, p.K, dt));
    else if (o.is_tensor())
      in.push_back(device_tensor(ctx.tensor(o.value).ptr, ctx.tensor(o.value).layout));
    else
      in.emplace_back();
  }
  const BoundTensor out = ctx.tensor(p.out);
  DeviceTensor y;
  if (p.out_view < 0)
    y = device_tensor(out.ptr, out.layout);
  else if (out.layout.is_contiguous())
    y = rows_of(out.ptr, p.M, p.N, out.layout.dtype);
  else
    return {{},
            "the result '" + g.values[p.out].name + "' " + out.layout.str() +
                " is not contiguous (the GEMM writes it as a row-major [M, N])"};
  const EagerLaunch gemm = lower_gemm(mm, in, {y});
  const std::string what = "ncclAllGather of node '" + g.nodes[p.all_gather].id + "'";
  const void* send = x.ptr;
  return {[d, send, gathered, shard_bytes, what, gemm](const LaunchContext& c) {
            nccl_all_gather_bytes(*d, send, gathered, shard_bytes, c.stream, what);
            gemm(c.stream);
          },
          ""};
}

}  // namespace

Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  if (v.name != "baseline") return bind_pipeline(g, r, v, ctx);
  return bind_baseline(g, r, ctx);
}

}  // namespace replay::ag_matmul
