// The matmul ceilings of a run (issue 26): per matmul class, the dense peak this device reaches
// through cuBLASLt as the fusions call it (impls/eager/gemm.hpp: prepare_matmul and
// prepare_scaled_matmul with the algorithm timed among the heuristic's candidates; float64 through
// the eager path), so a region's "% SOL" of a GEMM-bound graph is measured against what the
// hardware does here, not a datasheet.
// Method: one square problem per class (8192^3 for the 16-bit and float8 classes, 4096^3 for
// float32, 2048^3 for float64: each several hundred µs or more, so launch and ramp are < 1 %),
// operands filled with a tiled block of N(0, 1) values (random bit patterns draw the power a real
// GEMM draws; zeros would overstate the peak), mat2 column-major (nn.Linear's weight.t(), the TN
// layout Hopper's float8 kernels need), timed cold like the variants (harness/measure/TIMING.md).
// The peak is 2 M N K / the fastest cold sample: a ceiling is the best this device reached, and
// the median of one short measurement moved by up to 11 % between two runs on one H200
// (float8_rowwise 8192^3: 1302 and 1465 TFLOP/s, 2026-11-26), so a ceiling from the median put a
// trace's own 8192^3 _scaled_mm at 113 % of SOL.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "harness/measure/stats.hpp"
#include "harness/measure/timing.hpp"
#include "harness/report/results.hpp"

namespace replay {

/// One measured matmul ceiling.
struct MatmulPeak {
  std::string cls;  ///< matmul class (matmul_class(), workloads/ops/matmul.hpp)
  int64_t m = 0, n = 0, k = 0;
  double median_us = 0;  ///< µs per GEMM, cold L2, median
  double best_us = 0;    ///< µs per GEMM, cold L2, the fastest sample
  double tflops = 0;     ///< 2 m n k / best_us, TFLOP/s; 0 when not measured
  std::string error;     ///< non-empty: why this class was not measured (e.g. cuBLASLt refused)
  std::string algo;      ///< the cuBLASLt algorithm timed (empty: the eager path's, float64)
  /// Non-empty when every sample ran below the clock floor (StopRule::min_clock_ratio) and the
  /// class was timed again without it (what the GPU sustains at its power limit).
  std::string note;
};

/// The classes measure_matmul_peaks() measures, in order.
const std::vector<std::string>& matmul_peak_classes();

/// The trace text (replay-trace/1) of the one-node problem that measures class `cls` at m = n = k =
/// `size`: aten.mm.default for bf16/fp16/fp32/fp64, aten._scaled_mm.default (float8_e4m3fn
/// operands, bfloat16 output) with 0-dim scales for float8_tensorwise and [M, 1], [1, N] scales for
/// float8_rowwise. Throws std::invalid_argument for an unknown class.
std::string matmul_peak_trace(const std::string& cls, int64_t size);

/// The problem size measure_matmul_peaks() uses for a class (see the file comment).
int64_t matmul_peak_size(const std::string& cls);

/// Measures every class of matmul_peak_classes() on the current device on stream `s`, timed by
/// time_cold with `rule`. A class cuBLASLt refuses (or that fails) gets MatmulPeak::error, never
/// an exception; when the failure left the CUDA context broken (a sticky error), the failure is
/// rethrown as it was caught (RuntimeFailure for CUDA and cuBLASLt errors). Takes a few seconds
/// (6.6 s for all classes in the GPU test on an H200); device memory: up to 3 x 128 MiB per
/// class, freed after it.
std::vector<MatmulPeak> measure_matmul_peaks(cudaStream_t s, L2Flush& l2, const StopRule& rule);

/// Ceilings::matmul_tflops and matmul_problem from measured peaks (errors named in the problem).
void set_matmul_ceilings(const std::vector<MatmulPeak>& peaks, Ceilings& c);

}  // namespace replay
