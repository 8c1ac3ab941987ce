// `replay`: the CLI. Subcommands list, validate, plan, run (README.md documents them and the exit
// codes). Library code throws; this file maps errors to exit codes.
#include <malloc.h>
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "harness/cli/exit_codes.hpp"
#include "harness/dist/commands.hpp"
#include "harness/dist/launch_env.hpp"
#include "harness/dist/rank_results.hpp"
#include "harness/dist/rank_session.hpp"
#include "harness/measure/gpu_state.hpp"
#include "harness/measure/timing.hpp"
#include "harness/replay/ceilings.hpp"
#include "harness/replay/repro.hpp"
#include "harness/replay/runner.hpp"
#include "harness/replay/variants.hpp"
#include "harness/report/compare.hpp"
#include "harness/report/html.hpp"
#include "harness/report/markdown.hpp"
#include "harness/report/perfetto.hpp"
#include "harness/report/results_io.hpp"
#include "impls/cuda/cuda_check.hpp"
#include "impls/fusions/registry.hpp"
#include "impls/reference/saved_inputs.hpp"
#include "workloads/ir/error.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/ops/core_aten.hpp"
#include "workloads/ops/op.hpp"
#include "workloads/plan/plan.hpp"

#include "git_revision.hpp"  // generated at build time
#ifndef REPLAY_TRACES_DIR
#define REPLAY_TRACES_DIR "traces"
#endif

namespace fs = std::filesystem;
using namespace replay;

namespace {

// Trace files named on the command line; a directory stands for its *.json files, sorted.
std::vector<std::string> expand_traces(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (const auto& a : args) {
    if (fs::is_directory(a)) {
      std::vector<std::string> found;
      for (const auto& e : fs::directory_iterator(a))
        if (e.path().extension() == ".json") found.push_back(e.path().string());
      std::sort(found.begin(), found.end());
      out.insert(out.end(), found.begin(), found.end());
    } else {
      out.push_back(a);  // a missing file is reported by the loader
    }
  }
  return out;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string host_name() {
  char buf[256] = {};
  return gethostname(buf, sizeof buf - 1) == 0 ? buf : "unknown";
}

// Write `text` to `path` atomically (temp file + rename), so an earlier report survives a crash.
void write_file(const fs::path& path, const std::string& text) {
  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) throw std::runtime_error("cannot write " + tmp.string());
    f << text;
  }
  fs::rename(tmp, path);
}

int cmd_list(const std::string& traces_dir) {
  std::cout << "Bundled traces (" << traces_dir << "):\n";
  for (const auto& t : expand_traces({traces_dir})) {
    try {
      Graph g = load_trace(t, cut_options());
      std::cout << "  " << g.name << "  (" << g.nodes.size() << " nodes, phase "
                << g.source.value("phase", "?") << (g.golden ? ", golden tensors" : "")
                << (g.cut.empty()
                        ? ""
                        : ", graph cut at " + std::to_string(g.cut.size()) + " unsupported node(s)")
                << ")\n";
    } catch (const TraceError& e) {
      std::cout << "  " << t << "  INVALID: " << e.what() << "\n";
    }
  }
  std::cout << "\nFusions and their variants (every trace also runs reference and eager):\n";
  for (const FusionSpec* f : fusion_registry()) {
    std::cout << "  " << f->name << ": " << f->description << "\n";
    for (const auto& v : f->variants)
      std::cout << "      " << v.name << " (" << role_name(v.role) << "): " << v.description
                << "\n";
  }
  std::cout << "\nSupported ops (" << kOpCount << ", plus FX's getitem):\n";
  for (const OpDef* op : all_ops()) std::cout << "  " << op->name << "\n";
  const CoreAtenCoverage core = core_aten_coverage();
  std::cout << "\nCore ATen coverage: " << core.covered << " of " << core.total << " overloads\n  ("
            << core.source << ")\n  not covered:";
  for (size_t i = 0; i < core.missing.size(); ++i)
    std::cout << (i % 4 == 0 ? "\n    " : "  ") << core.missing[i];
  std::cout << "\n";
  return kExitOk;
}

int no_traces(const std::vector<std::string>& args) {
  std::string list;
  for (const auto& a : args) list += (list.empty() ? "" : ", ") + a;
  std::cerr << "error: no trace files (*.json) found in " << list << "\n";
  return kExitBadInput;
}

