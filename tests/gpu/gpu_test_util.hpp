// Helpers of the GPU tests: skip visibly without a device; run a variant against the reference.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "harness/replay/gpu_program.hpp"
#include "harness/replay/variants.hpp"
#include "harness/report/numerics.hpp"
#include "impls/fusions/registry.hpp"
#include "impls/reference/reference.hpp"
#include "workloads/loader/inputs.hpp"

#define REQUIRE_GPU() \
  if (::replay::cuda_device_count() == 0) GTEST_SKIP() << "skipped: no CUDA device"

namespace replay::test {

/// Values the regions of fusion `fusion` write, in plan order.
inline std::vector<int> fusion_region_outputs(const Plan& plan, std::string_view fusion) {
  std::vector<int> out;
  for (const Region& r : plan.regions)
    if (r.fusion->name == fusion) out.insert(out.end(), r.outputs.begin(), r.outputs.end());
  return out;
}

/// The first value of `vals` whose bits differ between two programs, as "name[i]: a vs b" ("" when
/// none): every element compared as its bits (a NaN equals any NaN, -0 differs from +0).
inline std::string first_bit_difference(const Graph& g, const GpuProgram& a, const GpuProgram& b,
                                        const std::vector<int>& vals) {
  for (int v : vals) {
    const HostTensor x = a.download(v, nullptr), y = b.download(v, nullptr);
    for (size_t i = 0; i < x.data.size(); ++i) {
      const double p = x.data[i], q = y.data[i];
      const bool same =
          (std::isnan(p) && std::isnan(q)) || (p == q && std::signbit(p) == std::signbit(q));
      if (!same)
        return g.values[v].name + "[" + std::to_string(i) + "]: " + std::to_string(p) + " vs " +
               std::to_string(q);
    }
  }
  return "";
}

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

/// Runs `variant` of `plan` and the eager executor on the inputs of `seed` (the variant's outputs
/// poisoned first; every region with the variant fused): the values `outs` must be the same bits,
/// and with `reference` every graph output must pass the numerics check against the float64
/// reference with the run's bounds. `label` names the case in failures.
inline void expect_bit_identical_to_eager(const Graph& g, const Plan& plan,
                                          const std::string& variant, const std::vector<int>& outs,
                                          uint64_t seed, bool reference, const std::string& label) {
  const auto inputs = generate_inputs(g, seed);
  GpuProgram eager(g, plan, std::string(kEagerVariant), inputs, nullptr);
  eager.run_all(LaunchContext{});
  GpuProgram prog(g, plan, variant, inputs, nullptr);
  expect_fused_where_available(plan, prog, variant, label);
  prog.poison_outputs(nullptr);
  prog.run_all(LaunchContext{});
  REPLAY_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(first_bit_difference(g, prog, eager, outs), "")
      << label << " " << variant << " seed " << seed;
  if (!reference) return;
  const auto ref = run_reference(g, inputs);
  const auto bounds = default_value_bounds(g);
  for (int v : g.outputs) {
    const auto res = check_value(g, v, prog.download(v, nullptr), ref.at(v), ref,
                                 output_bounds(g, plan, bounds, v));
    EXPECT_TRUE(res.pass()) << label << " " << variant << " seed " << seed << " "
                            << g.values[v].name << ": " << res.failure();
  }
}

}  // namespace replay::test
