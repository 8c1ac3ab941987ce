// Collectives of an SPMD (per-rank) graph: PyTorch's functional collectives
// (torch/distributed/_functional_collectives.py) as torch.compile graphs hold them, one row each
// (see op.hpp). Signatures, as c10d registers them (torch/csrc/distributed/c10d/Functional.cpp):
//   all_gather_into_tensor(Tensor input, int group_size, str group_name) -> Tensor
//   reduce_scatter_tensor(Tensor input, str reduce_op, int group_size, str group_name) -> Tensor
//   all_reduce(Tensor input, str reduce_op, str group_name) -> Tensor
//   wait_tensor(Tensor tensor) -> Tensor
// Groups: one group spanning the trace's world (group_size == Graph::world_size; all_reduce, which
// records no size, takes the world). A group that is a part of the world (a 2-D device mesh: TP
// inside DP) is refused: the trace does not say which ranks it holds. group_name is recorded,
// not interpreted. Reductions: "sum", "avg", "max" and "min" (torchao's Float8ColwiseParallel
// all-reduces the tensorwise amax with max) of a floating dtype other than float8 (NCCL
// reduces no float8 through PyTorch's process group). wait_tensor is the identity on values (the
// async handle the functional op returns is a value here).
//
// References: every rank's operand is in RefArgs::group (impls/reference/reference.hpp
// run_reference_ranks evaluates the ranks in lockstep); the single-rank executor passes a group
// of one, so a collective over more ranks throws there, naming the node. Sums are float64 over
// the ranks in rank order, rounded once to the output dtype by the executor (NCCL's ring or tree
// order, in the dtype, is the GPU's error, bounded by the numerics check).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include "workloads/ir/error.hpp"
#include "workloads/ir/strided_loop.hpp"
#include "workloads/ops/op.hpp"

namespace replay {
namespace {

std::string dt(DType t) {
  return std::string(dtype_name(t));
}

// A required string argument.
std::string require_string(ArgReader& a, size_t i, const char* kw) {
  auto s = a.opt_string(i, kw);
  if (!s) a.fail(std::string("missing argument '") + kw + "' (a string)");
  return *s;
}

// The group: its size must be the trace's world size.
void read_group(ArgReader& a, const Graph& g, Node& n, std::optional<size_t> size_at,
                size_t name_at) {
  if (size_at) {
    n.group_size = a.integer(*size_at, "group_size", 1, 65536);
    if (n.group_size != g.world_size)
      a.fail("group_size " + std::to_string(n.group_size) +
             " differs from the trace's world_size " + std::to_string(g.world_size) +
             ": only a group spanning the world is supported (a sub-group of a device mesh needs "
             "its ranks, which the trace does not record)");
  } else {
    n.group_size = g.world_size;  // all_reduce records no size: the world's group
  }
  n.group_name = require_string(a, name_at, "group_name");
}

void read_reduce_op(ArgReader& a, const Graph& g, Node& n, size_t i) {
  n.mode = require_string(a, i, "reduce_op");
  if (n.mode != "sum" && n.mode != "avg" && n.mode != "max" && n.mode != "min")
    a.fail("reduce_op '" + n.mode +
           "' is not supported (\"sum\", \"avg\", \"max\" and \"min\" are)");
  const DType t = g.meta(n.operands[0].value).dtype;
  if (!is_floating(t) || dtype_size(t) == 1)
    a.fail("a " + dt(t) + " reduction: only float64, float32, bfloat16 and float16 are reduced");
}

void parse_all_gather(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "input")}};
  read_group(a, g, n, 1, 2);
}
void parse_reduce_scatter(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "input")}};
  read_reduce_op(a, g, n, 1);
  read_group(a, g, n, 2, 3);
}
void parse_all_reduce(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "input")}};
  read_reduce_op(a, g, n, 1);
  read_group(a, g, n, std::nullopt, 2);
}
void parse_wait(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "tensor")}};
}

const TensorMeta& input_meta(const Graph& g, const Node& n) {
  return g.meta(n.operands[0].value);
}

// [N, ...] -> [group_size * N, ...]
std::vector<OutSpec> infer_all_gather(const Graph& g, const Node& n) {
  const TensorMeta& in = input_meta(g, n);
  if (in.shape.empty())
    throw std::invalid_argument("all_gather_into_tensor of a 0-dim tensor: it gathers along dim 0");
  Shape s = in.shape;
  s[0] *= n.group_size;
  return {{s, in.dtype}};
}

// [N, ...] -> [N / group_size, ...]
std::vector<OutSpec> infer_reduce_scatter(const Graph& g, const Node& n) {
  const TensorMeta& in = input_meta(g, n);
  if (in.shape.empty())
    throw std::invalid_argument("reduce_scatter_tensor of a 0-dim tensor: it scatters dim 0");
  if (in.shape[0] % n.group_size != 0)
    throw std::invalid_argument("reduce_scatter_tensor: dim 0 of the input " + in.str() +
                                " does not divide by group_size " + std::to_string(n.group_size));
  Shape s = in.shape;
  s[0] /= n.group_size;
  return {{s, in.dtype}};
}

std::vector<OutSpec> infer_same(const Graph& g, const Node& n) {
  const TensorMeta& in = input_meta(g, n);
  return {{in.shape, in.dtype}};
}

