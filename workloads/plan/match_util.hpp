// Helpers shared by the fusions' structural matchers.
#pragma once

#include <string>
#include <vector>

#include "workloads/plan/fusion_spec.hpp"

namespace replay {

/// view / _unsafe_view / reshape: the ops that give a tensor another shape of the same elements
/// in the same row-major order, whatever the shapes.
bool is_flat_reshape(Op op);

/// is_flat_reshape, unsqueeze and the squeezes: the ops that keep the row-major order of the
/// logical elements.
bool is_reshape_family(Op op);

/// The only node that reads value `v`, or -1 when it has several readers (or none) or is a graph
/// output: the "single use" condition.
int single_user(const Graph& g, int v);

/// The other operand of a two-operand node that reads `v`: its value index, `v` itself for
/// x op x, or -1 when the other operand is a Python scalar or the node has another arity.
int other_tensor(const Node& n, int v);

/// True when every use of every value the nodes produce, other than `exported`, is inside the set
/// and none of them is a graph output (the "intermediates stay private" condition of a fusion).
bool intermediates_private(const Graph& g, const std::vector<int>& nodes,
                           const std::vector<int>& exported);

/// A region of `nodes` (sorted here) with its external inputs and outputs filled in value order,
/// and `params`.
Region make_region(const Graph& g, std::vector<int> nodes, std::any params);

/// The view nodes among `nodes` (ops with an alias rule, reading their operand 0: view, reshape,
/// split, permute, ...) whose outputs something outside the set reads or the graph returns,
/// directly or through later such views, in graph order: the default partitioner saves
/// `view(mm)` for the backward. A fused step that writes each chain's root can leave them as
/// aliases of its buffers (Region::views). `roots` receives the root values (the first operand,
/// down each chain, that no view of the set produces), each once.
std::vector<int> outside_views(const Graph& g, const std::vector<int>& nodes,
                               std::vector<int>& roots);

/// `r` (from make_region) with the view nodes `views` (outside_views) left to alias what the
/// fused step writes: their outputs taken off r.outputs, their `roots` added, r.views set.
void set_region_views(Region& r, const Graph& g, const std::vector<int>& views,
                      const std::vector<int>& roots);

/// Bytes of the listed values (numel * element size each, every value counted once).
double value_bytes(const Graph& g, const std::vector<int>& values);

/// Bytes of region `r`'s inputs and outputs (value_bytes over both lists): what a fused step that
/// keeps its intermediates on chip must move at the least, the usual byte term of a cost().
double region_io_bytes(const Graph& g, const Region& r);

/// The names of the listed values, in order, as a JSON array (describe()'s value lists).
nlohmann::json value_names(const Graph& g, const std::vector<int>& values);

/// `'name'` of value `v`, for a decline's reason.
std::string quoted_value(const Graph& g, int v);

/// The readers of value `v` for a decline's reason: `'a', 'b'`, with "the graph output" when it is
/// one.
std::string readers_str(const Graph& g, int v);

/// The cost of a region around one GEMM node `mm` (mm, addmm, _scaled_mm): bytes of the region's
/// inputs and outputs once each, the GEMM's 2 M N K FLOPs under its matmul class. A fusion adds
/// its own communication bytes.
Cost gemm_region_cost(const Graph& g, const Region& r, int mm);

/// The graph input that `v` is a view of (through view ops only: ops whose OpDef has an `alias`
/// rule, each reading its operand 0), `v` itself for a graph input, or -1 when a computing op or
/// a copy lies on the way.
int view_root_input(const Graph& g, int v);

/// Bytes a whole trace must move at least, for its speed-of-light row: every graph output written
/// once and every graph input read once, except that an output which is a view of an input (a
/// pass-through such as litgpt's `v` split off a fused qkv) is neither written nor read: its
/// bytes are not counted, and are taken off its input's (down to zero, as an expand's view can be
/// larger than its input). The count errs low (a reshape that has to copy is taken for a view,
/// an input read both through a returned view and by compute is credited), so a % SOL from it
/// never exceeds what the graph's data movement allows.
double trace_io_bytes(const Graph& g);

}  // namespace replay
