// The canonical form every fusion matcher sees (issue 24; modelled on Inductor's joint-graph
// cleanups before its pattern matcher: torch/_inductor/fx_passes/joint_graph.py
// `remove_no_ops`, pointless view and convert pairs, and post_grad.py `remove_noop_ops`).
//
// Graphs arrive as torch.compile makes them from user code: aliases of saved tensors returned
// beside the tensors (aot_autograd's default partitioner returns `aten.alias(rsqrt)` beside
// `rsqrt`), no-op converts and clones, views that change nothing, operands of commutative ops in
// either order, dead nodes. One pass removes these, so that a matcher states its pattern once.
// The canonical graph keeps the captured graph's value indices (a removed node's output value
// stays in `values`, orphaned, and its readers read the value it was replaced by), so regions found
// on it carry over to the captured graph by mapping node indices (map_region). The executors
// (reference, eager, fused) still run the graph as captured.
//
// Rules (each proven by running the reference before and after: the graph outputs are
// bit-identical, tests/unit/test_canonical.cpp):
//   identity   a node whose output equals its one tensor operand value by value: aten.alias,
//              aten.clone (any memory format), prims.convert_element_type / aten._to_copy to the
//              operand's own dtype, view / _unsafe_view / reshape / expand to the operand's own
//              shape, permute by the identity, transpose(d, d), t of a tensor of rank < 2, a full
//              slice (start 0, end >= size, step 1), squeeze of dims that are not 1;
//   round trip convert(convert(x, wide), dtype(x)) where the first convert is exact (an upcast):
//              x itself; view(view(x, s), shape(x)) and the like over views of the same storage
//              order (view, _unsafe_view, reshape of contiguous shapes): x itself;
//   order      aten.add.Tensor with alpha 1, aten.mul.Tensor, eq, ne, logical_and/or/xor: the
//              tensor operand with more elements first, then the one produced later (IEEE addition
//              and multiplication are commutative, so the result is the same bits);
//   dead       a node none of whose outputs is read or returned;
//   same input an input that is the same tensor as an earlier one (`same_as` in the trace: the
//              default partitioner saves rsqrt and aten.alias(rsqrt) for the backward) is read
//              as that one;
//   widened    an input that is an earlier input widened (`widened_from` in the trace: T5's
//              default partitioner saves x and x.float()) is computed from it by a convert node
//              at the head of the canonical graph, as the min-cut partitioner's backward does;
//   outputs    graph outputs are resolved through removed nodes, so a value returned twice (once
//              through an alias) or an input returned as an output is one value.
#pragma once

#include <string>
#include <vector>

#include "workloads/ir/graph.hpp"

namespace replay {

/// The value index of `n`'s one tensor operand, or -1 when it has none or several.
int sole_tensor(const Node& n);

/// Why a captured node is not in the canonical graph.
enum class CanonRule : uint8_t { kIdentity, kRoundTrip, kDead };
std::string_view canon_rule_name(CanonRule r);

struct CanonicalGraph {
  /// The canonical graph: the captured graph's values (same indices, same metadata), the kept
  /// nodes in captured order with operands rewired, users and graph-output flags recomputed.
  Graph graph;
  /// Per canonical node: its index in the captured graph; -1 for the convert that computes a
  /// widened input (rule "widened"), which has none.
  std::vector<int> orig_node;
  /// Per captured node: its canonical index, or -1 when removed.
  std::vector<int> canon_node;
  /// Per captured node: the rule that removed it (meaningful where canon_node is -1).
  std::vector<CanonRule> rule;
  /// Per value: the value it was replaced by (itself when kept). Removed identity nodes' outputs
  /// resolve to their source; chains resolve to the end.
  std::vector<int> replaced_by;
  /// Captured node indices of the removed nodes, in graph order.
  std::vector<int> removed;
  /// Number of commutative nodes whose operands were swapped.
  int reordered = 0;
};

/// The canonical form of `g` (see the rules above). Never throws on a loaded graph.
CanonicalGraph canonicalize(const Graph& g);

/// The captured node standing for canonical node `n`: its orig_node, or for a widened input's
/// convert the first captured node reading that input (-1 if none does).
int captured_node(const CanonicalGraph& c, int n);

struct Region;
/// Maps region `r`, found on `c.graph`, onto the captured graph `g` in place: its nodes become
/// captured node indices, `anchor` the last of them (or the node the matcher chose, Region::anchor,
/// mapped), and it absorbs the removed nodes that belong
/// with it: identity nodes reading a value it produces (`tail` when something outside reads them:
/// their outputs alias the region output they resolve to), identity nodes whose every reader it
/// claims (a clone of its input), and dead nodes that read only its values. Inputs, outputs and
/// params keep their value indices (the same in both graphs). Returns why the region cannot be
/// mapped (a dead node reads one of its private values beside other values; an alias outside reads
/// a value the fused step does not write), or an empty string.
std::string map_region(const Graph& g, const CanonicalGraph& c, Region& r);

}  // namespace replay