// Every rank's operand, checked against the node's group.
const std::vector<const HostTensor*>& group_of(const RefArgs& r) {
  if (static_cast<int64_t>(r.group.size()) != r.node.group_size)
    throw TraceError("", r.node.id,
                     std::string(op_def(r.node.op).name) + " over " +
                         std::to_string(r.node.group_size) + " ranks has " +
                         std::to_string(r.group.size()) +
                         " rank(s)' operands: a collective over several ranks runs on the "
                         "multi-rank reference (run_reference_ranks), every rank in lockstep");
  for (const HostTensor* t : r.group)
    if (!t || t->meta.shape != r.in.at(0)->meta.shape)
      throw std::invalid_argument("node " + r.node.id + ": the ranks' operands differ in shape");
  return r.group;
}

std::vector<HostTensor> ref_all_gather(const RefArgs& r) {
  const auto& group = group_of(r);
  HostTensor out = make_host_tensor_for_overwrite(r.out[0].shape, r.out[0].dtype);
  const auto chunk = static_cast<int64_t>(r.in[0]->data.size());
  for (size_t q = 0; q < group.size(); ++q)
    parallel_copy(out.data.data() + static_cast<int64_t>(q) * chunk, group[q]->data.data(), chunk);
  return ref_outputs(std::move(out));
}

// out[i] = reduce over ranks q of in_q[offset + i] (sum; avg divides by the group size; max and
// min as NCCL takes them, a NaN of any rank propagating).
HostTensor reduce_ranks(const RefArgs& r, int64_t offset) {
  const auto& group = group_of(r);
  HostTensor out = make_host_tensor_for_overwrite(r.out[0].shape, r.out[0].dtype);
  const std::string& mode = r.node.mode;
  const double scale = mode == "avg" ? 1.0 / static_cast<double>(group.size()) : 1.0;
  double* o = out.data.data();
  parallel_for(static_cast<int64_t>(out.data.size()), [&](int64_t i) {
    if (mode == "max" || mode == "min") {
      double m = group[0]->data[offset + i];
      for (const HostTensor* t : group) {
        const double v = t->data[offset + i];
        if (std::isnan(v) || std::isnan(m))
          m = std::numeric_limits<double>::quiet_NaN();
        else
          m = mode == "max" ? std::max(m, v) : std::min(m, v);
      }
      o[i] = m;
      return;
    }
    double s = 0;
    for (const HostTensor* t : group) s += t->data[offset + i];
    o[i] = mode == "avg" ? s * scale : s;
  });
  return out;
}

std::vector<HostTensor> ref_reduce_scatter(const RefArgs& r) {
  const int64_t chunk = r.out[0].numel();
  return ref_outputs(reduce_ranks(r, static_cast<int64_t>(r.rank) * chunk));
}

std::vector<HostTensor> ref_all_reduce(const RefArgs& r) {
  return ref_outputs(reduce_ranks(r, 0));
}

std::vector<HostTensor> ref_wait(const RefArgs& r) {
  HostTensor out = make_host_tensor_for_overwrite(r.out[0].shape, r.out[0].dtype);
  parallel_copy(out.data.data(), r.in[0]->data.data(), static_cast<int64_t>(out.data.size()));
  return ref_outputs(std::move(out));
}

// --- the rows ----------------------------------------------------------------------------------
// The examples are one rank of a world of one (the table-walking tests run the single-rank
// reference); tests/unit/test_collective.cpp runs them over 2, 4 and 8 ranks.

#define COLL(op, name, parse, infer, ref, example) \
  { op, name, OpKind::kCollective, 1, parse, infer, ref, eager_collective(), nullptr, example }

constexpr OpDef kRows[] = {
    COLL(Op::kAllGatherIntoTensor, "_c10d_functional.all_gather_into_tensor.default",
         parse_all_gather, infer_all_gather, ref_all_gather,
         R"({"inputs": [{"shape": [4, 6], "dtype": "bfloat16"}],
             "args": [{"ref": "in0"}, 1, "0"]})"),
    COLL(Op::kReduceScatterTensor, "_c10d_functional.reduce_scatter_tensor.default",
         parse_reduce_scatter, infer_reduce_scatter, ref_reduce_scatter,
         R"({"inputs": [{"shape": [4, 6], "dtype": "float32"}],
             "args": [{"ref": "in0"}, "sum", 1, "0"]})"),
    COLL(Op::kAllReduce, "_c10d_functional.all_reduce.default", parse_all_reduce, infer_same,
         ref_all_reduce,
         R"({"inputs": [{"shape": [3, 5], "dtype": "bfloat16"}],
             "args": [{"ref": "in0"}, "avg", "0"]})"),
    COLL(Op::kWaitTensor, "_c10d_functional.wait_tensor.default", parse_wait, infer_same, ref_wait,
         R"({"inputs": [{"shape": [3, 5], "dtype": "bfloat16"}], "args": [{"ref": "in0"}]})"),
};
#undef COLL
static_assert(rows_cover(kRows, kCollectiveOps), "one row per collective, in enum order");

}  // namespace

std::span<const OpDef> collective_op_rows() {
  return kRows;
}

}  // namespace replay
