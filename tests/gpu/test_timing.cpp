// The timing layer on the GPU: the SM clock probe reads a plausible clock, time_cold keeps or
// discards every sample it takes and says why it stopped, and a spin of known length is timed as
// that length.
#include "gpu_test_util.hpp"
#include "harness/measure/timing.hpp"

using namespace replay;

TEST(GpuTiming, ClockProbeReadsAPlausibleSmClock) {
  REQUIRE_GPU();
  DeviceBuffer out(sizeof(float));
  enqueue_clock_probe(static_cast<float*>(out.get()), nullptr);
  float mhz = 0;
  REPLAY_CUDA(cudaMemcpy(&mhz, out.get(), sizeof(float), cudaMemcpyDeviceToHost));
  const double max_mhz = max_sm_clock_mhz();
  std::printf("probe %.0f MHz, NVML max %.0f MHz\n", mhz, max_mhz);
  EXPECT_GT(mhz, 100.f);
  if (max_mhz > 0) EXPECT_LT(mhz, 1.05 * max_mhz);
}

TEST(GpuTiming, TimeColdKeepsOrDiscardsEverySampleAndSaysWhy) {
  REQUIRE_GPU();
  L2Flush l2;
  StopRule rule;
  rule.min_time_s = 0.01;
  rule.timeout_s = 5;
  auto fn = [](cudaStream_t s) { enqueue_spin(s, 20); };
  ColdTiming t = time_cold(fn, nullptr, l2, rule);
  EXPECT_NE(t.stop, StopReason::kNone);
  EXPECT_EQ((t.samples_us.size() + t.discarded_slow_clock) % 10, 0u);  // whole batches
  EXPECT_EQ(t.host_us.size(), t.samples_us.size());
  EXPECT_EQ(t.sm_mhz.size(), t.samples_us.size());
  for (double m : t.sm_mhz) EXPECT_GE(m, t.clock_floor_mhz);
  const SampleStats st = summarize(t.samples_us);
  std::printf("%zu samples, %zu dropped, median %.2f us, rel_ci %.4f, stop %s, %.2f s\n", st.n,
              t.discarded_slow_clock, st.median, st.rel_ci, stop_reason_name(t.stop), t.wall_s);
  // A 20 µs globaltimer spin is timed at 20 µs plus launch latency inside the events.
  EXPECT_GT(st.median, 19.5);
  EXPECT_LT(st.median, 30.0);
  if (t.stop == StopReason::kConverged) {
    EXPECT_LE(st.rel_ci, rule.max_noise);
    EXPECT_GE(st.n * st.median * 1e-6, rule.min_time_s * 0.99);
  }
}

// With the clock check off nothing is discarded and no probe runs.
TEST(GpuTiming, ClockCheckOff) {
  REQUIRE_GPU();
  L2Flush l2;
  StopRule rule;
  rule.min_time_s = 0.001;
  rule.min_clock_ratio = 0;
  ColdTiming t = time_cold([](cudaStream_t s) { enqueue_spin(s, 5); }, nullptr, l2, rule);
  EXPECT_EQ(t.discarded_slow_clock, 0u);
  EXPECT_TRUE(t.sm_mhz.empty());
  EXPECT_FALSE(t.samples_us.empty());
}
