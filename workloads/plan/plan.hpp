// The plan of a graph: which nodes each fusion claims. Nodes no fusion claims run eagerly.
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "workloads/plan/fusion_spec.hpp"

namespace replay {

/// A match the plan did not take, and why (never dropped silently).
struct DroppedMatch {
  std::string fusion;
  std::vector<int> nodes;
  std::string reason;  ///< e.g. "overlaps region 0 (layernorm_fwd), which an earlier match claimed"
};

/// A candidate a fusion's matcher rejected (never silently): the captured node it started from.
struct DeclinedMatch {
  std::string fusion;
  int node = -1;  ///< captured node index
  std::string reason;
};

struct Plan {
  std::vector<Region> regions;
  std::vector<int> node_region;  ///< per node: region index, or -1 (runs eagerly)
  std::vector<DroppedMatch> dropped;
  std::vector<DeclinedMatch> declined;
  /// What the canonical form removed before matching: captured node index and rule name.
  std::vector<std::pair<int, std::string>> canonical_removed;
  int canonical_reordered = 0;  ///< commutative nodes whose operands the canonical form swapped
  /// Captured nodes the fused variants run as an alias of their operand instead of a copy
  /// (elidable_clones): clones (and same-dtype converts) the canonical form removed as identities
  /// that no region claims, laid out as their operand, whose storage nothing else returns. The
  /// eager variant still copies, as PyTorch does.
  std::vector<int> elided_clones;
  /// Captured cat nodes the fused variants run as a placement instead of a copy (placeable_cats):
  /// the cat's output buffer is allocated first and each operand's region writes its result
  /// straight into its slice of it. The eager variant still copies, as PyTorch does.
  std::vector<int> placed_cats;
};

/// The cat nodes of `plan` (over `g`) whose copy a GPU program may skip (Plan::placed_cats): an
/// `aten.cat` along the last dim that no region claims, of two or more operands of its output's
/// dtype, each the output of a region whose fusion writes outputs through their strides
/// (FusionSpec::strided_outputs), that region's own value (no tail alias passes it on), read by
/// the cat alone (so by no view, clone or second cat), no graph output, laid out dense as
/// recorded like the cat's output, and a whole number of 16-byte vectors wide (every slice starts
/// aligned). Each operand is then that output's slice along the cat's dim (what Inductor does for
/// a cat of its kernels' outputs). Where a region falls back to eager, the GPU program copies
/// after all.
std::vector<int> placeable_cats(const Graph& g, const Plan& plan);

/// The captured nodes of `g` that a program may run as an alias of their operand (Plan::
/// elided_clones), given the regions' claims (`node_region`, -1: eager) and the nodes the canonical
/// form removed as identities (`identities`). A node qualifies when it is a clone, _to_copy or
/// convert_element_type of one tensor to the same dtype, shape and recorded dense strides, no
/// region claims it, and the storage its operand may share in the GPU program (back through views,
/// wait_tensor and the removed identities, region tails and the other candidates included) is no
/// graph input, no graph output itself, and reached by no other graph output or candidate: the
/// alias then shares no storage PyTorch would keep apart (dropout at p = 0 after a captured MLP is
/// such a clone). Graphs are functional (no op writes into an operand), so the alias and a copy
/// hold the same values throughout. The GPU program still copies when the operand's buffer is not
/// laid out as recorded (GpuProgram).
std::vector<int> elidable_clones(const Graph& g, const std::vector<int>& node_region,
                                 const std::vector<int>& identities);

/// Canonicalizes `g` (workloads/plan/canonical.hpp) and runs each fusion's matcher over the
/// canonical form, in the order given (the registry order is the priority); each region found is
/// mapped back to the captured nodes (map_region). A match that overlaps nodes an earlier match
/// claimed is not taken and is listed in Plan::dropped with the region it overlaps; so is every
/// match of a fusion that needs more ranks than the trace's world_size, and one that cannot be
/// mapped back. Every candidate a matcher rejected is in Plan::declined with its reason.
Plan make_plan(const Graph& g, std::span<const FusionSpec* const> fusions);

/// The plan as JSON: regions with fusion, node ids, inputs/outputs, variants, cost, params; the
/// eagerly run nodes; dropped matches; declined candidates (`declined`: fusion, node, reason);
/// what the canonical form removed.
nlohmann::json plan_to_json(const Graph& g, const Plan& p);

}  // namespace replay
