#include "harness/replay/runner.hpp"

#include <algorithm>
#include <map>

#include "harness/measure/cupti_tracer.hpp"
#include "harness/measure/timing.hpp"
#include "harness/replay/gpu_program.hpp"
#include "impls/fusions/registry.hpp"
#include "impls/reference/reference.hpp"
#include "workloads/ir/error.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay {

GpuSession::GpuSession() {
  REPLAY_CUDA(cudaSetDevice(0));
  REPLAY_CUDA(cudaStreamCreateWithFlags(&ctx_.stream, cudaStreamNonBlocking));
  REPLAY_CUDA(cudaStreamCreateWithFlags(&ctx_.side_stream, cudaStreamNonBlocking));
  l2_ = std::make_unique<L2Flush>();
  bandwidth_gbps_ = measure_copy_bandwidth_gbps(ctx_.stream);
}

GpuSession::~GpuSession() {
  if (ctx_.stream) cudaStreamDestroy(ctx_.stream);
  if (ctx_.side_stream) cudaStreamDestroy(ctx_.side_stream);
}

double GpuSession::copy_us(double sol_bytes, const StopRule& rule) {
  const auto bytes = static_cast<size_t>(sol_bytes / 2) / 16 * 16;
  if (bytes == 0) return 0;
  auto it = copy_cache_.find(bytes);
  if (it != copy_cache_.end()) return it->second;
  DeviceBuffer src(bytes), dst(bytes);
  REPLAY_CUDA(cudaMemsetAsync(src.get(), 1, bytes, ctx_.stream));
  auto samples = time_cold(
      [&](cudaStream_t s) {
        REPLAY_CUDA(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, s));
      },
      ctx_.stream, *l2_, rule);
  return copy_cache_[bytes] = summarize(samples).median;
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

std::vector<RegionResult> result_rows(const Graph& g, const Plan& plan) {
  std::vector<RegionResult> rows;
  const bool one_region_is_trace =
      plan.regions.size() == 1 && plan.regions[0].nodes.size() == g.nodes.size();
  RegionResult whole;
  whole.label = one_region_is_trace
                    ? "trace = region 0: " + std::string(plan.regions[0].fusion->name)
                    : "trace";
  whole.fusion = one_region_is_trace ? std::string(plan.regions[0].fusion->name) : "";
  whole.region = one_region_is_trace ? 0 : -1;
  for (const auto& n : g.nodes) whole.nodes.push_back(n.id);
  if (one_region_is_trace) {
    whole.cost = plan.regions[0].fusion->cost(g, plan.regions[0]);
    rows.push_back(whole);
    return rows;
  }
  std::vector<int> io = g.inputs;
  io.insert(io.end(), g.outputs.begin(), g.outputs.end());
  whole.cost.bytes = value_bytes(g, io);
  rows.push_back(whole);
  for (size_t r = 0; r < plan.regions.size(); ++r) {
    const Region& reg = plan.regions[r];
    RegionResult rr;
    rr.label = "region " + std::to_string(r) + ": " + std::string(reg.fusion->name);
    rr.fusion = reg.fusion->name;
    rr.region = static_cast<int>(r);
    for (int n : reg.nodes) rr.nodes.push_back(g.nodes[n].id);
    rr.cost = reg.fusion->cost(g, reg);
    rows.push_back(rr);
  }
  return rows;
}

namespace {

// The tolerance of output `v` of `row`: its fusion's, where it declares one, else the dtype's.
Tolerance tolerance_for(const Graph& g, const Plan& plan, int region, int v) {
  if (region >= 0) {
    const Region& r = plan.regions[region];
    if (r.fusion->tolerance)
      if (auto t = r.fusion->tolerance(g, r, v)) return *t;
  }
  return default_tolerance(g.meta(v).dtype);
}

std::vector<NumericsResult> check(const Graph& g, const Plan& plan, int region,
                                  const GpuProgram& prog, const std::vector<int>& values,
                                  const std::map<int, HostTensor>& ref) {
  std::vector<NumericsResult> out;
  for (int v : values)
    out.push_back(compare_tensors(g.values[v].name, prog.download(v), ref.at(v),
                                  tolerance_for(g, plan, region, v)));
  return out;
}

// Variants to run on this trace, in display order.
std::vector<VariantInfo> variants_for(const Plan& plan, const RunOptions& opt) {
  std::vector<VariantInfo> all = plan_variants(plan);
  if (opt.variants.empty()) return all;
  std::vector<VariantInfo> out;
  for (const auto& name : opt.variants) {
    auto v = find_variant(fusion_registry(), name);
    if (v) out.push_back(*v);
  }
  return out;
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
    plan = make_plan(g, fusion_registry());
    ReplayInputs inputs = make_inputs(g, opt.seed);
    tr.input_source = inputs.source;
    ref = run_reference(g, inputs.values);
    for (int v : g.outputs) {
      auto it = inputs.golden.find(g.values[v].name);
      if (it != inputs.golden.end())
        tr.golden_check.push_back(compare_tensors(g.values[v].name, ref.at(v), it->second,
                                                  default_tolerance(g.meta(v).dtype)));
    }
  } catch (const TraceError& e) {
    tr.error = e.what();
    if (tr.name.empty()) tr.name = path;
    *bad_input = true;
    return tr;
  }

  tr.regions = result_rows(g, plan);
  std::string no_gpu;
  if (!gpu)
    no_gpu = "no CUDA device (GPU replay needs one)";
  else if (g.world_size > 1)
    no_gpu = "the trace is one rank of a world_size " + std::to_string(g.world_size) +
             " program; multi-rank replay is not built yet";
  if (no_gpu.empty())
    for (auto& row : tr.regions) row.copy_us = gpu->copy_us(row.cost.bytes, opt.rule);

  for (const VariantInfo& variant : variants_for(plan, opt)) {
    if (!variant.is_gpu() || !no_gpu.empty()) {  // a row per region that says why it is untimed
      for (auto& row : tr.regions) {
        VariantResult v;
        v.variant = variant;
        v.skipped = variant.is_gpu() ? no_gpu : "CPU float64 oracle: not timed";
        row.variants.push_back(v);
      }
      continue;
    }
    GpuProgram prog(g, plan, variant.name, ref);
    const LaunchContext& ctx = gpu->launch_context();
    prog.poison_outputs(ctx.stream);
    prog.run_all(ctx);
    REPLAY_CUDA(cudaStreamSynchronize(ctx.stream));
    for (auto& row : tr.regions) {
      VariantResult v;
      v.variant = variant;
      const int r = row.region;
      const bool whole_row = row.nodes.size() == g.nodes.size();
      const std::string why = r >= 0 ? prog.fallback_reason(r) : "";
      if (!why.empty()) v.skipped = "unsupported by this variant (" + why + "); ran eagerly";
      v.numerics = check(g, plan, whole_row ? -1 : r, prog,
                         whole_row ? g.outputs : plan.regions[r].outputs, ref);
      if (v.skipped.empty()) {
        auto fn = [&, whole_row, r](cudaStream_t st) {
          LaunchContext c = ctx;
          c.stream = st;
          if (whole_row)
            prog.run_all(c);
          else
            prog.run_region(r, c);
        };
        std::vector<double> host_us;
        v.samples_us = time_cold(fn, ctx.stream, gpu->l2(), opt.rule, 3, &host_us);
        v.stats = summarize(v.samples_us);
        v.host_stats = summarize(host_us);
        if (opt.cupti) v.cupti = trace_kernels(fn, ctx.stream);
      }
      row.variants.push_back(std::move(v));
    }
  }
  return tr;
}

}  // namespace replay
