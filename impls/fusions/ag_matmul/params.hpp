// ag_matmul: the column-parallel linear of tensor parallelism (issue 31), per rank:
//   all_gather_into_tensor(x_shard, group_size = n) -> wait_tensor -> [split/cat: the gather
//   along dim d, tp_match.hpp] -> [views to [M, K]] -> one or more mm / _scaled_mm with the
//   gathered activation as self (Llama's w1 and w3 read the same gathered x) -> [view back]
// The GEMMs can start on the rows already here while the rest arrive (Flux, PyTorch's
// fused_all_gather_matmul, which also takes several weights). The gathered activation may be read
// outside the region too (a training forward saves it for the weight gradient): the pipeline then
// writes it as well. Params hold value indices of the canonical graph (map_region maps node
// indices back).
#pragma once

#include <cstdint>
#include <vector>

#include "workloads/plan/fusion_spec.hpp"

namespace replay::ag_matmul {

/// One GEMM of the gathered activation.
struct Gemm {
  int mm = -1;                     ///< node: aten.mm / aten._scaled_mm, self = the gathered [M, K]
  int mm_out = -1;                 ///< value: its output (node indices are the canonical graph's;
                                   ///< binders and costs find the node as this value's producer)
  int out_view = -1;               ///< node: the view of its output back to [.., N], or -1
  int b = -1;                      ///< value: the weight shard, [K, N]
  int b_transpose_of = -1;         ///< value: the graph input [N, K] whose permute b is, when the
                                   ///< region claims the permute (b then lives only in it), or -1
  int scale_a = -1, scale_b = -1;  ///< values: _scaled_mm's scales, or -1 (mm)
  int out = -1;                    ///< value: the GEMM's result, [M, N] or [.., N]
  int64_t N = 0;
  bool scaled = false;             ///< _scaled_mm (float8) rather than mm
};

struct Params {
  int all_gather = -1;             ///< node: _c10d_functional.all_gather_into_tensor
  int ag_out = -1;                 ///< value: its output (the node is this value's producer)
  int wait = -1;                   ///< node: _c10d_functional.wait_tensor of its output
  int split = -1, cat = -1;        ///< nodes of the split/cat form (gather_dim > 0), or -1
  std::vector<int> in_views;       ///< nodes: views of the gathered tensor down to [M, K]
  int x = -1;                      ///< value: this rank's shard, contiguous [.., K]
  int gathered = -1;               ///< value: the gathered tensor (wait's or cat's output)
  int gathered_2d = -1;            ///< value: the GEMMs' self [M, K] (gathered or its last view)
  std::vector<int> gathered_values;  ///< values: gathered, its views, gathered_2d (same bytes)
  std::vector<Gemm> gemms;         ///< in graph order; at least one
  int64_t world_size = 0;          ///< ranks of the all-gather (== Graph::world_size)
  int64_t gather_dim = 0;          ///< the dim of the shard the ranks' shards join along
  int64_t lead = 1;                ///< the shard's dims before gather_dim, multiplied (tp_match.hpp)
  int64_t M = 0, K = 0;            ///< the gathered activation's rows and columns
};

void match(const Graph& g, Matches& out);
Cost cost(const Graph& g, const Region& r);
nlohmann::json describe(const Graph& g, const Region& r);
Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx);
/// The region's outputs that are the gathered activation (read outside the region), in order.
std::vector<int> gathered_outputs(const Params& p, const Region& r);
/// The chunked-pipeline variants (bind_pipeline.cpp): "optimized" and "nccl_chunked".
Binding bind_pipeline(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx);

}  // namespace replay::ag_matmul
