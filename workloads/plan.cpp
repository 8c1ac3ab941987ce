#include "workloads/plan.hpp"

#include <algorithm>
#include <set>

namespace replay {

const std::vector<FusionMatcher>& fusion_matchers() {
  static const std::vector<FusionMatcher> kMatchers = {
      {"layernorm_fwd",
       "LayerNorm / RMSNorm forward: row statistics + normalize + affine + casts (nanoGPT, Llama)",
       {"baseline", "optimized"},
       &match_layernorm_fwd},
  };
  return kMatchers;
}

Plan make_plan(const Graph& g) {
  Plan p;
  p.node_region.assign(g.nodes.size(), -1);
  for (const auto& m : fusion_matchers()) {
    std::vector<Region> found;
    m.match(g, p.node_region, found);
    for (auto& r : found) {
      bool free =
          std::all_of(r.nodes.begin(), r.nodes.end(), [&](int n) { return p.node_region[n] < 0; });
      if (!free) continue;
      for (int n : r.nodes) p.node_region[n] = static_cast<int>(p.regions.size());
      p.regions.push_back(std::move(r));
    }
  }
  return p;
}

void fill_region_io(const Graph& g, Region& r) {
  std::set<int> in_set(r.nodes.begin(), r.nodes.end());
  std::set<int> inputs, outputs;
  for (int ni : r.nodes) {
    const Node& n = g.nodes[ni];
    for (const auto& o : n.operands) {
      if (!o.is_tensor()) continue;
      int prod = g.values[o.value].producer;
      if (prod < 0 || !in_set.count(prod)) inputs.insert(o.value);
    }
    for (int v : n.outputs) {
      const Value& val = g.values[v];
      bool external = val.graph_output;
      for (int u : val.users) external |= !in_set.count(u);
      if (external) outputs.insert(v);
    }
  }
  r.inputs.assign(inputs.begin(), inputs.end());
  r.outputs.assign(outputs.begin(), outputs.end());
}

bool intermediates_private(const Graph& g, const std::vector<int>& nodes,
                           const std::vector<int>& exported) {
  std::set<int> in_set(nodes.begin(), nodes.end());
  for (int ni : nodes)
    for (int v : g.nodes[ni].outputs) {
      if (std::find(exported.begin(), exported.end(), v) != exported.end()) continue;
      if (g.values[v].graph_output) return false;
      for (int u : g.values[v].users)
        if (!in_set.count(u)) return false;
    }
  return true;
}

nlohmann::json plan_to_json(const Graph& g, const Plan& p) {
  using nlohmann::json;
  json regions = json::array();
  for (size_t i = 0; i < p.regions.size(); ++i) {
    const Region& r = p.regions[i];
    json nodes = json::array(), ins = json::array(), outs = json::array();
    for (int n : r.nodes) nodes.push_back(g.nodes[n].id);
    for (int v : r.inputs) ins.push_back({{"id", g.values[v].name}, {"meta", g.meta(v).str()}});
    for (int v : r.outputs) outs.push_back({{"id", g.values[v].name}, {"meta", g.meta(v).str()}});
    json variants = json::array({"reference", "eager"});
    for (const auto& m : fusion_matchers())
      if (r.fusion == m.fusion)
        for (const char* v : m.variants) variants.push_back(v);
    regions.push_back({{"index", i},
                       {"fusion", r.fusion},
                       {"nodes", nodes},
                       {"inputs", ins},
                       {"outputs", outs},
                       {"variants", variants},
                       {"params", r.params}});
  }
  json eager = json::array();
  for (size_t n = 0; n < g.nodes.size(); ++n)
    if (p.node_region[n] < 0) eager.push_back(g.nodes[n].id);
  return {{"trace", g.name}, {"file", g.file}, {"regions", regions}, {"eager_nodes", eager}};
}

}  // namespace replay
