#include "harness/dist/rank_results.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "harness/report/results_io.hpp"

#include <cstdio>
#include <stdexcept>

namespace replay::dist {

std::string rank_device_blob(const RankDevice& d) {
  return nlohmann::json{{"rank", d.rank}, {"host", d.host}, {"uuid", d.uuid}, {"device", d.device}}
      .dump();
}

RankDevice parse_rank_device(const std::string& blob, int rank) {
  try {
    const auto j = nlohmann::json::parse(blob);
    RankDevice d;
    d.rank = j.at("rank").get<int>();
    d.host = j.at("host").get<std::string>();
    d.uuid = j.at("uuid").get<std::string>();
    d.device = j.at("device").get<int>();
    if (d.rank != rank) throw std::invalid_argument("it says rank " + std::to_string(d.rank));
    return d;
  } catch (const std::exception& e) {
    throw std::invalid_argument("rank " + std::to_string(rank) +
                                ": malformed device description at the rendezvous: " + e.what());
  }
}

std::string shared_device_why(const std::vector<RankDevice>& ranks) {
  for (size_t a = 0; a < ranks.size(); ++a)
    for (size_t b = a + 1; b < ranks.size(); ++b)
      if (ranks[a].uuid == ranks[b].uuid)
        return "NCCL cannot place two ranks on one GPU (ranks " + std::to_string(ranks[a].rank) +
               " and " + std::to_string(ranks[b].rank) + " share device " + ranks[a].uuid +
               " on host " + ranks[a].host + ")";
  return "";
}

std::string trace_blob(const TraceResult& t) {
  RunResult one;
  one.environment = nlohmann::json::object();
  one.traces.push_back(t);
  return to_json(one).dump();
}

TraceResult parse_trace_blob(const std::string& blob, int rank) {
  const std::string who = "rank " + std::to_string(rank);
  try {
    RunResult r = results_from_json(nlohmann::json::parse(blob), who + "'s results");
    if (r.traces.size() != 1)
      throw std::runtime_error("holds " + std::to_string(r.traces.size()) + " traces, expected 1");
    return std::move(r.traces[0]);
  } catch (const std::exception& e) {
    throw std::runtime_error(who + " sent results that cannot be read: " + e.what());
  }
}

namespace {

// Copies the cold-timing fields of `from` into `to`.
void take_cold(VariantResult& to, const VariantResult& from) {
  to.samples_us = from.samples_us;
  to.stats = from.stats;
  to.stop = from.stop;
  to.timing_wall_s = from.timing_wall_s;
  to.sm_clock_mhz = from.sm_clock_mhz;
  to.discarded_slow_clock = from.discarded_slow_clock;
  to.clock_floor_mhz = from.clock_floor_mhz;
}

VariantResult merge_variant(const std::vector<const VariantResult*>& vs, bool shared_device) {
  VariantResult m = *vs[0];
  const size_t n = vs.size();
  if (n > 1) {
    m.rank_cupti.clear();
    for (size_t r = 0; r < n; ++r) {
      CuptiSummary c;
      if (vs[r]->cupti)
        c = *vs[r]->cupti;
      else
        c.error = "rank " + std::to_string(r) + ": not traced";
      m.rank_cupti.push_back(std::move(c));
    }
    m.numerics.clear();
    for (size_t r = 0; r < n; ++r)
      for (NumericsResult x : vs[r]->numerics) {
        x.value = "rank " + std::to_string(r) + ": " + x.value;
        m.numerics.push_back(std::move(x));
      }
    // A partial check is never a pass: a value some rank checked and another did not fails on
    // the rank that did not ("a row passes only if every rank passes").
    std::vector<std::string> values;
    for (size_t r = 0; r < n; ++r)
      for (const NumericsResult& x : vs[r]->numerics)
        if (std::find(values.begin(), values.end(), x.value) == values.end())
          values.push_back(x.value);
    for (size_t r = 0; r < n; ++r)
      for (const std::string& value : values) {
        const auto& own = vs[r]->numerics;
        if (std::any_of(own.begin(), own.end(),
                        [&](const NumericsResult& x) { return x.value == value; }))
          continue;
        NumericsResult miss;
        miss.value = "rank " + std::to_string(r) + ": " + value;
        miss.not_checked = "another rank checked it, this rank did not" +
                           (vs[r]->skipped.empty() ? std::string() : " (" + vs[r]->skipped + ")");
        m.numerics.push_back(std::move(miss));
      }
  }
  for (size_t r = 1; r < n && m.skipped.empty(); ++r)
    if (!vs[r]->skipped.empty()) m.skipped = "rank " + std::to_string(r) + ": " + vs[r]->skipped;
  for (size_t r = 1; r < n && m.repro.empty(); ++r)
    if (!vs[r]->repro.empty()) m.repro = "rank " + std::to_string(r) + ": " + vs[r]->repro;
  bool all_timed = true;
  for (const VariantResult* v : vs) all_timed = all_timed && v->timed();
  if (!all_timed || !m.skipped.empty()) {  // a rank that did not time: no merged time
    if (m.timed() && m.skipped.empty())
      for (size_t r = 1; r < n; ++r)
        if (!vs[r]->timed()) {
          m.skipped = "rank " + std::to_string(r) + ": not timed";
          break;
        }
    m.samples_us.clear();
    m.stats = {};
    m.hot_samples_us.clear();
    m.graph_samples_us.clear();
    return m;
  }
  size_t slow = 0;
  for (size_t r = 1; r < n; ++r)
    if (vs[r]->stats.median > vs[slow]->stats.median) slow = r;
  take_cold(m, *vs[slow]);
  size_t hot = 0, graph = 0;
  for (size_t r = 1; r < n; ++r) {
    if (vs[r]->hot_stats.median > vs[hot]->hot_stats.median) hot = r;
    if (vs[r]->graph_stats.median > vs[graph]->graph_stats.median) graph = r;
  }
  m.hot_samples_us = vs[hot]->hot_samples_us;
  m.hot_stats = vs[hot]->hot_stats;
  m.graph_samples_us = vs[graph]->graph_samples_us;
  m.graph_stats = vs[graph]->graph_stats;
  if (shared_device)
    m.timing_note = kSharedDeviceTimingNote;
  else if (n > 1)
    m.timing_note = "max over " + std::to_string(n) + " ranks of the median (slowest: rank " +
                    std::to_string(slow) + ")";
  return m;
}

}  // namespace

TraceResult merge_rank_results(const std::vector<TraceResult>& ranks, bool shared_device) {
  if (ranks.empty()) throw std::invalid_argument("merge_rank_results: no ranks");
  TraceResult m = ranks[0];
  for (size_t r = 0; r < ranks.size(); ++r) {
    const TraceResult& t = ranks[r];
    if (t.error_kind == TraceResult::Error::kNone) continue;
    const bool worse = m.error_kind == TraceResult::Error::kNone ||
                       (t.error_kind == TraceResult::Error::kRuntime &&
                        m.error_kind == TraceResult::Error::kBadInput);
    if (r == 0 || worse) {
      m.error_kind = t.error_kind;
      m.error = ranks.size() > 1 ? "rank " + std::to_string(r) + ": " + t.error : t.error;
    }
  }
  for (size_t r = 1; r < ranks.size(); ++r) {
    bool same = ranks[r].regions.size() == m.regions.size();
    for (size_t i = 0; same && i < m.regions.size(); ++i)
      same = ranks[r].regions[i].variants.size() == m.regions[i].variants.size();
    if (!same && ranks[r].error_kind == TraceResult::Error::kNone &&
        m.error_kind == TraceResult::Error::kNone) {
      m.error_kind = TraceResult::Error::kRuntime;
      m.error = "rank " + std::to_string(r) +
                " has other result rows than rank 0 (the ranks did not replay the same trace "
                "with the same variants)";
    }
    if (!same) return m;
  }
  for (size_t i = 0; i < m.regions.size(); ++i)
    for (size_t j = 0; j < m.regions[i].variants.size(); ++j) {
      std::vector<const VariantResult*> vs;
      for (const TraceResult& t : ranks) vs.push_back(&t.regions[i].variants[j]);
      m.regions[i].variants[j] = merge_variant(vs, shared_device);
    }
  return m;
}

std::string collective_timeout_message(int rank, const std::string& what, double timeout_s) {
  char t[32];
  std::snprintf(t, sizeof t, "%g", timeout_s);
  return "rank " + std::to_string(rank) + ": " + what + " did not complete within " + t +
         " s (a peer rank hung or died; the communicator was aborted)";
}

std::string world_size_mismatch(int trace_ws, int run_ws, bool launched) {
  if (!launched) {
    if (trace_ws <= 1) return "";
    return "the trace is one rank of a world_size " + std::to_string(trace_ws) +
           " program: GPU replay runs one process per rank; start it with torchrun "
           "--nproc-per-node " +
           std::to_string(trace_ws) + ", mpirun -n " + std::to_string(trace_ws) + ", srun -n " +
           std::to_string(trace_ws) + " or `replay launch --nproc " + std::to_string(trace_ws) +
           " -- run ...`";
  }
  if (trace_ws == run_ws) return "";
  return "the trace's world_size is " + std::to_string(trace_ws) +
         " but the run has WORLD_SIZE=" + std::to_string(run_ws) + " rank(s): start it with " +
         std::to_string(trace_ws) + " processes (e.g. `replay launch --nproc " +
         std::to_string(trace_ws) + " -- run ...`)";
}

StopReason agreed_stop(const std::vector<StopReason>& ranks) {
  for (StopReason r : ranks)
    if (r == StopReason::kTimeout || r == StopReason::kMaxSamples) return r;
  for (StopReason r : ranks)
    if (r == StopReason::kNone) return StopReason::kNone;
  return ranks.empty() ? StopReason::kNone : ranks.front();
}

std::string step_blob(const std::string& step, const std::string& blob) {
  std::string s = step;
  std::replace(s.begin(), s.end(), '\n', ' ');  // a file name with a newline in it
  return s + "\n" + blob;
}

std::vector<std::string> step_blobs(const std::vector<std::string>& all, const std::string& step_in,
                                    int my_rank) {
  std::string step = step_in;
  std::replace(step.begin(), step.end(), '\n', ' ');
  std::vector<std::string> out;
  for (size_t r = 0; r < all.size(); ++r) {
    const size_t nl = all[r].find('\n');
    const std::string theirs =
        nl == std::string::npos ? all[r].substr(0, 80) : all[r].substr(0, nl);
    if (nl == std::string::npos || theirs != step)
      throw std::runtime_error("rank " + std::to_string(r) + " is at step '" + theirs +
                               "' while rank " + std::to_string(my_rank) + " is at '" + step +
                               "': the ranks fell out of step (did a rank fail earlier?)");
    out.push_back(all[r].substr(nl + 1));
  }
  return out;
}

}  // namespace replay::dist
