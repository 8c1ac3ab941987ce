#include "harness/report/perfetto.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

namespace replay {
namespace {

nlohmann::json meta(const char* what, int pid, int tid, const nlohmann::json& args) {
  nlohmann::json e = {{"ph", "M"}, {"name", what}, {"pid", pid}, {"args", args}};
  if (tid >= 0) e["tid"] = tid;
  return e;
}

}  // namespace

nlohmann::json perfetto_trace(const RunResult& run) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t ti = 0; ti < run.traces.size(); ++ti) {
    const TraceResult& t = run.traces[ti];
    // A multi-process run: one process per rank (rank 0 keeps the trace's pid).
    size_t n_ranks = 0;
    for (const RegionResult& row : t.regions)
      for (const VariantResult& v : row.variants) n_ranks = std::max(n_ranks, v.rank_cupti.size());
    for (size_t rank = 0; rank < std::max<size_t>(n_ranks, 1); ++rank) {
      const int pid =
          rank == 0 ? static_cast<int>(ti) + 1
                    : kPerfettoRankPidBase * (static_cast<int>(ti) + 1) + static_cast<int>(rank);
      const std::string pname = n_ranks ? t.name + " · rank " + std::to_string(rank) : t.name;
      events.push_back(meta("process_name", pid, -1, {{"name", pname}}));
      events.push_back(meta("process_sort_index", pid, -1, {{"sort_index", pid}}));
      // Tracks: (variant, -1) holds the variant's region slices, (variant, stream) its kernels.
      std::map<std::pair<std::string, int64_t>, int> tids;
      auto track = [&](const std::string& variant, int64_t stream) {
        auto [it, fresh] = tids.try_emplace({variant, stream}, static_cast<int>(tids.size()) + 1);
        if (fresh) {
          const std::string name =
              stream < 0 ? variant : variant + " · stream " + std::to_string(stream);
          events.push_back(meta("thread_name", pid, it->second, {{"name", name}}));
          events.push_back(
              meta("thread_sort_index", pid, it->second, {{"sort_index", it->second}}));
        }
        return it->second;
      };
      double cursor = 0;
      for (const RegionResult& row : t.regions)
        for (const VariantResult& v : row.variants) {
          const CuptiSummary* cp =
              n_ranks ? (rank < v.rank_cupti.size() ? &v.rank_cupti[rank] : nullptr)
                      : (v.cupti ? &*v.cupti : nullptr);
          if (!cp || cp->timeline.empty()) continue;
          const CuptiSummary& c = *cp;
          double end = 0;
          for (const KernelEvent& k : c.timeline) end = std::max(end, k.start_us + k.dur_us);
          nlohmann::json args = {{"kernel_sum_us", c.kernel_sum_us},
                                 {"kernel_busy_us", c.kernel_busy_us},
                                 {"span_us", c.span_us},
                                 {"launches", c.timeline.size()},
                                 {"verdict", verdict_name(v.verdict())}};
          if (v.timed()) {
            args["median_us"] = v.stats.median;
            args["sol_pct"] = row.sol_pct(v.stats.median, run.ceilings);
          }
          if (!row.fusion.empty()) args["fusion"] = row.fusion;
          // One complete ("X") slice of this replay on a track of this variant.
          auto slice = [&](const char* cat, const std::string& name, int64_t stream, double ts,
                           double dur, nlohmann::json slice_args) {
            events.push_back({{"ph", "X"},
                              {"cat", cat},
                              {"name", name},
                              {"pid", pid},
                              {"tid", track(v.variant.name, stream)},
                              {"ts", ts},
                              {"dur", dur},
                              {"args", std::move(slice_args)}});
          };
          slice("region", row.label, -1, cursor, end, args);
          for (const KernelEvent& k : c.timeline)
            if (k.kind == KernelEvent::Kind::kMemcpy)
              slice("memcpy", k.name, k.stream, cursor + k.start_us, k.dur_us,
                    {{"copy_kind", k.copy_kind}, {"bytes", k.bytes}, {"region", row.label}});
            else
              slice("kernel", k.name, k.stream, cursor + k.start_us, k.dur_us,
                    {{"grid", {k.grid[0], k.grid[1], k.grid[2]}},
                     {"block", {k.block[0], k.block[1], k.block[2]}},
                     {"registers_per_thread", k.registers},
                     {"static_smem_bytes", k.static_smem},
                     {"dynamic_smem_bytes", k.dynamic_smem},
                     {"region", row.label}});
          cursor += end + kPerfettoReplayGapUs;
        }
    }
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ns"},
          {"otherData",
           {{"schema", kResultsSchema},
            {"device", run.environment.is_object() ? run.environment.value("device", "") : ""},
            {"git_revision",
             run.environment.is_object() ? run.environment.value("git_revision", "") : ""},
            {"time_axis",
             "each region replay (CUPTI, L2 not flushed, queued behind a spin kernel) is laid out "
             "after the previous one, " +
                 std::to_string(static_cast<int>(kPerfettoReplayGapUs)) +
                 " us apart; kernel times within a replay are CUPTI's"}}}};
}

}  // namespace replay
