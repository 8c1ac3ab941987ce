#include "harness/replay/runner.hpp"

#include "harness/replay/repro.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "harness/dist/rank_results.hpp"
#include "harness/measure/cupti_tracer.hpp"
#include "harness/measure/timing.hpp"
#include "harness/replay/gpu_program.hpp"
#include "impls/eager/collective.hpp"
#include "impls/fusions/registry.hpp"
#include "impls/reference/reference.hpp"
#include "impls/reference/saved_inputs.hpp"
#include "workloads/ir/error.hpp"
#include "workloads/ir/strided_loop.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/ops/matmul.hpp"
#include "workloads/ops/op.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay {
namespace {

// The per-sample alignment of a multi-process run's ranks (a one-float NCCL all-reduce between the
// flush and the start event: harness/measure/TIMING.md, "Multi-process samples"); none without a
// communicator (ranks sharing a GPU, whose timings mean nothing) or in a single-process run.
struct RankAlign {
  std::optional<DeviceBuffer> word;
  SampleAlign fn;
  explicit RankAlign(const DistContext* dist) {
    // World size 1: NCCL's one-rank in-place all-reduce launches no kernel, and nothing needs
    // aligning (the CUPTI replay would drop a replay kernel in its place).
    if (!dist || !dist->comm || dist->world_size < 2) return;
    word.emplace(sizeof(float));
    REPLAY_CUDA(cudaMemset(word->get(), 0, sizeof(float)));
    fn = [dist, w = static_cast<float*>(word->get())](cudaStream_t st) {
      nccl_align_ranks(*dist, w, st);
    };
  }
};

// Per value: whether it depends on one of the graph inputs `from` (a random op's hidden
// "#uniform" draw, a cut node's output drawn from its stats).
std::vector<bool> depends_on(const Graph& g, const std::vector<int>& from) {
  std::vector<bool> r(g.values.size(), false);
  for (int v : from) r[v] = true;
  for (const Node& n : g.nodes) {
    bool any = false;
    for (const auto& o : n.operands) any = any || (o.is_tensor() && r[o.value]);
    for (int o : n.outputs) r[o] = any;
  }
  return r;
}

// The float64 reference of a world_size > 1 trace: every rank's inputs generated from the run's
// seed mixed with the rank (rank_seed), the graph evaluated for all ranks in lockstep
// (run_reference_ranks). A backward's saved inputs linked to a forward trace come from that
// forward's multi-rank reference, rank by rank (its inputs from the same rank seeds), rounded to
// the input's dtype, as derive_saved_inputs does for one rank. Returns every rank's values (what
// a multi-process replay checks each rank against). Golden sidecars hold one rank's tensors:
// refused, naming the file; so is a forward of another world size.
std::vector<std::map<int, HostTensor>> run_reference_all_ranks(
    const Graph& g, const std::vector<ForwardOfSaved>& forwards, uint64_t seed, TraceResult& tr) {
  if (g.golden)
    throw TraceError(g.file, "",
                     "a world_size " + std::to_string(g.world_size) +
                         " trace with a golden sidecar: per-rank golden tensors are not supported "
                         "yet (leave out \"golden\"; the reference simulates every rank)");
  std::vector<std::map<int, HostTensor>> inputs;
  for (int r = 0; r < g.world_size; ++r) inputs.push_back(generate_inputs(g, rank_seed(seed, r)));
  tr.input_source = "generated per rank (world_size " + std::to_string(g.world_size) +
                    ": rank r from seed " + std::to_string(seed) +
                    " + r * 0x9E3779B97F4A7C15, captured value statistics); the float64 "
                    "reference simulated every rank in lockstep";
  for (const ForwardOfSaved& f : forwards) {
    if (!f.graph) {
      tr.input_source += "; saved inputs linked to forward trace " + f.path +
                         " generated independently: the forward was not found";
      continue;
    }
    if (f.graph->world_size != g.world_size)
      throw TraceError(g.file, "",
                       "saved inputs come from forward trace '" + f.trace + "' of world_size " +
                           std::to_string(f.graph->world_size) + ", this trace's is " +
                           std::to_string(g.world_size));
    std::vector<std::map<int, HostTensor>> fin;
    for (int r = 0; r < g.world_size; ++r)
      fin.push_back(generate_inputs(*f.graph, rank_seed(seed, r)));
    std::vector<std::map<int, HostTensor>> fwd = run_reference_ranks(*f.graph, std::move(fin));
    for (int r = 0; r < g.world_size; ++r)
      for (int v : f.saved) {
        const TensorMeta& m = g.meta(v);
        HostTensor t = std::move(fwd[r].at(f.graph->find_value(g.values[v].from->output)));
        for (double& x : t.data) x = round_to(m.dtype, x);
        t.meta = TensorMeta{m.shape, contiguous_strides(m.shape), m.dtype};
        inputs[r][v] = std::move(t);
      }
    tr.input_source +=
        "; every rank's saved inputs from rank r of the float64 multi-rank "
        "reference of forward trace " +
        f.trace + " (its inputs from the same seeds)";
  }
  // An input marked the same as (or widened from) a derived one takes its source's values.
  for (auto& in : inputs)
    for (int v : g.inputs) {
      const Value& val = g.values[v];
      const int src = val.same_as >= 0 ? val.same_as : val.widened_from;
      if (src < 0 || !in.count(src) || forwards.empty()) continue;
      in[v] = in.at(src);
      in[v].meta.dtype = val.meta.dtype;
    }
  return run_reference_ranks(g, std::move(inputs));
}

}  // namespace

