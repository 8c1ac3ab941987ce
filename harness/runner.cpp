#include "harness/runner.hpp"

#include <algorithm>
#include <map>

#include "harness/cupti_tracer.hpp"
#include "harness/gpu_replay.hpp"
#include "harness/timing.hpp"
#include "impls/reference/reference.hpp"
#include "workloads/error.hpp"
#include "workloads/trace_loader.hpp"

namespace replay {

GpuSession::GpuSession() {
  REPLAY_CUDA(cudaSetDevice(0));
  REPLAY_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  l2_ = std::make_unique<L2Flush>();
  bandwidth_gbps_ = measure_copy_bandwidth_gbps(stream_);
}

double GpuSession::copy_us(double sol_bytes, const StopRule& rule) {
  const auto bytes = static_cast<size_t>(sol_bytes / 2) / 16 * 16;
  if (bytes == 0) return 0;
  auto it = copy_cache_.find(bytes);
  if (it != copy_cache_.end()) return it->second;
  DeviceBuffer src(bytes), dst(bytes);
  REPLAY_CUDA(cudaMemsetAsync(src.get(), 1, bytes, stream_));
  auto samples = time_cold(
      [&](cudaStream_t s) {
        REPLAY_CUDA(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, s));
      },
      stream_, *l2_, rule);
  return copy_cache_[bytes] = summarize(samples).median;
}

GpuSession::~GpuSession() {
  if (stream_) cudaStreamDestroy(stream_);
}

nlohmann::json GpuSession::environment() const {
  cudaDeviceProp p{};
  REPLAY_CUDA(cudaGetDeviceProperties(&p, 0));
  int driver = 0, runtime = 0;
  REPLAY_CUDA(cudaDriverGetVersion(&driver));
  REPLAY_CUDA(cudaRuntimeGetVersion(&runtime));
  auto ver = [](int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); };
  return {{"device", p.name},
          {"compute_capability", std::to_string(p.major) + "." + std::to_string(p.minor)},
          {"sm_count", p.multiProcessorCount},
          {"global_memory_bytes", p.totalGlobalMem},
          {"l2_bytes", p.l2CacheSize},
          {"driver_version", ver(driver)},
          {"cuda_runtime", ver(runtime)}};
}

namespace {

double bytes_of(const Graph& g, const std::vector<int>& values) {
  double b = 0;
  for (int v : values) b += static_cast<double>(g.meta(v).nbytes());
  return b;
}

std::vector<NumericsResult> check(const Graph& g, const GpuProgram& prog,
                                  const std::vector<int>& values,
                                  const std::map<int, HostTensor>& ref) {
  std::vector<NumericsResult> out;
  for (int v : values)
    out.push_back(compare_tensors(g.values[v].name, prog.download(v), ref.at(v),
                                  default_tolerance(g.meta(v).dtype)));
  return out;
}

// Inputs: PyTorch's own (golden sidecar) when the trace has them, else generated from the seed.
std::map<int, HostTensor> make_inputs(const Graph& g, uint64_t seed, std::string* source,
                                      std::map<std::string, HostTensor>* golden) {
  if (g.golden) {
    *golden = read_safetensors(g.golden->path);
    std::map<int, HostTensor> in;
    for (int v : g.inputs) {
      auto it = golden->find(g.values[v].name);
      if (it == golden->end())
        throw TraceError(g.golden->path, g.values[v].name, "golden file lacks this graph input");
      if (it->second.meta.shape != g.meta(v).shape)
        throw TraceError(g.golden->path, g.values[v].name,
                         "golden tensor shape " + it->second.meta.str() +
                             " differs from the trace's " + g.meta(v).str());
      in[v] = it->second;
    }
    *source = "golden (" + g.golden->path + ")";
    return in;
  }
  *source = "generated (seed " + std::to_string(seed) + ", captured value statistics)";
  return generate_inputs(g, seed);
}

}  // namespace

