// Multi-GPU tests (ctest label `multigpu`): `replay launch --nproc N -- run` on the per-rank
// tensor-parallel traces, one GPU per rank, NCCL between them. Each skips, saying why, on a
// machine with fewer GPUs than ranks ("needs 2 GPUs, found 1").
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "impls/cuda/cuda_check.hpp"

namespace replay {
namespace {

std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Skips the test (a macro: GTEST_SKIP returns from the function it is in) when fewer than n GPUs.
#define REQUIRE_GPUS(n)                                               \
  if (const int found_ = ::replay::cuda_device_count(); found_ < (n)) \
  GTEST_SKIP() << "needs " << (n) << " GPUs, found " << found_

// Every variant of the world-size-2 traces across 2 GPUs: eager collectives and the baselines
// through NCCL, every rank checked against its own reference, one merged results.json.
TEST(MultiGpu, LaunchTwoRanksOnTheWs2Traces) {
  REQUIRE_GPUS(2);
  const std::string t = std::string(REPLAY_TRACES_DIR) + "/tp/";
  const auto out = std::filesystem::temp_directory_path() / "replay_multigpu_ws2";
  std::filesystem::remove_all(out);
  const std::string cmd = std::string(REPLAY_BIN) + " launch --nproc 2 --timeout 600 -- run " + t +
                          "tp_colwise_ag_mm_bf16_ws2_16x32x24.json " + t +
                          "tp_rowwise_mm_rs_bf16_ws2_16x32x24.json " + t +
                          "tp_rowwise_mm_rs_3d_bf16_ws2_4x3x32x16.json --modes cold --out " +
                          out.string() + " > " + out.string() + ".log 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << read_text(out.string() + ".log");
  const std::string results = read_text(out / "results.json");
  EXPECT_NE(results.find("communicator of 2 rank(s)"), std::string::npos);
  EXPECT_NE(results.find("max over 2 ranks of the median"), std::string::npos);
  EXPECT_NE(results.find("rank 1: "), std::string::npos);  // rank 1's checks are in
  EXPECT_EQ(results.find("\"verdict\": \"FAIL\""), std::string::npos);
}

TEST(MultiGpu, LaunchFourRanksOnTheWs4Traces) {
  REQUIRE_GPUS(4);
  const std::string t = std::string(REPLAY_TRACES_DIR) + "/tp/";
  const auto out = std::filesystem::temp_directory_path() / "replay_multigpu_ws4";
  std::filesystem::remove_all(out);
  const std::string cmd = std::string(REPLAY_BIN) + " launch --nproc 4 --timeout 600 -- run " + t +
                          "tp_colwise_ag_mm_bf16_ws4_16x32x24.json " + t +
                          "tp_rowwise_mm_rs_bf16_ws4_16x32x24.json --modes cold --out " +
                          out.string() + " > " + out.string() + ".log 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << read_text(out.string() + ".log");
  EXPECT_NE(read_text(out / "results.json").find("max over 4 ranks of the median"),
            std::string::npos);
}

}  // namespace
}  // namespace replay
