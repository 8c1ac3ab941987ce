// Inputs of a replay: PyTorch's own (the golden sidecar) when a trace has them, else generated
// from a seed following the captured value statistics.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "workloads/ir/host_tensor.hpp"

namespace replay {

/// Inputs for `g`, generated from `seed`: each input follows its recorded value statistics
/// (normal(mean, std) clipped to [min, max]; constant when std == 0), rounded to its dtype.
/// Each input's stream depends only on (seed, input name), not on the input's position.
std::map<int, HostTensor> generate_inputs(const Graph& g, uint64_t seed);

/// Inputs of one replay, keyed by graph-input value index, and where they came from.
struct ReplayInputs {
  std::map<int, HostTensor> values;
  std::string source;  ///< "golden (<file>)" or "generated (seed N, captured value statistics)"
  std::map<std::string, HostTensor> golden;  ///< every tensor of the golden sidecar (outputs too)
};

/// Golden inputs when `g` has a sidecar, else generate_inputs(g, seed). Throws TraceError naming
/// the sidecar and the input when the sidecar lacks a graph input or disagrees on its shape.
ReplayInputs make_inputs(const Graph& g, uint64_t seed);

}  // namespace replay
