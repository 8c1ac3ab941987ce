// Creation ops: one row each (see op.hpp). Their only operands the kernels read are Python
// numbers (fill value; start and step of a range); *_like ops also take a tensor for its shape
// and dtype. Default dtypes follow PyTorch: full's from its fill value (bool, int64, float32),
// zeros/ones/scalar_tensor float32, arange int64 when every bound is an integer, else float32.
// The eager kernel writes the values with one launch (PointwiseFn kFill / kIota).
#include <cmath>

#include "workloads/ops/eigen_ref.hpp"

namespace replay {
namespace {

using ref::ArrayXd;

// The keywords every factory function takes besides dtype; the recorded output metadata says
// what they did (a CUDA device, strided layout).
void ignore_factory_kwargs(ArgReader& a) {
  for (const char* kw : {"layout", "device", "pin_memory", "memory_format", "requires_grad"})
    a.ignore(kw);
}

void read_dtype(ArgReader& a, Node& n, DType dflt) {
  n.dtype = a.present(ArgReader::kKwOnly, "dtype") ? a.dtype(ArgReader::kKwOnly, "dtype") : dflt;
  ignore_factory_kwargs(a);
}

Operand number(double v, DType type) {
  Operand o;
  o.scalar = v;
  o.scalar_type = type;
  return o;
}

DType dtype_of_number(const Operand& o) {
  return o.scalar_type == DType::kFloat64 ? DType::kFloat32 : o.scalar_type;
}

std::vector<int64_t> read_size(ArgReader& a) {
  std::vector<int64_t> size = a.int_list(0, "size");
  for (int64_t d : size)
    if (d < 0) a.fail("negative size in " + shape_str(size));
  return size;
}

// full(size, fill_value, *, dtype=None, ...)
void parse_full(ArgReader& a, const Graph&, Node& n) {
  n.sizes = read_size(a);
  n.operands = {a.scalar_operand(1, "fill_value")};
  read_dtype(a, n, dtype_of_number(n.operands[0]));
}

// zeros/ones(size, *, dtype=None, ...)
template <int kValue>
void parse_constant(ArgReader& a, const Graph&, Node& n) {
  n.sizes = read_size(a);
  n.operands = {number(kValue, DType::kInt64)};
  read_dtype(a, n, DType::kFloat32);
}

// full_like(self, fill_value, *, dtype=None, ...)
void parse_full_like(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}, a.scalar_operand(1, "fill_value")};
  n.sizes = g.meta(n.operands[0].value).shape;
  read_dtype(a, n, g.meta(n.operands[0].value).dtype);
}

template <int kValue>
void parse_constant_like(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}, number(kValue, DType::kInt64)};
  n.sizes = g.meta(n.operands[0].value).shape;
  read_dtype(a, n, g.meta(n.operands[0].value).dtype);
}

// scalar_tensor(s, *, dtype=None, ...): shape [].
void parse_scalar_tensor(ArgReader& a, const Graph&, Node& n) {
  n.operands = {a.scalar_operand(0, "s")};
  read_dtype(a, n, DType::kFloat32);
}

// The operands of a range: start and step (the end only sets the length).
void set_range(ArgReader& a, Node& n, const Operand& start, const Operand& end,
               const Operand& step) {
  if (step.scalar == 0) a.fail("arange step must be nonzero");
  const double len = std::ceil((end.scalar - start.scalar) / step.scalar);
  if (!(len >= 0) || len > 9.0e15) a.fail("arange bounds give an invalid length");
  n.sizes = {static_cast<int64_t>(len)};
  n.operands = {start, step};
  const bool all_int = start.scalar_type != DType::kFloat64 && end.scalar_type != DType::kFloat64 &&
                       step.scalar_type != DType::kFloat64;
  read_dtype(a, n, all_int ? DType::kInt64 : DType::kFloat32);
}

void parse_arange(ArgReader& a, const Graph&, Node& n) {
  set_range(a, n, number(0, DType::kInt64), a.scalar_operand(0, "end"), number(1, DType::kInt64));
}

void parse_arange_start(ArgReader& a, const Graph&, Node& n) {
  set_range(a, n, a.scalar_operand(0, "start"), a.scalar_operand(1, "end"),
            number(1, DType::kInt64));
}

void parse_arange_step(ArgReader& a, const Graph&, Node& n) {
  const Operand start = a.scalar_operand(0, "start"), end = a.scalar_operand(1, "end");
  const Operand step =
      a.present(2, "step") ? a.scalar_operand(2, "step") : number(1, DType::kInt64);
  set_range(a, n, start, end, step);
}

