#include "harness/report/results.hpp"

#include <algorithm>
#include <cstdio>

namespace replay {

Verdict VariantResult::verdict() const {
  Verdict v = Verdict::kNotCompared;
  for (const auto& n : numerics) v = combine(v, n.pass() ? Verdict::kPass : Verdict::kFail);
  return v;
}

double SolTerms::sol_us() const {
  return std::max({memory_us, matmul_us, comm_us});
}

std::string SolTerms::bound() const {
  if (sol_us() <= 0) return "";
  if (matmul_us >= memory_us && matmul_us >= comm_us) return "matmul";
  return comm_us > memory_us ? "comm" : "memory";
}

std::string SolTerms::describe() const {
  if (sol_us() <= 0 && unmeasured.empty()) return "";
  auto us = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f µs", v);
    return std::string(b);
  };
  std::string s = "SOL " + us(sol_us());
  if (!bound().empty()) s += ", bound by " + bound();
  std::string terms;
  if (memory_us > 0) terms += "memory " + us(memory_us);
  if (matmul_us > 0) terms += (terms.empty() ? "" : ", ") + std::string("matmul ") + us(matmul_us);
  if (comm_us > 0) terms += (terms.empty() ? "" : ", ") + std::string("comm ") + us(comm_us);
  if (!terms.empty()) s += " (" + terms + ")";
  for (const auto& c : unmeasured)
    s += "; no " + c + " matmul peak measured: its FLOPs not counted";
  return s;
}

SolTerms RegionResult::sol_terms(const Ceilings& c) const {
  SolTerms t;
  if (c.copy_gbps > 0) t.memory_us = cost.bytes / (c.copy_gbps * 1e3);  // GB/s = 1e3 bytes/µs
  for (const auto& [cls, flops] : cost.matmul_flops) {
    if (flops <= 0) continue;
    const auto it = c.matmul_tflops.find(cls);
    if (it == c.matmul_tflops.end() || it->second <= 0)
      t.unmeasured.push_back(cls);
    else
      t.matmul_us += flops / (it->second * 1e6);  // TFLOP/s = 1e6 FLOP/µs
  }
  if (c.bus_gbps > 0) t.comm_us = cost.comm_bytes / (c.bus_gbps * 1e3);
  return t;
}

double RegionResult::sol_us(const Ceilings& c) const {
  return sol_terms(c).sol_us();
}

double RegionResult::sol_pct(double median_us, const Ceilings& c) const {
  if (median_us <= 0) return 0;
  return 100.0 * sol_us(c) / median_us;
}

const VariantResult* RegionResult::find(Role role) const {
  for (const auto& x : variants)
    if (x.variant.kind == VariantInfo::kFusion && x.variant.role == role) return &x;
  return nullptr;
}

std::vector<std::pair<const VariantResult*, RegionOverlap>> RegionResult::overlaps() const {
  std::vector<std::pair<const VariantResult*, RegionOverlap>> out;
  const VariantResult* base = find(Role::kBaseline);
  if (!communicates() || !base || !base->cupti || base->cupti->timeline.empty()) return out;
  for (const auto& v : variants) {
    if (&v == base || v.variant.kind != VariantInfo::kFusion || !v.cupti) continue;
    if (auto o = region_overlap(base->cupti->timeline, v.cupti->timeline, cost.comm_bytes))
      out.emplace_back(&v, *o);
  }
  return out;
}

Verdict TraceResult::verdict() const {
  Verdict v = Verdict::kNotCompared;
  for (const auto& n : golden_check) v = combine(v, n.pass() ? Verdict::kPass : Verdict::kFail);
  for (const auto& r : regions)
    for (const auto& x : r.variants) v = combine(v, x.verdict());
  return v;
}

std::pair<int, int> TraceResult::compared_and_not() const {
  int yes = golden_check.empty() ? 0 : 1, no = 0;
  for (const auto& r : regions)
    for (const auto& v : r.variants) {
      if (v.variant.kind == VariantInfo::kReference) continue;  // the oracle itself
      (v.verdict() == Verdict::kNotCompared ? no : yes) += 1;
    }
  return {yes, no};
}

