#include "harness/replay/gpu_program.hpp"

#include <algorithm>
#include <stdexcept>

#include "harness/replay/variants.hpp"
#include "impls/eager/collective.hpp"
#include "impls/eager/lower.hpp"
#include "impls/fusions/binding.hpp"
#include "workloads/ops/op.hpp"

namespace replay {
namespace {

// Layout for a computed value: the recorded strides when they are dense, else contiguous.
TensorMeta dense_layout(const TensorMeta& recorded) {
  TensorMeta m = recorded;
  if (m.storage_elems() != m.numel()) m.stride = contiguous_strides(m.shape);
  return m;
}

}  // namespace

// What a fusion's binder sees of the program: the buffers of the region's values, workspaces.
class GpuProgram::Binder : public BindContext {
 public:
  explicit Binder(GpuProgram& p) : p_(p) {}
  BoundTensor tensor(int value) override {
    auto it = p_.slots_.find(value);
    if (it == p_.slots_.end())
      throw std::logic_error("fused region: value '" + p_.g_.values.at(value).name +
                             "' has no buffer");
    return {it->second.ptr(), it->second.layout};
  }
  void* workspace(size_t bytes) override {
    p_.workspaces_.push_back(std::make_shared<DeviceBuffer>(std::max<size_t>(bytes, 16)));
    return p_.workspaces_.back()->get();
  }
  const DistContext* dist() const override { return p_.dist_; }