GpuSession::GpuSession(int device) : device_(device) {
  REPLAY_CUDA(cudaSetDevice(device));
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
  return copy_cache_[bytes] = summarize(samples.samples_us).median;
}

nlohmann::json GpuSession::environment() const {
  cudaDeviceProp p{};
  REPLAY_CUDA(cudaGetDeviceProperties(&p, device_));
  int driver = 0, runtime = 0;
  REPLAY_CUDA(cudaDriverGetVersion(&driver));
  REPLAY_CUDA(cudaRuntimeGetVersion(&runtime));
  auto ver = [](int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); };
  return {{"device", p.name},
          {"compute_capability", std::to_string(p.major) + "." + std::to_string(p.minor)},
          {"sm_count", p.multiProcessorCount},
          {"global_memory_bytes", p.totalGlobalMem},
          {"l2_bytes", p.l2CacheSize},
          {"cuda_driver_api", ver(driver)},
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
  whole.cost.bytes = trace_io_bytes(g);
  for (const Node& n : g.nodes)
    if (const double fl = matmul_flops(g, n); fl > 0) {
      whole.cost.flops += fl;
      whole.cost.matmul_flops[matmul_class(g, n)] += fl;
    }
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

std::string GpuSession::broken() const {
  const cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) return "";
  (void)cudaGetLastError();  // a non-sticky error clears here; a sticky one stays
  const cudaError_t again = cudaDeviceSynchronize();
  if (again == cudaSuccess) return "";
  return std::string(cudaGetErrorName(again)) + " (" + cudaGetErrorString(again) + ")";
}

ReferenceFootprint reference_footprint(const Graph& g) {
  ReferenceFootprint f;
  double largest = -1;
  for (size_t v = 0; v < g.values.size(); ++v) {
    const TensorMeta& m = g.values[v].meta;
    double b = static_cast<double>(m.numel()) * sizeof(double);  // the value, as doubles
    if (g.values[v].graph_input)  // generated storage, and the executor's copy of the input
      b += static_cast<double>(m.storage_elems()) * sizeof(double) +
           static_cast<double>(m.numel()) * sizeof(double);
    f.bytes += b;
    if (b > largest) largest = b, f.largest_value = static_cast<int>(v);
  }
  f.bytes += 2 * largest;  // an op's temporaries (a permuted copy of its input, its result)
  for (const Node& n : g.nodes) {
    if (const double fl = matmul_flops(g, n); fl > 0) {
      f.gemm_flops += fl;
      continue;
    }
    for (int out : n.outputs) f.elements += static_cast<double>(g.meta(out).numel());
  }
  for (int v : g.inputs)  // generated: one draw per storage element, then the logical copy
    f.elements += static_cast<double>(g.meta(v).storage_elems() + g.meta(v).numel());
  return f;
}

