// matmul_rs binder, the `baseline` variant (vanilla tensor parallelism): the graph's own mm /
// _scaled_mm (impls/eager/gemm.hpp lower_gemm) into a workspace holding the partial product
// [M, N], the split/cat's reordering of its row blocks by destination rank (2-D copies, where the
// scatter is along a dim > 0), then one NCCL reduce-scatter (sum or avg, as the graph records it)
// into the region's result. Needs this rank's NCCL communicator (BindContext::dist); without one the
// variant says why. The chunked pipelines ("optimized", "nccl_chunked") are bind_pipeline.cpp's.
#include <string>
#include <vector>

#include "impls/cuda/cuda_check.hpp"
#include "impls/eager/collective.hpp"
#include "impls/eager/gemm.hpp"
#include "impls/fusions/binding.hpp"
#include "impls/fusions/tp_pipeline.hpp"
#include "impls/fusions/matmul_rs/params.hpp"

namespace replay::matmul_rs {
namespace {

DeviceTensor rows_of(void* ptr, int64_t M, int64_t N, DType t) {
  return device_tensor(ptr, TensorMeta{{M, N}, {N, 1}, t});
}

Binding bind_baseline(const Graph& g, const Region& r, BindContext& ctx) {
  const auto& p = std::any_cast<const Params&>(r.params);
  const DistContext* d = ctx.dist();
  if (std::string why = tp::nccl_baseline_unsupported(d, p.world_size, "reduce-scatter");
      !why.empty())
    return {{}, why};
  const Node& mm = g.nodes[g.values[p.mm_out].producer];
  const DType part_dt = g.meta(mm.outputs[0]).dtype;
  if (std::string why = nccl_reduce_unsupported(part_dt, p.reduce_op); !why.empty())
    return {{}, why};
  const BoundTensor out = ctx.tensor(p.out);
  if (!out.layout.is_contiguous())
    return {{},
            "the result '" + g.values[p.out].name + "' " + out.layout.str() +
                " is not contiguous (NCCL scatters flat buffers)"};
  std::vector<DeviceTensor> in;
  for (size_t i = 0; i < mm.operands.size(); ++i) {
    const Operand& o = mm.operands[i];
    if (i == 0 && p.in_view >= 0) {  // the activation viewed as [M, K]
      const BoundTensor a = ctx.tensor(p.a);
      if (!a.layout.is_contiguous())
        return {{},
                "the activation '" + g.values[p.a].name + "' " + a.layout.str() +
                    " is not contiguous (viewed as [M, K])"};
      in.push_back(rows_of(a.ptr, p.M, p.K, a.layout.dtype));
    } else if (o.is_tensor()) {
      const BoundTensor t = ctx.tensor(o.value);
      in.push_back(device_tensor(t.ptr, t.layout));
    } else {
      in.emplace_back();
    }
  }
  const size_t all_bytes = static_cast<size_t>(p.M * p.N) * dtype_size(part_dt);
  void* partial = ctx.workspace(all_bytes);
  const EagerLaunch gemm = lower_gemm(mm, in, {rows_of(partial, p.M, p.N, part_dt)});
  // The split/cat form: rank q's blocks (l n + q) gathered to [q][l] for NCCL's flat scatter.
  void* send = p.lead > 1 ? ctx.workspace(all_bytes) : partial;
  const int64_t n = p.world_size, lead = p.lead;
  const size_t block = all_bytes / static_cast<size_t>(n * lead);
  const Node& wait = g.nodes[g.values[p.out].producer];  // p.out is the wait's output
  const std::string what =
      "ncclReduceScatter of node '" + g.nodes[g.values[wait.operands[0].value].producer].id + "'";
  const size_t count = static_cast<size_t>(out.layout.numel());
  void* recv = out.ptr;
  const std::string op = p.reduce_op;
  return {[d, partial, send, recv, count, part_dt, op, what, gemm, n, lead,
           block](const LaunchContext& c) {
            gemm(c.stream);
            if (lead > 1)
              for (int64_t q = 0; q < n; ++q)
                REPLAY_CUDA(cudaMemcpy2DAsync(static_cast<char*>(send) + q * lead * block, block,
                                              static_cast<const char*>(partial) + q * block,
                                              n * block, block, lead, cudaMemcpyDeviceToDevice,
                                              c.stream));
            nccl_reduce_scatter(*d, send, recv, count, part_dt, op, c.stream, what);
          },
          ""};
}

}  // namespace

Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  if (v.name != "baseline") return bind_pipeline(g, r, v, ctx);
  return bind_baseline(g, r, ctx);
}

}  // namespace replay::matmul_rs
