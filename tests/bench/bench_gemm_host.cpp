// Host enqueue of one eager matmul (lower_gemm, impls/eager/gemm.cu) against its problem size
// (Google Benchmark): why the mm nodes of the realistic traces cost 2-20x a bare kernel launch on
// the host (H100 on 2026-11-25: 7-8 us for [16, 64] x [64, 256], 75-121 us for the float32
// [8192, 4096] x [4096, 14336] of the float32 linear; reports/h100-2026-11-25-issue7-steps/).
// Each iteration is one enqueue timed behind the blocking kernel (time_host_enqueue), as `replay
// run` times a replay's host enqueue; the operands are uninitialized device buffers (what they
// hold does not change the enqueue). Counters: kernels (the kernels CUPTI saw in one launch,
// e.g. a split-K reduction beside the GEMM), gpu_us (one cold sample, L2 flushed); for scale,
// bare_launch times one launch of the harness's 1 us spin kernel (enqueue_spin) the same way.
//
// Usage: replay_bench_gemm_host [google benchmark flags, e.g. --benchmark_filter=float32]
// Without a CUDA device every benchmark reports "skipped: no CUDA device".
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "harness/measure/cupti_tracer.hpp"
#include "harness/measure/timing.hpp"
#include "impls/cuda/cuda_check.hpp"
#include "impls/eager/gemm.hpp"

using namespace replay;

namespace {

// [M, K] @ [K, N] -> [M, N], row-major operands, one dtype throughout.
struct Problem {
  int64_t M, N, K;
  DType dtype;
};

DeviceTensor matrix(void* ptr, DType t, int64_t rows, int64_t cols) {
  return device_tensor(ptr, TensorMeta{{rows, cols}, {cols, 1}, t});
}

void gemm_host(benchmark::State& state, Problem p) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    state.SkipWithError("skipped: no CUDA device");
    return;
  }
  const size_t es = dtype_size(p.dtype);
  DeviceBuffer a(p.M * p.K * es), b(p.K * p.N * es), c(p.M * p.N * es);
  REPLAY_CUDA(cudaMemset(a.get(), 0, a.bytes()));
  REPLAY_CUDA(cudaMemset(b.get(), 0, b.bytes()));
  Node n;
  n.id = "mm";
  n.op = Op::kMm;
  const EagerLaunch launch =
      lower_gemm(n, {matrix(a.get(), p.dtype, p.M, p.K), matrix(b.get(), p.dtype, p.K, p.N)},
                 {matrix(c.get(), p.dtype, p.M, p.N)});
  cudaStream_t s = nullptr;
  REPLAY_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  launch(s);  // the first launch chooses the algorithm
  REPLAY_CUDA(cudaStreamSynchronize(s));
  const CuptiSummary k = trace_kernels(launch, s);
  int kernels = 0;
  for (const auto& r : k.kernels) kernels += r.count;
  L2Flush l2;
  const std::vector<double> gpu = cold_samples(launch, s, l2, 3);
  size_t waited = 0;
  for (auto _ : state) {
    const HostEnqueue h = time_host_enqueue(launch, s, 1);
    waited += h.waited;
    state.SetIterationTime(h.us.empty() ? 0.1 : h.us[0] * 1e-6);
  }
  REPLAY_CUDA(cudaStreamDestroy(s));
  state.counters["kernels"] = kernels;
  state.counters["gpu_us"] = gpu.back();
  state.counters["waited"] = static_cast<double>(waited);
  if (!k.error.empty()) state.SetLabel("CUPTI: " + k.error);
}

void bare_launch(benchmark::State& state) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    state.SkipWithError("skipped: no CUDA device");
    return;
  }
  cudaStream_t s = nullptr;
  REPLAY_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto launch = [](cudaStream_t st) { enqueue_spin(st, 1); };
  launch(s);
  REPLAY_CUDA(cudaStreamSynchronize(s));
  for (auto _ : state) {
    const HostEnqueue h = time_host_enqueue(launch, s, 1);
    state.SetIterationTime(h.us.empty() ? 0.1 : h.us[0] * 1e-6);
  }
  REPLAY_CUDA(cudaStreamDestroy(s));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::RegisterBenchmark("bare_launch", bare_launch)
      ->UseManualTime()
      ->Iterations(30)
      ->Unit(benchmark::kMicrosecond);
  // Shapes of the bundled traces' mm nodes (M = batch x tokens), small to large.
  const Problem problems[] = {
      {16, 256, 64, DType::kBFloat16},       {1024, 1024, 1024, DType::kBFloat16},
      {8192, 6400, 1600, DType::kBFloat16},  {8192, 14336, 4096, DType::kBFloat16},
      {8192, 4096, 14336, DType::kBFloat16}, {16, 256, 64, DType::kFloat32},
      {1024, 1024, 1024, DType::kFloat32},   {8192, 14336, 4096, DType::kFloat32},
      {4096, 14336, 8192, DType::kFloat32}};
  for (const Problem& p : problems) {
    const std::string name = "mm/" + std::string(dtype_name(p.dtype)) + "/" + std::to_string(p.M) +
                             "x" + std::to_string(p.N) + "x" + std::to_string(p.K);
    benchmark::RegisterBenchmark(name.c_str(), gemm_host, p)
        ->UseManualTime()
        ->Iterations(30)
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
