// What the ag_matmul and matmul_rs matchers share (issue 31): the split/cat form in which PyTorch's
// functional collectives gather or scatter along a dim other than 0
// (torch/distributed/_functional_collectives.py all_gather_tensor / reduce_scatter_tensor):
//   gather along d:   all_gather_into_tensor (dim 0) -> wait_tensor -> split into the n ranks'
//                     chunks along dim 0 -> cat along dim d
//   scatter along d:  split into n chunks along dim d -> cat along dim 0 -> reduce_scatter_tensor
// DTensor's Shard(1) <-> Replicate redistributions (torchtitan's sequence parallelism) capture as
// these. With `lead` = the product of the shard's dims before d, the gathered tensor holds for
// every l < lead the ranks' blocks side by side: block (l, p) of rank p at rows (l n + p) of
// blocks of the same size, so a chunked pipeline moves and multiplies block by block.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "workloads/ir/graph.hpp"

namespace replay::tp {

/// The nodes of a split/cat form and the dim it gathers or scatters along.
struct SplitCat {
  int split = -1;             ///< node: aten.split.Tensor / split_with_sizes, or -1 for slices
  std::vector<int> slices;    ///< nodes: the n aten.slice.Tensor chunks (the autograd form)
  int cat = -1;               ///< node: aten.cat.default
  int64_t dim = 0;   ///< the gather dim (cat's dim) or scatter dim (split's dim), >= 0
};

/// The gather side: `w` (the wait_tensor's output, [n s_0, s_1, ..]) read only by a split into n
/// equal chunks along dim 0 (or by n slices: all_gather_tensor_autograd's form), each chunk read
/// only by one cat, which takes them in order along its dim. Fills `sc`; returns "" or what differs (named by node).
std::string gather_split_cat(const Graph& g, int w, int64_t n, SplitCat& sc);

/// The scatter side: `v` (the reduce_scatter's input) made by a cat along dim 0 of the n chunks,
/// in order, of `source` cut into equal chunks along one dim — by a split, or by n slices
/// (reduce_scatter_tensor_autograd's torch.chunk as aot_autograd records it) — each chunk read
/// only by the cat. Fills `sc` and `source`; returns "" or what differs.
std::string scatter_split_cat(const Graph& g, int v, int64_t n, SplitCat& sc, int& source);

/// The nodes of the form (split or slices, then cat).
std::vector<int> split_cat_nodes(const SplitCat& sc);

/// The product of shape[0 .. dim): how many blocks each rank's shard holds in the split/cat form.
int64_t lead_blocks(const std::vector<int64_t>& shape, int64_t dim);

/// How node `reader` reads value `v`, for a decline: "self", "mat2", "scale_a", "scale_b" of an
/// mm / _scaled_mm, else "an operand".
std::string operand_role(const Graph& g, int reader, int v);

}  // namespace replay::tp
