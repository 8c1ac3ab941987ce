#include "workloads/loader/inputs.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>

#include "workloads/ir/error.hpp"
#include "workloads/loader/philox.hpp"
#include "workloads/loader/safetensors.hpp"

namespace replay {

std::map<int, HostTensor> generate_inputs(const Graph& g, uint64_t seed,
                                          const std::vector<int>& skip) {
  const std::array<uint32_t, 2> key = {static_cast<uint32_t>(seed),
                                       static_cast<uint32_t>(seed >> 32)};
  std::map<int, HostTensor> out;
  for (int v : g.inputs) {
    if (std::find(skip.begin(), skip.end(), v) != skip.end()) continue;
    const Value& val = g.values[v];
    if (val.same_as >= 0 || val.widened_from >= 0) continue;  // copied from another below
    const TensorMeta& layout = val.meta;
    const ValueStats st = val.stats.value_or(ValueStats{});
    for (int64_t s : layout.stride)
      if (s < 0)
        throw std::invalid_argument("generate_inputs: input '" + val.name +
                                    "' has a negative stride " + shape_str(layout.stride));
    const uint32_t stream = fnv1a_32(val.name);
    // One value per storage element of the recorded layout, so logical elements that alias one
    // storage element (stride 0, overlapping strides) get the same value, as on the GPU.
    HostTensor storage = make_host_tensor_for_overwrite({layout.storage_elems()}, layout.dtype);
    // Counter-based: element i depends only on (key, i, stream), so the loops split over threads
    // (OpenMP when the build has it) give the same bits as one thread.
    if (val.uniform) {  // U[0, 1): the top 24 bits of Philox's first word of counter (i, stream)
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < storage.data.size(); ++i) {
        const auto w = philox4x32_10(
            {static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), stream, 0}, key);
        storage.data[i] = round_to(layout.dtype, static_cast<double>(w[0] >> 8) * 0x1p-24);
      }
    } else if (st.std > 0) {
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < storage.data.size(); ++i) {
        double x = st.mean + st.std * philox_normal(key, i, stream);
        x = x < st.min ? st.min : (x > st.max ? st.max : x);  // no std::clamp: min > max is UB
        storage.data[i] = round_to(layout.dtype, x);
      }
    } else {
      std::fill(storage.data.begin(), storage.data.end(), round_to(layout.dtype, st.mean));
    }
    if (layout.is_contiguous()) {  // storage order is logical order: no gather needed
      storage.meta = TensorMeta{layout.shape, contiguous_strides(layout.shape), layout.dtype};
      out[v] = std::move(storage);
    } else {
      out[v] = strided_view(storage, layout);
    }
  }
  for (int v : g.inputs) {
    const Value& val = g.values[v];
    if (val.same_as >= 0 && out.count(val.same_as)) out[v] = out.at(val.same_as);
    if (val.widened_from >= 0 && out.count(val.widened_from)) {
      out[v] = out.at(val.widened_from);  // an exact widening: the same numbers
      out[v].meta.dtype = val.meta.dtype;
    }
  }
  return out;
}

ReplayInputs make_inputs(const Graph& g, uint64_t seed, const std::vector<int>& skip) {
  ReplayInputs in;
  if (!g.golden) {
    in.source = "generated (seed " + std::to_string(seed) + ", captured value statistics)";
    in.values = generate_inputs(g, seed, skip);
    return in;
  }
  for (auto& [name, t] : read_safetensors(g.golden->path))  // this graph's tensors, unprefixed
    if (name.compare(0, g.golden->prefix.size(), g.golden->prefix) == 0)
      in.golden[name.substr(g.golden->prefix.size())] = std::move(t);
  const std::map<int, HostTensor> drawn = generate_inputs(g, seed);  // random ops' draws
  for (int v : g.inputs) {
    auto it = in.golden.find(g.values[v].name);
    // A cut node's output (Value::cut): PyTorch's value where the golden file holds it (a graph
    // output), else drawn from its stats like a generated input.
    if (g.values[v].uniform || (g.values[v].cut >= 0 && it == in.golden.end())) {
      in.values[v] = drawn.at(v);
      continue;
    }
    if (it == in.golden.end())
      throw TraceError(g.golden->path, g.values[v].name, "golden file lacks this graph input");
    if (it->second.meta.shape != g.meta(v).shape || it->second.meta.dtype != g.meta(v).dtype)
      throw TraceError(g.golden->path, g.values[v].name,
                       "golden tensor " + it->second.meta.str() + " differs from the trace's " +
                           g.meta(v).str());
    in.values[v] = it->second;
  }
  in.source =
      "golden (" + g.golden->path + (g.golden->prefix.empty() ? "" : ", " + g.golden->prefix) + ")";
  return in;
}

}  // namespace replay
