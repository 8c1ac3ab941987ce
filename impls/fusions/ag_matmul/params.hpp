// ag_matmul: the column-parallel linear of tensor parallelism (issue 31), per rank:
//   all_gather_into_tensor(x_shard [m, .., K], group_size = n) -> wait_tensor -> [view to
//   [n m .., K]] -> mm / _scaled_mm with the replicated weight shard [K, N] -> [view back]
// The gathered activation [M, K] (M = n * rows of the shard) exists only to feed the GEMM, so a
// fused kernel can start on the rows already here while the rest arrive (Flux, PyTorch's
// fused_all_gather_matmul). Params hold value indices of the canonical graph (map_region maps
// node indices back).
#pragma once

#include <cstdint>
#include <vector>

#include "workloads/plan/fusion_spec.hpp"

namespace replay::ag_matmul {

struct Params {
  int all_gather = -1;             ///< node: _c10d_functional.all_gather_into_tensor
  int wait = -1;                   ///< node: _c10d_functional.wait_tensor of its output
  int in_view = -1;                ///< node: the view of the gathered tensor to [M, K], or -1
  int mm = -1;                     ///< node: aten.mm / aten._scaled_mm
  int out_view = -1;               ///< node: the view of the GEMM's output back to [.., N], or -1
  int x = -1;                      ///< value: this rank's shard, [M / world_size, .., K]
  int b = -1;                      ///< value: the weight shard, [K, N]
  int scale_a = -1, scale_b = -1;  ///< values: _scaled_mm's scales, or -1 (mm)
  int out = -1;                    ///< value: the region's result, [M, N] or [.., N]
  int64_t world_size = 0;          ///< ranks of the all-gather (== Graph::world_size)
  int64_t M = 0, K = 0, N = 0;     ///< the gathered GEMM's sizes
  bool scaled = false;             ///< _scaled_mm (float8) rather than mm
};

void match(const Graph& g, Matches& out);
Cost cost(const Graph& g, const Region& r);
nlohmann::json describe(const Graph& g, const Region& r);
Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx);
/// The chunked-pipeline variants (bind_pipeline.cpp): "optimized" and "nccl_chunked".
Binding bind_pipeline(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx);

}  // namespace replay::ag_matmul