int reference_threads() {
  return host_threads();
}

double reference_elements_per_second() {
  return kReferenceElementsPerSecondPerThread * reference_threads();
}

double ReferenceFootprint::seconds(double gemm_gflops) const {
  return gemm_flops / (std::max(gemm_gflops, 1e-3) * 1e9) +
         elements / reference_elements_per_second();
}

double available_host_bytes() {
  double avail = 0;
  {
    std::ifstream f("/proc/meminfo");
    std::string key, unit;
    double kb = 0;
    while (f >> key >> kb >> unit)
      if (key == "MemAvailable:") avail = kb * 1024;
  }
  // A container's memory limit (cgroup v2, else v1) may be far below the machine's memory.
  auto read_num = [](const char* path) -> double {
    std::ifstream f(path);
    std::string s;
    if (!(f >> s) || s == "max") return 0;
    try {
      return std::stod(s);
    } catch (const std::exception&) {
      return 0;
    }
  };
  double limit = read_num("/sys/fs/cgroup/memory.max"),
         used = read_num("/sys/fs/cgroup/memory.current");
  if (limit <= 0) {
    limit = read_num("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    used = read_num("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  }
  if (limit > 0 && limit < 1e18) {
    const double cg = std::max(limit - used, 0.0);
    avail = avail > 0 ? std::min(avail, cg) : cg;
  }
  return avail;
}

namespace {

// Enqueues of one replay timed for its host enqueue (each behind a blocking kernel).
constexpr size_t kHostEnqueueSamples = 30;
// Host enqueues of each launch step alone (VariantResult::host_steps).
constexpr size_t kHostStepSamples = 10;

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

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  return buf;
}

// A reproducer bundle of a failing (row, variant), or why none was written.
std::string write_failure_repro(const Graph& g, const Plan& plan,
                                const std::map<int, HostTensor>& ref,
                                const std::vector<NumericsBounds>& defaults, int region,
                                const std::string& variant, const RunOptions& opt,
                                const std::string& file, const VariantResult& v) {
  ReproRequest req;
  req.trace_path = file;
  req.region = region;
  req.variant = variant;
  req.seed = opt.seed;
  req.max_bytes = 64.0 * 1024 * 1024;  // automatic bundles stay small; `replay repro` allows more
  req.out_dir =
      (std::filesystem::path(opt.repro_dir) /
       (g.name + "-" + (region < 0 ? "trace" : "r" + std::to_string(region)) + "-" + variant))
          .string();
  for (const auto& n : v.numerics)
    if (!n.pass()) {
      req.why = variant + " failed numerics on " + n.value + ": " + n.failure();
      break;
    }
  try {
    std::ifstream f(file);
    const nlohmann::json doc = nlohmann::json::parse(f);
    std::map<int, NumericsBounds> bounds;
    for (size_t i = 0; i < g.values.size(); ++i)
      bounds[static_cast<int>(i)] = output_bounds(g, plan, defaults, static_cast<int>(i));
    write_repro(req, doc, g, plan, ref, bounds);
    return req.out_dir;
  } catch (const std::exception& e) {
    return std::string("not written: ") + e.what();
  }
}

// The GPU part of one trace: per variant a poisoned run checked against the reference, then cold
// timing; CUPTI passes only after every variant is timed, so no timing runs with the profiler
// attached (trace_kernels detaches it when done).
void run_gpu(const Graph& g, const Plan& plan, const std::map<int, HostTensor>& ref,
             const std::vector<NumericsBounds>& bounds, const std::vector<VariantInfo>& variants,
             const RunOptions& opt, GpuSession& gpu, TraceResult& tr, const DistContext* dist) {
  LaunchContext ctx = gpu.launch_context();
  const RankAlign align(dist);
  StopAgreement agree;  // a multi-process run: every rank takes the same number of samples
  if (dist) {
    ctx.rank = dist->rank;
    ctx.world_size = dist->world_size;
    ctx.comm = dist->comm;
    agree = [dist](StopReason mine) {
      std::vector<StopReason> all;
      const std::string step = "when to stop timing";
      for (const std::string& b : dist::step_blobs(
               dist->all_gather(dist::step_blob(step, std::string(1, static_cast<char>(mine)))),
               step, dist->rank))
        all.push_back(b.size() == 1 ? static_cast<StopReason>(b[0]) : StopReason::kNone);
      return dist::agreed_stop(all);
    };
  }
  struct Timed {
    std::unique_ptr<GpuProgram> prog;
    std::vector<std::pair<size_t, std::function<void(cudaStream_t)>>> rows;  // row, replay
  };
  std::vector<Timed> timed;
  for (const VariantInfo& variant : variants) {
    if (!variant.is_gpu()) continue;
    Timed t;
    try {
      t.prog = std::make_unique<GpuProgram>(g, plan, variant.name, ref, ctx.stream, dist);
    } catch (const NoCommunicator& e) {
      // Ranks sharing a GPU have no NCCL communicator: a variant that runs a collective eagerly
      // cannot run (every rank decides the same); the others still run. Any other error of the
      // program stays an error.
      if (!dist || dist->comm) throw;
      for (RegionResult& rr : tr.regions) {
        VariantResult v;
        v.variant = variant;
        v.skipped = std::string("not run: ") + e.what();
        rr.variants.push_back(std::move(v));
      }
      timed.push_back(std::move(t));  // one per GPU variant (the CUPTI pass below indexes them)
      continue;
    }
    const GpuProgram& prog = *t.prog;
    prog.poison_outputs(ctx.stream);
    prog.run_all(ctx);
    for (size_t row = 0; row < tr.regions.size(); ++row) {
      RegionResult& rr = tr.regions[row];
      VariantResult v;
      v.variant = variant;
      const int r = rr.region;
      const bool whole_row = rr.nodes.size() == g.nodes.size();
      const std::string why = r >= 0 ? prog.fallback_reason(r) : "";
      if (!why.empty()) v.skipped = "unsupported by this variant (" + why + "); ran eagerly";
      if (r >= 0) {
        v.gemms = prog.gemm_choices(r);
      } else {
        for (size_t k = 0; k < plan.regions.size(); ++k) {
          const auto& c = prog.gemm_choices(static_cast<int>(k));
          v.gemms.insert(v.gemms.end(), c.begin(), c.end());
        }
      }
      for (int out : whole_row ? g.outputs : plan.regions[r].outputs)
        v.numerics.push_back(check_value(g, out, prog.download(out, ctx.stream), ref.at(out), ref,
                                         output_bounds(g, plan, bounds, out)));
      if (v.verdict() == Verdict::kFail && !opt.repro_dir.empty())
        v.repro = write_failure_repro(g, plan, ref, bounds, whole_row ? -1 : r, variant.name, opt,
                                      tr.file, v);
      if (v.skipped.empty()) {
        {  // one untimed replay of the row with the launchers' widths recorded
          LaunchWidthLog widths;
          if (whole_row)
            prog.run_all(ctx);
          else
            prog.run_region(r, ctx);
          REPLAY_CUDA(cudaStreamSynchronize(ctx.stream));
          v.vector_widths = widths.take();
        }
        const auto slow = opt.test_slowdown_us.find(variant.name);
        const double slow_us = slow == opt.test_slowdown_us.end() ? 0 : slow->second;
        auto fn = [&prog, &ctx, whole_row, r, slow_us](cudaStream_t st) {
          LaunchContext c = ctx;
          c.stream = st;
          if (whole_row)
            prog.run_all(c);
          else
            prog.run_region(r, c);
          if (slow_us > 0) enqueue_spin(st, slow_us);
        };
        if (dist) dist->barrier();  // the ranks start each measurement together
        // ... and each sample: a one-float all-reduce between the flush and the start event, so a
        // sample times the replay, not how late the other ranks' flush and enqueue came
        // (TIMING.md, "Multi-process samples"). Without a communicator (ranks sharing a GPU)
        // nothing aligns them: those timings mean nothing anyway.
        Timing ct = time_cold(fn, ctx.stream, gpu.l2(), opt.rule, 3, agree, align.fn);
        if (ct.samples_us.empty())  // a timeout with every sample under the clock floor
          v.skipped = "not timed: all " + std::to_string(ct.discarded_slow_clock) +
                      " samples ran with the SM clock below " +
                      std::to_string(static_cast<int>(ct.clock_floor_mhz)) +
                      " MHz (--min-clock-ratio) until the timeout";
        v.samples_us = std::move(ct.samples_us);
        v.stats = summarize(v.samples_us);
        const HostEnqueue he = time_host_enqueue(fn, ctx.stream, kHostEnqueueSamples);
        v.host_stats = summarize(he.us);
        v.host_enqueue_waited = he.waited;
        // Each launch step alone, behind the same blocking kernel: which op costs the host.
        for (size_t i = 0; i < prog.num_steps(); ++i) {
          if (!whole_row && prog.step_region(i) != r) continue;
          const HostEnqueue hs = time_host_enqueue(
              [&prog, &ctx, i](cudaStream_t st) {
                LaunchContext c = ctx;
                c.stream = st;
                prog.run_step(i, c);
              },
              ctx.stream, kHostStepSamples);
          v.host_steps.push_back(
              {prog.step_label(i), hs.us.empty() ? 0.0 : summarize(hs.us).median, hs.waited});
        }
        v.stop = ct.stop;
        v.timing_wall_s = ct.wall_s;
        v.sm_clock_mhz = summarize(ct.sm_mhz);
        v.discarded_slow_clock = ct.discarded_slow_clock;
        v.clock_floor_mhz = ct.clock_floor_mhz;
        if (opt.hot) {
          if (dist) dist->barrier();
          v.hot_samples_us = time_hot(fn, ctx.stream, opt.rule, 3, agree, align.fn).samples_us;
          v.hot_stats = summarize(v.hot_samples_us);
        }
        if (opt.graph && dist) {
          v.graph_skipped =
              "CUDA-graph timing of a multi-process replay is not run yet (NCCL calls of a "
              "non-blocking communicator inside a captured graph)";
        } else if (opt.graph) {
          std::unique_ptr<CapturedGraph> graph;
          try {
            graph = std::make_unique<CapturedGraph>(fn, ctx.stream);
          } catch (const std::runtime_error& e) {
            v.graph_skipped = e.what();
          }
          if (graph) {
            auto launch = [&graph](cudaStream_t st) { graph->launch(st); };
            v.graph_samples_us = time_cold(launch, ctx.stream, gpu.l2(), opt.rule, 3).samples_us;
            v.graph_stats = summarize(v.graph_samples_us);
          }
        }
        t.rows.emplace_back(row, fn);
      }
      rr.variants.push_back(std::move(v));
    }
    timed.push_back(std::move(t));
  }
  if (!opt.cupti) return;
  // A multi-process run aligns the ranks before each traced replay, as before each timed sample.
  for (size_t i = 0, vi = 0; i < variants.size(); ++i) {
    if (!variants[i].is_gpu()) continue;
    for (auto& [row, fn] : timed[vi].rows) {
      for (auto& v : tr.regions[row].variants)
        if (v.variant.name == variants[i].name) v.cupti = trace_kernels(fn, ctx.stream, align.fn);
    }
    ++vi;
  }
}

}  // namespace

