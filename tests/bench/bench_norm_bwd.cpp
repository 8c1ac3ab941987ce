// norm_bwd split-size sweep (Google Benchmark): per norm backward region of each trace, the
// baseline, the optimized kernel at the heuristic's split size, and the optimized kernel at every
// split size from one row group per block (rows_per_iter) doubling up to the whole region in one
// block. Each iteration is one cold sample of the harness's own timing primitive (cold_samples: L2
// flushed by reading, events around the region's launches), as `replay run` and replay_bench
// time them. Counters: median_us, pct_SOL (the region's cost model against the session's measured
// copy bandwidth), copy_us (a device copy of the region's bytes, timed the same way: the floor at
// this size) and x_copy (median_us / copy_us), split (rows per block), blocks (partial rows of
// dw/db).
//
// Usage: replay_bench_norm_bwd [--traces-dir DIR] [--trace NAME]... [--shape
// ROWSxCOLS[:DTYPE][:rms]]...
//                              [google benchmark flags, e.g. --benchmark_filter=576000]
//   --trace   a bundled trace name (default: every bundled trace with a norm backward)
//   --shape   a synthetic LayerNorm (or :rms RMSNorm) backward of that shape (default bfloat16)
// Without a CUDA device every benchmark reports "skipped: no CUDA device". TUNING.md in
// impls/fusions/norm_bwd/ records sweeps and what the heuristic picks.
#include <benchmark/benchmark.h>

#include <cstring>
#include <filesystem>
#include <memory>

#include "harness/measure/timing.hpp"
#include "harness/replay/gpu_program.hpp"
#include "harness/replay/runner.hpp"
#include "impls/fusions/binding.hpp"
#include "impls/fusions/norm_bwd/params.hpp"
#include "impls/fusions/norm_bwd/tests/synthetic.hpp"
#include "workloads/ir/error.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/trace_loader.hpp"

namespace replay::fusions {
extern const FusionSpec norm_bwd;
}

using namespace replay;

namespace {

struct Fixture {
  Graph graph;
  Plan plan;
  std::map<int, HostTensor> inputs;
  std::vector<RegionResult> rows;
};

GpuSession& session() {
  static GpuSession s;
  return s;
}

// norm_bwd with the split size forced (0: the heuristic) for the program being built.
int64_t g_split = 0;

Binding split_bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  Region m = r;
  auto p = std::any_cast<norm_bwd::Params>(r.params);
  p.split_size = g_split;
  m.params = p;
  return norm_bwd::bind(g, m, v, ctx);
}

const FusionSpec& split_spec() {
  static const FusionSpec s = [] {
    FusionSpec f = fusions::norm_bwd;
    f.bind = split_bind;
    return f;
  }();
  return s;
}

// The fields of a region's NormBwdArgs that choose the row kernel, its geometry and occupancy
// (the heuristic's split), as the binder sets them; the pointers only say present or absent here.
NormBwdArgs shape_args(const Graph& g, const norm_bwd::Params& p) {
  static const float present[4] = {};
  auto at = [](int v) -> const void* { return v >= 0 ? present : nullptr; };
  NormBwdArgs a;
  a.rows = p.rows;
  a.cols = p.cols;
  a.layernorm = p.layernorm;
  a.stats = p.stats;
  a.x_dtype = g.meta(p.x).dtype;
  a.dy_dtype = g.meta(p.dy).dtype;
  a.xs = at(p.xs);
  if (p.xs >= 0) a.xs_dtype = g.meta(p.xs).dtype;
  a.w = at(p.w);
  if (p.w >= 0) a.w_dtype = g.meta(p.w).dtype;
  a.w_offset = static_cast<float>(p.w_offset);
  a.w_round = p.w_round;
  a.g_round = p.g_round;
  a.xhat_round = p.xhat_round;
  a.dwt_round = p.dwt_round;
  a.recenter = p.recenter;
  if (p.dx_part_round == DType::kBFloat16 || p.dx_part_round == DType::kFloat16)
    a.dx_part_round = p.dx_part_round;
  a.dw = const_cast<void*>(at(p.dw));
  a.db = const_cast<void*>(at(p.db));
  return a;
}