 private:
  GpuProgram& p_;
};

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

const GpuProgram::Slot& GpuProgram::slot(int value, const std::string& node) const {
  auto it = slots_.find(value);
  if (it == slots_.end())
    throw std::logic_error("node " + node + ": operand '" + g_.values.at(value).name +
                           "' not computed before use");
  return it->second;
}

GpuProgram::GpuProgram(const Graph& g, const Plan& plan, std::string variant,
                       const std::map<int, HostTensor>& inputs, cudaStream_t stream,
                       const DistContext* dist)
    : g_(g), plan_(plan), variant_(std::move(variant)), dist_(dist) {
  for (int v : g.inputs) {
    const TensorMeta& m = g.meta(v);
    Slot& s = alloc(v, m);
    std::vector<uint8_t> bytes = pack(inputs.at(v), m);
    REPLAY_CUDA(
        cudaMemcpyAsync(s.ptr(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream));
    REPLAY_CUDA(cudaStreamSynchronize(stream));  // `bytes` is pageable and goes out of scope
  }
  const bool fuse = variant_ != kEagerVariant;
  if (fuse) place_cats();
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const int r = plan.node_region[ni];
    if (fuse && r >= 0) {  // every node of a region is emitted at its anchor
      const Region& reg = plan.regions[r];
      // The fused step sits at the region's anchor (the last node its matcher claimed, or an
      // earlier one of its nodes after everything the region reads, Region::anchor); the
      // absorbed identities something outside reads alias what it writes (Region::tail).
      const int anchor = reg.anchor >= 0 ? reg.anchor : reg.nodes.back();
      if (static_cast<int>(ni) != anchor) continue;
      if (add_fused_step(r)) {
        for (int n : reg.views) {  // aliases of what the step wrote (Region::views), in order
          alias_absorbed_source(reg, n);
          add_view(n);
        }
        for (const TailAlias& t : reg.tail)  // (an alias of a view reads the view's slot)
          slots_[g.nodes[t.node].outputs.at(0)] = slot(t.source, g.nodes[t.node].id);
        continue;
      }
      // Unsupported: the region's nodes run eagerly. A node after the anchor reads only the
      // region's values and what was produced before the anchor, so it can run here too.
      for (int n : reg.nodes) add_eager_step(n);
      continue;
    }
    if (fuse && alias_clone(static_cast<int>(ni))) continue;
    if (fuse && placed_cat(static_cast<int>(ni))) continue;
    add_eager_step(static_cast<int>(ni));
  }
  for (int v : g.outputs)
    if (!slots_.count(v))
      throw std::logic_error("graph output '" + g.values[v].name + "' not produced");
}

GpuProgram::~GpuProgram() = default;

bool GpuProgram::alias_clone(int ni) {
  if (std::find(plan_.elided_clones.begin(), plan_.elided_clones.end(), ni) ==
      plan_.elided_clones.end())
    return false;
  const Node& n = g_.nodes[ni];
  int src = -1;
  for (const auto& o : n.operands)
    if (o.is_tensor()) src = o.value;
  const Slot& x = slot(src, n.id);
  const TensorMeta want = dense_layout(g_.meta(n.outputs.at(0)));
  // The copy's layout is the recorded dense one: alias only a source laid out the same way.
  if (x.layout.shape != want.shape || x.layout.stride != want.stride ||
      x.layout.dtype != want.dtype)
    return false;
  slots_[n.outputs[0]] = x;
  return true;
}

void GpuProgram::place_cats() {
  for (int ni : plan_.placed_cats) {
    const Node& n = g_.nodes[ni];
    const int out = n.outputs.at(0);
    Slot cat;
    cat.layout = dense_layout(g_.meta(out));
    cat.storage = std::make_shared<DeviceBuffer>(std::max<size_t>(
        static_cast<size_t>(cat.layout.storage_elems()) * dtype_size(cat.layout.dtype), 16));
    placement_[out] = cat;
    const size_t d = static_cast<size_t>(n.dim);
    int64_t at = 0;  // along the cat's dim
    for (const Operand& o : n.operands) {
      Slot part = cat;
      part.layout.shape = g_.meta(o.value).shape;
      part.offset = at * cat.layout.stride.at(d);
      at += part.layout.shape.at(d);
      placement_[o.value] = part;
    }
  }
}

bool GpuProgram::placed_cat(int ni) {
  if (std::find(plan_.placed_cats.begin(), plan_.placed_cats.end(), ni) == plan_.placed_cats.end())
    return false;
  const Node& n = g_.nodes[ni];
  for (const Operand& o : n.operands) {
    auto it = slots_.find(o.value);
    const Slot& want = placement_.at(o.value);
    if (it == slots_.end() || it->second.storage != want.storage ||
        it->second.offset != want.offset)
      return false;  // that operand's region ran eagerly into its own buffer
  }
  slots_[n.outputs.at(0)] = placement_.at(n.outputs.at(0));
  placed_done_.push_back(ni);
  return true;
}

void GpuProgram::alias_absorbed_source(const Region& r, int ni) {
  {
    const int v = g_.nodes[ni].operands.at(0).value;
    const int p = g_.values[v].producer;
    if (slots_.count(v) || p < 0 ||
        std::find(r.absorbed.begin(), r.absorbed.end(), p) == r.absorbed.end())
      return;
    int src = -1, tensors = 0;
    for (const auto& o : g_.nodes[p].operands)
      if (o.is_tensor()) {
        src = o.value;
        ++tensors;
      }
    auto it = slots_.find(src);
    if (tensors != 1 || g_.nodes[p].outputs.size() != 1 || it == slots_.end()) return;
    const TensorMeta want = dense_layout(g_.meta(v));
    const TensorMeta& have = it->second.layout;
    if (have.shape == want.shape && have.stride == want.stride && have.dtype == want.dtype)
      slots_[v] = it->second;
  }
}

void GpuProgram::add_view(int ni) {
  const Node& n = g_.nodes[ni];
  const Slot& x = slot(n.operands.at(0).value, n.id);
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    const TensorMeta& om = g_.meta(n.outputs[k]);
    std::optional<ViewLayout> lay;
    try {
      lay = op_def(n.op).alias(n, x.layout, om.shape, static_cast<int>(k));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("node " + n.id + ": " + e.what());
    }
    if (lay) {  // alias: same storage, new shape/strides/offset
      Slot v = x;
      v.layout = TensorMeta{om.shape, lay->stride, om.dtype};
      v.offset = lay->absolute ? lay->offset : x.offset + lay->offset;
      slots_[n.outputs[k]] = v;
      continue;
    }
    // Not viewable: copy into a contiguous buffer (same logical order, input's shape).
    Slot& out = alloc(n.outputs[k], TensorMeta{om.shape, contiguous_strides(om.shape), om.dtype});
    TensorMeta as_in{x.layout.shape, contiguous_strides(x.layout.shape), om.dtype};
    EagerLaunch copy =
        lower_copy(device_tensor(out.ptr(), as_in), device_tensor(x.ptr(), x.layout));
    steps_.push_back({plan_.node_region[ni],
                      [copy](const LaunchContext& c) { copy(c.stream); },
                      {n.outputs[k]},
                      n.id + (n.outputs.size() > 1 ? " (copy " + std::to_string(k) + ")"
                                                   : std::string(" (copy)"))});
  }
}

