// Graph IR: a loaded, validated trace. Values (graph inputs and node outputs) carry
// shape/stride/dtype; nodes carry their ATen op and decoded arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "workloads/ir/dtype.hpp"
#include "workloads/ops/op_id.hpp"

namespace replay {

/// Most dims a tensor may have (the eager kernels index with fixed-size arrays).
inline constexpr int kMaxRank = 8;
/// Largest tensor the harness accepts, bytes (its numel and storage span are then far from
/// overflowing int64).
inline constexpr int64_t kMaxTensorBytes = int64_t(1) << 46;

/// Shape [d0, d1, ...], strides in elements, and dtype of one tensor.
struct TensorMeta {
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;
  DType dtype = DType::kFloat32;

  int64_t numel() const;
  /// numel * element size: the bytes a kernel must read or write for this tensor.
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  /// Elements the strided layout spans: 1 + sum((shape[i]-1) * stride[i]).
  int64_t storage_elems() const;
  bool is_contiguous() const;
  /// Every element at its own offset and the offsets gapless (a permutation of a contiguous
  /// layout), as every computed (non-view) tensor in PyTorch is.
  bool non_overlapping_and_dense() const;
  std::string str() const;  ///< e.g. "bfloat16[16, 1024, 1600]"
};

/// numel of `shape`, or std::nullopt when a size is negative or the product overflows int64.
std::optional<int64_t> checked_numel(const std::vector<int64_t>& shape);

/// "[d0, d1, ...]" for error messages.
std::string shape_str(const std::vector<int64_t>& shape);

/// Row-major strides of a shape.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);

/// Value statistics recorded at capture time; inputs are generated to follow them.
struct ValueStats {
  double mean = 0, std = 1, min = -1e30, max = 1e30;
};

/// A backward trace's saved input: the forward trace's output it is (traces/SCHEMA.md, "from").
struct ForwardOutputRef {
  std::string trace;   ///< forward trace name (its file is <trace>.json beside this one)
  std::string output;  ///< the forward graph's output value id
};

struct Value {
  std::string name;
  TensorMeta meta;
  int producer = -1;       ///< node index, or -1 for a graph input
  int output_index = 0;    ///< which output of the producer
  std::vector<int> users;  ///< node indices that read this value
  std::optional<ValueStats> stats;
  bool graph_input = false;
  bool graph_output = false;
  /// A hidden input the loader adds for a random op ("<node id>#uniform"): U[0, 1) drawn from
  /// the run's seed (traces/SCHEMA.md, "Random ops"), never taken from a golden file.
  bool uniform = false;
  /// Training captures: the input's role ("activation", "param", "saved", "tangent"; empty when
  /// the trace gives none) and, for a saved input, the forward output it is.
  std::string role;
  std::optional<ForwardOutputRef> from;
  /// A graph input that is the same tensor as an earlier input (traces/SCHEMA.md "same_as":
  /// aot_autograd's default partitioner saves `rsqrt` and `aten.alias(rsqrt)` for the backward):
  /// that input's value index, else -1. Inputs are generated equal; the canonical form reads the
  /// earlier one.
  int same_as = -1;
  /// A graph input that is exactly an earlier input widened to this input's dtype
  /// (traces/SCHEMA.md "widened_from": T5's default partitioner saves x in bf16 and
  /// `x.float()` for the backward): that input's value index, else -1. Inputs are generated
  /// equal; the canonical form computes this one from the earlier one.
  int widened_from = -1;
  /// A graph input that stands for an output of a node the loader cut out (an op the harness
  /// cannot run): its index in Graph::cut; -1 otherwise.
  int cut = -1;
  /// An output the op returned as None (a `null` entry of the node's recorded outputs: the
  /// gradients native_layer_norm_backward's output_mask turns off). Shape [0], never computed;
  /// no node or graph output may read it (traces/SCHEMA.md, "None outputs").
  bool none = false;
};

/// A node operand: a tensor (value index) or a Python scalar.
struct Operand {
  int value = -1;
  double scalar = 0;
  bool none = false;  ///< Python None for an optional operand (_scaled_mm bias, clamp min, ...)
  /// A Python scalar's type for type promotion: float64 (a Python float), int64 (an int) or
  /// bool, as PyTorch wraps numbers.
  DType scalar_type = DType::kFloat64;
  bool is_tensor() const { return value >= 0; }
  bool is_scalar() const { return value < 0 && !none; }
};

/// One op call. Its fields are filled by the op's row parser (workloads/ops/*.cpp); a field an op
/// does not take keeps its default.
struct Node {
  std::string id;
  Op op = Op::kCount;
  /// Tensor or scalar operands in ATen order: (x) for unary ops, (x, exponent) for pow,
  /// (a, b) for binary ops. FX's getitem is resolved by the loader and never appears.
  std::vector<Operand> operands;
  /// Reduction dims (normalized to [0, ndim), sorted), permute order, or view/expand shape.
  std::vector<int64_t> dims;
  bool keepdim = false;
  double correction = 1;          ///< var_mean: divisor is N - correction
  double alpha = 1;               ///< add/sub: a + alpha * b
  DType dtype = DType::kFloat32;  ///< convert_element_type / _to_copy / creation / out_dtype
  int64_t dim = 0;                ///< unsqueeze, slice, select, cat, split, squeeze position
  double beta = 1;                ///< addmm/baddbmm: beta * self + alpha * (a @ b)
  bool flag = false;  ///< _scaled_mm use_fast_accum, native_dropout train, clamp has-max, ...
  int64_t start = 0, end = 0, step = 1;  ///< slice / slice_scatter bounds (normalized)
  std::vector<int64_t> sizes;            ///< split sizes, creation / as_strided shape
  std::vector<int64_t> strides;          ///< as_strided strides
  int64_t offset = 0;                    ///< as_strided storage offset; select index (normalized)
  std::string mode;          ///< div rounding_mode ("", "trunc", "floor"), gelu approximate
  std::vector<int> outputs;  ///< value indices
  nlohmann::json raw;        ///< the node as written in the trace (for repro and errors)