// A trace with ops the harness cannot run is loaded with its graph cut around them, so the rest
// is validated too; each cut node is reported, and the trace is invalid (exit 2) unless
// `allow_cut` (--allow-cut), as `replay run` replays it.
int cmd_validate(const std::vector<std::string>& traces, bool allow_cut) {
  auto files = expand_traces(traces);
  if (files.empty()) return no_traces(traces);
  int rc = kExitOk;
  for (const auto& t : files) {
    try {
      Graph g = load_trace(t, cut_options());
      std::string links;  // a backward's saved inputs: their forward, its outputs checked
      for (const ForwardOfSaved& f : forwards_of_saved_inputs(g))
        links += f.graph ? "; saved inputs from " + f.trace : "; forward " + f.path + " not found";
      for (const CutNode& c : g.cut) {
        const std::string line = t + ": " + c.describe() + " — `replay run` cuts the graph here";
        if (allow_cut)
          std::cout << "CUT     " << line << "\n";
        else
          std::cerr << "INVALID " << line << " (--allow-cut accepts it)\n";
      }
      for (const LackedValue& l : g.lacked) {
        const std::string line = t + ": graph " + (l.input ? "input '" : "output '") + l.name +
                                 "' is " + l.what + ", a dtype the harness lacks: not replayed";
        if (allow_cut)
          std::cout << "CUT     " << line << "\n";
        else
          std::cerr << "INVALID " << line << " (--allow-cut accepts it)\n";
      }
      if ((!g.cut.empty() || !g.lacked.empty()) && !allow_cut) {
        rc = kExitBadInput;
        continue;
      }
      std::cout << "OK      " << t << ": " << g.inputs.size() << " inputs, " << g.nodes.size()
                << " nodes, " << g.outputs.size() << " outputs" << links
                << (g.cut.empty() ? "" : "; " + std::to_string(g.cut.size()) + " node(s) cut")
                << "\n";
    } catch (const TraceError& e) {
      std::cerr << "INVALID " << e.what() << "\n";
      rc = kExitBadInput;
    }
  }
  return rc;
}

// `replay compare OLD NEW`: exit 1 on any SLOWER beyond the threshold or any numerics
// regression, 2 when a file is missing or not a results.json.
int cmd_compare(const std::string& old_path, const std::string& new_path, CompareOptions opt,
                const std::string& out) {
  auto read = [](const std::string& p) {
    std::ifstream f(p);
    if (!f) throw TraceError(p, "", "cannot open the results file");
    try {
      return nlohmann::json::parse(f);
    } catch (const nlohmann::json::exception& e) {
      throw TraceError(p, "", std::string("malformed JSON: ") + e.what());
    }
  };
  std::vector<CompareRow> rows;
  try {
    rows = compare_runs(read(old_path), read(new_path), opt);
  } catch (const std::invalid_argument& e) {
    throw TraceError(old_path + " / " + new_path, "", e.what());
  }
  const std::string md = render_compare(rows, opt);
  std::cout << md;
  if (!out.empty()) write_file(out, md);
  return compare_fails(rows, opt) ? kExitNumerics : kExitOk;
}

// `replay merge`: the shards' (and peers') results as one results.json, report.md and timeline.
int cmd_merge(const std::vector<std::string>& inputs, const std::string& out_dir) {
  std::vector<RunResult> parts;
  RunResult run;
  try {
    for (const auto& p : inputs) parts.push_back(read_results(p));
    run = merge_runs(parts, inputs);
  } catch (const ResultsError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const std::invalid_argument& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitBadInput;
  }
  fs::create_directories(out_dir);
  write_file(fs::path(out_dir) / "results.json", to_json(run).dump(1));
  write_file(fs::path(out_dir) / "report.md", render_markdown(run));
  write_file(fs::path(out_dir) / "timeline.perfetto.json", perfetto_trace(run).dump());
  write_file(fs::path(out_dir) / "report.html", render_html(run));
  std::cout << "merged " << inputs.size() << " results (" << run.traces.size() << " traces) into "
            << (fs::path(out_dir) / "results.json").string() << "\n";
  const int rc = exit_code(run, false, false);
  if (rc == kExitNumerics) std::cerr << "numerics check FAILED (see report.md)\n";
  return rc;
}

// A 64-bit seed, exactly: no sign, no overflow, no trailing text (CLI11 would saturate). False,
// with the error printed, otherwise.
bool parse_seed(const std::string& s, uint64_t& seed) {
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0])) || *end != '\0' ||
      errno == ERANGE) {
    std::cerr << "error: --seed " << s << " is not an integer in [0, 2^64-1]\n";
    return false;
  }
  seed = v;
  return true;
}

