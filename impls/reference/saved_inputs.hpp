// Saved-for-backward inputs consistent with the forward (issue 8). A backward trace's saved
// inputs (role "saved" with a "from" link, traces/SCHEMA.md) are what its forward graph computed:
// rstd is a function of x. Generated independently from the seed, a realistic backward (no golden
// tensors) would get an rstd unrelated to its x. Here the forward trace named by the links, found
// beside the backward (<folder>/<name>.json), gets its inputs generated from the same seed and runs
// through the float64 reference; its named outputs, rounded to the backward inputs' dtypes, are
// the saved inputs. An input both graphs share (x, weight: the forward returns its own input) is
// therefore the forward's generated tensor, identical in both.
//
// Layering: this needs the loader and input generator (workloads/loader/) and the reference
// executor (impls/reference/), so it lives beside the executor, the lowest layer that has both;
// the loader only parses and validates the links (Value::from). harness/replay/runner.cpp calls
// forwards_of_saved_inputs first, to count the forward's reference in its memory and time
// estimates, then make_replay_inputs.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "workloads/ir/graph.hpp"
#include "workloads/loader/inputs.hpp"

namespace replay {

/// One forward trace that saved inputs of a backward trace are linked to.
struct ForwardOfSaved {
  std::string trace;           ///< forward trace name, as the links give it
  std::string path;            ///< <folder of the backward trace>/<trace>.json
  std::vector<int> saved;      ///< the backward's input value indices linked to it
  std::optional<Graph> graph;  ///< the loaded forward; empty when `path` does not exist
};

/// The forward traces `g`'s saved inputs are linked to, in order of first appearance, each loaded
/// and its links checked when its file exists (also for a trace with golden tensors, whose inputs
/// make_replay_inputs nevertheless takes from the golden file). Empty without links. Throws
/// TraceError: naming `g`'s file and the input when a link names an output the forward does not
/// return, or one whose shape or dtype differs from the input's; naming `g`'s file when the
/// forward file holds a trace of another name; naming the forward's file when it is malformed.
std::vector<ForwardOfSaved> forwards_of_saved_inputs(const Graph& g);

/// Sets, in `inputs` (g's inputs generated from `seed`; make_replay_inputs leaves out the ones a
/// forward will give), every saved input linked to a found forward to that forward's output: the
/// forward's inputs generated from `seed` (generate_inputs, random ops' draws included),
/// run_reference, the output rounded to the input's dtype (float32 too: the reference keeps float32
/// values in float64). Returns what it did for the report's input source ("" when `forwards` is
/// empty): which inputs came from which forward, and which saved inputs stayed independent draws
/// and why (forward not found, no link).
std::string derive_saved_inputs(const Graph& g, uint64_t seed,
                                const std::vector<ForwardOfSaved>& forwards,
                                std::map<int, HostTensor>& inputs);

/// The inputs of one replay of `g`: make_inputs (golden, else generated from `seed` but for the
/// saved inputs a found forward gives), then, for a backward trace without golden tensors, its
/// saved inputs from its forward (derive_saved_inputs;
/// `forwards` from forwards_of_saved_inputs(g), not used when `g` has golden tensors). The source
/// string says which.
ReplayInputs make_replay_inputs(const Graph& g, uint64_t seed,
                                const std::vector<ForwardOfSaved>& forwards);
ReplayInputs make_replay_inputs(const Graph& g, uint64_t seed);

}  // namespace replay
