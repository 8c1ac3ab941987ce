#include "harness/gpu_replay.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>

#include "impls/eager/eager.hpp"
#include "impls/fusions/fusion_binding.hpp"
#include "workloads/shapes.hpp"

namespace replay {
namespace {

PointwiseOp pointwise_op(Op op) {
  switch (op) {
    case Op::kConvertElementType:
    case Op::kClone:
      return PointwiseOp::kCopy;
    case Op::kRsqrt:
      return PointwiseOp::kRsqrt;
    case Op::kSqrt:
      return PointwiseOp::kSqrt;
    case Op::kNeg:
      return PointwiseOp::kNeg;
    case Op::kAbs:
      return PointwiseOp::kAbs;
    case Op::kExp:
      return PointwiseOp::kExp;
    case Op::kReciprocal:
      return PointwiseOp::kReciprocal;
    case Op::kPowTensorScalar:
      return PointwiseOp::kPow;
    case Op::kAdd:
      return PointwiseOp::kAdd;
    case Op::kSub:
      return PointwiseOp::kSub;
    case Op::kMul:
      return PointwiseOp::kMul;
    case Op::kDiv:
      return PointwiseOp::kDiv;
    default:
      throw std::invalid_argument("not a pointwise op: " + std::string(op_name(op)));
  }
}

ReduceOp reduce_op(Op op) {
  switch (op) {
    case Op::kVarMean:
      return ReduceOp::kVarMean;
    case Op::kMeanDim:
      return ReduceOp::kMean;
    case Op::kSumDim:
      return ReduceOp::kSum;
    case Op::kAmax:
      return ReduceOp::kAmax;
    default:
      throw std::invalid_argument("not a reduction: " + std::string(op_name(op)));
  }
}

// Layout for a computed value: the recorded strides when they are dense, else contiguous.
TensorMeta dense_layout(const TensorMeta& recorded) {
  TensorMeta m = recorded;
  if (m.storage_elems() != m.numel()) m.stride = contiguous_strides(m.shape);
  return m;
}

}  // namespace

void* GpuProgram::Slot::ptr() const {
  return static_cast<char*>(storage->get()) +
         offset * static_cast<int64_t>(dtype_size(layout.dtype));
}

GpuProgram::Slot& GpuProgram::alloc(int value, const TensorMeta& m) {
  Slot s;
  s.layout = m;
  s.storage = std::make_shared<DeviceBuffer>(
      std::max<size_t>(static_cast<size_t>(m.storage_elems()) * dtype_size(m.dtype), 16));
  return slots_[value] = std::move(s);
}

GpuProgram::GpuProgram(const Graph& g, const Plan& plan, std::string variant,
                       const std::map<int, HostTensor>& inputs)
    : g_(g), plan_(plan), variant_(std::move(variant)) {
  if (variant_ != "eager" && variant_ != "baseline" && variant_ != "optimized")
    throw std::invalid_argument("unknown GPU variant '" + variant_ + "'");
  for (int v : g.inputs) {
    const TensorMeta& m = g.meta(v);
    Slot& s = alloc(v, m);
    std::vector<uint8_t> bytes = pack(inputs.at(v), m);
    REPLAY_CUDA(cudaMemcpy(s.ptr(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  }
  const bool fuse = variant_ != "eager";
  std::set<int> fused_done;
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const int r = plan.node_region[ni];
    if (fuse && r >= 0 && !fallback_.count(r)) {
      const auto& nodes = plan.regions[r].nodes;
      if (static_cast<int>(ni) != nodes.back()) continue;  // the fused step sits at the last node
      if (add_fused_step(r)) continue;
      for (int n : nodes) add_eager_step(n);  // unsupported: the region's nodes run eagerly
      continue;
    }
    add_eager_step(static_cast<int>(ni));
  }
  // Every value a step reads must exist by then (inputs are bound first).
  for (int v : g.outputs)
    if (!slots_.count(v))
      throw std::logic_error("graph output '" + g.values[v].name + "' not produced");
}

void GpuProgram::add_eager_step(int ni) {
  const Node& n = g_.nodes[ni];
  auto in = [&](size_t i) -> const Slot& {
    auto it = slots_.find(n.operands.at(i).value);
    if (it == slots_.end())
      throw std::logic_error("node " + n.id + ": operand not computed before use");
    return it->second;
  };
  const OpKind kind = op_info(n.op).kind;
  if (kind == OpKind::kView) {
    const Slot& x = in(0);
    Slot v = x;  // alias: same storage and offset, new shape/strides
    const TensorMeta& om = g_.meta(n.outputs[0]);
    v.layout.shape = om.shape;
    switch (n.op) {
      case Op::kPermute:
        v.layout.stride.clear();
        for (int64_t d : n.dims) v.layout.stride.push_back(x.layout.stride[d]);
        break;
      case Op::kUnsqueeze: {
        const auto d = static_cast<size_t>(n.dim);
        int64_t st = d < x.layout.shape.size() ? x.layout.shape[d] * x.layout.stride[d] : 1;
        v.layout.stride.insert(v.layout.stride.begin() + n.dim, st);
        break;
      }
      case Op::kExpand:
        v.layout = expand_meta(x.layout, n.dims);
        break;
      default: {  // view / _unsafe_view / reshape
        auto st = view_strides(x.layout.shape, x.layout.stride, om.shape);
        if (st) {
          v.layout.stride = *st;
        } else if (n.op == Op::kReshape || n.op == Op::kUnsafeView) {
          Slot& out =
              alloc(n.outputs[0], TensorMeta{om.shape, contiguous_strides(om.shape), om.dtype});
          DeviceTensor src = device_tensor(x.ptr(), x.layout);
          TensorMeta as_in{x.layout.shape, contiguous_strides(x.layout.shape), om.dtype};
          DeviceTensor dst = device_tensor(out.ptr(), as_in);  // same storage, input's shape
          steps_.push_back({plan_.node_region[ni],
                            [src, dst](cudaStream_t s) {
                              launch_pointwise(PointwiseOp::kCopy, dst, src, nullptr, 0, 1, s);
                            },
                            {n.outputs[0]}});
          return;
        } else {
          throw std::invalid_argument("node " + n.id + ": view of a non-viewable layout");
        }
      }
    }
    slots_[n.outputs[0]] = v;
    return;
  }
  std::vector<DeviceTensor> outs;
  for (int o : n.outputs) {
    Slot& s = alloc(o, dense_layout(g_.meta(o)));
    outs.push_back(device_tensor(s.ptr(), s.layout));
  }
  Step step;
  step.region = plan_.node_region[ni];
  step.writes = n.outputs;
  if (kind == OpKind::kReduction) {
    DeviceTensor x = device_tensor(in(0).ptr(), in(0).layout);
    ReduceOp op = reduce_op(n.op);
    auto dims = n.dims;
    double corr = n.correction;
    step.launch = [op, x, dims, outs, corr](cudaStream_t s) {
      launch_reduction(op, x, dims, outs[0], outs.size() > 1 ? &outs[1] : nullptr, corr, s);
    };
  } else {
    DeviceTensor a = device_tensor(in(0).ptr(), in(0).layout);
    bool has_b = n.operands.size() > 1 && n.operands[1].is_tensor();
    DeviceTensor b = has_b ? device_tensor(in(1).ptr(), in(1).layout) : DeviceTensor{};
    double scalar = n.operands.size() > 1 && !has_b ? n.operands[1].scalar : 0.0;
    if (!n.operands[0].is_tensor())
      throw std::invalid_argument("node " + n.id + ": scalar first operand is not supported");
    PointwiseOp op = pointwise_op(n.op);
    double alpha = n.alpha;
    step.launch = [op, out = outs[0], a, b, has_b, scalar, alpha](cudaStream_t s) {
      launch_pointwise(op, out, a, has_b ? &b : nullptr, scalar, alpha, s);
    };
  }
  steps_.push_back(std::move(step));
}

bool GpuProgram::add_fused_step(int r) {
  const Region& reg = plan_.regions[r];
  for (int v : reg.outputs) alloc(v, dense_layout(g_.meta(v)));
  FusionContext ctx;
  ctx.value = [this](const std::string& name) {
    int v = g_.find_value(name);
    auto it = slots_.find(v);
    if (v < 0 || it == slots_.end())
      throw std::logic_error("fused region: value '" + name + "' has no buffer");
    return BoundValue{it->second.ptr(), it->second.layout};
  };
  ctx.workspace = [this](size_t bytes) {
    workspaces_.push_back(std::make_shared<DeviceBuffer>(std::max<size_t>(bytes, 16)));
    return workspaces_.back()->get();
  };
  FusionBinding b;
  if (reg.fusion == "layernorm_fwd") {
    b = bind_layernorm_fwd(reg.params, variant_, ctx);
  } else {
    b.unsupported = "no GPU variants for fusion " + reg.fusion;
  }
  if (!b.launch) {
    fallback_[r] = b.unsupported;
    for (int v : reg.outputs) slots_.erase(v);
    return false;
  }
  steps_.push_back({r, b.launch, reg.outputs});
  return true;
}

void GpuProgram::run_all(cudaStream_t s) const {
  for (const auto& st : steps_) st.launch(s);
}

void GpuProgram::run_region(int r, cudaStream_t s) const {
  for (const auto& st : steps_)
    if (st.region == r) st.launch(s);
}

void GpuProgram::poison_outputs(cudaStream_t s) const {
  for (const auto& st : steps_)
    for (int v : st.writes) {
      const Slot& sl = slots_.at(v);
      poison(sl.ptr(), static_cast<size_t>(sl.layout.storage_elems()) * dtype_size(sl.layout.dtype),
             s);
    }
}

HostTensor GpuProgram::download(int value) const {
  auto it = slots_.find(value);
  if (it == slots_.end())
    throw std::invalid_argument("value '" + g_.values[value].name +
                                "' is not materialized in variant " + variant_);
  const Slot& sl = it->second;
  std::vector<uint8_t> bytes(static_cast<size_t>(sl.layout.storage_elems()) *
                             dtype_size(sl.layout.dtype));
  REPLAY_CUDA(cudaMemcpy(bytes.data(), sl.ptr(), bytes.size(), cudaMemcpyDeviceToHost));
  return unpack(bytes, sl.layout);
}

std::string GpuProgram::fallback_reason(int r) const {
  auto it = fallback_.find(r);
  return it == fallback_.end() ? "" : it->second;
}

}  // namespace replay