int cmd_plan(const std::string& trace) {
  Graph g = load_trace(trace, cut_options());
  nlohmann::json j = plan_to_json(g, make_plan(g, fusion_registry()));
  nlohmann::json cut = nlohmann::json::array();  // nodes cut out: ops the harness cannot run
  for (const CutNode& c : g.cut) cut.push_back(to_json(c));
  j["cut"] = cut;
  if (!g.lacked.empty()) {  // inputs and outputs of dtypes the harness lacks: not replayed
    nlohmann::json lacked = nlohmann::json::array();
    for (const LackedValue& l : g.lacked)
      lacked.push_back({{"value", l.name}, {"what", l.what}, {"input", l.input}});
    j["lacked"] = lacked;
  }
  std::cout << j.dump(2) << "\n";
  return kExitOk;
}

void print_summary(const TraceResult& t, const Ceilings& c) {
  std::printf("\n== %s\n", t.name.c_str());
  if (!t.error.empty())
    std::printf("   ERROR (%s): %s\n",
                t.error_kind == TraceResult::Error::kBadInput ? "bad input" : "runtime failure",
                t.error.c_str());
  for (const CutNode& c : t.cut_nodes)
    std::printf("   GRAPH CUT: %s (the rest of the graph replays)\n", c.describe().c_str());
  for (const auto& n : t.golden_not_compared)
    std::printf("   reference vs PyTorch golden: not compared: %s\n", n.c_str());
  if (!t.not_replayed.empty()) {
    std::printf("   NOT REPLAYED: %s\n",
                t.not_replayed.substr(t.not_replayed.find(':') + 2).c_str());
    return;
  }
  if (t.reference_s > 0 && t.reference_estimate_s > 0)
    std::printf("   reference: %.1f s (inputs + float64 reference; estimated %.1f s)\n",
                t.reference_s, t.reference_estimate_s);
  else if (t.reference_s > 0)
    std::printf("   reference: %.1f s (inputs + float64 reference)\n", t.reference_s);
  for (const auto& n : t.golden_check)
    std::printf("   reference vs PyTorch golden %-24s %s (rel_l2 %.2e, max %.0f ulp)\n",
                n.value.c_str(), n.pass() ? "PASS" : ("FAIL " + n.failure()).c_str(), n.rel_l2,
                n.max_ulp_err);
  for (const auto& r : t.regions) {
    const std::string sol = r.sol_terms(c).describe();
    std::printf("   %s%s%s\n", r.label.c_str(), sol.empty() ? "" : ": ", sol.c_str());
    for (const auto& v : r.variants) {
      std::printf("     %-10s ", v.variant.name.c_str());
      if (v.timed())
        std::printf("%10.2f us  %5.1f%% SOL  host %.1f us  ", v.stats.median,
                    r.sol_pct(v.stats.median, c), v.host_stats.median);
      if (v.host_steps.size() > 1) {  // the step that costs the host most
        const auto& s = *std::max_element(
            v.host_steps.begin(), v.host_steps.end(),
            [](const auto& a, const auto& b) { return a.median_us < b.median_us; });
        std::printf("(slowest: %s %.1f us)  ", s.step.c_str(), s.median_us);
      }
      if (v.cupti && v.cupti->error.empty()) {
        std::printf("kernels %.2f us  ", v.cupti->kernel_busy_us);
        if (v.cupti->kernels_overlap()) std::printf("(sum %.2f us)  ", v.cupti->kernel_sum_us);
      }
      if (!v.vector_widths.empty()) std::printf("vec %s  ", width_range(v.vector_widths).c_str());
      std::printf("numerics %s  ", std::string(verdict_name(v.verdict())).c_str());
      if (!v.skipped.empty()) std::printf("skipped: %s", v.skipped.c_str());
      if (v.host_enqueue_waited > 0)
        std::printf("(%zu of the host enqueues waited for the GPU)", v.host_enqueue_waited);
      std::printf("\n");
    }
  }
}

// One trace's results of every rank (each rank's TraceResult as a results.json of one trace,
// all-gathered through the rendezvous), merged (harness/dist/rank_results.hpp). Every rank merges,
// so every rank knows whether the run can go on.
TraceResult gather_rank_results(dist::RankSession& rank, const TraceResult& mine) {
  const std::string step = "results of " + mine.file;
  const std::vector<std::string> all =
      dist::step_blobs(rank.rendezvous().all_gather(dist::step_blob(step, dist::trace_blob(mine))),
                       step, rank.context().rank);
  std::vector<TraceResult> ranks;
  for (size_t r = 0; r < all.size(); ++r)
    ranks.push_back(dist::parse_trace_blob(all[r], static_cast<int>(r)));
  return dist::merge_rank_results(ranks, rank.context().shared_device);
}