  // nn ops (workloads/ops/nn.cpp); nll_loss's reduction is in `mode` ("none", "mean", "sum").
  double eps = 0;                 ///< native_layer_norm / native_group_norm epsilon
  int64_t ignore_index = -100;    ///< nll_loss: the target value that contributes nothing
  std::vector<bool> output_mask;  ///< norm backwards: which of (dx, dw, db) are computed

  // collectives (workloads/ops/collective.cpp); the reduce_op ("sum", "avg") is in `mode`.
  int64_t group_size = 0;  ///< ranks of the collective's group (== Graph::world_size)
  std::string group_name;  ///< the process group's name as captured (e.g. "0"); not interpreted
};

/// Golden tensors stored beside a trace (safetensors), keyed by value name.
struct GoldenRef {
  std::string path;                ///< absolute or trace-relative file path
  std::vector<std::string> names;  ///< tensors it holds (graph inputs and outputs)
  std::string prefix;  ///< key prefix of this graph's tensors in the file (op corpus: "c3/")
};

/// A node the loader cut out of the graph because the harness cannot run its op
/// (LoadOptions::cut_unsupported; traces/SCHEMA.md, "Cut nodes"). It is not in Graph::nodes; each
/// of its outputs that the graph reads became a graph input (Value::cut) drawn from the output's
/// recorded statistics, so the rest of the graph replays.
struct CutNode {
  std::string id;      ///< the node's id in the trace
  std::string op;      ///< its op as the trace names it, e.g.
                       ///< "aten._scaled_dot_product_flash_attention.default"
  std::string reason;  ///< why it was cut: "unsupported op 'aten.X'"
  struct Output {
    std::string value;      ///< the graph input it became (the getitem's id for a tuple's output)
    int index = 0;          ///< which output of the node
    ValueStats stats;       ///< what its values are drawn from
    bool recorded = false;  ///< stats recorded by the capture; false: the synthetic default
    /// Set by the runner: the value was taken from the golden file (a graph output PyTorch
    /// returned), not drawn from the stats.
    bool golden = false;
  };
  std::vector<Output> outputs;  ///< outputs the graph reads, in the order it first reads them
  /// Outputs of a dtype PyTorch has and the harness lacks (complex64, uint8, ...): not values of
  /// the graph; every node reading one is cut too ("complex64 [1, 8, 4, 8]" per output, with its
  /// name: "view_as_complex: complex64 [1, 8, 4, 8]").
  std::vector<std::string> lacked_outputs;
  /// One line for the console and the reports: "node 'X': unsupported op 'aten.Y'; outputs a, b
  /// drawn from recorded stats" (outputs without recorded stats: "drawn from synthetic stats").
  std::string describe() const;
};

/// A value of a dtype the harness lacks (a complex64 table, uint8 mask, uint64 RNG state) that the
/// loader keeps out of the graph (LoadOptions::cut_unsupported): a graph input, or a graph output
/// no replay can produce. Its readers are cut (CutNode).
struct LackedValue {
  std::string name;
  std::string what;    ///< "complex64 [8, 8]" (the dtype and shape as recorded)
  bool input = false;  ///< a graph input (else a graph output of a cut node)
};

struct Graph {
  std::string name;
  std::string file;  ///< path it was loaded from
  nlohmann::json source;
  int world_size = 1;
  std::vector<Value> values;
  std::vector<Node> nodes;   ///< topological order (as captured)
  std::vector<int> inputs;   ///< value indices of graph inputs
  std::vector<int> outputs;  ///< value indices of graph outputs
  std::optional<GoldenRef> golden;
  std::vector<CutNode> cut;  ///< nodes cut out (unsupported ops), in trace order; empty normally
  /// Graph inputs and outputs of a dtype the harness lacks, left out of `inputs` / `outputs`.
  std::vector<LackedValue> lacked;

  /// Value index by name, or -1.
  int find_value(const std::string& name) const;
  const TensorMeta& meta(int value) const { return values.at(value).meta; }
};

}  // namespace replay
