#include "workloads/plan/plan.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "workloads/ops/op.hpp"
#include "workloads/plan/canonical.hpp"

namespace replay {

std::string_view role_name(Role r) {
  switch (r) {
    case Role::kBaseline:
      return "baseline";
    case Role::kOptimized:
      return "optimized";
    case Role::kAlternative:
      return "alternative";
  }
  return "?";
}

const VariantSpec* FusionSpec::find_variant(std::string_view n) const {
  for (const auto& v : variants)
    if (v.name == n) return &v;
  return nullptr;
}

namespace {

// For a region of the fusion that takes what the others leave (FusionSpec::match_rest), found
// before the earlier regions' anchors were known to it: every input is computed before its
// anchor and every outside reader of what it writes runs after it, a claimed node running at
// its region's anchor; and it writes no graph input. "" when so, else why not.
std::string rest_order(const Graph& g, const Plan& p, const Region& r) {
  const int anchor = r.anchor >= 0 ? r.anchor : r.nodes.back();
  auto runs_at = [&](int n) {
    const int k = p.node_region[n];
    if (k < 0) return n;
    const Region& o = p.regions[k];
    return o.anchor >= 0 ? o.anchor : o.nodes.back();
  };
  const std::set<int> in(r.nodes.begin(), r.nodes.end());
  for (int v : r.inputs) {
    const int q = g.values[v].producer;
    if (q >= 0 && !in.count(q) && runs_at(q) > anchor)
      return "reads '" + g.values[v].name + "', which region " + std::to_string(p.node_region[q]) +
             " writes only after this chain's anchor";
  }
  std::vector<int> written = r.outputs;
  for (int n : r.views)
    written.insert(written.end(), g.nodes[n].outputs.begin(), g.nodes[n].outputs.end());
  for (int v : written) {
    if (g.values[v].graph_input) return "would write '" + g.values[v].name + "', a graph input";
    for (int u : g.values[v].users)
      if (!in.count(u) && runs_at(u) < anchor)
        return "'" + g.values[v].name + "' is read by node '" + g.nodes[u].id +
               "', which runs before this chain's anchor";
  }
  return "";
}

}  // namespace

Plan make_plan(const Graph& g, std::span<const FusionSpec* const> fusions) {
  Plan p;
  p.node_region.assign(g.nodes.size(), -1);
  const CanonicalGraph c = canonicalize(g);
  for (int k : c.removed) p.canonical_removed.emplace_back(k, canon_rule_name(c.rule[k]));
  p.canonical_reordered = c.reordered;
  auto captured = [&](const std::vector<int>& canon_nodes) {
    std::vector<int> v;
    for (int n : canon_nodes)
      if (c.orig_node.at(n) >= 0) v.push_back(c.orig_node.at(n));
    return v;
  };
  for (const FusionSpec* f : fusions) {
    Matches found;
    if (f->match_rest) {  // what the earlier fusions left, in canonical node indices
      std::vector<char> claimed(c.graph.nodes.size(), 0);
      for (size_t k = 0; k < claimed.size(); ++k)  // a widened input's convert is no node
        claimed[k] = c.orig_node[k] < 0 || p.node_region[c.orig_node[k]] >= 0;
      f->match_rest(c.graph, claimed, found);
    } else {
      f->match(c.graph, found);
    }
    for (const Decline& d : found.declined)
      if (const int at = captured_node(c, d.node); at >= 0)  // -1: an unread widened input
        p.declined.push_back({std::string(f->name), at, d.reason});
    for (auto& r : found.regions) {
      r.fusion = f;
      if (g.world_size < f->min_world_size) {
        p.dropped.push_back({std::string(f->name), captured(r.nodes),
                             "needs world_size >= " + std::to_string(f->min_world_size) +
                                 "; the trace has " + std::to_string(g.world_size)});
        continue;
      }
      const std::vector<int> matched = captured(r.nodes);
      if (std::string why = map_region(g, c, r); !why.empty()) {
        p.dropped.push_back({std::string(f->name), matched, why});
        continue;
      }
      // An identity both regions absorbed (the clone of fp8_quantize's transposed float8 tensor,
      // which a GEMM region also takes as the clone of its input) stays with the earlier region
      // when it is a tail there: that region's buffer is the clone's value, which the later
      // region then reads as its input.
      auto shared_tail = [&](int n) {
        const int other = p.node_region[n];
        if (other < 0 || std::find(r.absorbed.begin(), r.absorbed.end(), n) == r.absorbed.end())
          return false;
        const auto& tail = p.regions[other].tail;
        return std::any_of(tail.begin(), tail.end(),
                           [&](const TailAlias& t) { return t.node == n; });
      };
      if (std::any_of(r.nodes.begin(), r.nodes.end(), shared_tail) &&
          std::none_of(r.nodes.begin(), r.nodes.end(),
                       [&](int n) { return p.node_region[n] >= 0 && !shared_tail(n); })) {
        std::vector<int> keep;
        for (int n : r.nodes)
          if (!shared_tail(n)) keep.push_back(n);
        std::vector<int> absorbed;
        for (int n : r.absorbed)
          if (p.node_region[n] < 0) absorbed.push_back(n);
        r.nodes = std::move(keep);
        r.absorbed = std::move(absorbed);
      }
      if (f->match_rest) {
        // A removed identity an earlier region absorbed too (a clone of this region's output
        // that a GEMM region takes as the clone of its input) stays with the earlier region;
        // this one writes the value the clone passes on.
        auto elsewhere = [&](int n) {
          return p.node_region[n] >= 0 &&
                 std::find(r.absorbed.begin(), r.absorbed.end(), n) != r.absorbed.end();
        };
        if (std::any_of(r.nodes.begin(), r.nodes.end(), elsewhere)) {
          std::erase_if(r.nodes, elsewhere);
          std::erase_if(r.absorbed, elsewhere);
          std::erase_if(r.tail, [&](const TailAlias& t) { return elsewhere(t.node); });
        }
        if (std::string why = rest_order(g, p, r); !why.empty()) {
          p.dropped.push_back({std::string(f->name), r.nodes, why});
          continue;
        }
      }
      auto taken = std::find_if(r.nodes.begin(), r.nodes.end(),
                                [&](int n) { return p.node_region[n] >= 0; });
      if (taken != r.nodes.end()) {
        const int other = p.node_region[*taken];
        p.dropped.push_back({std::string(f->name), r.nodes,
                             "overlaps region " + std::to_string(other) + " (" +
                                 std::string(p.regions[other].fusion->name) + ") at node '" +
                                 g.nodes[*taken].id + "', which an earlier match claimed"});
        continue;
      }
      for (int n : r.nodes) p.node_region[n] = static_cast<int>(p.regions.size());
      p.regions.push_back(std::move(r));
    }
  }
  std::vector<int> identities;
  for (const auto& [k, rule] : p.canonical_removed)
    if (rule == canon_rule_name(CanonRule::kIdentity)) identities.push_back(k);
  p.elided_clones = elidable_clones(g, p.node_region, identities);
  p.placed_cats = placeable_cats(g, p);
  return p;
}

std::vector<int> placeable_cats(const Graph& g, const Plan& plan) {
  std::vector<char> graph_output(g.values.size(), 0);
  for (int v : g.outputs) graph_output[v] = 1;
  std::vector<int> readers(g.values.size(), 0);  // nodes reading each value (once per node)
  for (const Node& n : g.nodes) {
    std::vector<int> seen;
    for (const Operand& o : n.operands)
      if (o.is_tensor() && std::find(seen.begin(), seen.end(), o.value) == seen.end()) {
        seen.push_back(o.value);
        ++readers[o.value];
      }
  }
  auto dense = [](const TensorMeta& m) { return m.storage_elems() == m.numel(); };
  std::vector<int> out;
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& n = g.nodes[ni];
    if (n.op != Op::kCat || plan.node_region[ni] >= 0 || n.outputs.size() != 1 ||
        n.operands.size() < 2)
      continue;
    const TensorMeta& om = g.meta(n.outputs[0]);
    // along the last dim only: each slice keeps the rows of a 2-D [rows, width] matrix
    bool ok =
        dense(om) && !graph_output[n.outputs[0]] && n.dim == static_cast<int>(om.shape.size()) - 1;
    for (const Operand& o : n.operands) {
      if (!ok || !o.is_tensor()) {
        ok = false;
        break;
      }
      const int v = o.value;
      const int prod = g.values[v].producer;
      const int r = prod >= 0 ? plan.node_region[prod] : -1;
      // read by the cat alone (no view, as_strided or clone of it sees the slice), its width a
      // whole number of 16-byte vectors (every slice starts aligned)
      const TensorMeta& m = g.meta(v);
      ok = r >= 0 && plan.regions[r].fusion->strided_outputs && !graph_output[v] &&
           readers[v] == 1 &&
           std::count_if(n.operands.begin(), n.operands.end(),
                         [&](const Operand& q) { return q.value == v; }) == 1 &&
           m.dtype == om.dtype && m.shape.size() == om.shape.size() && dense(m) &&
           (m.shape.back() * static_cast<int64_t>(dtype_size(m.dtype))) % 16 == 0;
      if (!ok) break;
      const Region& reg = plan.regions[r];
      ok = std::find(reg.outputs.begin(), reg.outputs.end(), v) != reg.outputs.end() &&
           std::none_of(reg.tail.begin(), reg.tail.end(),
                        [&](const TailAlias& t) { return t.source == v; });
    }
    if (ok) out.push_back(static_cast<int>(ni));
  }
  return out;
}

