// pointwise: the chains of elementwise ops no other fusion claims, fused into one generated kernel
// (what Inductor's and nvFuser's pointwise schedulers do for any graph). The matcher groups the
// unclaimed pointwise nodes of the canonical graph that feed each other over one iteration space;
// the binder turns the group's captured nodes into a CUDA kernel (codegen.hpp), compiled at bind
// time with NVRTC (jit.hpp), each op computed with the eager kernel's own expression
// (impls/eager/pw_math.cuh) and rounded to its dtype as the graph stores it, so the fused values
// are the eager executor's bits. TUNING.md: the rules, the byte count, what was measured.
//
//   params.hpp  this file     match.cpp  grouping and declines     cost.cpp  bytes, describe
//   codegen.*   kernel source from a chain (host code, no GPU)     jit.*     NVRTC, load, launch
//   bind.cpp    captured nodes -> chain -> kernel (optimized), eager launches (baseline)
//   tests/      matcher and codegen (unit_*.cpp), GPU cases against eager (gpu_*.cpp)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "impls/fusions/binding.hpp"
#include "impls/fusions/pointwise/codegen.hpp"
#include "impls/fusions/pointwise/jit.hpp"
#include "workloads/plan/fusion_spec.hpp"

namespace replay::pointwise {

/// Limits of one generated kernel: tensors read from outside, tensors written, elementwise ops.
inline constexpr int kMaxInputs = 16;
inline constexpr int kMaxOutputs = 16;
inline constexpr int kMaxOps = 96;
/// Column sums one kernel computes beside its chain (codegen.hpp, KernelSpec::sums).
inline constexpr int kMaxSums = 4;

/// A matched group. The binder reads the region's captured nodes; these are for `replay plan`.
struct Params {
  int64_t numel = 0;             ///< elements of the iteration space (every member's output)
  std::vector<std::string> ops;  ///< the compute nodes' ops, graph order ("aten.mul.Tensor")
  bool linear = true;            ///< members row-major contiguous (else one dense layout)
  /// The members' one dense layout when not `linear`: the order every value of the chain is
  /// visited in (a linear chain visits each value in the row-major order of its own shape).
  std::vector<int64_t> order_shape, order_stride;
  /// Column sums taken with the chain (bias gradients; linear chains only): the results (value
  /// indices) of the `aten.sum.dim_IntList` nodes over every dim but the last of a row-major value
  /// the chain computes, read directly or through reshape views; `sum_cols` = that last dim (C, a
  /// multiple of 8, one C for all of them). The kernel sums each value as it stores it
  /// (TUNING.md, "Column sums"). Empty: none.
  std::vector<int> sums;
  int64_t sum_cols = 0;
};

void match_rest(const Graph& g, const std::vector<char>& claimed, Matches& out);
Cost cost(const Graph& g, const Region& r);
nlohmann::json describe(const Graph& g, const Region& r);
Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx);

/// The region's chain over the buffers `ctx` gives (bind.cpp): the kernel spec codegen turns into
/// source, and in `args` the pointers its loads and stores take; `why` empty, or why the chain
/// cannot be built (a node that is not elementwise, an operand that does not broadcast).
KernelSpec chain_spec(const Graph& g, const Region& r, BindContext& ctx, KernelArgs& args,
                      std::string& why);

/// Test hook (the GPU mutants, tests/gpu_pointwise.cpp): called on every chain the optimized
/// variant binds, before its source is generated; null (the default) in production.
using SpecMutator = void (*)(KernelSpec&);
void set_spec_mutator(SpecMutator m);

/// Test hook (the GPU mutants of the generated text: a changed instruction or constant): called
/// on every generated source the optimized variant loads; null (the default) in production.
using SourceMutator = void (*)(std::string&);
void set_source_mutator(SourceMutator m);

/// Why node `ni` of `g` cannot be a member of a pointwise group, or "" when it can: its op runs
/// on the eager executor's generic pointwise kernel (not a creation or random function), one
/// output of a dense layout, every tensor and the compute type float32 / bfloat16 / float16 (or
/// bool), add/sub/rsub with alpha +-1 (the eager kernel may contract alpha * y into an FMA).
std::string member_decline(const Graph& g, int ni);

}  // namespace replay::pointwise