void GpuProgram::add_eager_step(int ni) {
  const Node& n = g_.nodes[ni];
  if (op_def(n.op).eager.kernel == EagerLowering::kAlias) return add_view(ni);
  if (n.op == Op::kWaitTensor && dist_) {  // the collective ran on this stream: nothing to wait
    slots_[n.outputs.at(0)] = slot(n.operands.at(0).value, n.id);
    return;
  }
  std::vector<DeviceTensor> in, outs;
  for (const auto& o : n.operands) {
    if (!o.is_tensor()) {
      in.emplace_back();
      continue;
    }
    const Slot& s = slot(o.value, n.id);
    in.push_back(device_tensor(s.ptr(), s.layout));
  }
  for (int o : n.outputs) {
    Slot& s = alloc(o, dense_layout(g_.meta(o)));
    outs.push_back(device_tensor(s.ptr(), s.layout));
  }
  const bool nccl = dist_ && op_def(n.op).eager.kernel == EagerLowering::kCollective;
  EagerLaunch launch = nccl ? lower_collective(n, in, outs, *dist_) : lower_node(g_, n, in, outs);
  steps_.push_back({plan_.node_region[ni], [launch](const LaunchContext& c) { launch(c.stream); },
                    n.outputs, n.id});
}

bool GpuProgram::add_fused_step(int r) {
  const Region& reg = plan_.regions[r];
  const VariantSpec* v = reg.fusion->find_variant(variant_);
  if (!v) {
    fallback_[r] = "fusion " + std::string(reg.fusion->name) + " has no variant '" + variant_ + "'";
    return false;
  }
  for (int out : reg.outputs) {
    if (auto it = placement_.find(out); it != placement_.end()) {  // a slice of a placed cat
      slots_[out] = it->second;
      continue;
    }
    // A tail identity that records another dense layout of the same tensor (a contiguous clone
    // of a strided value: a per-head norm's dx) passes this buffer on as that value, and later
    // views of it expect that layout: the output is allocated so (binders read the actual
    // strides).
    TensorMeta m = dense_layout(g_.meta(out));
    for (const TailAlias& t : reg.tail) {
      if (t.source != out) continue;
      const TensorMeta& tm = g_.meta(g_.nodes[t.node].outputs.at(0));
      if (tm.shape == m.shape && tm.dtype == m.dtype) m = dense_layout(tm);
    }
    alloc(out, m);
  }
  Binder ctx(*this);
  GemmChoiceLog gemms;
  Binding b = reg.fusion->bind(g_, reg, *v, ctx);
  if (b.launch) gemm_choices_[r] = gemms.take();  // a region that runs eagerly runs none of them
  if (!b.launch) {
    fallback_[r] = b.unsupported;
    for (int out : reg.outputs) slots_.erase(out);
    return false;
  }
  steps_.push_back({r, b.launch, reg.outputs,
                    "region " + std::to_string(r) + ": " + std::string(reg.fusion->name)});
  return true;
}

void GpuProgram::run_all(const LaunchContext& ctx) const {
  for (const auto& st : steps_) st.launch(ctx);
}

void GpuProgram::run_region(int r, const LaunchContext& ctx) const {
  for (const auto& st : steps_)
    if (st.region == r) st.launch(ctx);
}

void GpuProgram::poison_outputs(cudaStream_t s) const {
  for (const auto& st : steps_)
    for (int v : st.writes) {
      const Slot& sl = slots_.at(v);
      poison(sl.ptr(), static_cast<size_t>(sl.layout.storage_elems()) * dtype_size(sl.layout.dtype),
             s);
    }
}

HostTensor GpuProgram::download(int value, cudaStream_t stream) const {
  auto it = slots_.find(value);
  if (it == slots_.end())
    throw std::invalid_argument("value '" + g_.values[value].name +
                                "' is not materialized in variant " + variant_);
  const Slot& sl = it->second;
  std::vector<uint8_t> bytes(static_cast<size_t>(sl.layout.storage_elems()) *
                             dtype_size(sl.layout.dtype));
  REPLAY_CUDA(
      cudaMemcpyAsync(bytes.data(), sl.ptr(), bytes.size(), cudaMemcpyDeviceToHost, stream));
  REPLAY_CUDA(cudaStreamSynchronize(stream));
  return unpack(bytes, sl.layout);
}

const std::vector<GemmChoice>& GpuProgram::gemm_choices(int r) const {
  static const std::vector<GemmChoice> kNone;
  auto it = gemm_choices_.find(r);
  return it == gemm_choices_.end() ? kNone : it->second;
}

std::string GpuProgram::fallback_reason(int r) const {
  auto it = fallback_.find(r);
  return it == fallback_.end() ? "" : it->second;
}

}  // namespace replay