std::vector<int> elidable_clones(const Graph& g, const std::vector<int>& node_region,
                                 const std::vector<int>& identities) {
  // The value whose storage `v` may share in the GPU program: back through every node whose
  // output can be an alias of its operand there (views; wait_tensor; the identities the canonical
  // form removed: region tails and the candidates themselves), so a chain of clones, or a clone of
  // a tail, counts as the one storage it may become.
  std::vector<char> identity(g.nodes.size(), 0);
  for (int k : identities) identity[k] = 1;
  auto root = [&](int v) {
    for (int depth = 0; depth < 256; ++depth) {
      const int p = g.values[v].producer;
      if (p < 0) break;
      const Node& n = g.nodes[p];
      if (op_def(n.op).eager.kernel != EagerLowering::kAlias && n.op != Op::kWaitTensor &&
          !identity[p])
        break;
      const int x = sole_tensor(n);
      if (x < 0) break;
      v = x;
    }
    return v;
  };
  std::vector<int> candidates;
  for (int k : identities) {
    const Node& n = g.nodes[k];
    if (node_region.at(k) >= 0 || n.outputs.size() != 1) continue;
    if (n.op != Op::kClone && n.op != Op::kToCopy && n.op != Op::kConvertElementType) continue;
    const int x = sole_tensor(n);
    const TensorMeta &in = g.meta(x < 0 ? n.outputs[0] : x), &out = g.meta(n.outputs[0]);
    // The same recorded dense layout: the copy would lay the values out as the operand has them
    // (a contiguous() of a transposed or expanded view is a real copy).
    if (x < 0 || in.dtype != out.dtype || in.shape != out.shape || in.stride != out.stride ||
        out.storage_elems() != out.numel())
      continue;
    candidates.push_back(k);
  }
  // Roots that something returns without one of the candidates, and how many candidates view each.
  std::map<int, int> returned, per_root;
  std::vector<char> is_candidate_out(g.values.size(), 0);
  for (int k : candidates) {
    is_candidate_out[g.nodes[k].outputs[0]] = 1;
    ++per_root[root(sole_tensor(g.nodes[k]))];
  }
  for (int v : g.outputs)
    if (!is_candidate_out[v]) ++returned[root(v)];
  std::vector<int> out;
  for (int k : candidates) {
    const int r = root(sole_tensor(g.nodes[k]));
    if (g.values[r].graph_input || returned.count(r) || per_root[r] > 1) continue;
    out.push_back(k);
  }
  return out;
}

