// Fusion regions and the plan: which nodes of a graph each fusion claims. Matchers are structural
// (ops, single use, shapes, dtypes), not name-based; nodes no fusion claims run eagerly.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "workloads/graph.hpp"

namespace replay {

/// One matched fusion instance.
struct Region {
  std::string fusion;        ///< fusion name, e.g. "layernorm_fwd"
  std::vector<int> nodes;    ///< node indices it claims, in graph order
  std::vector<int> inputs;   ///< value indices it reads from outside
  std::vector<int> outputs;  ///< value indices it produces for the rest of the graph
  /// Fusion-specific description the variants are built from (e.g. kind, eps, rows, cols,
  /// epilogue). Also printed by `replay plan`.
  nlohmann::json params;
};

struct Plan {
  std::vector<Region> regions;
  std::vector<int> node_region;  ///< per node: region index, or -1 (runs eagerly)
};

/// A fusion's matcher: appends the regions it finds among the unclaimed nodes.
struct FusionMatcher {
  const char* fusion;
  const char* description;
  std::vector<const char*>
      variants;  ///< GPU variants besides eager, e.g. {"baseline", "optimized"}
  void (*match)(const Graph& g, const std::vector<int>& node_region, std::vector<Region>& out);
};

/// All fusions the harness knows, in matching priority order.
const std::vector<FusionMatcher>& fusion_matchers();

/// Run every matcher over `g`; each node is claimed by at most one region.
Plan make_plan(const Graph& g);

/// External inputs and outputs of a set of nodes, in value order. Also checks that every value
/// the nodes produce and that is used outside the set is listed as an output.
void fill_region_io(const Graph& g, Region& r);

/// True when every use of every value the nodes produce, other than `exported`, is inside the set
/// and none of them is a graph output (the "single use" condition of a fusion).
bool intermediates_private(const Graph& g, const std::vector<int>& nodes,
                           const std::vector<int>& exported);

/// The plan as JSON: regions with fusion, node ids, inputs/outputs, variants, params.
nlohmann::json plan_to_json(const Graph& g, const Plan& p);

// Matchers, one per fusion file (workloads/matchers/*.cpp).
void match_layernorm_fwd(const Graph& g, const std::vector<int>& node_region,
                         std::vector<Region>& out);

}  // namespace replay