TraceResult run_trace(const std::string& path, const RunOptions& opt, GpuSession* gpu,
                      bool* bad_input) {
  TraceResult tr;
  tr.file = path;
  Graph g;
  Plan plan;
  std::map<int, HostTensor> ref;
  try {
    g = load_trace(path);
    tr.name = g.name;
    plan = make_plan(g);
    std::map<std::string, HostTensor> golden;
    auto inputs = make_inputs(g, opt.seed, &tr.input_source, &golden);
    ref = run_reference(g, inputs);
    for (int v : g.outputs) {
      auto it = golden.find(g.values[v].name);
      if (it != golden.end())
        tr.golden_check.push_back(compare_tensors(g.values[v].name, ref.at(v), it->second,
                                                  default_tolerance(g.meta(v).dtype)));
    }
  } catch (const TraceError& e) {
    tr.error = e.what();
    if (tr.name.empty()) tr.name = path;
    *bad_input = true;
    return tr;
  }

  // Rows: the whole trace, then each region (unless a single region is the whole trace).
  const bool one_region_is_trace =
      plan.regions.size() == 1 && plan.regions[0].nodes.size() == g.nodes.size();
  RegionResult whole;
  whole.label = one_region_is_trace ? "trace = region 0: " + plan.regions[0].fusion : "trace";
  whole.fusion = one_region_is_trace ? plan.regions[0].fusion : "";
  for (const auto& n : g.nodes) whole.nodes.push_back(n.id);
  whole.sol_bytes = bytes_of(g, g.inputs) + bytes_of(g, g.outputs);
  tr.regions.push_back(whole);
  if (!one_region_is_trace)
    for (size_t r = 0; r < plan.regions.size(); ++r) {
      RegionResult rr;
      rr.label = "region " + std::to_string(r) + ": " + plan.regions[r].fusion;
      rr.fusion = plan.regions[r].fusion;
      for (int n : plan.regions[r].nodes) rr.nodes.push_back(g.nodes[n].id);
      rr.sol_bytes = bytes_of(g, plan.regions[r].inputs) + bytes_of(g, plan.regions[r].outputs);
      tr.regions.push_back(rr);
    }

  if (gpu)
    for (auto& row : tr.regions) row.copy_us = gpu->copy_us(row.sol_bytes, opt.rule);

  for (const auto& variant : opt.variants) {
    if (variant == "reference" || !gpu) {  // a row per region that says why it is not timed
      for (auto& row : tr.regions) {
        VariantResult v;
        v.variant = variant;
        v.skipped = variant == "reference" ? "CPU float64 oracle: not timed"
                                           : "no CUDA device (GPU replay needs one)";
        row.variants.push_back(v);
      }
      continue;
    }
    GpuProgram prog(g, plan, variant, ref);
    cudaStream_t s = gpu->stream();
    prog.poison_outputs(s);
    prog.run_all(s);
    REPLAY_CUDA(cudaStreamSynchronize(s));
    for (size_t row = 0; row < tr.regions.size(); ++row) {
      VariantResult v;
      v.variant = variant;
      const int r = one_region_is_trace ? 0 : static_cast<int>(row) - 1;  // -1: whole trace
      const bool whole_row = row == 0;
      const std::string why = r >= 0 ? prog.fallback_reason(r) : "";
      if (!why.empty() && (!whole_row || one_region_is_trace)) {
        v.skipped = "unsupported by this variant (" + why + "); ran eagerly";
      }
      v.numerics = check(g, prog, whole_row ? g.outputs : plan.regions[r].outputs, ref);
      if (v.skipped.empty()) {
        auto fn =
            whole_row
                ? std::function<void(cudaStream_t)>([&](cudaStream_t st) { prog.run_all(st); })
                : [&, r](cudaStream_t st) { prog.run_region(r, st); };
        std::vector<double> host_us;
        v.samples_us = time_cold(fn, s, gpu->l2(), opt.rule, 3, &host_us);
        v.stats = summarize(v.samples_us);
        v.host_stats = summarize(host_us);
        if (opt.cupti) v.cupti = trace_kernels(fn, s);
      }
      tr.regions[row].variants.push_back(std::move(v));
    }
  }
  return tr;
}

}  // namespace replay
