#include "workloads/plan/match_util.hpp"

#include "workloads/ops/matmul.hpp"
#include "workloads/ops/op.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace replay {

bool is_flat_reshape(Op op) {
  return op == Op::kView || op == Op::kUnsafeView || op == Op::kReshape;
}

bool is_reshape_family(Op op) {
  switch (op) {
    case Op::kUnsqueeze:
    case Op::kSqueeze:
    case Op::kSqueezeDim:
    case Op::kSqueezeDims:
      return true;
    default:
      return is_flat_reshape(op);
  }
}

int single_user(const Graph& g, int v) {
  const Value& val = g.values[v];
  if (val.graph_output || val.users.size() != 1) return -1;
  return val.users[0];
}

int other_tensor(const Node& n, int v) {
  if (n.operands.size() != 2) return -1;
  const Operand& o = n.operands[0].value == v ? n.operands[1] : n.operands[0];
  return o.is_tensor() && o.value != v ? o.value : (o.is_tensor() ? v : -1);
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

Region make_region(const Graph& g, std::vector<int> nodes, std::any params) {
  Region r;
  std::sort(nodes.begin(), nodes.end());
  r.nodes = std::move(nodes);
  r.params = std::move(params);
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
  return r;
}

std::vector<int> outside_views(const Graph& g, const std::vector<int>& nodes,
                               std::vector<int>& roots) {
  const std::set<int> in(nodes.begin(), nodes.end());
  auto is_view = [&](int ni) {
    const Node& n = g.nodes[ni];
    return in.count(ni) && op_def(n.op).alias != nullptr && !n.operands.empty() &&
           n.operands[0].is_tensor();
  };
  // Backward over graph order: a view is needed when one of its outputs leaves the set, or feeds
  // a needed view.
  std::set<int> needed;
  std::vector<int> sorted(nodes.begin(), nodes.end());
  std::sort(sorted.begin(), sorted.end());
  for (auto it = sorted.rbegin(); it != sorted.rend(); ++it) {
    if (!is_view(*it)) continue;
    bool need = false;
    for (int v : g.nodes[*it].outputs) {
      need |= g.values[v].graph_output;
      for (int u : g.values[v].users) need |= !in.count(u) || needed.count(u);
    }
    if (need) needed.insert(*it);
  }
  std::vector<int> views(needed.begin(), needed.end());
  std::set<int> root_set;
  for (int ni : views) {
    const int src = g.nodes[ni].operands[0].value;
    const int p = g.values[src].producer;
    if (p < 0 || !needed.count(p)) root_set.insert(src);
  }
  roots.assign(root_set.begin(), root_set.end());
  return views;
}

void set_region_views(Region& r, const Graph& g, const std::vector<int>& views,
                      const std::vector<int>& roots) {
  std::set<int> outs(r.outputs.begin(), r.outputs.end());
  for (int ni : views)
    for (int v : g.nodes[ni].outputs) outs.erase(v);
  outs.insert(roots.begin(), roots.end());
  r.outputs.assign(outs.begin(), outs.end());
  r.views = views;
}

double value_bytes(const Graph& g, const std::vector<int>& values) {
  std::set<int> unique(values.begin(), values.end());
  double b = 0;
  for (int v : unique) b += static_cast<double>(g.meta(v).nbytes());
  return b;
}

double region_io_bytes(const Graph& g, const Region& r) {
  std::vector<int> io = r.inputs;
  io.insert(io.end(), r.outputs.begin(), r.outputs.end());
  return value_bytes(g, io);
}

nlohmann::json value_names(const Graph& g, const std::vector<int>& values) {
  nlohmann::json a = nlohmann::json::array();
  for (int v : values) a.push_back(g.values[v].name);
  return a;
}

std::string quoted_value(const Graph& g, int v) {
  return "'" + g.values[v].name + "'";
}

std::string readers_str(const Graph& g, int v) {
  std::string s;
  for (int u : g.values[v].users) s += (s.empty() ? "'" : ", '") + g.nodes[u].id + "'";
  if (g.values[v].graph_output) s += s.empty() ? "the graph output" : " and the graph output";
  return s;
}

Cost gemm_region_cost(const Graph& g, const Region& r, int mm) {
  Cost c;
  c.bytes = region_io_bytes(g, r);
  const Node& n = g.nodes[mm];
  c.flops = matmul_flops(g, n);
  c.matmul_flops[matmul_class(g, n)] += c.flops;
  return c;
}

int view_root_input(const Graph& g, int v) {
  while (v >= 0 && !g.values[v].graph_input) {
    const int p = g.values[v].producer;
    if (p < 0) return -1;
    const Node& n = g.nodes[p];
    if (op_def(n.op).alias == nullptr || n.operands.empty() || !n.operands[0].is_tensor())
      return -1;
    v = n.operands[0].value;
  }
  return v;
}

double trace_io_bytes(const Graph& g) {
  std::map<int, double> credit;  // input -> bytes of the outputs that are views of it
  double b = 0;
  for (int o : std::set<int>(g.outputs.begin(), g.outputs.end())) {
    const double ob = static_cast<double>(g.meta(o).nbytes());
    if (const int root = view_root_input(g, o); root >= 0)
      credit[root] += ob;
    else
      b += ob;
  }
  for (int i : std::set<int>(g.inputs.begin(), g.inputs.end())) {
    const double ib = static_cast<double>(g.meta(i).nbytes());
    const auto it = credit.find(i);
    b += std::max(0.0, ib - (it == credit.end() ? 0.0 : it->second));
  }
  return b;
}

}  // namespace replay