int cmd_run(const std::vector<std::string>& traces, RunOptions opt, bool variants_given,
            const std::string& out_dir, const std::string& command_line, double rank_timeout_s) {
  for (const auto& v : opt.variants)
    if (!find_variant(fusion_registry(), v)) {
      std::string known;
      for (const auto& k : known_variants(fusion_registry()))
        known += (known.empty() ? "" : ", ") + k.name;
      std::cerr << "error: unknown variant '" << v << "' (expected one of " << known << ")\n";
      return kExitBadInput;
    }
  auto files = expand_traces(traces);
  if (files.empty()) return no_traces(traces);
  const size_t traces_total = files.size();
  if (opt.shard_count > 1) {
    files = shard_files(files, opt.shard_index, opt.shard_count);
    std::fprintf(stderr, "shard %zu/%zu: %zu of %zu traces\n", opt.shard_index, opt.shard_count,
                 files.size(), traces_total);
  }
  // Under a launcher (torchrun, mpirun, srun, `replay launch`) this process is one rank: it joins
  // the rendezvous, takes its GPU and the NCCL communicator (harness/dist/rank_session.hpp).
  std::unique_ptr<dist::RankSession> rank;
  if (const dist::EnvMap env = dist::process_env(); dist::launched(env)) {
    dist::LaunchEnv le;
    try {
      le = dist::parse_launch_env(env);
    } catch (const dist::LaunchEnvError& e) {
      std::cerr << "error: " << e.what() << "\n";
      return kExitBadInput;
    }
    try {
      rank = std::make_unique<dist::RankSession>(le, rank_timeout_s);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      const std::string who = "rank " + std::to_string(le.rank) + ": ";
      std::cerr << ("error: " + (what.rfind("rank ", 0) == 0 ? what : who + what) + "\n")
                << std::flush;
      return kExitRuntime;
    }
    opt.graph = false;  // not with NCCL calls of a non-blocking communicator (runner.hpp)
    if (le.rank > 0 && !opt.repro_dir.empty())  // rank 0 owns OUT; the others' bundles apart
      opt.repro_dir = (fs::path(out_dir) / ("rank" + std::to_string(le.rank)) / "repro").string();
  }
  const bool writes = !rank || rank->context().rank == 0;  // rank 0 writes the reports
  RunResult run;
  run.seed = opt.seed;
  run.environment = {{"git_revision", REPLAY_GIT_REVISION}};
  // "complete" turns true only after the last trace: a results.json left by a run that was
  // stopped (a killed rank, the launcher's timeout) says it is partial.
  run.run_info = {{"started_utc", utc_now()},
                  {"complete", false},
                  {"host", host_name()},
                  {"command_line", command_line},
                  {"stop_rule", to_json(opt.rule)},
                  {"modes", nlohmann::json::array({"cold"})},
                  {"warmup_runs", 3},
                  {"host_enqueue_method", kHostEnqueueMethod}};
  if (opt.shard_count > 1) {
    run.run_info["shard"] = std::to_string(opt.shard_index) + "/" + std::to_string(opt.shard_count);
    run.run_info["traces_total"] = traces_total;
  }
  if (opt.hot) run.run_info["modes"].push_back("hot");
  if (opt.graph) run.run_info["modes"].push_back("graph");
  if (rank) {
    const DistContext& d = rank->context();
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& rd : rank->devices())
      ranks.push_back(
          {{"rank", rd.rank}, {"host", rd.host}, {"device", rd.device}, {"uuid", rd.uuid}});
    run.run_info["dist"] = {
        {"world_size", d.world_size},
        {"launcher", rank->env().launcher},
        {"rendezvous", rank->rendezvous().address()},
        {"timeout_s", d.timeout_s},
        {"nccl", d.comm ? "communicator of " + std::to_string(d.world_size) + " rank(s)"
                        : "none: " + d.no_nccl_why},
        {"ranks", ranks},
        {"time",
         "max over ranks of the median, each measurement started "
         "behind a barrier"}};
    if (d.shared_device)
      run.gpu_note = std::string(dist::kSharedDeviceTimingNote) + ". " + d.no_nccl_why +
                     ": variants that need NCCL did not run (their regions ran eagerly, the "
                     "collectives over CUDA IPC); the others ran for correctness.";
  }
  if (!opt.test_slowdown_us.empty()) {
    run.run_info["test_slowdown_us"] = opt.test_slowdown_us;
    // Beside a note already there (ranks sharing a GPU), not over it.
    run.gpu_note = (run.gpu_note.empty() ? "" : run.gpu_note + " ") +
                   "TEST RUN: a spin kernel was added to the timed replays of some variants "
                   "(--test-slowdown); its times are not the kernels' times.";
  }
  std::unique_ptr<GpuSession> gpu;
  const bool wants_gpu = opt.variants.empty() ||
                         std::any_of(opt.variants.begin(), opt.variants.end(), [](const auto& v) {
                           return find_variant(fusion_registry(), v)->is_gpu();
                         });
  bool no_device = false, gpu_failed = false;
  std::string no_gpu_why = "no CUDA device (GPU replay needs one)";
  if (wants_gpu) {
    if (cuda_device_count() > 0) {
      try {
        gpu = std::make_unique<GpuSession>(rank ? rank->context().device : 0);
        run.environment.update(gpu->environment());
        run.ceilings.copy_gbps = gpu->bandwidth_gbps();
        if (opt.matmul_ceilings) {
          const auto peaks =
              measure_matmul_peaks(gpu->launch_context().stream, gpu->l2(), opt.rule);
          set_matmul_ceilings(peaks, run.ceilings);
          std::fprintf(stderr, "matmul ceilings (TFLOP/s):");
          for (const auto& p : peaks)
            if (p.tflops > 0)
              std::fprintf(stderr, " %s %.0f", p.cls.c_str(), p.tflops);
            else
              std::fprintf(stderr, " %s not measured (%s)", p.cls.c_str(), p.error.c_str());
          std::fprintf(stderr, "\n");
        }
        run.run_info["l2_flush_bytes"] = gpu->l2().bytes();
        run.run_info["gpu_state_start"] = gpu_state(rank ? rank->context().device : 0);
        if (run.run_info["gpu_state_start"].contains("driver_version"))
          run.environment["driver_version"] = run.run_info["gpu_state_start"]["driver_version"];
      } catch (const std::exception& e) {
        gpu.reset();
        gpu_failed = true;
        no_gpu_why = std::string("the CUDA device could not be used: ") + e.what();
        run.gpu_note = no_gpu_why;
      }
    } else {
      no_device = true;
      run.gpu_note =
          "GPU replay needs a CUDA device: none was found, so only the reference executor, "
          "trace validation and the fusion matchers ran.";
      std::cout << "NOTE: " << run.gpu_note << "\n";
    }
  }
  if (writes) fs::create_directories(out_dir);
  auto write_reports = [&] {  // after every trace: a later failure keeps what was measured
    if (!writes) return;
    write_file(fs::path(out_dir) / "results.json", to_json(run).dump(1));
    write_file(fs::path(out_dir) / "report.md", render_markdown(run));
    write_file(fs::path(out_dir) / "timeline.perfetto.json", perfetto_trace(run).dump());
    write_file(fs::path(out_dir) / "report.html", render_html(run));
  };
  const auto started = std::chrono::steady_clock::now();
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string& t = files[i];
    {  // progress line (stderr, so stdout stays the summary): position, elapsed, a naive ETA
      const double el =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      std::fprintf(stderr, "[%zu/%zu] %s  (elapsed %.0f s", i + 1, files.size(),
                   fs::path(t).filename().string().c_str(), el);
      if (i > 0) std::fprintf(stderr, ", ~%.0f s left", el / i * (files.size() - i));
      std::fprintf(stderr, ")\n");
    }
    TraceResult mine = run_trace(t, opt, gpu.get(), no_gpu_why, rank ? &rank->context() : nullptr);
    bool stop = false;
    if (rank) {
      try {
        mine = gather_rank_results(*rank, mine);
      } catch (const std::exception& e) {  // a rank gone: the run cannot go on
        mine.error_kind = TraceResult::Error::kRuntime;
        mine.error = "rank " + std::to_string(rank->context().rank) +
                     ": gathering the ranks' results failed: " + e.what();
        stop = true;
      }
      // A runtime failure on any rank ends the run on every rank (all merged the same): the
      // ranks cannot stay in lockstep past it.
      stop = stop || mine.error_kind == TraceResult::Error::kRuntime;
    }
    run.traces.push_back(std::move(mine));
    const TraceResult& tr = run.traces.back();
    if (writes) print_summary(tr, run.ceilings);
    if (gpu && tr.error_kind == TraceResult::Error::kRuntime) {
      // A sticky CUDA error poisons the context for the rest of the process: later traces still
      // run the reference and say why their GPU rows did not run.
      if (std::string why = gpu->broken(); !why.empty()) {
        gpu.reset();
        gpu_failed = true;
        no_gpu_why = "the CUDA context failed earlier in this run: " + why;
        run.gpu_note = no_gpu_why;
        std::cerr << "NOTE: " << no_gpu_why << "; GPU replay stops here\n";
      }
    }
    run.run_info["finished_utc"] = utc_now();
    write_reports();
    if (stop) {
      std::cerr << ("error: " + tr.error + "; the multi-process run stops here\n") << std::flush;
      break;
    }
  }
  if (gpu) run.run_info["gpu_state_end"] = gpu_state(rank ? rank->context().device : 0);
  run.run_info["complete"] = true;
  write_reports();
  if (writes)
    std::cout << "\nwrote " << (fs::path(out_dir) / "results.json").string() << " and "
              << (fs::path(out_dir) / "report.md").string() << "\n";
  const int rc = exit_code(run, gpu_failed, no_device && variants_given);
  if (rc == kExitNumerics && writes) std::cerr << "numerics check FAILED (see report.md)\n";
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  // The float64 reference allocates and frees tensors of hundreds of MB op after op. glibc serves
  // those with fresh mmap()s, so every op paid page faults and the kernel's page zeroing (45% of a
  // realistic reference run under perf). From the heap, kept (no trim), freed pages are reused.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, -1);
  CLI::App app{"replay: trace-replay benchmarking and verification harness for fusions"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("replay ") + REPLAY_GIT_REVISION);
  std::string traces_dir = REPLAY_TRACES_DIR;
  app.add_option("--traces-dir", traces_dir, "folder of bundled traces")->capture_default_str();

  auto* list =
      app.add_subcommand("list", "bundled traces, fusions and their variants, supported ops");
  auto* validate = app.add_subcommand("validate", "load and validate traces; exit 0 or 2");
  std::vector<std::string> vtraces;
  validate->add_option("traces", vtraces, "trace files or folders")->required();
  bool allow_cut = false;
  validate->add_flag("--allow-cut", allow_cut,
                     "accept a trace with ops the harness cannot run (`replay run` cuts the "
                     "graph around them; each is still listed)");
  auto* plan = app.add_subcommand("plan", "the fusion regions found in a trace, as JSON");
  std::string ptrace;
  plan->add_option("trace", ptrace, "trace file")->required();
  auto* compare = app.add_subcommand(
      "compare",
      "compare two results.json (old, new): FASTER/SLOWER/SAME/UNSURE per row; exit 1 "
      "on a SLOWER beyond the threshold or a numerics regression");
  std::string cold, cnew, cout_path;
  double threshold_pct = 5;
  compare->add_option("old", cold, "results.json of the old run")->required();
  compare->add_option("new", cnew, "results.json of the new run")->required();
  compare
      ->add_option("--threshold", threshold_pct,
                   "relative change of the median, in %, below "
                   "which a row is SAME")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1000.0));
  compare->add_option("--out", cout_path, "also write the Markdown table to this file");
  double min_change_us = CompareOptions{}.min_change_us;
  compare
      ->add_option("--min-change-us", min_change_us,
                   "a median that moved by at most this many µs is SAME (timing resolution "
                   "between processes)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  bool allow_missing = false, any_device = false;
  compare->add_flag("--allow-missing", allow_missing,
                    "rows of the old run missing or untimed in the new one do not fail the gate");
  compare->add_flag("--any-device", any_device,
                    "compare runs measured on different GPUs (an error otherwise)");
  auto* repro = app.add_subcommand(
      "repro", "write a reproducer bundle of one region of a trace (or of the whole graph)");
  std::string repro_trace, repro_region, repro_variant, repro_out, repro_seed = "0";
  repro->add_option("trace", repro_trace, "trace file")->required();
  repro
      ->add_option("--region", repro_region,
                   "region index (`replay plan` lists them), or `trace` for the whole graph")
      ->required();
  repro->add_option("--variant", repro_variant, "the variant the bundle is about (recorded)");
  repro->add_option("--seed", repro_seed, "seed of the original run's generated inputs")
      ->capture_default_str();
  repro->add_option("--out", repro_out, "bundle folder (default reports/repro/<trace>-r<region>)");
  auto* merge = app.add_subcommand(
      "merge", "join results.json files (the shards of a suite, PyTorch peers) into one run");
  std::vector<std::string> merge_inputs;
  std::string merge_out = "reports/merged";
  merge->add_option("results", merge_inputs, "results.json files")->required();
  merge->add_option("--out", merge_out, "output folder")->capture_default_str();
  auto* run = app.add_subcommand(
      "run", "replay traces through every variant; write results.json and report.md");
  std::vector<std::string> rtraces;
  run->add_option("traces", rtraces, "trace files or folders")->required();
  std::string variants_csv;
  RunOptions opt;
  std::string out_dir = "reports/latest";
  run->add_option("--variants", variants_csv,
                  "comma-separated variants (default: every variant of each trace; `replay list` "
                  "names them)");
  std::string seed_str = "0";
  run->add_option("--seed", seed_str,
                  "input generation seed, 0 to 2^64-1 (traces without golden inputs)")
      ->capture_default_str();
  run->add_option("--out", out_dir, "output folder")->capture_default_str();
  run->add_option("--min-samples", opt.rule.min_samples, "timing: minimum samples")
      ->capture_default_str();
  run->add_option("--max-time", opt.rule.timeout_s,
                  "timing: seconds per measurement before giving up on the noise target")
      ->capture_default_str();
  run->add_option("--noise", opt.rule.max_noise,
                  "timing: relative noise target (half-width of the 95% confidence interval of "
                  "the median / median)")
      ->capture_default_str();
  run->add_option("--min-time", opt.rule.min_time_s,
                  "timing: seconds of summed GPU time before a measurement may converge")
      ->capture_default_str();
  run->add_option("--min-clock-ratio", opt.rule.min_clock_ratio,
                  "timing: discard samples taken while the SM clock ran below this fraction of "
                  "its maximum (0: keep all)")
      ->capture_default_str();
  run->add_option("--throttle-recovery", opt.rule.throttle_recovery_s,
                  "timing: seconds the GPU idles after a batch with a discarded (throttled) "
                  "sample, before a shorter one")
      ->capture_default_str();
  std::vector<std::string> slowdown;
  run->add_option("--test-slowdown", slowdown,
                  "test only: VARIANT:US adds a spin of US µs to every timed replay of VARIANT "
                  "(proves that compare catches a slower variant; recorded in results.json)");
  std::string modes_csv = "cold,hot,graph";
  run->add_option("--modes", modes_csv,
                  "timing modes, comma-separated: cold (L2 flushed before each sample; always "
                  "measured, the one compare judges), hot (back to back, L2 warm), graph (the "
                  "replay captured into one CUDA graph, cold)")
      ->capture_default_str();
  std::string shard_spec;
  run->add_option("--shard", shard_spec,
                  "I/N: run share I (0-based) of N of the traces (sorted by path, every N-th), "
                  "for a CI matrix; `replay merge` joins the shards' results");
  bool no_repro = false;
  run->add_flag("--no-repro", no_repro,
                "do not write a reproducer bundle (OUT/repro/) for each numerics failure");
  bool no_cupti = false;
  run->add_flag("--no-cupti", no_cupti, "skip the CUPTI kernel summary");
  bool no_matmul_ceilings = false;
  run->add_flag(
      "--no-matmul-ceilings", no_matmul_ceilings,
      "do not measure the matmul peaks at the start (a few seconds); SOL then has no matmul "
      "term");
  run->add_option("--reference-budget", opt.reference_budget_s,
                  "seconds: a trace whose float64 reference is estimated to take longer on this "
                  "machine is not replayed (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  double rank_timeout_s = 30;
  run->add_option("--rank-timeout", rank_timeout_s,
                  "seconds: under a launcher (torchrun, mpirun, srun, `replay launch`), the limit "
                  "of every wait on another rank (rendezvous steps, NCCL init, each NCCL call)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);

  auto* launch = app.add_subcommand(
      "launch",
      "run N ranks of this binary on this host with torchrun's environment (RANK, WORLD_SIZE, "
      "LOCAL_RANK, MASTER_ADDR, MASTER_PORT): replay launch --nproc N -- <replay args>");
  int launch_nproc = 1, launch_port = 0;
  double launch_timeout = 0;
  std::vector<std::string> launch_args;
  launch->add_option("--nproc", launch_nproc, "number of ranks")
      ->required()
      ->check(CLI::Range(1, 1024));
  launch->add_option("--timeout", launch_timeout, "seconds for the whole run (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  launch->add_option("--master-port", launch_port, "rendezvous port (0: a free one)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  launch->add_option("args", launch_args, "the replay arguments of every rank, after --")
      ->required();
  auto* rdzv_check = app.add_subcommand(
      "rendezvous-check", "join the rendezvous of a multi-process run and check an all-gather");
  rdzv_check->group("");  // hidden: exercises the multi-process path (harness/dist/README.md)
  double rdzv_timeout = 30;
  int rdzv_hang_rank = -1, rdzv_die_rank = -1;
  rdzv_check->add_option("--timeout", rdzv_timeout, "seconds per rendezvous step")
      ->check(CLI::PositiveNumber);
  rdzv_check->add_option("--test-hang-rank", rdzv_hang_rank, "test only: this rank never joins");
  rdzv_check->add_option("--test-die-rank", rdzv_die_rank,
                         "test only: this rank kills itself after joining");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitBadInput;
  }
  try {
    if (*list) return cmd_list(traces_dir);
    if (*launch) return dist::cmd_launch(launch_nproc, launch_timeout, launch_port, launch_args);
    if (*rdzv_check) return dist::cmd_rendezvous_check(rdzv_timeout, rdzv_hang_rank, rdzv_die_rank);
    if (*validate) return cmd_validate(vtraces, allow_cut);
    if (*plan) return cmd_plan(ptrace);
    if (*compare) {
      CompareOptions opt;
      opt.threshold = threshold_pct / 100;
      opt.min_change_us = min_change_us;
      opt.allow_missing = allow_missing;
      opt.allow_device_mismatch = any_device;
      return cmd_compare(cold, cnew, opt, cout_path);
    }
    if (*merge) return cmd_merge(merge_inputs, merge_out);
    if (*repro) {
      ReproRequest req;
      req.trace_path = repro_trace;
      req.variant = repro_variant;
      if (repro_region != "trace") {
        try {
          size_t used = 0;
          req.region = std::stoi(repro_region, &used);
          if (used != repro_region.size() || req.region < 0) throw std::invalid_argument("");
        } catch (const std::exception&) {
          std::cerr << "error: --region " << repro_region
                    << ": expected a region index (0, 1, ...) or `trace`\n";
          return kExitBadInput;
        }
      }
      if (!parse_seed(repro_seed, req.seed)) return kExitBadInput;
      req.out_dir = !repro_out.empty()
                        ? repro_out
                        : "reports/repro/" + fs::path(repro_trace).stem().string() + "-" +
                              (req.region < 0 ? "trace" : "r" + std::to_string(req.region));
      try {
        const std::string bundle = make_repro(req);
        std::cout << "wrote " << bundle << " (and repro.json, README.md, repro.py beside it)\n";
        return kExitOk;
      } catch (const ReproError& e) {
        std::cerr << "error: " << e.what() << "\n";
        return kExitBadInput;
      }
    }
    if (*run) {
      bool given = !variants_csv.empty();
      if (given) {
        opt.variants.clear();
        std::stringstream ss(variants_csv);
        for (std::string v; std::getline(ss, v, ',');)
          if (!v.empty()) opt.variants.push_back(v);
        if (opt.variants.empty()) {
          std::cerr << "error: --variants names no variant\n";
          return kExitBadInput;
        }
      }
      opt.cupti = !no_cupti;
      opt.matmul_ceilings = !no_matmul_ceilings;
      if (!no_repro) opt.repro_dir = (fs::path(out_dir) / "repro").string();
      if (!shard_spec.empty()) {
        try {
          std::tie(opt.shard_index, opt.shard_count) = parse_shard(shard_spec);
        } catch (const std::invalid_argument& e) {
          std::cerr << "error: " << e.what() << "\n";
          return kExitBadInput;
        }
      }
      opt.hot = opt.graph = false;
      {
        std::stringstream ss(modes_csv);
        for (std::string m; std::getline(ss, m, ',');) {
          if (m == "hot")
            opt.hot = true;
          else if (m == "graph")
            opt.graph = true;
          else if (m != "cold") {
            std::cerr << "error: --modes " << modes_csv << ": unknown mode '" << m
                      << "' (expected cold, hot or graph)\n";
            return kExitBadInput;
          }
        }
      }
      for (const auto& s : slowdown) {
        const auto colon = s.rfind(':');
        try {
          if (colon == std::string::npos) throw std::invalid_argument(s);
          opt.test_slowdown_us[s.substr(0, colon)] = std::stod(s.substr(colon + 1));
        } catch (const std::exception&) {
          std::cerr << "error: --test-slowdown " << s << ": expected VARIANT:US\n";
          return kExitBadInput;
        }
      }
      if (!parse_seed(seed_str, opt.seed)) return kExitBadInput;
      std::string cmd;
      for (int i = 0; i < argc; ++i) cmd += (i ? " " : "") + std::string(argv[i]);
      return cmd_run(rtraces, opt, given, out_dir, cmd, rank_timeout_s);
    }
  } catch (const TraceError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitRuntime;
  }
  return kExitOk;
}