// prims.iota(length, *, start, step, dtype, device, requires_grad)
void parse_iota(ArgReader& a, const Graph&, Node& n) {
  const int64_t len = a.integer(0, "length", 0);
  n.sizes = {len};
  n.operands = {a.scalar_operand(ArgReader::kKwOnly, "start"),
                a.scalar_operand(ArgReader::kKwOnly, "step")};
  n.dtype = a.dtype(ArgReader::kKwOnly, "dtype");
  ignore_factory_kwargs(a);
}

std::vector<OutSpec> infer_created(const Graph&, const Node& n) {
  return {{n.sizes, n.dtype}};
}

// The scalar operands of a creation node, in order (the *_like tensor skipped).
std::vector<double> numbers(const RefArgs& a) {
  std::vector<double> v;
  for (const auto& o : a.node.operands)
    if (!o.is_tensor()) v.push_back(o.scalar);
  return v;
}

std::vector<HostTensor> ref_fill(const RefArgs& a) {
  HostTensor t = make_host_tensor_for_overwrite(a.out[0].shape, a.out[0].dtype);
  const double v = numbers(a).at(0);
  parallel_for(static_cast<int64_t>(t.data.size()), [&](int64_t i) { t.data[i] = v; });
  return ref_outputs(std::move(t));
}

std::vector<HostTensor> ref_iota(const RefArgs& a) {
  HostTensor t = make_host_tensor_for_overwrite(a.out[0].shape, a.out[0].dtype);
  const auto v = numbers(a);
  const double start = v.at(0), step = v.at(1);
  parallel_for(static_cast<int64_t>(t.data.size()),
               [&](int64_t i) { t.data[i] = start + step * static_cast<double>(i); });
  return ref_outputs(std::move(t));
}

#define ROW(op, name, parse, ref, fn, example)                                                   \
  {                                                                                              \
    op, name, OpKind::kCreation, 1, parse, infer_created, ref, eager_pointwise(PointwiseFn::fn), \
        nullptr, example                                                                         \
  }
#define LIKE_EX R"({"inputs": [{"shape": [2, 3], "dtype": "bfloat16"}], "args": [{"ref": "in0"}]})"

constexpr OpDef kRows[] = {
    ROW(Op::kFull, "aten.full.default", parse_full, ref_fill, kFill,
        R"({"inputs": [], "args": [[2, 3], 0.5], "kwargs": {"dtype": {"dtype": "bfloat16"},
            "layout": {"enum": "torch.strided"}, "device": {"enum": "cuda:0"}, "pin_memory": false}})"),
    ROW(Op::kFullLike, "aten.full_like.default", parse_full_like, ref_fill, kFill,
        R"({"inputs": [{"shape": [2, 3], "dtype": "float32"}], "args": [{"ref": "in0"}, -1]})"),
    ROW(Op::kZeros, "aten.zeros.default", parse_constant<0>, ref_fill, kFill,
        R"({"inputs": [], "args": [[4]]})"),
    ROW(Op::kOnes, "aten.ones.default", parse_constant<1>, ref_fill, kFill,
        R"({"inputs": [], "args": [[2, 2]], "kwargs": {"dtype": {"dtype": "int64"}}})"),
    ROW(Op::kZerosLike, "aten.zeros_like.default", parse_constant_like<0>, ref_fill, kFill,
        LIKE_EX),
    ROW(Op::kOnesLike, "aten.ones_like.default", parse_constant_like<1>, ref_fill, kFill, LIKE_EX),
    ROW(Op::kScalarTensor, "aten.scalar_tensor.default", parse_scalar_tensor, ref_fill, kFill,
        R"({"inputs": [], "args": [-2.5]})"),
    ROW(Op::kArange, "aten.arange.default", parse_arange, ref_iota, kIota,
        R"({"inputs": [], "args": [7]})"),
    ROW(Op::kArangeStart, "aten.arange.start", parse_arange_start, ref_iota, kIota,
        R"({"inputs": [], "args": [-3, 4], "kwargs": {"dtype": {"dtype": "float32"}}})"),
    ROW(Op::kArangeStep, "aten.arange.start_step", parse_arange_step, ref_iota, kIota,
        R"({"inputs": [], "args": [0, 1.0, 0.125]})"),
    ROW(Op::kIota, "prims.iota.default", parse_iota, ref_iota, kIota,
        R"({"inputs": [], "args": [5], "kwargs": {"start": 2, "step": 3,
            "dtype": {"dtype": "int64"}, "device": {"enum": "cuda:0"}, "requires_grad": false}})"),
};
static_assert(rows_cover(kRows, kCreationOps), "one row per creation op, in enum order");

}  // namespace

std::span<const OpDef> creation_op_rows() {
  return kRows;
}

}  // namespace replay
