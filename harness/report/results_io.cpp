#include "harness/report/results_io.hpp"

#include "harness/measure/timeline_overlap.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>

namespace replay {
namespace {

// A cursor into the document: the JSON value and its path, for errors that name both.
struct JNode {
  const nlohmann::json& j;
  std::string path;
  const std::string& file;

  [[noreturn]] void fail(const std::string& what) const {
    throw ResultsError(file + ": " + (path.empty() ? "/" : path) + ": " + what);
  }
  bool has(const char* key) const { return j.is_object() && j.contains(key); }
  JNode at(const char* key) const {
    if (!j.is_object()) fail("expected an object");
    if (!j.contains(key)) fail(std::string("missing field \"") + key + "\"");
    return {j.at(key), path + "/" + key, file};
  }
  JNode at(size_t i) const { return {j.at(i), path + "/" + std::to_string(i), file}; }
  std::vector<JNode> items() const {
    if (!j.is_array()) fail("expected an array");
    std::vector<JNode> out;
    for (size_t i = 0; i < j.size(); ++i) out.push_back(at(i));
    return out;
  }
  std::string str() const {
    if (!j.is_string()) fail("expected a string");
    return j.get<std::string>();
  }
  double num() const {  // null: a non-finite number to_json could not write (see the header)
    if (j.is_null()) return std::numeric_limits<double>::infinity();
    if (!j.is_number()) fail("expected a number");
    return j.get<double>();
  }
  int64_t integer() const {
    if (!j.is_number_integer()) fail("expected an integer");
    return j.get<int64_t>();
  }
  bool boolean() const {
    if (!j.is_boolean()) fail("expected true or false");
    return j.get<bool>();
  }
  uint64_t uinteger() const {
    if (!j.is_number_unsigned()) fail("expected a non-negative integer");
    return j.get<uint64_t>();
  }
  std::vector<double> nums() const {
    std::vector<double> out;
    for (const JNode& n : items()) out.push_back(n.num());
    return out;
  }
  std::vector<std::string> strs() const {
    std::vector<std::string> out;
    for (const JNode& n : items()) out.push_back(n.str());
    return out;
  }
  // Optional fields: the default when absent.
  std::string str_or(const char* key, const std::string& def) const {
    return has(key) ? at(key).str() : def;
  }
  double num_or(const char* key, double def) const { return has(key) ? at(key).num() : def; }
};

SampleStats read_stats(const JNode& n) {
  SampleStats s;
  s.n = static_cast<size_t>(n.at("n").uinteger());
  s.median = n.at("median_us").num();
  s.q1 = n.at("q1_us").num();
  s.q3 = n.at("q3_us").num();
  s.iqr = n.at("iqr_us").num();
  s.min = n.at("min_us").num();
  s.max = n.at("max_us").num();
  s.mean = n.at("mean_us").num();
  s.stdev = n.at("stdev_us").num();
  s.rel_noise = n.at("rel_noise").num();
  // Version 1 before the stopping rule on the median's CI had no interval.
  s.median_ci_lo = n.num_or("median_ci_lo_us", 0);
  s.median_ci_hi = n.num_or("median_ci_hi_us", 0);
  s.rel_ci = n.num_or("rel_ci", 0);
  return s;
}

StopReason read_stop(const JNode& n) {
  const std::string s = n.str();
  for (StopReason r : {StopReason::kConverged, StopReason::kTimeout, StopReason::kMaxSamples,
                       StopReason::kFixedCount, StopReason::kNone})
    if (s == stop_reason_name(r)) return r;
  n.fail("expected a stop reason (converged, timeout, max_samples, fixed_count, running), got \"" +
         s + "\"");
}

NumericsResult read_numerics(const JNode& n) {
  NumericsResult r;
  r.value = n.at("value").str();
  const JNode dt = n.at("dtype");
  const auto d = parse_dtype(dt.str());
  if (!d) dt.fail("expected a dtype name, got \"" + dt.str() + "\"");
  r.dtype = *d;
  r.numel = n.at("numel").integer();
  r.nonfinite_mismatch = n.at("nonfinite_mismatch").integer();
  r.beyond_1ulp = n.at("beyond_1ulp").integer();
  r.beyond_1ulp_share = n.at("beyond_1ulp_share").num();
  r.max_ulp_err = n.at("max_ulp_err").num();
  r.max_abs_err = n.at("max_abs_err").num();
  r.max_rel_err = n.at("max_rel_err").num();
  r.rel_l2 = n.at("rel_l2").num();
  r.bias = n.at("bias").num();
  r.bias_se = n.at("bias_se").num();
  r.max_row_rel_l2 = n.at("max_row_rel_l2").num();
  r.worst_row = n.at("worst_row").integer();
  r.elem_excess = n.at("elem_excess").integer();
  r.not_checked = n.str_or("not_checked", "");
  const JNode b = n.at("bounds");
  r.bounds.max_rel_l2 = b.at("max_rel_l2").num();
  r.bounds.max_beyond_1ulp = b.at("max_beyond_1ulp").num();
  r.bounds.max_bias = b.at("max_bias").num();
  r.bounds.max_row_rel_l2 = b.at("max_row_rel_l2").num();
  r.bounds.elem_floor = b.at("elem_floor").num();
  // Added later (results before them: 2 ulps, no share allowed beyond).
  if (b.has("elem_ulps")) r.bounds.elem_ulps = b.at("elem_ulps").num();
  if (b.has("share_floor")) r.bounds.share_floor = b.at("share_floor").num();
  if (b.has("addend_ulps")) r.bounds.addend_ulps = b.at("addend_ulps").boolean();
  if (b.has("check_as")) {
    const auto d = parse_dtype(b.at("check_as").str());
    if (!d) b.at("check_as").fail("expected a dtype name");
    r.bounds.check_as = *d;
  }
  r.bounds.why = b.at("why").str();
  if (n.has("first_bad")) {
    const JNode f = n.at("first_bad");
    for (const JNode& i : f.at("index").items()) r.first_bad.push_back(i.integer());
    r.first_got = f.at("got").num();
    r.first_target = f.at("target").num();
  }
  return r;
}

VariantInfo read_variant_info(const JNode& v) {
  VariantInfo info;
  info.name = v.at("variant").str();
  if (v.str_or("kind", "") == "peer") {
    info.kind = VariantInfo::kPeer;
  } else if (info.name == kReferenceVariant) {
    info.kind = VariantInfo::kReference;
  } else if (info.name == kEagerVariant) {
    info.kind = VariantInfo::kEager;
  } else {
    info.kind = VariantInfo::kFusion;
    const JNode role = v.at("role");
    const std::string r = role.str();
    if (r == role_name(Role::kBaseline))
      info.role = Role::kBaseline;
    else if (r == role_name(Role::kOptimized))
      info.role = Role::kOptimized;
    else if (r == role_name(Role::kAlternative))
      info.role = Role::kAlternative;
    else
      role.fail("expected baseline, optimized or alternative, got \"" + r + "\"");
  }
  return info;
}

CuptiSummary read_cupti(const JNode& c) {
  CuptiSummary s;
  for (const JNode& k : c.at("kernels").items())
    s.kernels.push_back(
        {k.at("name").str(), static_cast<int>(k.at("count").integer()), k.at("total_us").num()});
  s.kernel_sum_us = c.at("kernel_sum_us").num();
  s.span_us = c.at("span_us").num();
  s.error = c.str_or("error", "");
  if (c.has("timeline"))  // version 2
    for (const JNode& k : c.at("timeline").items()) {
      KernelEvent e;
      e.name = k.at("name").str();
      e.start_us = k.at("start_us").num();
      e.dur_us = k.at("dur_us").num();
      e.stream = static_cast<uint32_t>(k.at("stream").uinteger());
      const auto grid = k.at("grid").items(), block = k.at("block").items();
      if (grid.size() != 3) k.at("grid").fail("expected [x, y, z]");
      if (block.size() != 3) k.at("block").fail("expected [x, y, z]");
      for (int d = 0; d < 3; ++d) {
        e.grid[d] = static_cast<int>(grid[d].integer());
        e.block[d] = static_cast<int>(block[d].integer());
      }
      e.registers = static_cast<int>(k.at("registers").integer());
      e.static_smem = static_cast<int>(k.at("static_smem").integer());
      e.dynamic_smem = static_cast<int>(k.at("dynamic_smem").integer());
      if (k.has("kind")) {  // copies (absent: a kernel, as every record before copies were traced)
        const JNode kind = k.at("kind");
        if (kind.str() != "memcpy") kind.fail("expected \"memcpy\" (or no kind: a kernel)");
        e.kind = KernelEvent::Kind::kMemcpy;
        e.copy_kind = k.at("copy_kind").str();
        e.bytes = k.at("bytes").uinteger();
      }
      s.timeline.push_back(std::move(e));
    }
  // kernel_busy_us came after the timeline: a file without it gets it from its timeline (or,
  // without one either, the kernel sum: no overlap known).
  if (c.has("kernel_busy_us")) {
    s.kernel_busy_us = c.at("kernel_busy_us").num();
    if (!(s.kernel_busy_us >= 0)) c.at("kernel_busy_us").fail("expected a time >= 0");
  } else if (!s.timeline.empty()) {
    try {
      s.kernel_busy_us = timeline_kernel_busy_us(s.timeline);
    } catch (const std::invalid_argument& e) {
      c.at("timeline").fail(e.what());
    }
  } else {
    s.kernel_busy_us = s.kernel_sum_us;
  }
  return s;
}

VariantResult read_variant(const JNode& v) {
  VariantResult r;
  r.variant = read_variant_info(v);
  r.skipped = v.str_or("skipped", "");
  r.timing_note = v.str_or("timing_note", "");
  if (v.has("samples_us")) {
    r.samples_us = v.at("samples_us").nums();
    r.stats = read_stats(v.at("stats"));
    r.host_stats = read_stats(v.at("host_enqueue"));
    if (v.has("host_enqueue_waited"))
      r.host_enqueue_waited = static_cast<size_t>(v.at("host_enqueue_waited").uinteger());
    if (v.has("host_enqueue_steps"))
      for (const JNode& s : v.at("host_enqueue_steps").items()) {
        VariantResult::HostStep h;
        h.step = s.at("step").str();
        h.median_us = s.at("median_us").num();
        if (s.has("waited")) h.waited = static_cast<size_t>(s.at("waited").uinteger());
        r.host_steps.push_back(std::move(h));
      }
    if (v.has("timing")) {  // version 2 (and version 1 after the stopping-rule change)
      const JNode t = v.at("timing");
      r.stop = read_stop(t.at("stop_reason"));
      r.timing_wall_s = t.at("wall_s").num();
      const JNode c = t.at("sm_clock_mhz");
      r.sm_clock_mhz.n = static_cast<size_t>(c.at("n").uinteger());
      r.sm_clock_mhz.median = c.at("median").num();
      r.sm_clock_mhz.min = c.at("min").num();
      r.sm_clock_mhz.max = c.at("max").num();
      r.clock_floor_mhz = t.at("clock_floor_mhz").num();
      r.discarded_slow_clock = static_cast<size_t>(t.at("discarded_slow_clock").uinteger());
    }
  }
  if (v.has("hot")) {
    r.hot_samples_us = v.at("hot").at("samples_us").nums();
    r.hot_stats = read_stats(v.at("hot").at("stats"));
  }
  if (v.has("graph")) {
    const JNode g = v.at("graph");
    if (g.has("skipped")) {
      r.graph_skipped = g.at("skipped").str();
    } else {
      r.graph_samples_us = g.at("samples_us").nums();
      r.graph_stats = read_stats(g.at("stats"));
    }
  }
  for (const JNode& n : v.at("numerics").items()) r.numerics.push_back(read_numerics(n));
  r.repro = v.str_or("repro", "");
  if (v.has("cupti")) r.cupti = read_cupti(v.at("cupti"));
  if (v.has("rank_cupti"))
    for (const JNode& c : v.at("rank_cupti").items()) r.rank_cupti.push_back(read_cupti(c));
  if (v.has("vector_widths"))
    for (const JNode& w : v.at("vector_widths").items())
      r.vector_widths.push_back(
          {w.at("kernel").str(), w.at("operand").str(), static_cast<int>(w.at("bytes").num())});
  if (v.has("gemms"))
    for (const JNode& gn : v.at("gemms").items()) {
      GemmChoice c;
      c.name = gn.at("name").str();
      c.problem = gn.at("problem").str();
      c.algo = gn.at("algo").str();
      c.tuned = gn.at("tuned").boolean();
      c.candidates = static_cast<int>(gn.at("candidates").integer());
      c.candidate_us = gn.at("candidate_us").nums();
      c.chosen = static_cast<int>(gn.at("chosen").integer());
      c.workspace_bytes = gn.at("workspace_bytes").uinteger();
      r.gemms.push_back(std::move(c));
    }
  return r;
}

// {"key": number, ...}
std::map<std::string, double> read_number_map(const JNode& n) {
  if (!n.j.is_object()) n.fail("expected an object of numbers");
  std::map<std::string, double> m;
  for (const auto& [k, v] : n.j.items()) {
    if (!v.is_number()) n.fail("expected a number at key '" + k + "'");
    m[k] = v.get<double>();
  }
  return m;
}

RegionResult read_region(const JNode& n) {
  RegionResult r;
  r.label = n.at("label").str();
  r.fusion = n.at("fusion").str();
  r.region = static_cast<int>(n.at("region").integer());
  r.nodes = n.at("nodes").strs();
  const JNode c = n.at("cost");
  r.cost.bytes = c.at("bytes").num();
  r.cost.flops = c.at("flops").num();
  r.cost.comm_bytes = c.at("comm_bytes").num();
  if (c.has("matmul_FLOP")) r.cost.matmul_flops = read_number_map(c.at("matmul_FLOP"));
  r.copy_us = n.at("copy_us").num();
  for (const JNode& v : n.at("variants").items()) r.variants.push_back(read_variant(v));
  return r;
}

TraceResult read_trace(const JNode& n) {
  TraceResult t;
  t.name = n.at("name").str();
  t.file = n.at("file").str();
  t.input_source = n.at("input_source").str();
  for (const JNode& g : n.at("golden_check").items()) t.golden_check.push_back(read_numerics(g));
  for (const JNode& r : n.at("regions").items()) t.regions.push_back(read_region(r));
  t.dropped_matches = n.at("dropped_matches").strs();
  if (n.has("declined")) t.declined = n.at("declined").strs();  // results before issue 24: none
  if (n.has("golden_not_compared")) t.golden_not_compared = n.at("golden_not_compared").strs();
  if (n.has("cut_nodes"))
    for (const JNode& c : n.at("cut_nodes").items()) {
      CutNode cn;
      cn.id = c.at("node").str();
      cn.op = c.at("op").str();
      cn.reason = c.at("reason").str();
      for (const JNode& o : c.at("outputs").items()) {
        CutNode::Output out;
        out.value = o.at("value").str();
        out.index = static_cast<int>(o.at("index").integer());
        const JNode st = o.at("stats");
        out.stats = {st.at("mean").num(), st.at("std").num(), st.at("min").num(),
                     st.at("max").num()};
        const JNode src = o.at("stats_source");
        if (src.str() != "recorded" && src.str() != "synthetic" && src.str() != "golden")
          src.fail("expected \"recorded\", \"synthetic\" or \"golden\", got \"" + src.str() + "\"");
        out.recorded = src.str() != "synthetic";  // a golden value's stats were recorded too
        out.golden = src.str() == "golden";
        cn.outputs.push_back(out);
      }
      if (c.has("lacked_outputs")) cn.lacked_outputs = c.at("lacked_outputs").strs();
      t.cut_nodes.push_back(std::move(cn));
    }
  if (n.has("lacked")) t.lacked = n.at("lacked").strs();
  t.not_replayed = n.str_or("not_replayed", "");
  t.reference_s = n.num_or("reference_s", 0);
  t.reference_estimate_s = n.num_or("reference_estimate_s", 0);
  if (n.has("error")) {
    t.error = n.at("error").str();
    const JNode k = n.at("error_kind");
    const std::string kind = k.str();
    if (kind == "bad input")
      t.error_kind = TraceResult::Error::kBadInput;
    else if (kind == "runtime")
      t.error_kind = TraceResult::Error::kRuntime;
    else
      k.fail("expected \"bad input\" or \"runtime\", got \"" + kind + "\"");
  }
  return t;
}

}  // namespace

RunResult results_from_json(const nlohmann::json& j, const std::string& file) {
  const JNode root{j, "", file};
  const JNode schema = root.at("schema");
  const std::string s = schema.str();
  if (s != kResultsSchema && s != "replay-results/1")
    schema.fail("expected \"" + std::string(kResultsSchema) + "\" or \"replay-results/1\", got \"" +
                s + "\"");
  // The first drafts of schema 1 (tests/data/results/h200_schema1_first_draft.json) predate run
  // info, ceilings and the numerics verdicts; their numerics used another bound model, so they
  // cannot be read back.
  if (s == "replay-results/1" && j.is_object() && !j.contains("run") && j.contains("numerics_pass"))
    root.fail(
        "an early draft of replay-results/1 (no run info, ceilings or numerics verdicts): it "
        "cannot be read back into a run; `replay compare` still reads its timing samples");
  RunResult r;
  r.environment = root.at("environment").j;
  if (!r.environment.is_object()) root.at("environment").fail("expected an object");
  r.run_info = root.at("run").j;
  if (!r.run_info.is_object()) root.at("run").fail("expected an object");
  r.seed = root.at("seed").uinteger();
  const JNode c = root.at("ceilings");
  r.ceilings.copy_gbps = c.at("copy_GBps").num();
  // Before the per-class peaks, matmul_TFLOPs was one number, never measured (0).
  if (const JNode m = c.at("matmul_TFLOPs"); !m.j.is_number())
    r.ceilings.matmul_tflops = read_number_map(m);
  r.ceilings.matmul_problem = c.str_or("matmul_problem", "");
  r.ceilings.bus_gbps = c.at("bus_GBps").num();
  r.gpu_note = root.at("gpu_note").str();
  for (const JNode& t : root.at("traces").items()) r.traces.push_back(read_trace(t));
  return r;
}

RunResult read_results(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw ResultsError(path + ": cannot open the results file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::parse_error& e) {
    throw ResultsError(path + ": not JSON: " + e.what());
  }
  return results_from_json(j, path);
}

std::pair<size_t, size_t> parse_shard(const std::string& spec) {
  const auto slash = spec.find('/');
  auto digits = [](const std::string& s) {
    return !s.empty() && s.size() <= 9 &&
           std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  };
  const std::string a = slash == std::string::npos ? "" : spec.substr(0, slash);
  const std::string b = slash == std::string::npos ? "" : spec.substr(slash + 1);
  if (!digits(a) || !digits(b))
    throw std::invalid_argument("--shard " + spec + ": expected I/N with integers 0 <= I < N");
  const size_t i = std::stoul(a), n = std::stoul(b);
  if (n == 0 || i >= n)
    throw std::invalid_argument("--shard " + spec + ": expected I/N with 0 <= I < N");
  return {i, n};
}

std::vector<std::string> shard_files(std::vector<std::string> files, size_t index, size_t count) {
  std::sort(files.begin(), files.end());
  std::vector<std::string> out;
  for (size_t k = index; k < files.size(); k += count) out.push_back(files[k]);
  return out;
}

RunResult merge_runs(const std::vector<RunResult>& parts, const std::vector<std::string>& names) {
  if (parts.empty()) throw std::invalid_argument("merge: no results to merge");
  auto is_peers = [](const RunResult& r) {
    return r.run_info.is_object() && r.run_info.value("peers", false);
  };
  auto device = [](const RunResult& r) {
    return r.environment.is_object() ? r.environment.value("device", std::string()) : "";
  };
  auto name_of = [&](size_t i) {
    return i < names.size() ? names[i] : "part " + std::to_string(i);
  };
  // The lead (environment, run info, seed, ceilings): the first of our runs that ran on a device,
  // else the first of our runs, else (peers only) the first part.
  size_t lead = parts.size();
  for (size_t i = 0; i < parts.size() && lead == parts.size(); ++i)
    if (!is_peers(parts[i]) && !device(parts[i]).empty()) lead = i;
  for (size_t i = 0; i < parts.size() && lead == parts.size(); ++i)
    if (!is_peers(parts[i])) lead = i;
  if (lead == parts.size()) lead = 0;
  RunResult out;
  out.environment = parts[lead].environment;
  out.run_info = parts[lead].run_info;
  // The merged run is ours when a part of ours leads; a merge of peers alone stays peers.
  if (out.run_info.is_object() && !is_peers(parts[lead])) out.run_info.erase("peers");
  out.seed = parts[lead].seed;
  out.ceilings = parts[lead].ceilings;
  nlohmann::json from = nlohmann::json::array();
  std::set<std::string> devices;
  std::map<std::string, std::pair<std::string, size_t>> by_name;  // name -> (file, out index)
  std::map<std::string, size_t> part_of;                          // name -> part
  std::vector<size_t> order;  // our runs first, then the peers that join their rows
  for (size_t i = 0; i < parts.size(); ++i)
    if (!is_peers(parts[i])) order.push_back(i);
  for (size_t i = 0; i < parts.size(); ++i)
    if (is_peers(parts[i])) order.push_back(i);
  for (size_t i : order) {
    const RunResult& p = parts[i];
    const std::string name = name_of(i);
    from.push_back({{"file", name}, {"device", device(p)}, {"peers", is_peers(p)}});
    if (!device(p).empty()) devices.insert(device(p));
    if (!is_peers(p) && !is_peers(parts[lead]) && p.seed != out.seed)
      throw std::invalid_argument("merge: " + name + " ran with seed " + std::to_string(p.seed) +
                                  ", " + name_of(lead) + " with " + std::to_string(out.seed));
    if (!p.gpu_note.empty() && out.gpu_note.find(p.gpu_note) == std::string::npos)
      out.gpu_note += (out.gpu_note.empty() ? "" : " ") + p.gpu_note;
    for (const TraceResult& t : p.traces) {
      auto it = by_name.find(t.name);
      if (is_peers(p) && it != by_name.end()) {
        // Join the peers' whole-graph variants to our row of the same trace; a peer that failed
        // on the whole trace becomes a skipped peer variant there.
        TraceResult& ours = out.traces[it->second.second];
        std::vector<VariantResult> add;
        if (!t.regions.empty()) {
          add = t.regions[0].variants;
        } else {
          VariantResult failed;
          failed.variant.kind = VariantInfo::kPeer;
          failed.variant.name = "pytorch_ops";
          failed.skipped = "peer failed: " + (t.error.empty() ? "no timing" : t.error);
          add.push_back(failed);
        }
        if (ours.regions.empty()) continue;  // our replay failed: no row to join, its error stays
        auto& row = ours.regions[0].variants;
        for (const VariantResult& v : add) {
          for (const VariantResult& have : row)
            if (have.variant.name == v.variant.name)
              throw std::invalid_argument("merge: variant " + v.variant.name + " of trace " +
                                          t.name + " appears twice (" + name + ")");
          row.push_back(v);
        }
        continue;
      }
      if (it != by_name.end()) {
        const std::string where = name_of(part_of[t.name]);
        if (it->second.first == t.file)
          throw std::invalid_argument("merge: trace " + t.name + " (" + t.file + ") is in both " +
                                      where + " and " + name);
        throw std::invalid_argument("merge: two traces are named " + t.name + " (" +
                                    it->second.first + " in " + where + ", " + t.file + " in " +
                                    name + "): rows are keyed on trace names; rename one");
      }
      by_name.emplace(t.name, std::make_pair(t.file, out.traces.size()));
      part_of[t.name] = i;
      out.traces.push_back(t);
    }
  }
  out.run_info["merged_from"] = from;
  if (devices.size() > 1) {
    std::string list;
    for (const auto& d : devices) list += (list.empty() ? "" : ", ") + d;
    out.gpu_note += (out.gpu_note.empty() ? "" : " ") +
                    std::string("MERGED FROM DIFFERENT DEVICES (") + list +
                    "): rows timed on different GPUs are not comparable.";
  }
  return out;
}

}  // namespace replay
