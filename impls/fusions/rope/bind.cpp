// rope binder: typed params (match.cpp) -> kernel jobs (kernels.hpp). Every operand is read
// through the strides of its actual buffer (the views outside the region are aliases): q and k
// as views of a fused qkv, the tables as broadcast views, outputs in the layout the graph made.
#include <algorithm>

#include "impls/fusions/binding.hpp"
#include "impls/fusions/bookend/variants.hpp"
#include "impls/fusions/rope/joint.hpp"
#include "impls/fusions/rope/params.hpp"

namespace replay::rope {
namespace {

bool kernel_dtype(DType t) {
  return t == DType::kBFloat16 || t == DType::kFloat16 || t == DType::kFloat32;
}

// Strides of `m` right-aligned to the leading dims of an output of rank n_lead + 1 (a dim of
// size 1, or one `m` lacks, broadcasts: stride 0); false when `m` does not broadcast.
bool broadcast_strides(const TensorMeta& m, const std::vector<int64_t>& out_shape,
                       int64_t* lead_stride, int64_t& last_stride) {
  const int n = static_cast<int>(out_shape.size()), k = static_cast<int>(m.shape.size());
  if (k > n || k == 0) return false;
  for (int d = 0; d < n; ++d) {
    const int e = d - (n - k);
    int64_t st = 0;
    if (e >= 0) {
      // the last dim may hold more entries than are read (its first ones: the GPU mutant
      // "rotary dim two short" reads R - 2 of a table of R)
      const bool fits = m.shape[e] == out_shape[d] || (d == n - 1 && m.shape[e] > out_shape[d]);
      if (m.shape[e] != 1 && !fits) return false;
      st = m.shape[e] == 1 ? 0 : m.stride[e];
    }
    if (d == n - 1)
      last_stride = st;
    else
      lead_stride[d] = st;
  }
  return true;
}

}  // namespace

void order_rows(RopeJob& j) {
  // rows of at least one 128-byte line: walking them out of memory order costs no partial lines
  const bool whole_lines = j.head_dim * static_cast<int64_t>(dtype_size(j.out_dtype)) >= 128;
  auto shares_table = [&](int d) {
    return whole_lines && j.cos.lead_stride[d] == 0 && j.sin.lead_stride[d] == 0;
  };
  int perm[kRopeMaxLead];
  for (int d = 0; d < j.n_lead; ++d) perm[d] = d;
  std::stable_sort(perm, perm + j.n_lead, [&](int a, int b) {
    if (shares_table(a) != shares_table(b)) return shares_table(b);  // table-sharing dims inner
    return j.out_lead_stride[a] > j.out_lead_stride[b];
  });
  RopeJob o = j;
  for (int d = 0; d < j.n_lead; ++d) {
    const int e = perm[d];
    j.lead[d] = o.lead[e];
    j.out_lead_stride[d] = o.out_lead_stride[e];
    j.x.lead_stride[d] = o.x.lead_stride[e];
    j.cos.lead_stride[d] = o.cos.lead_stride[e];
    j.sin.lead_stride[d] = o.sin.lead_stride[e];
  }
}

Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  const auto& p = std::any_cast<const Params&>(r.params);
  if (bookend::is_bookend_variant(v)) return bookend::bind_bookend(g, r, v, ctx, &bind);
  Binding b;
  if (v.role == Role::kAlternative) {
    b.unsupported = "rope has no variant '" + std::string(v.name) + "'";
    return b;
  }
  if (p.rotations.empty() || p.rotations.size() > static_cast<size_t>(kRopeMaxJobs)) {
    b.unsupported = "rope region of " + std::to_string(p.rotations.size()) + " rotations (1 to " +
                    std::to_string(kRopeMaxJobs) + ")";
    return b;
  }
  RopeArgs a;
  a.style = p.style;
  a.backward = p.backward;
  a.sin_sign = p.sin_sign;
  a.write_tail = p.write_tail;
  a.force_index64 = p.force_index64;
  a.force_generic = p.force_generic;
  a.fixed_forms = p.fixed_forms;
  if (p.joint.value >= 0 && p.joint.steps.size() != p.rotations.size()) {
    b.unsupported = "joint gradient without a layout for every job";
    return b;
  }
  for (size_t ri = 0; ri < p.rotations.size(); ++ri) {
    const Rotation& rot = p.rotations[ri];
    const bool copy = rot.cos < 0;  // a cat operand copied into the joint gradient
    RopeJob& j = a.jobs[a.n_jobs++];
    const BoundTensor x = ctx.tensor(rot.x);
    // The output: its own buffer, or its part of the joint gradient (joint.hpp).
    BoundTensor out;
    if (p.joint.value >= 0) {
      const BoundTensor jt = ctx.tensor(p.joint.value);
      const auto l =
          apply_steps(StridedLayout{jt.layout.shape, jt.layout.stride, 0}, p.joint.steps[ri]);
      if (!l) {
        b.unsupported = "the joint gradient " + jt.layout.str() + " cannot be viewed as the part " +
                        "of '" + g.values[rot.x].name + "'";
        return b;
      }
      out.ptr = static_cast<char*>(jt.ptr) +
                l->offset * static_cast<int64_t>(dtype_size(jt.layout.dtype));
      out.layout = TensorMeta{l->shape, l->stride, jt.layout.dtype};
    } else {
      out = ctx.tensor(rot.out);
    }
    const BoundTensor cs = copy ? x : ctx.tensor(rot.cos), sn = copy ? x : ctx.tensor(rot.sin);
    const std::vector<int64_t>& shape = out.layout.shape;
    const int n = static_cast<int>(shape.size());
    const bool dims_ok =
        copy ? rot.rotary_dim == 0
             : rot.rotary_dim >= 2 && rot.rotary_dim % 2 == 0 && rot.rotary_dim <= rot.head_dim;
    if (n < 1 || n - 1 > kRopeMaxLead || x.layout.shape != shape || shape.back() != rot.head_dim ||
        !dims_ok) {
      b.unsupported = "rotation of " + g.values[rot.x].name + " " + x.layout.str() + " into " +
                      out.layout.str() + ", rotary dim " + std::to_string(rot.rotary_dim) +
                      ": needs the same [.., D] shape (rank 1 to " +
                      std::to_string(kRopeMaxLead + 1) + "), an even rotary dim <= D";
      return b;
    }
    for (const auto& [t, what] : {std::pair{&x, "x"}, std::pair{&cs, "cos"}, std::pair{&sn, "sin"},
                                  std::pair{static_cast<const BoundTensor*>(&out), "out"}})
      if (!kernel_dtype(t->layout.dtype)) {
        b.unsupported = std::string(what) + " is " + t->layout.str() +
                        " (the kernel takes bfloat16, float16, float32)";
        return b;
      }
    j.n_lead = n - 1;
    j.rows = 1;
    for (int d = 0; d < n - 1; ++d) {
      j.lead[d] = shape[d];
      j.rows *= shape[d];
      j.x.lead_stride[d] = x.layout.stride[d];
      j.out_lead_stride[d] = out.layout.stride[d];
    }
    j.x.ptr = x.ptr;
    j.x.dtype = x.layout.dtype;
    j.x.last_stride = x.layout.stride.back();
    j.out = out.ptr;
    j.out_dtype = out.layout.dtype;
    j.out_last_stride = out.layout.stride.back();
    const std::vector<int64_t> rot_shape = [&] {
      std::vector<int64_t> s = shape;
      s.back() = rot.pair_table ? rot.rotary_dim / 2 : rot.rotary_dim;
      return s;
    }();
    for (const auto& [t, op, name] :
         {std::tuple{&cs, &j.cos, "cos"}, std::tuple{&sn, &j.sin, "sin"}}) {
      if (copy) break;  // no table: every element is the tail
      op->ptr = t->ptr;
      op->dtype = t->layout.dtype;
      if (!broadcast_strides(t->layout, rot_shape, op->lead_stride, op->last_stride)) {
        b.unsupported = std::string(name) + " table " + t->layout.str() +
                        " does not broadcast to " + shape_str(rot_shape);
        return b;
      }
    }
    j.head_dim = rot.head_dim;
    order_rows(j);
    j.rotary_dim = rot.rotary_dim;
    j.mul_cos_dtype = rot.mul_cos_dtype;
    j.mul_sin_dtype = rot.mul_sin_dtype;
    j.add_dtype = rot.add_dtype;
    j.mul_cos_cvt = rot.mul_cos_cvt;
    j.mul_sin_cvt = rot.mul_sin_cvt;
    j.sum_cvt = rot.sum_cvt;
    j.tail_cvt = rot.tail_cvt;
    j.zero_add = rot.zero_add;
    j.sum_order = rot.sum_order;
    j.pair_table = rot.pair_table;
    if (rot.pair_table && p.style != Style::kInterleaved) {
      b.unsupported = "a table per pair with the rotate-half style";
      return b;
    }
  }
  if (p.joint.zero_steps.size() > static_cast<size_t>(kRopeMaxJobs)) {
    b.unsupported = "joint gradient with " + std::to_string(p.joint.zero_steps.size()) +
                    " zero parts (at most " + std::to_string(kRopeMaxJobs) + ")";
    return b;
  }
  for (const auto& steps : p.joint.zero_steps) {
    const BoundTensor jt = ctx.tensor(p.joint.value);
    const int64_t esize = static_cast<int64_t>(dtype_size(jt.layout.dtype));
    const auto l = apply_steps(StridedLayout{jt.layout.shape, jt.layout.stride, 0}, steps);
    const auto rows = l ? rows_2d(*l, esize) : std::nullopt;
    if (!rows) {
      b.unsupported = "the joint gradient " + jt.layout.str() +
                      " has a zero part that is not rows of uniform pitch";
      return b;
    }
    RopeArgs::Zero& z = a.zeros[a.n_zeros++];
    z.ptr = static_cast<char*>(jt.ptr) + rows->offset;
    z.pitch = static_cast<size_t>(rows->pitch);
    z.width = static_cast<size_t>(rows->width);
    z.height = static_cast<size_t>(rows->height);
  }
  if (v.role == Role::kOptimized) {
    b.launch = [a](const LaunchContext& c) { rope_optimized(a, c.stream); };
    return b;
  }
  void* ws = ctx.workspace(rope_baseline_workspace(a));
  b.launch = [a, ws](const LaunchContext& c) { rope_baseline(a, ws, c.stream); };
  return b;
}

}  // namespace replay::rope
