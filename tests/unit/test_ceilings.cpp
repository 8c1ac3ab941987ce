// The matmul side of SOL (issue 26), host side: each matmul node's class (the key of its measured
// peak), the whole-trace row's tensor-core FLOPs by class, and the one-node problems that measure
// the peaks (harness/replay/ceilings.hpp) — each loads, and its node is of the class it measures.
// The measurement itself runs on a device: tests/gpu/test_ceilings.cpp.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "harness/replay/ceilings.hpp"
#include "harness/replay/runner.hpp"
#include "test_util.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/ops/matmul.hpp"
#include "workloads/plan/plan.hpp"

using namespace replay;
using namespace replay::test;

namespace {

// The class of every matmul node of a bundled trace, joined ("bf16,bf16,...").
std::string classes_of(const std::string& trace) {
  const Graph g = load_trace(trace_path(trace));
  std::string s;
  for (const Node& n : g.nodes)
    if (const std::string c = matmul_class(g, n); !c.empty()) s += (s.empty() ? "" : ",") + c;
  return s;
}

}  // namespace

TEST(MatmulClass, ByOperandDtypeAndScaleShape) {
  EXPECT_EQ(classes_of("float8_linear_rowwise_train_fwd_2x8x64x32"), "float8_rowwise");
  EXPECT_EQ(classes_of("float8_linear_tensorwise_train_fwd_2x8x64x32"), "float8_tensorwise");
  EXPECT_EQ(classes_of("linear_fp32_train_fwd_2x8x64x32"), "fp32");
  EXPECT_EQ(classes_of("byog/linear/llama_mlp_mincut_train_fwd_2x8x128"), "bf16,bf16,bf16");
  // addmm's class comes from mat1, not from the bias (GPT-2's Conv1D: addmm(bias, x, W)).
  EXPECT_EQ(classes_of("byog/linear/gpt2_c_attn_mincut_train_fwd_2x8x128"), "bf16");
  EXPECT_EQ(classes_of("byog/llama_rmsnorm_mincut_train_fwd_2x8x256"), "");  // no matmul
}

// The whole-trace row carries every GEMM's FLOPs under its class; SOL then has a matmul term.
TEST(MatmulClass, WholeTraceRowCountsEveryGemm) {
  const Graph g = load_trace(trace_path("byog/linear/llama_mlp_mincut_train_fwd_1x8192x4096"));
  const auto rows = result_rows(g, make_plan(g, {}));
  ASSERT_FALSE(rows.empty());
  const Cost& c = rows[0].cost;
  // gate, up: [8192, 4096] x [4096, 14336]; down: [8192, 14336] x [14336, 4096]
  const double want = 3 * 2.0 * 8192 * 4096 * 14336;
  ASSERT_EQ(c.matmul_flops.size(), 1u);
  EXPECT_DOUBLE_EQ(c.matmul_flops.at("bf16"), want);
  Ceilings ceil;
  ceil.copy_gbps = 4000;
  ceil.matmul_tflops["bf16"] = 700;
  const SolTerms t = rows[0].sol_terms(ceil);
  EXPECT_EQ(t.bound(), "matmul");
  EXPECT_DOUBLE_EQ(t.matmul_us, want / 700e6);
}

TEST(MatmulPeakTrace, EachClassLoadsAsItsOwnClass) {
  for (const std::string& cls : matmul_peak_classes()) {
    const int64_t n = matmul_peak_size(cls);
    EXPECT_GE(n, 2048) << cls;
    const Graph g = parse_trace_text(matmul_peak_trace(cls, 64), "<peak " + cls + ">");
    ASSERT_EQ(g.nodes.size(), 1u) << cls;
    EXPECT_EQ(matmul_class(g, g.nodes[0]), cls);
    EXPECT_DOUBLE_EQ(matmul_flops(g, g.nodes[0]), 2.0 * 64 * 64 * 64) << cls;
    // mat2 column-major: the TN layout nn.Linear's weight.t() gives and float8 GEMMs need
    EXPECT_EQ(g.meta(g.nodes[0].operands[1].value).stride, (std::vector<int64_t>{1, 64})) << cls;
  }
  EXPECT_THROW(matmul_peak_trace("int8", 64), std::invalid_argument);
  EXPECT_THROW(matmul_peak_size("tf64"), std::invalid_argument);
}

TEST(MatmulPeakTrace, CeilingsKeepWhatWasMeasuredAndSayWhatWasNot) {
  std::vector<MatmulPeak> peaks(2);
  peaks[0] = {"bf16", 8192, 8192, 8192, 1560.0, 1500.0, 733.0, ""};
  peaks[1] = {"float8_rowwise", 8192, 8192, 8192, 0, 0, 0, "CUBLAS_STATUS_NOT_SUPPORTED"};
  Ceilings c;
  set_matmul_ceilings(peaks, c);
  ASSERT_EQ(c.matmul_tflops.size(), 1u);
  EXPECT_EQ(c.matmul_tflops.at("bf16"), 733.0);
  EXPECT_NE(c.matmul_problem.find("bf16 8192^3"), std::string::npos) << c.matmul_problem;
  EXPECT_NE(c.matmul_problem.find("float8_rowwise not measured: CUBLAS_STATUS_NOT_SUPPORTED"),
            std::string::npos)
      << c.matmul_problem;
}
