// Random ops: one row each (see op.hpp). A replay must be deterministic and every executor must
// see the same draw, so the loader gives each random node a hidden graph input "<id>#uniform"
// (float32, the node's output shape, U[0, 1) drawn from the run's seed as traces/SCHEMA.md
// specifies), appended as the node's last operand; the ops are then functions of it:
//   rand, rand_like      out = U
//   bernoulli.p          out = U < p
//   native_dropout       mask = U < 1 - p, out = mask ? x / (1 - p) : 0   (train; as ATen's
//                        fused dropout keeps an element with probability 1 - p)
// The values differ from PyTorch's own draw (Philox with its offsets); a trace's golden outputs
// of a random op are therefore not compared (the report says so).
#include "workloads/ops/eigen_ref.hpp"

namespace replay {
namespace {

using ref::ArrayXd;

void ignore_factory_kwargs(ArgReader& a) {
  for (const char* kw :
       {"layout", "device", "pin_memory", "memory_format", "requires_grad", "generator"})
    a.ignore(kw);
}

// rand(size, *, dtype=None, ...)
void parse_rand(ArgReader& a, const Graph&, Node& n) {
  n.sizes = a.int_list(0, "size");
  for (int64_t d : n.sizes)
    if (d < 0) a.fail("negative size in " + shape_str(n.sizes));
  n.dtype = a.present(ArgReader::kKwOnly, "dtype") ? a.dtype(ArgReader::kKwOnly, "dtype")
                                                   : DType::kFloat32;
  ignore_factory_kwargs(a);
}

// rand_like(self, *, dtype=None, ...)
void parse_rand_like(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  n.sizes = g.meta(n.operands[0].value).shape;
  n.dtype = a.present(ArgReader::kKwOnly, "dtype") ? a.dtype(ArgReader::kKwOnly, "dtype")
                                                   : g.meta(n.operands[0].value).dtype;
  ignore_factory_kwargs(a);
}

double read_probability(ArgReader& a, size_t i, const char* kw, double dflt) {
  const double p = a.opt_scalar(i, kw).value_or(dflt);
  if (!(p >= 0 && p <= 1))
    a.fail(std::string(kw) + " = " + std::to_string(p) + " is not in [0, 1]");
  return p;
}

// bernoulli.p(self, p=0.5, *, generator=None)
void parse_bernoulli(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  Operand p;
  p.scalar = read_probability(a, 1, "p", 0.5);
  n.operands.push_back(p);
  n.sizes = g.meta(n.operands[0].value).shape;
  n.dtype = g.meta(n.operands[0].value).dtype;
  ignore_factory_kwargs(a);
}

// native_dropout(input, p, train)
void parse_dropout(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "input")}};
  Operand p;
  p.scalar = read_probability(a, 1, "p", 0.5);
  n.operands.push_back(p);
  n.flag = a.boolean(2, "train", true);
  if (!n.flag) n.operands[1].scalar = 0;  // eval: identity, mask all true
  n.sizes = g.meta(n.operands[0].value).shape;
  n.dtype = g.meta(n.operands[0].value).dtype;
}

std::vector<OutSpec> infer_random(const Graph&, const Node& n) {
  return {{n.sizes, n.dtype}};
}

std::vector<OutSpec> infer_dropout(const Graph&, const Node& n) {
  return {{n.sizes, n.dtype}, {n.sizes, DType::kBool}};
}

// The drawn U[0, 1) tensor: the node's last operand (added by the loader).
const HostTensor& uniform(const RefArgs& a) {
  return *a.in.back();
}

std::vector<HostTensor> ref_rand(const RefArgs& a) {
  return ref_outputs(ref::from_array(ref::as_array(uniform(a)), a.out[0]));
}

std::vector<HostTensor> ref_bernoulli(const RefArgs& a) {
  const double p = a.node.operands[1].scalar;
  return ref_outputs(ref::from_array((ref::as_array(uniform(a)) < p).cast<double>(), a.out[0]));
}

std::vector<HostTensor> ref_dropout(const RefArgs& a) {
  const double keep = 1 - a.node.operands[1].scalar;
  const double scale = keep > 0 ? 1 / keep : 0;
  const ArrayXd mask = (ref::as_array(uniform(a)) < keep).cast<double>();
  const ArrayXd x = ref::as_array(*a.in[0]);
  return ref_outputs(ref::from_array(x * mask * scale, a.out[0]), ref::from_array(mask, a.out[1]));
}

#define ROW(op, name, nout, parse, infer, ref, example) \
  { op, name, OpKind::kRandom, nout, parse, infer, ref, eager_generated(), nullptr, example }

constexpr OpDef kRows[] = {
    ROW(Op::kRand, "aten.rand.default", 1, parse_rand, infer_random, ref_rand,
        R"({"inputs": [], "args": [[3, 4]], "kwargs": {"dtype": {"dtype": "bfloat16"}}})"),
    ROW(Op::kRandLike, "aten.rand_like.default", 1, parse_rand_like, infer_random, ref_rand,
        R"({"inputs": [{"shape": [2, 5], "dtype": "float32"}], "args": [{"ref": "in0"}]})"),
    ROW(Op::kBernoulliP, "aten.bernoulli.p", 1, parse_bernoulli, infer_random, ref_bernoulli,
        R"({"inputs": [{"shape": [2, 5], "dtype": "float32"}], "args": [{"ref": "in0"}, 0.25]})"),
    ROW(Op::kNativeDropout, "aten.native_dropout.default", 2, parse_dropout, infer_dropout,
        ref_dropout,
        R"({"inputs": [{"shape": [4, 5], "dtype": "bfloat16"}], "args": [{"ref": "in0"}, 0.1, true]})"),
};
static_assert(rows_cover(kRows, kRandomOps), "one row per random op, in enum order");

}  // namespace

std::span<const OpDef> random_op_rows() {
  return kRows;
}

}  // namespace replay
