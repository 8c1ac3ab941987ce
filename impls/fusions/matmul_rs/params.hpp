// matmul_rs: the row-parallel linear of tensor parallelism (issue 31), per rank:
//   [view x to [M, K_shard]] -> mm / _scaled_mm with the weight shard [K_shard, N] -> [view back
//   to [M_0, .., N]] -> reduce_scatter_tensor(group_size = n, dim 0) -> wait_tensor
// The partial product [M, N] exists only to be summed across the ranks and scattered by rows, so
// a fused kernel can send each chunk of rows as soon as its GEMM tile is done (Flux, PyTorch's
// fused_matmul_reduce_scatter). Params hold value indices of the canonical graph.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "workloads/plan/fusion_spec.hpp"

namespace replay::matmul_rs {

struct Params {
  int in_view = -1;                ///< node: the view of the activation to [M, K], or -1
  int mm = -1;                     ///< node: aten.mm / aten._scaled_mm
  int mm_out = -1;                 ///< value: its output (node indices are the canonical graph's;
                                   ///< binders and costs find the node as this value's producer)
  int out_view = -1;               ///< node: the view of the partial product to [M_0, .., N], or -1
  int split = -1, cat = -1;        ///< nodes of the split/cat form (scatter_dim > 0), or -1
  int reduce_scatter = -1;         ///< node: _c10d_functional.reduce_scatter_tensor
  int wait = -1;                   ///< node: _c10d_functional.wait_tensor of its output
  int a = -1;                      ///< value: the activation (sharded along K), [M, K] or [.., K]
  int b = -1;                      ///< value: the weight shard, [K, N]
  int scale_a = -1, scale_b = -1;  ///< values: _scaled_mm's scales, or -1 (mm)
  int out = -1;                    ///< value: this rank's reduced rows, [M_0 / world_size, .., N]
  std::string reduce_op;           ///< "sum" or "avg"
  int64_t world_size = 0;          ///< ranks of the reduce-scatter (== Graph::world_size)
  int64_t M = 0, K = 0, N = 0;     ///< the GEMM's sizes (before the scatter)
  bool scaled = false;             ///< _scaled_mm (float8) rather than mm
  int64_t scatter_dim = 0;         ///< the dim of the partial product the ranks' rows are cut along
  int64_t lead = 1;                ///< its dims before scatter_dim, multiplied (tp_match.hpp)
};

void match(const Graph& g, Matches& out);
Cost cost(const Graph& g, const Region& r);
nlohmann::json describe(const Graph& g, const Region& r);
Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx);
/// The bounds of the reduce-scattered result (tolerance.cpp); std::nullopt for other values.
std::optional<NumericsBounds> tolerance(const Graph& g, const Region& r, int value);
/// The chunked-pipeline variants (bind_pipeline.cpp): "optimized" and "nccl_chunked".
Binding bind_pipeline(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx);

}  // namespace replay::matmul_rs