nlohmann::json plan_to_json(const Graph& g, const Plan& p) {
  using nlohmann::json;
  auto ids = [&](const std::vector<int>& nodes) {
    json a = json::array();
    for (int n : nodes) a.push_back(g.nodes[n].id);
    return a;
  };
  auto tail_ids = [&](const std::vector<TailAlias>& tail) {
    json a = json::array();
    for (const TailAlias& t : tail) a.push_back(g.nodes[t.node].id);
    return a;
  };
  json regions = json::array();
  for (size_t i = 0; i < p.regions.size(); ++i) {
    const Region& r = p.regions[i];
    json ins = json::array(), outs = json::array();
    for (int v : r.inputs) ins.push_back({{"id", g.values[v].name}, {"meta", g.meta(v).str()}});
    for (int v : r.outputs) outs.push_back({{"id", g.values[v].name}, {"meta", g.meta(v).str()}});
    json variants = json::array({"reference", "eager"});
    for (const auto& v : r.fusion->variants) variants.push_back(v.name);
    const Cost c = r.fusion->cost(g, r);
    regions.push_back(
        {{"index", i},
         {"fusion", r.fusion->name},
         {"nodes", ids(r.nodes)},
         {"absorbed", ids(r.absorbed)},
         {"tail", tail_ids(r.tail)},
         {"views", ids(r.views)},
         {"inputs", ins},
         {"outputs", outs},
         {"variants", variants},
         {"cost", {{"bytes", c.bytes}, {"flops", c.flops}, {"comm_bytes", c.comm_bytes}}},
         {"params", r.fusion->describe(g, r)}});
  }
  json eager = json::array();
  for (size_t n = 0; n < g.nodes.size(); ++n)
    if (p.node_region[n] < 0) eager.push_back(g.nodes[n].id);
  json dropped = json::array();
  for (const auto& d : p.dropped)
    dropped.push_back({{"fusion", d.fusion}, {"nodes", ids(d.nodes)}, {"reason", d.reason}});
  json declined = json::array();
  for (const auto& d : p.declined)
    declined.push_back({{"fusion", d.fusion}, {"node", g.nodes[d.node].id}, {"reason", d.reason}});
  json removed = json::array();
  for (const auto& [n, rule] : p.canonical_removed)
    removed.push_back({{"node", g.nodes[n].id}, {"rule", rule}});
  json elided = json::array();
  for (int n : p.elided_clones) elided.push_back(g.nodes[n].id);
  json placed = json::array();
  for (int n : p.placed_cats) placed.push_back(g.nodes[n].id);
  return {{"trace", g.name},
          {"file", g.file},
          {"regions", regions},
          {"eager_nodes", eager},
          {"elided_clones", elided},
          {"placed_cats", placed},
          {"dropped_matches", dropped},
          {"declined", declined},
          {"canonical", {{"removed", removed}, {"reordered", p.canonical_reordered}}}};
}

}  // namespace replay