void run(benchmark::State& state, std::shared_ptr<Fixture> fx, size_t row, std::string variant,
         int64_t split) {
  if (cuda_device_count() == 0) {
    state.SkipWithError("skipped: no CUDA device");
    return;
  }
  try {
    GpuSession& gpu = session();
    g_split = split;
    GpuProgram prog(fx->graph, fx->plan, variant, fx->inputs, gpu.launch_context().stream);
    g_split = 0;
    const RegionResult& rr = fx->rows[row];
    if (!prog.fallback_reason(rr.region).empty()) {
      state.SkipWithError(("ran eagerly: " + prog.fallback_reason(rr.region)).c_str());
      return;
    }
    auto fn = [&](cudaStream_t s) {
      LaunchContext c = gpu.launch_context();
      c.stream = s;
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
    state.counters["median_us"] = median;
    state.counters["pct_SOL"] = rr.sol_pct(median, c);
    // The floor at this size: a device-to-device copy moving the region's bytes (half read, half
    // written), timed the same way (cold, events; cached per size), and the variant against it.
    const double copy = gpu.copy_us(rr.cost.bytes, StopRule{});
    state.counters["copy_us"] = copy;
    state.counters["x_copy"] = copy > 0 ? median / copy : 0;
    if (variant == "optimized") {
      const auto& p = std::any_cast<const norm_bwd::Params&>(fx->plan.regions[rr.region].params);
      const NormBwdArgs a = shape_args(fx->graph, p);
      const int64_t rpi = norm_bwd_geometry(a).rows_per_iter;
      int64_t eff = split > 0 ? split : norm_bwd_default_split(a);
      eff = (eff + rpi - 1) / rpi * rpi;
      state.counters["split"] = static_cast<double>(eff);
      state.counters["blocks"] = static_cast<double>((p.rows + eff - 1) / eff);
    }
  } catch (const std::exception& e) {
    g_split = 0;
    state.SkipWithError(e.what());
  }
}

void register_fixture(std::shared_ptr<Fixture> fx) {
  fx->rows = result_rows(fx->graph, fx->plan);
  for (size_t row = 0; row < fx->rows.size(); ++row) {
    const RegionResult& rr = fx->rows[row];
    if (rr.region < 0) continue;
    const auto& p = std::any_cast<const norm_bwd::Params&>(fx->plan.regions[rr.region].params);
    const int64_t rpi = norm_bwd_geometry(shape_args(fx->graph, p)).rows_per_iter;
    const std::string base = fx->graph.name + "/region" + std::to_string(rr.region) + "/";
    auto add = [&](const std::string& name, const std::string& variant, int64_t split) {
      benchmark::RegisterBenchmark((base + name).c_str(), run, fx, row, variant, split)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    };
    add("baseline", "baseline", 0);
    add("optimized", "optimized", 0);
    for (int64_t s = rpi; s < p.rows * 2; s *= 2)
      add("optimized/split:" + std::to_string(s), "optimized", s);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = REPLAY_TRACES_DIR;
  std::vector<std::string> traces, shapes;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--traces-dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a == "--trace" && i + 1 < argc) {
      traces.emplace_back(argv[++i]);
    } else if (a == "--shape" && i + 1 < argc) {
      shapes.emplace_back(argv[++i]);
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (traces.empty() && shapes.empty()) {
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      const std::string n = e.path().stem().string();
      if (e.path().extension() == ".json" && n.find("_train_bwd_") != std::string::npos &&
          n.find("norm") != std::string::npos)
        traces.push_back(n);
    }
    std::sort(traces.begin(), traces.end());
  }
  const FusionSpec* fusions[] = {&split_spec()};
  for (const auto& t : traces) {
    auto fx = std::make_shared<Fixture>();
    try {
      fx->graph = load_trace(dir + "/" + t + ".json");
      fx->plan = make_plan(fx->graph, fusions);
      fx->inputs = make_inputs(fx->graph, 0).values;
    } catch (const TraceError& e) {
      std::fprintf(stderr, "skipping %s\n", e.what());
      continue;
    }
    register_fixture(fx);
  }
  for (const auto& s : shapes) {  // ROWSxCOLS[:DTYPE][:rms]
    test::NormBwdForm f;
    const size_t x = s.find('x');
    f.lead = {std::stoll(s.substr(0, x))};
    f.cols = std::stoll(s.substr(x + 1));
    size_t c = s.find(':');
    while (c != std::string::npos) {
      const size_t e = s.find(':', c + 1);
      const std::string opt = s.substr(c + 1, e == std::string::npos ? e : e - c - 1);
      if (opt == "rms")
        f.layernorm = false;
      else
        f.dtype = opt;
      c = e;
    }
    auto fx = std::make_shared<Fixture>();
    fx->graph = parse_trace(test::norm_bwd_trace(f), "<" + s + ">");
    fx->graph.name = "synthetic_" + s;
    fx->plan = make_plan(fx->graph, fusions);
    fx->inputs = generate_inputs(fx->graph, 0);
    register_fixture(fx);
  }
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
