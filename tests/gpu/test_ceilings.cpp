// The matmul ceilings measured on the device (harness/replay/ceilings.hpp): every class measured
// through the eager cuBLASLt path, each peak plausible for the hardware (below any datasheet
// peak of a current GPU, tensor-core classes well above float32's).
#include <gtest/gtest.h>

#include <map>

#include "gpu_test_util.hpp"
#include "harness/measure/timing.hpp"
#include "harness/replay/ceilings.hpp"

using namespace replay;

TEST(MatmulCeilings, EveryClassIsMeasuredAndPlausible) {
  REQUIRE_GPU();
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  L2Flush l2;
  StopRule rule;
  rule.timeout_s = 5;
  const auto peaks = measure_matmul_peaks(s, l2, rule);
  cudaStreamDestroy(s);
  std::map<std::string, double> tf;
  for (const auto& p : peaks) {
    EXPECT_TRUE(p.error.empty()) << p.cls << ": " << p.error;
    EXPECT_GT(p.best_us, 0) << p.cls;
    EXPECT_LE(p.best_us, p.median_us) << p.cls;
    tf[p.cls] = p.tflops;
    std::printf("%-18s %6lld^3  median %9.1f us  best %9.1f us  %7.1f TFLOP/s\n", p.cls.c_str(),
                static_cast<long long>(p.m), p.median_us, p.best_us, p.tflops);
    if (!p.note.empty()) std::printf("  %s: %s\n", p.cls.c_str(), p.note.c_str());
  }
  ASSERT_EQ(tf.size(), matmul_peak_classes().size());
  for (const auto& [cls, v] : tf) EXPECT_LT(v, 2500.0) << cls << ": above any dense peak";
  EXPECT_GT(tf["bf16"], 4 * tf["fp32"]);
  EXPECT_GT(tf["fp16"], 4 * tf["fp32"]);
  EXPECT_GT(tf["float8_tensorwise"], tf["bf16"]);
  EXPECT_GT(tf["float8_rowwise"], tf["bf16"]);
}
