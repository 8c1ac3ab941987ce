// What the rest of the harness needs to know about the matmul rows' float64 reference (Eigen's
// GEMM, workloads/ops/matmul.cpp): its work and this machine's speed, to budget a reference run.
#pragma once

#include <string>

#include "workloads/ir/graph.hpp"

namespace replay {

/// Floating-point operations of matmul node `n` (mm, addmm, bmm, baddbmm, _scaled_mm):
/// 2 * numel(out) * K, FLOP; 0 for any other op.
double matmul_flops(const Graph& g, const Node& n);

/// The matmul class of node `n`, the key of its peak in the run's ceilings
/// (Ceilings::matmul_tflops): "bf16", "fp16", "fp32" (float32 without TF32, as the eager executor
/// and PyTorch's default run it), "fp64" by the operands' dtype; _scaled_mm: "float8_tensorwise"
/// (one-element scales) or "float8_rowwise" ([M, 1] and [1, N] scales). Empty for any other op.
std::string matmul_class(const Graph& g, const Node& n);

/// This machine's float64 GEMM rate as the reference uses it (Eigen, every hardware thread),
/// GFLOP/s: the best of two [768, 768] x [768, 768] products (0.9 GFLOP each), measured once per
/// process on first call (a few ms to a few tens of ms).
double reference_gemm_gflops();

}  // namespace replay
