// bookend: the segmented and host_alias variants over a fusion's own binder (variants.hpp).
#include "impls/fusions/bookend/variants.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>

#include "impls/fusions/bookend/alias.hpp"
#include "impls/fusions/bookend/segment.hpp"

namespace replay::bookend {
namespace {

int64_t g_offset_mutant = 0;

BoundTensor contiguous_like(const BoundTensor& t, void* ptr) {
  return {ptr, TensorMeta{t.layout.shape, contiguous_strides(t.layout.shape), t.layout.dtype}};
}

// segmented: what the binder asks for, contiguous; the copies in and out recorded.
class SegmentContext : public BindContext {
 public:
  SegmentContext(const Region& r, BindContext& base) : r_(r), base_(base) {}
  BoundTensor tensor(int value) override {
    if (auto it = given_.find(value); it != given_.end()) return it->second;
    const BoundTensor t = base_.tensor(value);
    BoundTensor out = t;
    if (!t.layout.is_contiguous() && t.layout.numel() > 0) {
      out = contiguous_like(t, base_.workspace(t.layout.nbytes()));
      const bool is_output =
          std::find(r_.outputs.begin(), r_.outputs.end(), value) != r_.outputs.end();
      if (is_output)
        after_.push_back(make_segment_copy(t, out));
      else
        before_.push_back(make_segment_copy(out, t));
    }
    return given_[value] = out;
  }
  void* workspace(size_t bytes) override { return base_.workspace(bytes); }
  std::vector<SegmentCopy> before_, after_;

 private:
  const Region& r_;
  BindContext& base_;
  std::map<int, BoundTensor> given_;
};

// host_alias: per value the binder asks for, its root buffer and the meta ops from it.
struct Resolved {
  BoundTensor root;
  std::vector<MetaOp> ops;
};
struct HostAliasPlan {
  std::map<int, Resolved> values;
  std::vector<void*> workspaces;  // in the order the binder asked for them
};

BoundTensor resolve_at_replay(const Resolved& rs) {
  if (rs.ops.empty()) return rs.root;
  const auto lay = resolve(AliasLayout{rs.root.layout.shape, rs.root.layout.stride, 0}, rs.ops);
  if (!lay) throw std::logic_error("host_alias: a boundary view stopped being an alias");
  const int64_t off = lay->offset + g_offset_mutant;
  return {static_cast<char*>(rs.root.ptr) +
              off * static_cast<int64_t>(dtype_size(rs.root.layout.dtype)),
          TensorMeta{lay->shape, lay->stride, rs.root.layout.dtype}};
}

// At bind time: finds each value's root (the longest chain of meta ops whose root has a buffer
// and whose arithmetic reproduces the program's own alias of the value: a view the eager executor
// had to copy, or one another region's output stands behind, ends the chain there).
class CaptureContext : public BindContext {
 public:
  CaptureContext(const Graph& g, BindContext& base, HostAliasPlan& plan)
      : g_(g), base_(base), plan_(plan) {}
  BoundTensor tensor(int value) override {
    if (auto it = plan_.values.find(value); it != plan_.values.end())
      return resolve_at_replay(it->second);
    const BoundTensor want = base_.tensor(value);
    const BoundaryChain ch = input_chain(g_, value);
    for (size_t drop = 0; drop <= ch.ops.size(); ++drop) {
      const int root = drop < ch.ops.size() ? ch.inputs[drop] : value;
      Resolved rs;
      rs.ops.assign(ch.ops.begin() + static_cast<std::ptrdiff_t>(drop), ch.ops.end());
      try {
        rs.root = base_.tensor(root);
      } catch (const std::logic_error&) {
        continue;  // no buffer of its own (a value private to another region)
      }
      if (rs.ops.empty()) {
        plan_.values[value] = rs;
        return want;
      }
      const auto lay = resolve(AliasLayout{rs.root.layout.shape, rs.root.layout.stride, 0}, rs.ops);
      const int64_t elem = static_cast<int64_t>(dtype_size(want.layout.dtype));
      if (!lay || lay->shape != want.layout.shape || lay->stride != want.layout.stride ||
          rs.root.layout.dtype != want.layout.dtype ||
          static_cast<char*>(rs.root.ptr) + lay->offset * elem != want.ptr)
        continue;
      plan_.values[value] = rs;
      return want;
    }
    throw std::logic_error("host_alias: no root for value '" + g_.values[value].name + "'");
  }
  void* workspace(size_t bytes) override {
    plan_.workspaces.push_back(base_.workspace(bytes));
    return plan_.workspaces.back();
  }

 private:
  const Graph& g_;
  BindContext& base_;
  HostAliasPlan& plan_;
};

// Per replay: the captured roots, the meta ops run again on the host.
class ReplayContext : public BindContext {
 public:
  ReplayContext(const Graph& g, const HostAliasPlan& plan) : g_(g), plan_(plan) {}
  BoundTensor tensor(int value) override {
    auto it = plan_.values.find(value);
    if (it == plan_.values.end())
      throw std::logic_error("host_alias: the binder asked at replay for '" +
                             g_.values.at(value).name + "', which it did not ask for at bind time");
    return resolve_at_replay(it->second);
  }
  void* workspace(size_t) override {
    if (ws_ >= plan_.workspaces.size())
      throw std::logic_error("host_alias: the binder asked for more workspaces at replay");
    return plan_.workspaces[ws_++];
  }

 private:
  const Graph& g_;
  const HostAliasPlan& plan_;
  size_t ws_ = 0;
};

}  // namespace

bool is_bookend_variant(const VariantSpec& v) {
  return v.name == kSegmented || v.name == kHostAlias;
}

void set_host_alias_offset_mutant(int64_t elems) {
  g_offset_mutant = elems;
}

Binding bind_bookend(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx,
                     BindFn bind) {
  Binding out;
  const VariantSpec* opt = r.fusion ? r.fusion->find_variant("optimized") : nullptr;
  if (!opt || !is_bookend_variant(v)) {
    out.unsupported = "no optimized variant for the bookend variant '" + std::string(v.name) + "'";
    return out;
  }
  if (v.name == kSegmented) {
    SegmentContext sc(r, ctx);
    Binding inner;
    try {
      inner = bind(g, r, *opt, sc);
    } catch (const std::invalid_argument& e) {  // a copy the segment kernel cannot plan
      out.unsupported = std::string("segmented: ") + e.what();
      return out;
    }
    if (!inner.launch) return inner;
    out.launch = [before = sc.before_, after = sc.after_,
                  launch = std::move(inner.launch)](const LaunchContext& c) {
      for (const SegmentCopy& cp : before) launch_segment_copy(cp, c.stream);
      launch(c);
      for (const SegmentCopy& cp : after) launch_segment_copy(cp, c.stream);
    };
    return out;
  }
  auto plan = std::make_shared<HostAliasPlan>();
  CaptureContext cc(g, ctx, *plan);
  Binding probe = bind(g, r, *opt, cc);  // which values, with which roots; and whether it runs
  if (!probe.launch) return probe;
  // The region is copied: a caller's binder may hand over a region of its own making (a test's
  // mutant wraps the params) that does not outlive this call. The graph outlives the program.
  out.launch = [plan, gp = &g, rp = std::make_shared<const Region>(r), opt,
                bind](const LaunchContext& c) {
    ReplayContext rc(*gp, *plan);
    Binding b = bind(*gp, *rp, *opt, rc);
    if (!b.launch)
      throw std::runtime_error("host_alias: the binder declined at replay: " + b.unsupported);
    b.launch(c);
  };
  return out;
}

}  // namespace replay::bookend