Verdict RunResult::verdict() const {
  Verdict v = Verdict::kNotCompared;
  for (const auto& t : traces) v = combine(v, t.verdict());
  return v;
}

namespace {

nlohmann::json sol_terms_json(const SolTerms& t) {
  nlohmann::json j = {
      {"memory", t.memory_us}, {"matmul", t.matmul_us}, {"comm", t.comm_us}, {"bound", t.bound()}};
  if (!t.unmeasured.empty()) j["matmul_unmeasured"] = t.unmeasured;
  return j;
}

// A CUPTI summary as results.json holds it (kernels, sums, timeline with copies, error).
nlohmann::json cupti_json(const CuptiSummary& c) {
  nlohmann::json ks = nlohmann::json::array();
  for (const auto& k : c.kernels)
    ks.push_back({{"name", k.name}, {"count", k.count}, {"total_us", k.total_us}});
  nlohmann::json tl = nlohmann::json::array();
  for (const auto& k : c.timeline) {
    nlohmann::json e = {{"name", k.name},
                        {"start_us", k.start_us},
                        {"dur_us", k.dur_us},
                        {"stream", k.stream},
                        {"grid", {k.grid[0], k.grid[1], k.grid[2]}},
                        {"block", {k.block[0], k.block[1], k.block[2]}},
                        {"registers", k.registers},
                        {"static_smem", k.static_smem},
                        {"dynamic_smem", k.dynamic_smem}};
    if (k.kind == KernelEvent::Kind::kMemcpy) {
      e["kind"] = "memcpy";
      e["copy_kind"] = k.copy_kind;
      e["bytes"] = k.bytes;
    }
    tl.push_back(std::move(e));
  }
  nlohmann::json j = {{"kernels", ks},
                      {"kernel_sum_us", c.kernel_sum_us},
                      {"kernel_busy_us", c.kernel_busy_us},
                      {"span_us", c.span_us},
                      {"timeline", tl}};
  if (!c.error.empty()) j["error"] = c.error;
  return j;
}

// One timeline's overlap figures (timeline_overlap.hpp), a communicating region's copies counted
// as communication.
nlohmann::json overlap_json(const std::vector<KernelEvent>& timeline) {
  const OverlapStats o = timeline_overlap(timeline, true);
  return {{"comm_us", o.comm_us},
          {"compute_us", o.compute_us},
          {"overlap_us", o.overlap_us},
          {"exposed_comm_us", o.exposed_comm_us},
          {"overlap_fraction",
           o.has_comm ? nlohmann::json(o.overlap_fraction) : nlohmann::json(nullptr)}};
}

nlohmann::json variant_json(const VariantResult& v, const RegionResult& r, const Ceilings& c) {
  nlohmann::json j = {{"variant", v.variant.name}};
  if (v.variant.kind == VariantInfo::kFusion) j["role"] = role_name(v.variant.role);
  if (v.variant.kind == VariantInfo::kPeer) j["kind"] = "peer";
  if (!v.skipped.empty()) j["skipped"] = v.skipped;
  if (!v.timing_note.empty()) j["timing_note"] = v.timing_note;
  if (v.timed()) {
    j["samples_us"] = v.samples_us;
    j["stats"] = to_json(v.stats);
    j["host_enqueue"] = to_json(v.host_stats);
    if (v.host_enqueue_waited > 0) j["host_enqueue_waited"] = v.host_enqueue_waited;
    if (!v.host_steps.empty()) {
      nlohmann::json steps = nlohmann::json::array();
      for (const auto& h : v.host_steps) {
        nlohmann::json s = {{"step", h.step}, {"median_us", h.median_us}};
        if (h.waited > 0) s["waited"] = h.waited;
        steps.push_back(std::move(s));
      }
      j["host_enqueue_steps"] = std::move(steps);
    }
    j["timing"] = {{"stop_reason", stop_reason_name(v.stop)},
                   {"wall_s", v.timing_wall_s},
                   {"sm_clock_mhz",
                    {{"n", v.sm_clock_mhz.n},
                     {"median", v.sm_clock_mhz.median},
                     {"min", v.sm_clock_mhz.min},
                     {"max", v.sm_clock_mhz.max}}},
                   {"clock_floor_mhz", v.clock_floor_mhz},
                   {"discarded_slow_clock", v.discarded_slow_clock}};
    j["sol_pct"] = r.sol_pct(v.stats.median, c);
  }
  if (!v.hot_samples_us.empty())
    j["hot"] = {{"samples_us", v.hot_samples_us}, {"stats", to_json(v.hot_stats)}};
  if (!v.graph_samples_us.empty())
    j["graph"] = {{"samples_us", v.graph_samples_us}, {"stats", to_json(v.graph_stats)}};
  else if (!v.graph_skipped.empty())
    j["graph"] = {{"skipped", v.graph_skipped}};
  nlohmann::json nums = nlohmann::json::array();
  for (const auto& n : v.numerics) nums.push_back(to_json(n));
  j["numerics"] = nums;
  if (!v.repro.empty()) j["repro"] = v.repro;
  j["verdict"] = verdict_name(v.verdict());
  if (v.cupti) {
    j["cupti"] = cupti_json(*v.cupti);
    if (r.communicates() && !v.cupti->timeline.empty())
      j["overlap"] = overlap_json(v.cupti->timeline);
  }
  if (!v.rank_cupti.empty()) {  // a multi-process run: every rank's timeline and overlap
    nlohmann::json rc = nlohmann::json::array(), ro = nlohmann::json::array();
    for (const CuptiSummary& c : v.rank_cupti) {
      rc.push_back(cupti_json(c));
      ro.push_back(c.timeline.empty() ? nlohmann::json(nullptr) : overlap_json(c.timeline));
    }
    j["rank_cupti"] = std::move(rc);
    if (r.communicates()) j["rank_overlap"] = std::move(ro);
  }
  if (!v.vector_widths.empty()) {
    nlohmann::json w = nlohmann::json::array();
    for (const auto& e : v.vector_widths)
      w.push_back({{"kernel", e.kernel}, {"operand", e.operand}, {"bytes", e.bytes}});
    j["vector_widths"] = std::move(w);
  }
  if (!v.gemms.empty()) {
    nlohmann::json gs = nlohmann::json::array();
    for (const GemmChoice& c : v.gemms)
      gs.push_back({{"name", c.name},
                    {"problem", c.problem},
                    {"algo", c.algo},
                    {"tuned", c.tuned},
                    {"candidates", c.candidates},
                    {"candidate_us", c.candidate_us},
                    {"chosen", c.chosen},
                    {"chosen_us", c.chosen_us()},
                    {"heuristic_first_us", c.first_us()},
                    {"workspace_bytes", c.workspace_bytes}});
    j["gemms"] = std::move(gs);
  }
  return j;
}

// Each overlapped variant's E, Flux figures and busbw against the baseline's serial timeline
// (timeline_overlap.hpp); empty when the region does not communicate or nothing was traced.
nlohmann::json region_overlap_json(const RegionResult& reg) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [v, o] : reg.overlaps())
    out[v->variant.name] = {{"t_gemm_us", o.t_gemm_us},
                            {"t_comm_us", o.t_comm_us},
                            {"t_total_us", o.t_total_us},
                            {"efficiency", o.efficiency},
                            {"flux_effective_comm_us", o.flux_eff_comm_us},
                            {"flux_efficiency", o.flux_efficiency},
                            {"gemm_slowdown", o.gemm_slowdown},
                            {"baseline_busbw_GBps", o.busbw_gbps}};
  return out;
}

}  // namespace

