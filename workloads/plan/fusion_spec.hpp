// What a fusion is, as data (nccl-tests' testColl, ggml's backend ops): a name, its variants, a
// structural matcher, a cost model (the fusion states its own speed-of-light), a describer for
// `replay plan`, a binder to GPU kernels, optional tolerance. One FusionSpec per fusion folder
// (impls/fusions/<name>/), listed once in impls/fusions/registry.cpp.
#pragma once

#include <any>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "workloads/ir/graph.hpp"
#include "workloads/ir/tolerance.hpp"

namespace replay {

/// Work a region must do at least: the speed-of-light terms. SOL time = max(bytes / copy
/// bandwidth, sum over matmul classes of matmul_flops / that class's matmul peak, comm_bytes / bus
/// bandwidth), each term counted only where the run measured its ceiling
/// (RegionResult::sol_terms, harness/report/results.hpp).
struct Cost {
  double bytes = 0;       ///< device-memory bytes that must move (each input read once, each
                          ///< output written once), bytes
  double flops = 0;       ///< floating-point operations of every kind (informational), FLOP
  double comm_bytes = 0;  ///< bytes each rank must send over the interconnect, bytes
  /// Tensor-core work by matmul class (matmul_class(), workloads/ops/matmul.hpp: "bf16", "fp16",
  /// "fp32", "fp64", "float8_tensorwise", "float8_rowwise"), FLOP: the GEMMs run one after the
  /// other on the same units, so their times at the class peaks add up.
  std::map<std::string, double> matmul_flops;
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
struct Matches;
class BindContext;  // impls/fusions/binding.hpp: device buffers of the region's values
struct Binding;     // impls/fusions/binding.hpp: a launch, or why the variant cannot run

struct FusionSpec {
  std::string_view name;         ///< e.g. "layernorm_fwd"
  std::string_view description;  ///< one line for `replay list`
  std::span<const VariantSpec> variants;
  /// Appends every region it finds in `g` (the canonical form, workloads/plan/canonical.hpp),
  /// with nodes, inputs, outputs and typed params filled (match_util.hpp helps), and every
  /// candidate it considered and rejected with the reason (Matches::decline). Structural: ops,
  /// single use, shapes and dtypes, never node names. It sees the whole graph: make_plan decides
  /// overlaps, and records the matches it drops.
  void (*match)(const Graph& g, Matches& out);
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
  /// Instead of `match` (null then), for a fusion that takes what the others leave (the generic
  /// pointwise fusion, last in the registry): `claimed` has one entry per node of `g` (the
  /// canonical form), nonzero where an earlier fusion's region holds the node.
  void (*match_rest)(const Graph& g, const std::vector<char>& claimed, Matches& out) = nullptr;
  /// Whether every variant's binder writes each region output through the strides of its bound
  /// layout (rows any distance apart), so that the output may be a slice of a larger buffer: a
  /// cat of such outputs is then placed, not copied (Plan::placed_cats).
  bool strided_outputs = false;

  /// The variant named `name`, or nullptr.
  const VariantSpec* find_variant(std::string_view name) const;
};

/// A node the canonical form removed as an identity (an alias, a same-dtype convert or clone, a
/// same-shape view) whose value the fused step writes: the GPU program aliases its output to
/// `source`'s buffer (the same values), so something outside can read it.
struct TailAlias {
  int node = -1;    ///< captured node index
  int source = -1;  ///< the region output (value index) it passes on
};

/// One matched fusion instance.
struct Region {
  const FusionSpec* fusion = nullptr;
  std::vector<int> nodes;    ///< node indices it claims, in graph order
  std::vector<int> inputs;   ///< value indices the fused step reads from outside
  std::vector<int> outputs;  ///< value indices the fused step writes for the rest of the graph
  std::any params;           ///< the fusion's own typed params (value indices, not names)
  /// Set by make_plan on the captured graph: the node at which the fused step runs (the last node
  /// the matcher claimed; -1: nodes.back()). A matcher may instead set it to one of its own nodes
  /// (a canonical node index; map_region maps it) at which every region input is computed and
  /// before every outside reader of a region output: amax_reuse runs at its first reduction, since
  /// the scale of a rowwise amax is read before the columnwise amax of the same tensor;
  /// fp8_quantize where its source tensor is ready, before the GEMMs that read its first float8
  /// tensor (the graph makes the column-major copies after them). The nodes
  /// the canonical form had removed and the
  /// region claims with it (aliases of its values, clones of its inputs, dead readers of its
  /// intermediates); and of those, the ones something outside reads, whose outputs alias what
  /// the fused step writes (an alias of a saved statistic returned beside it).
  int anchor = -1;
  std::vector<int> absorbed;
  std::vector<TailAlias> tail;
  /// View nodes of the region (view, reshape, split, ...; canonical indices from the matcher,
  /// captured ones after map_region) that the fused step does not run: right after it, the GPU
  /// program makes their outputs aliases of the buffers it wrote, as the eager executor makes
  /// any view (outside_views, match_util.hpp). Their outputs are not in `outputs`; the values
  /// they view are. The default partitioner returns `view(mm)` for the backward beside the
  /// epilogue that reads it.
  std::vector<int> views;
};

/// A candidate a matcher considered and rejected, and why (issue 24: "why did this not fuse?" is
/// answered by the tool). `node` indexes the graph the matcher saw.
struct Decline {
  int node = -1;
  std::string reason;  ///< e.g. "rstd has a reader outside the region: node 'x' (graph output)"
};

/// What a matcher gives back: the regions it found and the candidates it declined.
struct Matches {
  std::vector<Region> regions;
  std::vector<Decline> declined;
  /// Records that the candidate at `node` was rejected; returns false, so a matcher can write
  /// `return out.decline(root, "...")` in a function that reports whether it matched.
  bool decline(int node, std::string reason) {
    declined.push_back({node, std::move(reason)});
    return false;
  }
};

}  // namespace replay
