// bookend: the three places a fused region's boundary meta ops can run (issue 28; nvFuser PRs
// 2639 / 2815 moved them to the host, Thunder later turned that off), as variants of the fusion
// itself, so one `replay run` job measures them side by side:
//
//   optimized   inside the kernel: the meta ops between a region input and its root buffer
//               (view, permute, slice, split, select, expand, unsqueeze, squeeze) are folded at
//               program build time into the strides and offset the kernel indexes with; a
//               replay enqueues the kernel with arguments built once (no host work per replay).
//   segmented   materialized: every tensor the kernel would read or write through a layout that
//               is not contiguous is copied by a copy kernel (segment.hpp) into a contiguous
//               workspace first (inputs), or written contiguous and copied into its strided
//               buffer after (outputs); the kernel sees contiguous tensors only. Broadcast
//               operands the kernel indexes by their own shape ([C] weights, [T, D] tables)
//               are not expanded.
//   host_alias  host aliases per replay: the host resolves each region input from its root
//               buffer through its meta ops (alias.hpp: sizes, strides, storage offset) and runs
//               the fusion's binder on the result every replay, then the kernel reads the
//               strided tensors it is handed (widths chosen per launch).
//
// Each fusion with these variants adds the two rows from kBookendVariants to its spec and sends
// them to bind_bookend() from its bind (rope, layernorm_fwd). TUNING.md beside this file has the
// method and the measurements.
#pragma once

#include <cstdint>
#include <string_view>

#include "impls/fusions/binding.hpp"

namespace replay::bookend {

inline constexpr std::string_view kSegmented = "segmented";
inline constexpr std::string_view kHostAlias = "host_alias";

/// The registry rows of the two variants (Role::kAlternative), for a fusion's spec.cpp.
inline constexpr VariantSpec kSegmentedVariant = {
    kSegmented, Role::kAlternative,
    "bookend study: the boundary views materialized by copy kernels into contiguous tensors, "
    "then the optimized kernel over them (and copies back into strided outputs)"};
inline constexpr VariantSpec kHostAliasVariant = {
    kHostAlias, Role::kAlternative,
    "bookend study: the host resolves every boundary view as an alias (sizes, strides, storage "
    "offset) and rebinds the optimized kernel on every replay"};

/// A fusion's binder.
using BindFn = Binding (*)(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx);

/// True for the two names above.
bool is_bookend_variant(const VariantSpec& v);

/// Binds `v` (segmented or host_alias) through `bind`, the fusion's own binder, called with the
/// fusion's optimized variant (r.fusion->find_variant("optimized")) over a context that
/// materializes (segmented) or resolves per replay (host_alias) the tensors it asks for. The
/// binder's reason where it declines; the region then runs eagerly.
Binding bind_bookend(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx,
                     BindFn bind);

/// Test hook (the GPU mutant "host alias with a wrong storage offset"): host_alias adds `elems`
/// elements to the storage offset of every tensor it resolves through at least one meta op. 0
/// (the default) is the correct arithmetic. Not thread-safe; tests only.
void set_host_alias_offset_mutant(int64_t elems);

}  // namespace replay::bookend
