#include "harness/replay/variants.hpp"

#include <algorithm>

namespace replay {
namespace {

std::vector<VariantInfo> collect(const std::vector<const FusionSpec*>& fusions) {
  std::vector<VariantInfo> out = {{VariantInfo::kReference, std::string(kReferenceVariant)},
                                  {VariantInfo::kEager, std::string(kEagerVariant)}};
  for (Role role : {Role::kBaseline, Role::kOptimized, Role::kAlternative})
    for (const FusionSpec* f : fusions)
      for (const VariantSpec& v : f->variants) {
        if (v.role != role) continue;
        auto same = [&](const VariantInfo& i) { return i.name == v.name; };
        if (std::none_of(out.begin(), out.end(), same))
          out.push_back({VariantInfo::kFusion, std::string(v.name), v.role});
      }
  return out;
}

}  // namespace

std::vector<VariantInfo> known_variants(std::span<const FusionSpec* const> fusions) {
  return collect({fusions.begin(), fusions.end()});
}

std::optional<VariantInfo> find_variant(std::span<const FusionSpec* const> fusions,
                                        std::string_view name) {
  for (auto& v : known_variants(fusions))
    if (v.name == name) return v;
  return std::nullopt;
}

std::vector<VariantInfo> plan_variants(const Plan& p) {
  std::vector<const FusionSpec*> used;
  for (const Region& r : p.regions)
    if (std::find(used.begin(), used.end(), r.fusion) == used.end()) used.push_back(r.fusion);
  return collect(used);
}

}  // namespace replay