TraceResult run_trace(const std::string& path, const RunOptions& opt, GpuSession* gpu,
                      const std::string& no_gpu_why, const DistContext* dist) {
  TraceResult tr;
  tr.file = path;
  tr.name = path;
  auto fail = [&](TraceResult::Error kind, const std::string& what) {
    tr.error_kind = kind;
    tr.error = what;
    return tr;
  };
  Graph g;
  Plan plan;
  std::map<int, HostTensor> ref;
  // world_size > 1: every rank's reference values (run_reference_all_ranks); `ref` stays empty.
  std::vector<std::map<int, HostTensor>> ref_ranks;
  std::vector<NumericsBounds> bounds;
  // A reference this machine cannot afford (time budget, memory) is a limit of the machine, not
  // of the trace: every row says why it was not replayed, and the run goes on (exit 0).
  auto not_replayed = [&](const std::string& why) {
    ref.clear();
    ref_ranks.clear();
    tr.not_replayed = why;
    tr.regions = result_rows(g, plan);
    for (auto& row : tr.regions)
      for (const VariantInfo& variant : variants_for(plan, opt)) {
        VariantResult v;
        v.variant = variant;
        v.skipped = tr.not_replayed;
        row.variants.push_back(v);
      }
    return tr;
  };
  try {
    g = load_trace(path, cut_options());
    tr.name = g.name;
    tr.cut_nodes = g.cut;
    for (const LackedValue& l : g.lacked)
      tr.lacked.push_back(std::string(l.input ? "input '" : "output '") + l.name + "': " + l.what);
    plan = make_plan(g, fusion_registry());
    for (const auto& d : plan.dropped) {
      std::string nodes;
      for (int n : d.nodes) nodes += (nodes.empty() ? "" : ", ") + g.nodes[n].id;
      tr.dropped_matches.push_back(d.fusion + " on [" + nodes + "]: " + d.reason);
    }
    for (const auto& d : plan.declined)
      tr.declined.push_back(d.fusion + " at node '" + g.nodes[d.node].id + "': " + d.reason);
    {  // one process per rank: the run's ranks must be the trace's (before the reference runs)
      // Launched with another world size: an error. Not launched (a folder of traces run by one
      // process, the bundled traces among them): the reference simulates every rank and the GPU
      // rows say how to start one process per rank (below), with or without a device.
      const std::string why =
          dist ? dist::world_size_mismatch(static_cast<int>(g.world_size), dist->world_size, true)
               : "";
      if (!why.empty()) throw TraceError(g.file, "", why);
    }
    // A backward trace's saved inputs come from its forward's reference (make_replay_inputs,
    // impls/reference/saved_inputs.hpp; golden traces keep PyTorch's): that reference runs first,
    // while the backward's generated inputs are held, so it adds to the time and, where it is the
    // larger, sets the memory estimate. The links are checked either way.
    const std::vector<ForwardOfSaved> forwards = forwards_of_saved_inputs(g);
    ReferenceFootprint need = reference_footprint(g);
    const Graph* big_graph = &g;
    for (const ForwardOfSaved& f : forwards) {
      if (!f.graph || g.golden) continue;
      const ReferenceFootprint fwd = reference_footprint(*f.graph);
      need.gemm_flops += fwd.gemm_flops;
      need.elements += fwd.elements;
      double held = fwd.bytes;  // the backward's generated inputs: storage and logical copy
      for (int v : g.inputs)
        held += static_cast<double>(g.meta(v).storage_elems() + g.meta(v).numel()) * sizeof(double);
      if (held > need.bytes) {
        need.bytes = held;
        need.largest_value = fwd.largest_value;
        big_graph = &*f.graph;
      }
    }
    if (g.world_size > 1) {  // the reference simulates every rank, all values held at once
      need.gemm_flops *= g.world_size;
      need.elements *= g.world_size;
      need.bytes *= g.world_size;
    }
    std::string skip_why;  // why this machine cannot afford the reference
    {
      const double gflops = need.gemm_flops > 0 ? reference_gemm_gflops() : 0;
      const double est = need.seconds(gflops);
      tr.reference_estimate_s = est;
      if (opt.reference_budget_s > 0 && est > opt.reference_budget_s) {
        char why[320];
        std::snprintf(why, sizeof why,
                      "not replayed: its float64 reference would take ~%.0f s on this machine "
                      "(%.0f GFLOP of matmuls at the measured %.0f GFLOP/s, %.2g elements of "
                      "other ops and inputs at ~%.0f M/s on %d threads), over the "
                      "--reference-budget of %.0f s (--reference-budget 0 lifts it)",
                      est, need.gemm_flops / 1e9, gflops, need.elements,
                      reference_elements_per_second() / 1e6, reference_threads(),
                      opt.reference_budget_s);
        skip_why = why;
      }
    }
    const double have = available_host_bytes();
    if (skip_why.empty() && have > 0 && need.bytes > 0.8 * have) {
      const Value& big = big_graph->values[need.largest_value];
      skip_why =
          "not replayed: " + path + ": node '" +
          (big.producer >= 0 ? big_graph->nodes[big.producer].id : big.name) +
          "': its float64 reference needs " + gib(need.bytes) + " of host memory (largest value " +
          big.meta.str() +
          (big_graph != &g ? " of forward trace " + big_graph->name + ", run for the saved inputs"
                           : "") +
          "), more than 80% of the " + gib(have) +
          " this machine has available (memory or container limit); run it on a larger machine";
    }
    if (dist) {  // the ranks decide together (their estimates may differ): any rank's reason, all
      std::string first;
      const std::string step = "whether to replay " + path;
      for (const std::string& w :
           dist::step_blobs(dist->all_gather(dist::step_blob(step, skip_why)), step, dist->rank))
        if (first.empty() && !w.empty()) first = w;
      skip_why = first;
    }
    if (!skip_why.empty()) return not_replayed(skip_why);
    const auto ref_start = std::chrono::steady_clock::now();
    if (g.world_size > 1) {
      ref_ranks = run_reference_all_ranks(g, forwards, opt.seed, tr);
      tr.reference_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - ref_start).count();
      if (dist) {  // this rank replays its own inputs and checks its own outputs
        ref = std::move(ref_ranks.at(static_cast<size_t>(dist->rank)));
        ref_ranks.clear();
        tr.input_source +=
            "; one process per rank, each replaying its own inputs and checking "
            "its own outputs";
      }
    }
    ReplayInputs inputs;  // world_size 1 (world_size > 1: each rank's, above)
    if (g.world_size == 1) {
      inputs = make_replay_inputs(g, opt.seed, forwards);
      tr.input_source = inputs.source;
    }
    // Random ops draw from the run's seed, not PyTorch's generator: outputs that depend on a
    // draw cannot match the golden ones and are not compared with them (said in the report).
    std::vector<int> draws, cut_drawn;  // inputs whose values PyTorch's golden run did not see
    for (int v : g.inputs) {
      if (g.values[v].uniform) draws.push_back(v);
      if (g.values[v].cut < 0) continue;
      if (!inputs.golden.count(g.values[v].name)) {
        cut_drawn.push_back(v);
        continue;
      }
      for (auto& o : tr.cut_nodes[static_cast<size_t>(g.values[v].cut)].outputs)
        o.golden = o.golden || o.value == g.values[v].name;
    }
    const std::vector<bool> random = depends_on(g, draws);
    if (!draws.empty())
      tr.input_source += "; random ops drawn from seed " + std::to_string(opt.seed) +
                         " (the same draw for the reference and every GPU variant)";
    // A cut node's outputs are drawn from their recorded stats, not PyTorch's values: golden
    // outputs downstream of a cut are not compared (said in the report, never a silent pass).
    const std::vector<bool> after_cut = depends_on(g, cut_drawn);
    if (!cut_drawn.empty()) {
      std::string names;
      for (int v : cut_drawn) names += (names.empty() ? "" : ", ") + g.values[v].name;
      tr.input_source += "; outputs " + names + " of cut nodes drawn from their stats (seed " +
                         std::to_string(opt.seed) + ")";
    }
    if (g.world_size == 1) {
      ref = run_reference(g, inputs.values);
      tr.reference_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - ref_start).count();
    }
    bounds = default_value_bounds(g);
    for (int v : g.outputs) {
      if (random[v]) continue;
      auto it = inputs.golden.find(g.values[v].name);
      if (after_cut[v] && it != inputs.golden.end()) {
        std::set<std::string> ids;
        for (int c : cut_drawn)
          if (depends_on(g, {c})[v]) ids.insert(g.cut[g.values[c].cut].id);
        std::string cuts;
        for (const auto& id : ids) cuts += (cuts.empty() ? "'" : ", '") + id + "'";
        tr.golden_not_compared.push_back(g.values[v].name + ": depends on cut node(s) " + cuts +
                                         ", whose outputs were drawn from their stats");
        continue;
      }
      if (it != inputs.golden.end() &&
          (it->second.meta.shape != g.meta(v).shape || it->second.meta.dtype != g.meta(v).dtype))
        throw TraceError(g.golden->path, g.values[v].name,
                         "golden output " + it->second.meta.str() + " differs from the trace's " +
                             g.meta(v).str());
      if (it != inputs.golden.end())
        tr.golden_check.push_back(
            check_value(g, v, ref.at(v), it->second, ref, output_bounds(g, plan, bounds, v)));
    }
  } catch (const TraceError& e) {
    return fail(TraceResult::Error::kBadInput, e.what());
  } catch (const std::bad_alloc&) {
    if (g.nodes.empty() && g.inputs.empty())  // while loading: the trace file itself
      return fail(TraceResult::Error::kBadInput,
                  path + ": ran out of host memory while loading it");
    // The footprint estimate was not enough: a trace this machine cannot replay, like one it
    // estimates too big.
    tr.golden_check.clear();
    return not_replayed("not replayed: " + path +
                        ": ran out of host memory while running the float64 reference (memory "
                        "or container limit); run it on a larger machine");
  } catch (const std::exception& e) {
    return fail(TraceResult::Error::kRuntime, path + ": " + e.what());
  }

  tr.regions = result_rows(g, plan);
  std::string no_gpu;
  if (g.world_size > 1 && !dist)  // one process, several ranks: the reference only
    no_gpu = "the trace is one rank of a world_size " + std::to_string(g.world_size) +
             " program: the reference simulated every rank on the CPU; GPU replay runs one "
             "process per rank (torchrun / mpirun / srun / `replay launch --nproc " +
             std::to_string(g.world_size) + " -- run ...`), each with a CUDA device" +
             (gpu ? std::string() : " (" + no_gpu_why + ")");
  else if (!gpu)
    no_gpu = no_gpu_why;
  const std::vector<VariantInfo> variants = variants_for(plan, opt);
  for (const VariantInfo& variant : variants) {
    if (variant.is_gpu() && no_gpu.empty()) continue;  // run below
    for (auto& row : tr.regions) {  // a row per region that says why it is not timed
      VariantResult v;
      v.variant = variant;
      v.skipped = variant.is_gpu() ? no_gpu : "CPU float64 oracle: not timed";
      row.variants.push_back(v);
    }
  }
  if (!no_gpu.empty()) return tr;
  try {
    // Every rank has its reference: the GPU phase (NCCL calls, watched from their enqueue) starts
    // together.
    if (dist) dist->barrier();
    for (auto& row : tr.regions) row.copy_us = gpu->copy_us(row.cost.bytes, opt.rule);
    run_gpu(g, plan, ref, bounds, variants, opt, *gpu, tr, dist);
  } catch (const TraceError& e) {
    return fail(TraceResult::Error::kBadInput, e.what());
  } catch (const std::invalid_argument& e) {  // a graph the GPU executors cannot lay out
    return fail(TraceResult::Error::kBadInput, path + ": " + e.what());
  } catch (const std::exception& e) {
    return fail(TraceResult::Error::kRuntime, path + ": " + e.what());
  }
  return tr;
}

}  // namespace replay
