// What a fusion is, as data (nccl-tests' testColl, ggml's backend ops): a name, its variants, a
// structural matcher, a cost model (the fusion states its own speed-of-light), a describer for
// `replay plan`, a binder to GPU kernels, optional tolerance. One FusionSpec per fusion folder
// (impls/fusions/<name>/), listed once in impls/fusions/registry.cpp.
#pragma once

#include <any>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "workloads/ir/graph.hpp"
#include "workloads/ir/tolerance.hpp"

namespace replay {

/// Work a region must do at least: the speed-of-light terms. SOL time = max(bytes / copy
/// bandwidth, flops / matmul peak, comm_bytes / bus bandwidth), each term counted only where the
/// run measured its ceiling.
struct Cost {
  double bytes = 0;       ///< device-memory bytes that must move (each input read once, each
                          ///< output written once), bytes
  double flops = 0;       ///< floating-point operations, FLOP
  double comm_bytes = 0;  ///< bytes each rank must send over the interconnect, bytes
};

enum class Role : uint8_t {
  kBaseline,     ///< the best implementation without the optimization (one per fusion: "baseline")
  kOptimized,    ///< the optimization itself (one per fusion: "optimized")
  kAlternative,  ///< any other named variant (a library kernel, another schedule, ...)
};
std::string_view role_name(Role r);

struct VariantSpec {
  std::string_view name;  ///< "baseline", "optimized", or the alternative's name
  Role role;
  std::string_view description;  ///< one line: what this variant does differently
};

struct Region;
class BindContext;  // impls/fusions/binding.hpp: device buffers of the region's values
struct Binding;     // impls/fusions/binding.hpp: a launch, or why the variant cannot run

struct FusionSpec {
  std::string_view name;         ///< e.g. "layernorm_fwd"
  std::string_view description;  ///< one line for `replay list`
  std::span<const VariantSpec> variants;
  /// Appends every region it finds in `g`, with nodes, inputs, outputs and typed params filled
  /// (match_util.hpp helps). Structural: ops, single use, shapes and dtypes, never node names.
  /// It sees the whole graph: make_plan decides overlaps, and records the matches it drops.
  void (*match)(const Graph& g, std::vector<Region>& out);
  /// The region's speed-of-light work.
  Cost (*cost)(const Graph& g, const Region& r);
  /// The region's params as JSON, for `replay plan` and the results.
  nlohmann::json (*describe)(const Graph& g, const Region& r);
  /// Binds variant `v` to the region's device buffers: a launch, or the reason it cannot run
  /// (the region then runs eagerly and the report says why).
  Binding (*bind)(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx);
  /// Optional: numerics bounds for output `value` other than the default (default_bounds), with
  /// the reason in NumericsBounds::why; nullptr, or std::nullopt, for the default.
  std::optional<NumericsBounds> (*tolerance)(const Graph& g, const Region& r, int value) = nullptr;
  /// Ranks the fusion needs (collectives: 2); on a trace of fewer, its matches are dropped.
  int min_world_size = 1;

  /// The variant named `name`, or nullptr.
  const VariantSpec* find_variant(std::string_view name) const;
};

/// One matched fusion instance.
struct Region {
  const FusionSpec* fusion = nullptr;
  std::vector<int> nodes;    ///< node indices it claims, in graph order
  std::vector<int> inputs;   ///< value indices it reads from outside
  std::vector<int> outputs;  ///< value indices it produces for the rest of the graph
  std::any params;           ///< the fusion's own typed params (value indices, not names)
};

}  // namespace replay
