// Trace-level variants: what a name given to `replay run --variants` means. Executors are
// "reference" (CPU float64) and "eager" (one launch per op); every other name is a fusion variant
// (impls/fusions/<name>/spec.cpp), which each region runs through its fusion's variant of that
// name while the rest of the graph runs eagerly.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "workloads/plan/plan.hpp"

namespace replay {

inline constexpr std::string_view kReferenceVariant = "reference";
inline constexpr std::string_view kEagerVariant = "eager";

struct VariantInfo {
  /// kPeer: an outside implementation timed with our method and read from its results
  /// (traces/capture/peer_results.py: PyTorch op by op, torch.compile); never run by `replay run`.
  enum Kind : uint8_t { kReference, kEager, kFusion, kPeer } kind = kEager;
  std::string name;
  Role role = Role::kAlternative;  ///< fusion variants only
  bool is_gpu() const { return kind != kReference; }
};

/// Every variant a run may name: reference, eager, then the fusions' variants (baselines,
/// optimized, alternatives; each name once).
std::vector<VariantInfo> known_variants(std::span<const FusionSpec* const> fusions);

/// The variant called `name`, or std::nullopt.
std::optional<VariantInfo> find_variant(std::span<const FusionSpec* const> fusions,
                                        std::string_view name);

/// The variants of one trace: reference, eager, and the variants of the fusions its plan uses.
std::vector<VariantInfo> plan_variants(const Plan& p);

}  // namespace replay
