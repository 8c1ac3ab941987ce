// Inputs of a replay: PyTorch's own (the golden sidecar) when a trace has them, else generated
// from a seed following the captured value statistics.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "workloads/ir/host_tensor.hpp"

namespace replay {

/// Inputs for `g`, generated from `seed`, keyed by graph-input value index; each a logical
/// (row-major) HostTensor of the input's shape and dtype. Bit-for-bit the same on every platform
/// (the algorithm is specified in traces/SCHEMA.md, "Inputs"): one value per storage element of
/// the input's recorded layout (TensorMeta::storage_elems(), in storage order), each
/// normal(mean, std) from its recorded stats (default mean 0, std 1) by Philox4x32-10 and the polar
/// method (workloads/loader/philox.hpp), clamped to [min, max] (constant mean when std == 0),
/// rounded to the dtype (round_to); the logical tensor is the strided view of that storage, so
/// logical elements sharing a storage element (stride 0) hold the same value and pack() accepts
/// them. Each input's stream depends only on (seed, input name), not on the input's position.
/// Throws std::invalid_argument naming the input when a recorded stride is negative (its storage
/// elements would not be numbered from 0). Inputs listed in `skip` (value indices) are left out:
/// a backward's saved inputs that come from its forward's reference instead; each other input's
/// values do not depend on what is skipped. An input marked `same_as` another gets that one's
/// values (unless that one is skipped).
std::map<int, HostTensor> generate_inputs(const Graph& g, uint64_t seed,
                                          const std::vector<int>& skip = {});

/// Rank `rank`'s seed in a replay of a world_size > 1 trace (traces/SCHEMA.md, "world_size"):
/// seed + rank * 0x9E3779B97F4A7C15 (mod 2^64; the golden-ratio increment of SplitMix64), so
/// rank 0 draws what a single-rank replay of the seed draws and every rank its own values,
/// reproducibly: rank r's inputs are generate_inputs(g, rank_seed(seed, r)).
constexpr uint64_t rank_seed(uint64_t seed, int rank) {
  return seed + static_cast<uint64_t>(rank) * 0x9E3779B97F4A7C15ull;
}

/// Inputs of one replay, keyed by graph-input value index, and where they came from.
struct ReplayInputs {
  std::map<int, HostTensor> values;
  std::string source;  ///< "golden (<file>)" or "generated (seed N, captured value statistics)"
  std::map<std::string, HostTensor> golden;  ///< every tensor of the golden sidecar (outputs too)
};

/// Golden inputs when `g` has a sidecar, else generate_inputs(g, seed). With a sidecar, random
/// ops' hidden inputs and the outputs of cut nodes (Value::cut) that the sidecar does not hold
/// are generated from `seed` as generate_inputs does. Throws TraceError naming
/// the sidecar and the input when the sidecar lacks a graph input or disagrees on its shape.
/// `skip`: as generate_inputs (not used with golden inputs).
ReplayInputs make_inputs(const Graph& g, uint64_t seed, const std::vector<int>& skip = {});

}  // namespace replay