nlohmann::json to_json(const CutNode& c) {
  nlohmann::json outs = nlohmann::json::array();
  for (const auto& o : c.outputs)
    outs.push_back(
        {{"value", o.value},
         {"index", o.index},
         {"stats",
          {{"mean", o.stats.mean},
           {"std", o.stats.std},
           {"min", o.stats.min},
           {"max", o.stats.max}}},
         {"stats_source", o.golden ? "golden" : (o.recorded ? "recorded" : "synthetic")}});
  nlohmann::json j = {{"node", c.id}, {"op", c.op}, {"reason", c.reason}, {"outputs", outs}};
  if (!c.lacked_outputs.empty()) j["lacked_outputs"] = c.lacked_outputs;
  return j;
}

nlohmann::json to_json(const RunResult& r) {
  nlohmann::json traces = nlohmann::json::array();
  for (const auto& t : r.traces) {
    nlohmann::json regions = nlohmann::json::array();
    for (const auto& reg : t.regions) {
      nlohmann::json vs = nlohmann::json::array();
      for (const auto& v : reg.variants) vs.push_back(variant_json(v, reg, r.ceilings));
      regions.push_back({{"label", reg.label},
                         {"fusion", reg.fusion},
                         {"region", reg.region},
                         {"nodes", reg.nodes},
                         {"sol_bytes", reg.cost.bytes},
                         {"cost",
                          {{"bytes", reg.cost.bytes},
                           {"flops", reg.cost.flops},
                           {"comm_bytes", reg.cost.comm_bytes},
                           {"matmul_FLOP", reg.cost.matmul_flops}}},
                         {"sol_us", reg.sol_us(r.ceilings)},
                         {"sol_terms_us", sol_terms_json(reg.sol_terms(r.ceilings))},
                         {"copy_us", reg.copy_us},
                         {"variants", vs}});
      if (nlohmann::json o = region_overlap_json(reg); !o.empty()) regions.back()["overlap"] = o;
    }
    nlohmann::json golden = nlohmann::json::array();
    for (const auto& n : t.golden_check) golden.push_back(to_json(n));
    nlohmann::json tj = {{"name", t.name},
                         {"file", t.file},
                         {"input_source", t.input_source},
                         {"golden_check", golden},
                         {"regions", regions},
                         {"verdict", verdict_name(t.verdict())},
                         {"dropped_matches", t.dropped_matches},
                         {"declined", t.declined}};
    nlohmann::json cut = nlohmann::json::array();
    for (const CutNode& c : t.cut_nodes) cut.push_back(to_json(c));
    tj["cut_nodes"] = cut;
    if (!t.lacked.empty()) tj["lacked"] = t.lacked;
    if (!t.golden_not_compared.empty()) tj["golden_not_compared"] = t.golden_not_compared;
    if (!t.not_replayed.empty()) tj["not_replayed"] = t.not_replayed;
    if (t.reference_s > 0) tj["reference_s"] = t.reference_s;
    if (t.reference_estimate_s > 0) tj["reference_estimate_s"] = t.reference_estimate_s;
    if (!t.error.empty()) {
      tj["error"] = t.error;
      tj["error_kind"] = t.error_kind == TraceResult::Error::kBadInput ? "bad input" : "runtime";
    }
    traces.push_back(tj);
  }
  return {{"schema", kResultsSchema},
          {"environment", r.environment},
          {"run", r.run_info},
          {"seed", r.seed},
          {"copy_bandwidth_GBps", r.ceilings.copy_gbps},
          {"ceilings",
           {{"copy_GBps", r.ceilings.copy_gbps},
            {"matmul_TFLOPs", r.ceilings.matmul_tflops},
            {"matmul_problem", r.ceilings.matmul_problem},
            {"bus_GBps", r.ceilings.bus_gbps}}},
          {"gpu_note", r.gpu_note},
          {"verdict", verdict_name(r.verdict())},
          {"traces", traces}};
}

}  // namespace replay
