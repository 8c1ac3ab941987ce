#include "workloads/loader/inputs.hpp"

#include <algorithm>
#include <random>

#include "workloads/ir/error.hpp"
#include "workloads/loader/safetensors.hpp"

namespace replay {

std::map<int, HostTensor> generate_inputs(const Graph& g, uint64_t seed) {
  std::map<int, HostTensor> out;
  for (int v : g.inputs) {
    const Value& val = g.values[v];
    HostTensor t = make_host_tensor(val.meta.shape, val.meta.dtype);
    ValueStats st = val.stats.value_or(ValueStats{0.0, 1.0, -1e30, 1e30});
    std::seed_seq sseq{seed, static_cast<uint64_t>(std::hash<std::string>{}(val.name))};
    std::mt19937_64 rng(sseq);
    std::normal_distribution<double> normal(st.mean, st.std > 0 ? st.std : 1.0);
    for (double& x : t.data) {
      double r = st.std > 0 ? std::clamp(normal(rng), st.min, st.max) : st.mean;
      x = round_to(val.meta.dtype, r);
    }
    out[v] = std::move(t);
  }
  return out;
}

ReplayInputs make_inputs(const Graph& g, uint64_t seed) {
  ReplayInputs in;
  if (!g.golden) {
    in.source = "generated (seed " + std::to_string(seed) + ", captured value statistics)";
    in.values = generate_inputs(g, seed);
    return in;
  }
  in.golden = read_safetensors(g.golden->path);
  for (int v : g.inputs) {
    auto it = in.golden.find(g.values[v].name);
    if (it == in.golden.end())
      throw TraceError(g.golden->path, g.values[v].name, "golden file lacks this graph input");
    if (it->second.meta.shape != g.meta(v).shape)
      throw TraceError(g.golden->path, g.values[v].name,
                       "golden tensor shape " + it->second.meta.str() +
                           " differs from the trace's " + g.meta(v).str());
    in.values[v] = it->second;
  }
  in.source = "golden (" + g.golden->path + ")";
  return in;
}

}  // namespace replay
