// Google Benchmark runner for (trace, variant): one benchmark per bundled trace and GPU variant,
// manual timing with CUDA events and the L2 flushed before every iteration (the same method as
// `replay run`), so the JSON output works with Google Benchmark's compare.py.
// Usage: replay_bench [--traces-dir DIR] [google benchmark flags, e.g. --benchmark_format=json]
// Without a CUDA device every benchmark reports "skipped: no CUDA device".
#include <benchmark/benchmark.h>

#include <cstring>
#include <filesystem>
#include <memory>

#include "harness/gpu_replay.hpp"
#include "harness/timing.hpp"
#include "workloads/trace_loader.hpp"

using namespace replay;

namespace {

struct Fixture {  // one loaded trace, shared by its variants
  Graph graph;
  Plan plan;
  std::map<int, HostTensor> inputs;
  double sol_bytes = 0;
};

void run_variant(benchmark::State& state, std::shared_ptr<Fixture> fx, std::string variant) {
  if (cuda_device_count() == 0) {
    state.SkipWithError("skipped: no CUDA device");
    return;
  }
  try {
    GpuProgram prog(fx->graph, fx->plan, variant, fx->inputs);
    cudaStream_t s = nullptr;
    REPLAY_CUDA(cudaStreamCreate(&s));
    L2Flush l2;
    cudaEvent_t start, stop;
    REPLAY_CUDA(cudaEventCreate(&start));
    REPLAY_CUDA(cudaEventCreate(&stop));
    prog.run_all(s);  // warm-up
    for (auto _ : state) {
      l2.flush(s);
      REPLAY_CUDA(cudaEventRecord(start, s));
      prog.run_all(s);
      REPLAY_CUDA(cudaEventRecord(stop, s));
      REPLAY_CUDA(cudaEventSynchronize(stop));
      float ms = 0;
      REPLAY_CUDA(cudaEventElapsedTime(&ms, start, stop));
      state.SetIterationTime(ms * 1e-3);
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * fx->sol_bytes));
    for (size_t r = 0; r < fx->plan.regions.size(); ++r)
      if (!prog.fallback_reason(static_cast<int>(r)).empty())
        state.SetLabel("region " + std::to_string(r) +
                       " ran eagerly: " + prog.fallback_reason(static_cast<int>(r)));
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaStreamDestroy(s);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = REPLAY_TRACES_DIR;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--traces-dir") == 0) dir = argv[i + 1];
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    auto fx = std::make_shared<Fixture>();
    try {
      fx->graph = load_trace(f);
    } catch (const TraceError& e) {
      std::fprintf(stderr, "skipping %s\n", e.what());
      continue;
    }
    fx->plan = make_plan(fx->graph);
    fx->inputs = generate_inputs(fx->graph, 0);
    for (int v : fx->graph.inputs) fx->sol_bytes += static_cast<double>(fx->graph.meta(v).nbytes());
    for (int v : fx->graph.outputs)
      fx->sol_bytes += static_cast<double>(fx->graph.meta(v).nbytes());
    for (const char* variant : {"eager", "baseline", "optimized"})
      benchmark::RegisterBenchmark((fx->graph.name + "/" + variant).c_str(), run_variant, fx,
                                   std::string(variant))
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
