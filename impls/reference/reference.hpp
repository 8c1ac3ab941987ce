// Reference executor: CPU, Eigen, float64 arithmetic and accumulation. The oracle for every GPU
// result. Each op's float64 semantics is its row's reference function (workloads/ops/*.cpp); this
// executor walks the graph and applies the precision policy.
//
// Precision policy: every op computes in float64. A value whose dtype is narrower than float64
// (float32, bfloat16, float16, float8) is rounded to it after the op that produces it, as
// PyTorch's materialized tensor would be: each op is correctly rounded, at least as accurate as
// PyTorch's float32 "opmath". float32 values used to be kept in float64; a float32 float8 scale
// (448 / amax, rowwise) then differed from PyTorch's by up to half a float32 ulp, and the products
// x * scale that sit exactly on a float8 rounding tie (common with bfloat16 x) rounded the other
// way: 6e-4 of the float8 elements one ulp off, all in one direction (H100, [8192, 4096]).
#pragma once

#include <map>
#include <optional>
#include <vector>

#include "workloads/ir/graph.hpp"
#include "workloads/ir/host_tensor.hpp"

namespace replay {

/// Evaluate one node given the values of its operands (looked up in `values` by value index).
/// Returns one HostTensor per node output, each contiguous with the recorded dtype, rounded per
/// the precision policy.
std::vector<HostTensor> reference_node(const Graph& g, const Node& n,
                                       const std::map<int, HostTensor>& values);

/// Evaluate the whole graph. `inputs` maps every graph input's value index to its data. Returns
/// every value of the graph (inputs included), keyed by value index. Throws
/// std::invalid_argument when an input is missing.
std::map<int, HostTensor> run_reference(const Graph& g, const std::map<int, HostTensor>& inputs);
/// As above, taking the inputs over (no copy of them).
std::map<int, HostTensor> run_reference(const Graph& g, std::map<int, HostTensor>&& inputs);

/// Evaluate an SPMD graph (Graph::world_size ranks, traces/SCHEMA.md "world_size") for every
/// rank in lockstep: node by node, each rank's outputs from its own values, and a collective
/// (OpKind::kCollective) from every rank's operand (RefArgs::group). `inputs[r]` maps every graph
/// input's value index to rank r's data (inputs/inputs.hpp rank_seed: distinct per rank).
/// Returns every rank's values, [world_size] maps keyed by value index, as run_reference does for
/// one. Throws std::invalid_argument when inputs.size() != world_size or a rank lacks an input;
/// TraceError naming the node for a collective whose ranks disagree. Memory: world_size times
/// run_reference's. For world_size 1 it is run_reference (a collective over a group of one passes
/// its operand on).
std::vector<std::map<int, HostTensor>> run_reference_ranks(
    const Graph& g, std::vector<std::map<int, HostTensor>>&& inputs);

/// The magnitudes of the addends behind value `v`, per element: max(|a|, |alpha b|) of the add /
/// sub that produced v (a Python number addend counts as a constant), carried through the views
/// and one-operand copies between that node and v (carried_value). `ref`: run_reference's values
/// (the addends must be there). std::nullopt when v does not come from an addition that way.
/// Shape of v, contiguous, float64. What NumericsBounds::addend_ulps measures ulps against.
std::optional<HostTensor> addend_magnitude(const Graph& g, const std::map<int, HostTensor>& ref,
                                           int v);

}  // namespace replay
