#include "impls/reference/saved_inputs.hpp"

#include "workloads/ir/strided_loop.hpp"

#include <algorithm>
#include <filesystem>

#include "impls/reference/reference.hpp"
#include "workloads/ir/error.hpp"
#include "workloads/loader/trace_loader.hpp"

namespace replay {
namespace {

std::string names_of(const Graph& g, const std::vector<int>& values) {
  std::string s;
  for (int v : values) s += (s.empty() ? "" : ", ") + g.values[v].name;
  return s;
}

// Checks that each input linked to `f` names an output of the loaded forward with the input's
// shape and dtype.
void check_links(const Graph& g, const ForwardOfSaved& f) {
  const Graph& fwd = *f.graph;
  if (fwd.name != f.trace)
    throw TraceError(g.file, "",
                     "saved inputs link to forward trace '" + f.trace + "', but " + f.path +
                         " holds trace '" + fwd.name + "'");
  for (int v : f.saved) {
    const Value& in = g.values[v];
    const int fv = fwd.find_value(in.from->output);
    if (fv < 0 || !fwd.values[fv].graph_output)
      throw TraceError(
          g.file, in.name,
          "saved input: \"from\" names output '" + in.from->output + "' of forward trace '" +
              f.trace + "' (" + f.path +
              "), which returns no such value (its outputs: " + names_of(fwd, fwd.outputs) + ")");
    const TensorMeta& m = fwd.meta(fv);
    if (m.shape != in.meta.shape || m.dtype != in.meta.dtype)
      throw TraceError(g.file, in.name,
                       "saved input " + in.meta.str() + ": forward trace '" + f.trace +
                           "' output '" + in.from->output + "' is " + m.str() + " (" + f.path +
                           ")");
  }
}

}  // namespace

std::vector<ForwardOfSaved> forwards_of_saved_inputs(const Graph& g) {
  std::vector<ForwardOfSaved> out;
  for (int v : g.inputs) {
    const Value& in = g.values[v];
    if (!in.from) continue;
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const ForwardOfSaved& f) { return f.trace == in.from->trace; });
    if (it == out.end()) {
      ForwardOfSaved f;
      f.trace = in.from->trace;
      f.path = (std::filesystem::path(g.file).parent_path() / (f.trace + ".json")).string();
      out.push_back(std::move(f));
      it = out.end() - 1;
    }
    it->saved.push_back(v);
  }
  for (ForwardOfSaved& f : out) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(f.path, ec)) continue;
    f.graph = load_trace(f.path, cut_options());  // as `replay run` loads it
    check_links(g, f);
  }
  return out;
}

std::string derive_saved_inputs(const Graph& g, uint64_t seed,
                                const std::vector<ForwardOfSaved>& forwards,
                                std::map<int, HostTensor>& inputs) {
  std::string note;
  auto add = [&](const std::string& s) { note += (note.empty() ? "" : "; ") + s; };
  for (const ForwardOfSaved& f : forwards) {
    if (!f.graph) {
      add("saved inputs " + names_of(g, f.saved) +
          " generated independently of each other: forward trace " + f.path + " not found");
      continue;
    }
    std::map<int, HostTensor> values = run_reference(*f.graph, generate_inputs(*f.graph, seed));
    for (int v : f.saved) {
      const TensorMeta& m = g.meta(v);
      HostTensor t = std::move(values.at(f.graph->find_value(g.values[v].from->output)));
      parallel_for(static_cast<int64_t>(t.data.size()),
                   [&](int64_t i) { t.data[i] = round_to(m.dtype, t.data[i]); });
      t.meta = TensorMeta{m.shape, contiguous_strides(m.shape), m.dtype};
      inputs[v] = std::move(t);
    }
    add("saved inputs " + names_of(g, f.saved) + " from the float64 reference of forward trace " +
        f.trace + " on its inputs generated from the same seed");
  }
  if (!forwards.empty()) {
    std::vector<int> unlinked;
    for (int v : g.inputs)
      if (g.values[v].role == "saved" && !g.values[v].from) unlinked.push_back(v);
    if (!unlinked.empty())
      add("saved inputs " + names_of(g, unlinked) +
          " have no forward link: generated independently");
  }
  return note;
}

ReplayInputs make_replay_inputs(const Graph& g, uint64_t seed,
                                const std::vector<ForwardOfSaved>& forwards) {
  std::vector<int> from_forward;  // saved inputs the forwards' references will give
  for (const ForwardOfSaved& f : forwards)
    if (f.graph) from_forward.insert(from_forward.end(), f.saved.begin(), f.saved.end());
  ReplayInputs in = make_inputs(g, seed, g.golden ? std::vector<int>{} : from_forward);
  if (g.golden) return in;
  const std::string note = derive_saved_inputs(g, seed, forwards, in.values);
  if (!note.empty()) in.source += "; " + note;
  // An input marked the same as (or widened from) a derived one, without a forward link of its
  // own: generate_inputs left it for its source, which only the derivation gave.
  for (int v : g.inputs) {
    const Value& val = g.values[v];
    const int src = val.same_as >= 0 ? val.same_as : val.widened_from;
    if (src < 0 || in.values.count(v) || !in.values.count(src)) continue;
    in.values[v] = in.values.at(src);
    in.values[v].meta.dtype = val.meta.dtype;  // exact: a widening keeps the numbers
  }
  return in;
}

ReplayInputs make_replay_inputs(const Graph& g, uint64_t seed) {
  return make_replay_inputs(g, seed,
                            g.golden ? std::vector<ForwardOfSaved>{} : forwards_of_saved_inputs(g));
}

}  // namespace replay
