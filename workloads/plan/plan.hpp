// The plan of a graph: which nodes each fusion claims. Nodes no fusion claims run eagerly.
#pragma once

#include <span>
#include <string>
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

struct Plan {
  std::vector<Region> regions;
  std::vector<int> node_region;  ///< per node: region index, or -1 (runs eagerly)
  std::vector<DroppedMatch> dropped;
};

/// Runs each fusion's matcher over `g`, in the order given (the registry order is the priority):
/// a match that overlaps nodes an earlier match claimed is not taken and is listed in
/// Plan::dropped with the region it overlaps; so is every match of a fusion that needs more ranks
/// than the trace's world_size.
Plan make_plan(const Graph& g, std::span<const FusionSpec* const> fusions);

/// The plan as JSON: regions with fusion, node ids, inputs/outputs, variants, cost, params; the
/// eagerly run nodes; dropped matches.
nlohmann::json plan_to_json(const Graph& g, const Plan& p);

}  // namespace replay
