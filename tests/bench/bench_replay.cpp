// Google Benchmark runner: one benchmark per (bundled trace, row, GPU variant), where a row is the
// whole trace or one fusion region (harness result_rows). Each iteration is one cold sample of the
// harness's own timing primitive (cold_samples: L2 flushed by reading, events around the replay),
// so the numbers match `replay run` and the JSON output works with Google Benchmark's compare.py.
// Counters: bytes/s and FLOP/s of the row's cost (over the mean), and the median µs and its % SOL
// against the session's measured copy bandwidth, as `replay run` reports them.
// Usage: replay_bench [--traces-dir DIR] [google benchmark flags, e.g. --benchmark_format=json]
// Without a CUDA device every benchmark reports "skipped: no CUDA device".
#include <benchmark/benchmark.h>

#include <cstring>
#include <filesystem>
#include <memory>

#include "harness/measure/timing.hpp"
#include "harness/replay/gpu_program.hpp"
#include "harness/replay/runner.hpp"
#include "impls/fusions/registry.hpp"
#include "workloads/ir/error.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/trace_loader.hpp"

using namespace replay;

namespace {

struct Fixture {  // one loaded trace, shared by its benchmarks
  Graph graph;
  Plan plan;
  std::map<int, HostTensor> inputs;
  std::vector<RegionResult> rows;
};

GpuSession& session() {
  static GpuSession s;
  return s;
}

void run_variant(benchmark::State& state, std::shared_ptr<Fixture> fx, size_t row,
                 std::string variant) {
  if (cuda_device_count() == 0) {
    state.SkipWithError("skipped: no CUDA device");
    return;
  }
  try {
    GpuSession& gpu = session();
    GpuProgram prog(fx->graph, fx->plan, variant, fx->inputs, gpu.launch_context().stream);
    const RegionResult& rr = fx->rows[row];
    if (rr.region >= 0 && !prog.fallback_reason(rr.region).empty()) {
      state.SkipWithError(("ran eagerly: " + prog.fallback_reason(rr.region)).c_str());
      return;
    }
    const bool whole = rr.nodes.size() == fx->graph.nodes.size();
    auto fn = [&](cudaStream_t s) {
      LaunchContext c = gpu.launch_context();
      c.stream = s;
      if (whole)
        prog.run_all(c);
      else
        prog.run_region(rr.region, c);
    };
    cudaStream_t s = gpu.launch_context().stream;
    for (int i = 0; i < 3; ++i) fn(s);  // warm-up, as `replay run`
    std::vector<double> us;
    for (auto _ : state) {
      us.push_back(cold_samples(fn, s, gpu.l2(), 1)[0]);
      state.SetIterationTime(us.back() * 1e-6);
    }
    Ceilings c;
    c.copy_gbps = gpu.bandwidth_gbps();
    const double median = summarize(us).median;
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * rr.cost.bytes));
    state.counters["FLOP/s"] =
        benchmark::Counter(rr.cost.flops, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["median_us"] = median;
    state.counters["pct_SOL"] = rr.sol_pct(median, c);
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
      fx->plan = make_plan(fx->graph, fusion_registry());
      fx->inputs = make_inputs(fx->graph, 0).values;
    } catch (const TraceError& e) {
      std::fprintf(stderr, "skipping %s\n", e.what());
      continue;
    }
    fx->rows = result_rows(fx->graph, fx->plan);
    for (size_t row = 0; row < fx->rows.size(); ++row)
      for (const auto& v : plan_variants(fx->plan)) {
        if (!v.is_gpu()) continue;
        std::string name =
            fx->graph.name + "/" + (row == 0 ? "trace" : fx->rows[row].label) + "/" + v.name;
        benchmark::RegisterBenchmark(name.c_str(), run_variant, fx, row, v.name)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
