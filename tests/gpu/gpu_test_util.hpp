// Helpers of the GPU tests: skip visibly without a device; run a variant against the reference.
#pragma once

#include <gtest/gtest.h>

#include "harness/replay/gpu_program.hpp"
#include "harness/report/numerics.hpp"
#include "impls/fusions/registry.hpp"
#include "impls/reference/reference.hpp"
#include "workloads/loader/inputs.hpp"

#define REQUIRE_GPU() \
  if (::replay::cuda_device_count() == 0) GTEST_SKIP() << "skipped: no CUDA device"

namespace replay::test {

/// Every region whose fusion has `variant` runs fused in `prog` (no fallback to eager).
inline void expect_fused_where_available(const Plan& plan, const GpuProgram& prog,
                                         const std::string& variant, const std::string& label) {
  for (size_t r = 0; r < plan.regions.size(); ++r) {
    if (plan.regions[r].fusion->find_variant(variant)) {
      EXPECT_EQ(prog.fallback_reason(static_cast<int>(r)), "") << label << " " << variant;
    }
  }
}

/// Runs `variant` of g on inputs generated from `seed` (outputs poisoned first) and checks every
/// graph output against the reference with the run's bounds (the harness's own verdict). With
/// `expect_fused`, every region whose fusion has `variant` must run fused (no fallback).
inline void expect_variant_matches(const Graph& g, const std::string& variant, uint64_t seed,
                                   bool expect_fused = true) {
  Plan plan = make_plan(g, fusion_registry());
  auto ref = run_reference(g, generate_inputs(g, seed));
  GpuProgram prog(g, plan, variant, ref, nullptr);
  if (expect_fused) expect_fused_where_available(plan, prog, variant, g.name);
  prog.poison_outputs(nullptr);
  prog.run_all(LaunchContext{});
  REPLAY_CUDA(cudaDeviceSynchronize());
  const auto bounds = default_value_bounds(g);
  for (int v : g.outputs) {
    auto res = check_numerics(g.values[v].name, prog.download(v, nullptr), ref.at(v),
                              output_bounds(g, plan, bounds, v));
    EXPECT_TRUE(res.pass()) << g.name << " " << variant << " seed " << seed << ": "
                            << res.failure();
  }
}

}  // namespace replay::test
