// What the rest of the harness needs to know about the matmul rows' float64 reference (Eigen's
// GEMM, workloads/ops/matmul.cpp): its work and this machine's speed, to budget a reference run.
#pragma once

#include "workloads/ir/graph.hpp"

namespace replay {

/// Floating-point operations of matmul node `n` (mm, addmm, bmm, baddbmm, _scaled_mm):
/// 2 * numel(out) * K, FLOP; 0 for any other op.
double matmul_flops(const Graph& g, const Node& n);

/// This machine's float64 GEMM rate as the reference uses it (Eigen, every hardware thread),
/// GFLOP/s: the best of two [768, 768] x [768, 768] products (0.9 GFLOP each), measured once per
/// process on first call (a few ms to a few tens of ms).
double reference_gemm_gflops();

}  // namespace replay
