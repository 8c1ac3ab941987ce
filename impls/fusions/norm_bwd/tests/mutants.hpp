// Deliberately wrong norm_bwd launches: the real params (and so the real kernels) with one thing
// wrong — x and dy swapped, LayerNorm taken as RMSNorm and back, the weight offset off by one,
// the last row lost, dw and db swapped, mean and rstd swapped, eps off, the dx epilogue add
// (the residual stream's other gradient) dropped, a dx-only LayerNorm's mean term dropped, the
// saved normalized value of the dw term replaced by dy, a recentered xhat term taken as the plain
// one. Each
// names the outputs it must make FAIL the numerics check. Used by the CPU model tests
// (unit_model.cpp) and the GPU tests (gpu_mutants.cpp): a wrong dx, dw or db is proven to be
// caught.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "impls/fusions/norm_bwd/params.hpp"

namespace replay::test {

struct NormBwdMutant {
  std::string name;
  std::function<bool(const norm_bwd::Params&)> applies;
  std::function<void(norm_bwd::Params&)> mutate;
  bool fails_dx, fails_dw, fails_db;  ///< outputs that must FAIL (db only where there is one)
};

inline std::vector<NormBwdMutant> norm_bwd_mutants() {
  auto always = [](const norm_bwd::Params&) { return true; };
  return {
      // (an RMSNorm dw = sum(dy * x * rstd) is symmetric in x and dy: only dx and db must fail)
      {"swapped_x_dy", always, [](norm_bwd::Params& p) { std::swap(p.x, p.dy); }, true, false,
       true},
      {"kind_flipped", always, [](norm_bwd::Params& p) { p.layernorm = !p.layernorm; }, true, false,
       false},
      // (without a weight, w_offset is unused: w = 1)
      {"weight_offset_plus_1", [](const norm_bwd::Params& p) { return p.w >= 0; },
       [](norm_bwd::Params& p) { p.w_offset += 1; }, true, false, false},
      {"lost_last_row", always, [](norm_bwd::Params& p) { p.rows -= 1; }, true, false, false},
      {"dw_db_swapped", [](const norm_bwd::Params& p) { return p.db >= 0; },
       [](norm_bwd::Params& p) { std::swap(p.dw, p.db); }, false, true, true},
      {"mean_rstd_swapped", [](const norm_bwd::Params& p) { return p.mean >= 0 && p.rstd >= 0; },
       [](norm_bwd::Params& p) { std::swap(p.mean, p.rstd); }, true, true, false},
      {"eps_x100",
       [](const norm_bwd::Params& p) {
         return p.stats == NormBwdStats::kRecompute && p.eps_value < 0;
       },
       [](norm_bwd::Params& p) { p.eps *= 100; }, true, true, false},
      // The dx epilogue add dropped: the residual stream's other gradient is lost.
      {"dropped_dx_add", [](const norm_bwd::Params& p) { return p.dx_add >= 0; },
       [](norm_bwd::Params& p) { p.dx_add = -1; }, true, false, false},
      // The saved normalized value of the dw term (the default partitioner's form) replaced by
      // dy: dw = sum(dy * dy). Caught only if the kernels read Params::xs for the dw term.
      {"saved_xhat_replaced_by_dy", [](const norm_bwd::Params& p) { return p.xs >= 0; },
       [](norm_bwd::Params& p) { p.xs = p.dy; }, false, true, false},
      // A two-pass LayerNorm's recentered xhat term (Cohere) taken as the plain one.
      {"recenter_dropped", [](const norm_bwd::Params& p) { return p.recenter; },
       [](norm_bwd::Params& p) { p.recenter = false; }, true, false, false},
      // dx only (no affine parameters): a LayerNorm's dx without its mean term - S1 / C
      {"dx_only_dropped_s1", [](const norm_bwd::Params& p) { return p.dw < 0 && p.layernorm; },
       [](norm_bwd::Params& p) { p.layernorm = false; }, true, false, false},
  };
}

}  // namespace replay::test
