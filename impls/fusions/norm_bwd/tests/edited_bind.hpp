// norm_bwd's registry row with its params edited before binding: the GPU tests run the real
// kernels with one thing changed (a split size, a mutant) through the whole GPU program.
#pragma once

#include <any>
#include <functional>

#include "impls/fusions/binding.hpp"
#include "impls/fusions/norm_bwd/params.hpp"

namespace replay::fusions {
extern const FusionSpec norm_bwd;
}

namespace replay::test {

/// The edit edited_bind applies (nullptr: none); a test sets it before building its program and
/// clears it after.
inline std::function<void(norm_bwd::Params&)> g_edit;

/// norm_bwd::bind on a copy of the region whose params g_edit changed.
inline Binding edited_bind(const Graph& g, const Region& r, const VariantSpec& v,
                           BindContext& ctx) {
  Region m = r;
  auto p = std::any_cast<norm_bwd::Params>(r.params);
  if (g_edit) g_edit(p);
  m.params = p;
  return norm_bwd::bind(g, m, v, ctx);
}

}  // namespace replay::test
