// An op's definition: one row per op (name, kind, arity, argument parser, shape rule, float64
// reference, eager lowering, a small example), in its family file (see op_id.hpp). The loader,
// the reference executor and the eager executor read only these rows, so a new op is one row plus
// its functions; tests/unit/test_op_table.cpp walks every row (and the GPU op test runs every
// row's example through the eager executor against the reference).
#pragma once

#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "workloads/ir/graph.hpp"
#include "workloads/ir/host_tensor.hpp"
#include "workloads/ir/layout.hpp"
#include "workloads/ops/args.hpp"
#include "workloads/ops/eager_fn.hpp"
#include "workloads/ops/op_id.hpp"

namespace replay {

/// An op's family (one family file each, see op_id.hpp).
enum class OpKind : uint8_t {
  kPointwise,
  kReduction,
  kView,
  kCreation,
  kCopy,
  kMatmul,
  kRandom,
  kIndexing,
  kNn,
  kCollective,  ///< _c10d_functional collectives of a per-rank graph (collective.cpp)
};

/// How the eager executor runs an op: a host-side alias (views; the row's `alias` gives the
/// layout), one launch of a generic kernel with one of its functions, a GEMM (cuBLASLt), a
/// composite of copies into views of the output (cat, *_scatter), or the upload of values the
/// harness drew on the host (random ops: every executor sees the same draw).
struct EagerLowering {
  enum Kernel : uint8_t {
    kAlias,
    kPointwise,
    kReduction,
    kGemm,
    kComposite,
    kGenerated,
    kIndexing,  ///< impls/eager/indexing.cu, one of IndexingFn
    kNn,        ///< the row-wise kernels of impls/eager/nn.cu (softmax, nll_loss, norms)
    /// A collective: a copy when its group is one rank; over more ranks it needs the
    /// multi-process path (not built yet), and lowering throws.
    kCollective,
  } kernel = kAlias;
  uint8_t fn = 0;  ///< PointwiseFn, ReduceFn, GemmFn, CompositeFn, IndexingFn or NnFn
};
constexpr EagerLowering eager_pointwise(PointwiseFn f) {
  return {EagerLowering::kPointwise, static_cast<uint8_t>(f)};
}
constexpr EagerLowering eager_reduction(ReduceFn f) {
  return {EagerLowering::kReduction, static_cast<uint8_t>(f)};
}
constexpr EagerLowering eager_gemm(GemmFn f) {
  return {EagerLowering::kGemm, static_cast<uint8_t>(f)};
}
constexpr EagerLowering eager_composite(CompositeFn f) {
  return {EagerLowering::kComposite, static_cast<uint8_t>(f)};
}
constexpr EagerLowering eager_indexing(IndexingFn f) {
  return {EagerLowering::kIndexing, static_cast<uint8_t>(f)};
}
constexpr EagerLowering eager_nn(NnFn f) {
  return {EagerLowering::kNn, static_cast<uint8_t>(f)};
}
constexpr EagerLowering eager_collective() {
  return {EagerLowering::kCollective, 0};
}
constexpr EagerLowering eager_alias() {
  return {EagerLowering::kAlias, 0};
}
constexpr EagerLowering eager_generated() {
  return {EagerLowering::kGenerated, 0};
}

/// A view's output layout over its input's storage: strides, and the storage offset (elements)
/// relative to the input's own offset, or from the storage's start when `absolute`
/// (as_strided with a storage_offset).
struct ViewLayout {
  std::vector<int64_t> stride;
  int64_t offset = 0;
  bool absolute = false;
};

/// A reference function's result from its output tensors, moved in: a braced list
/// (`return {t};`) would copy every tensor, gigabytes at the realistic shapes.
template <typename... T>
std::vector<HostTensor> ref_outputs(T&&... t) {
  std::vector<HostTensor> v;
  v.reserve(sizeof...(T));
  (v.push_back(std::forward<T>(t)), ...);
  return v;
}

/// What a reference function gets: the node, one tensor per operand (nullptr for a Python
/// scalar, whose value is in node.operands[i].scalar), and the recorded output metadata.
/// Operand tensors are contiguous float64 HostTensors already rounded to their dtype.
struct RefArgs {
  const Node& node;
  std::vector<const HostTensor*> in;
  const std::vector<TensorMeta>& out;
  /// The recorded layout of each tensor operand (nullptr for numbers): as_strided reads storage.
  std::vector<const TensorMeta*> in_meta = {};
  /// Collectives only (OpKind::kCollective): operand 0 of every rank of the group, in rank
  /// order (group[rank] == in[0]), and the rank being evaluated. The single-rank executor passes
  /// {in[0]}: a group of one; impls/reference/reference.hpp run_reference_ranks passes every
  /// rank's operand.
  std::vector<const HostTensor*> group = {};
  int rank = 0;
};

/// What a shape rule gives for one output: its shape, and its dtype where the op fixes it
/// (conversions, views); the loader checks the recorded metadata against both.
struct OutSpec {
  Shape shape;
  std::optional<DType> dtype;
  /// The op returns None here (a norm backward's output_mask entry is false): the trace records
  /// `null`, and the value is a shape-[0] placeholder nothing reads (Value::none).
  bool none = false;
};

struct OpDef {
  Op op;
  std::string_view name;  ///< ATen spelling, e.g. "aten.var_mean.correction"
  OpKind kind;
  int num_outputs;
  /// Reads the node's FX arguments into `n` (operands, dims, dtype, ...). Throws TraceError
  /// through `args` for a missing, mistyped, out-of-range or extra argument.
  void (*parse)(ArgReader& args, const Graph& g, Node& n);
  /// Output shapes (and dtypes where fixed) from the operands' metadata. Throws
  /// std::invalid_argument.
  std::vector<OutSpec> (*infer)(const Graph& g, const Node& n);
  /// Float64 reference: one contiguous HostTensor per output, values not yet rounded to the
  /// output dtype (the executor rounds; impls/reference/reference.hpp gives the policy).
  std::vector<HostTensor> (*reference)(const RefArgs& a);
  EagerLowering eager;
  /// Views only: layout of output `k` (shape `out`) as an alias of input 0 with layout `in`;
  /// std::nullopt when the layout cannot be aliased and the op copies instead (reshape). Throws
  /// std::invalid_argument when the op cannot copy either (view of a non-viewable layout).
  std::optional<ViewLayout> (*alias)(const Node& n, const TensorMeta& in, const Shape& out, int k);
  /// A small case for the table-walking tests, as a trace fragment:
  /// {"inputs": [{"shape": [3, 5], "dtype": "float32", "stats": {...}?, "stride": [...]?}, ...],
  ///  "args": [...], "kwargs": {...}?}; inputs are named in0, in1, ... and referenced as
  /// {"ref": "in0"}.
  std::string_view example;
};

/// The row of `op`.
const OpDef& op_def(Op op);
/// Every row, in enum order.
std::span<const OpDef* const> all_ops();

/// aten.add / aten.sub (Tensor and Scalar overloads) and aten.rsub.Scalar: a sum of two addends,
/// whose magnitudes the numerics check may need (NumericsBounds::addend_ulps).
bool is_addition(Op op);
/// The value `n` passes on with its magnitudes unchanged: the one tensor operand of a view or of
/// a copy (clone, _to_copy, convert_element_type); -1 for any other node.
int carried_value(const Node& n);

// Family tables (one per family file), each covering its OpRange in order.
std::span<const OpDef> pointwise_op_rows();
std::span<const OpDef> compare_op_rows();
std::span<const OpDef> reduction_op_rows();
std::span<const OpDef> view_op_rows();
std::span<const OpDef> creation_op_rows();
std::span<const OpDef> copy_op_rows();
std::span<const OpDef> matmul_op_rows();
std::span<const OpDef> random_op_rows();
std::span<const OpDef> indexing_op_rows();
std::span<const OpDef> nn_op_rows();
std::span<const OpDef> collective_op_rows();

/// Whether `rows` lists exactly the ops of `range`, in enum order (each family file
/// static_asserts this on its table).
template <size_t N>
constexpr bool rows_cover(const OpDef (&rows)[N], OpRange range) {
  if (N != range.size()) return false;
  for (size_t i = 0; i < N; ++i)
    if (static_cast<size_t>(rows[i].op) != static_cast<size_t>(range.first) + i) return false;
  return true;
}

}  // namespace replay
