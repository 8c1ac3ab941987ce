// norm_bwd binder: typed params (match.cpp) -> kernel arguments (kernels.hpp).
#include "impls/fusions/binding.hpp"
#include "impls/fusions/norm_bwd/params.hpp"
#include "workloads/ir/layout.hpp"

namespace replay::norm_bwd {
namespace {

bool narrow(DType t) {
  return t == DType::kBFloat16 || t == DType::kFloat16;
}

// Row stride of m seen as [numel / cols, cols] with a contiguous last dim, whatever its shape
// ([B, T, H * D] for rows of D), or -1.
int64_t flat_rows_stride(const TensorMeta& m, int64_t cols) {
  if (cols <= 0 || m.numel() % cols) return -1;
  const int64_t rows = m.numel() / cols;
  auto st = view_strides(m.shape, m.stride, {rows, cols});
  if (!st || (*st)[1] != 1) return -1;
  return rows == 1 ? cols : (*st)[0];
}

// True when `fine` (size-1 dims dropped) is `coarse` (size-1 dims dropped) with some runs of
// adjacent dims merged: the two shapes enumerate their elements in the same order with the same
// dims. A permuted copy ([B, H, T, D] beside [B, T, H, D], H != T) is not; equal numel alone
// would not tell.
bool merges_into(const Shape& fine, const Shape& coarse) {
  Shape f, c;
  for (int64_t d : fine)
    if (d != 1) f.push_back(d);
  for (int64_t d : coarse)
    if (d != 1) c.push_back(d);
  size_t i = 0;
  for (int64_t want : c) {
    int64_t prod = 1;
    while (i < f.size() && prod < want) prod *= f[i++];
    if (prod != want) return false;
  }
  return i == f.size();
}

}  // namespace

// Row maps (kernels.hpp, NormBwdRowMap) of tensors read or written as [rows, cols]: plain rows
// when every one is [rows, cols] with a contiguous last dim (row_stride). Else the others (a
// per-head norm's dy read through permute(0, 2, 1, 3), its dx before the contiguous copy) must
// share one shape [.., cols] with a contiguous last dim, and their leading dims, merged where
// every one of them allows it, must come down to at most 3 (n0, n1, n2) with a stride each; a
// plain tensor with row stride s then has strides (n1 * n2 * s, n2 * s, s). False: no map.
bool row_maps(const std::vector<const TensorMeta*>& ts, int64_t rows, int64_t cols, int64_t* n1,
              int64_t* n2, const std::vector<NormBwdRowMap*>& maps) {
  *n1 = *n2 = 1;
  std::vector<int64_t> plain(ts.size());
  std::vector<size_t> strided;
  for (size_t i = 0; i < ts.size(); ++i) {
    plain[i] = flat_rows_stride(*ts[i], cols);
    *maps[i] = NormBwdRowMap{};
    maps[i]->s[0] = plain[i];
    if (plain[i] < 0) strided.push_back(i);
  }
  if (strided.empty()) return true;
  const Shape& shape = ts[strided[0]]->shape;
  if (shape.empty() || shape.back() != cols) return false;
  for (size_t i : strided)
    if (ts[i]->shape != shape || ts[i]->stride.size() != shape.size() || ts[i]->stride.back() != 1)
      return false;
  // A plain tensor beside them must hold its rows in their order: its shape is theirs with
  // adjacent dims merged (x [B, T, H, D] or a saved [B, T, H * D] beside a transposed dy), so
  // flat row r is the same (b, t, h) in every tensor.
  for (size_t i = 0; i < ts.size(); ++i)
    if (plain[i] >= 0 && !merges_into(shape, ts[i]->shape)) return false;
  // Leading dims (size > 1) from the innermost out, merged into the group inside them when every
  // strided tensor allows it.
  struct Dim {
    int64_t n;
    std::vector<int64_t> s;  // per strided tensor
  };
  std::vector<Dim> dims;  // innermost first
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) {
    if (shape[d] == 1) continue;
    Dim dim{shape[d], {}};
    for (size_t i : strided) dim.s.push_back(ts[i]->stride[d]);
    if (!dims.empty()) {
      Dim& in = dims.back();
      bool merge = true;
      for (size_t k = 0; k < strided.size(); ++k) merge &= dim.s[k] == in.s[k] * in.n;
      if (merge) {
        in.n *= dim.n;
        continue;
      }
    }
    dims.push_back(dim);
  }
  if (dims.size() > 3) return false;
  while (dims.size() < 3) dims.push_back(Dim{1, std::vector<int64_t>(strided.size(), 0)});
  if (dims[0].n * dims[1].n * dims[2].n < rows) return false;  // rows beyond the tensors
  // dims[2] outermost (i0), dims[1] (i1, n1), dims[0] innermost (i2, n2).
  *n1 = dims[1].n;
  *n2 = dims[0].n;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (plain[i] >= 0) {
      maps[i]->s[0] = *n1 * *n2 * plain[i];
      maps[i]->s[1] = *n2 * plain[i];
      maps[i]->s[2] = plain[i];
    }
  }
  for (size_t k = 0; k < strided.size(); ++k)
    for (int j = 0; j < 3; ++j) maps[strided[k]]->s[j] = dims[2 - j].s[k];
  return true;
}

Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  const auto& p = std::any_cast<const Params&>(r.params);
  Binding b;
  if (v.role == Role::kAlternative) {
    b.unsupported = "norm_bwd has no variant '" + std::string(v.name) + "'";
    return b;
  }
  NormBwdArgs a;
  a.rows = p.rows;
  a.cols = p.cols;
  a.layernorm = p.layernorm;
  a.stats = p.stats;
  BoundTensor x = ctx.tensor(p.x), dy = ctx.tensor(p.dy), dx = ctx.tensor(p.dx);
  a.x = x.ptr;
  a.x_dtype = x.layout.dtype;
  a.dy = dy.ptr;
  a.dy_dtype = dy.layout.dtype;
  a.dx = dx.ptr;
  std::vector<const TensorMeta*> metas = {&x.layout, &dy.layout, &dx.layout};
  std::vector<NormBwdRowMap*> maps = {&a.x_rows, &a.dy_rows, &a.dx_rows};
  BoundTensor add, xs;
  if (p.dx_add >= 0) {  // dx epilogue add: the other gradient of the residual stream
    add = ctx.tensor(p.dx_add);
    a.dx_add = add.ptr;
    if (add.layout.dtype != dx.layout.dtype) {
      b.unsupported = "the tensor added to dx, '" + g.values[p.dx_add].name + "', is " +
                      add.layout.str() + " (needs dx's dtype)";
      return b;
    }
    metas.push_back(&add.layout);
    maps.push_back(&a.dx_add_rows);
  }
  if (p.xs >= 0) {  // the saved normalized value of the dw term
    xs = ctx.tensor(p.xs);
    a.xs = xs.ptr;
    a.xs_dtype = xs.layout.dtype;
    metas.push_back(&xs.layout);
    maps.push_back(&a.xs_rows);
  }
  if (!row_maps(metas, a.rows, a.cols, &a.row_n1, &a.row_n2, maps)) {
    b.unsupported =
        "x, dy, dx (or the saved xhat, the tensor added to dx) rows are neither [rows, cols] with "
        "a contiguous last dim nor views of one shape whose leading dims merge into at most 3 "
        "strided dims";
    return b;
  }
  if (dx.layout.dtype != a.dy_dtype) {
    b.unsupported = "dy and dx dtypes differ (" + std::string(dtype_name(a.dy_dtype)) + ", " +
                    std::string(dtype_name(dx.layout.dtype)) + ")";
    return b;
  }
  if (narrow(p.dx_round) && p.dx_round != a.dy_dtype) {
    b.unsupported = "dx rounded to " + std::string(dtype_name(p.dx_round)) + " but stored as " +
                    std::string(dtype_name(a.dy_dtype));
    return b;
  }
  // The kernels round to bf16 or fp16 (or not at all, fp32); a graph rounding an intermediate to
  // float8 on the way (dx32 -> float8 -> bf16) must not be run as if it did not.
  for (auto [what, t] : {std::pair{"w", p.w_round},
                         {"g", p.g_round},
                         {"xhat", p.xhat_round},
                         {"dw term", p.dwt_round},
                         {"dx", p.dx_round},
                         {"dx terms", p.dx_part_round},
                         {"dw", p.dw_round},
                         {"db", p.db_round}})
    if (t != DType::kFloat32 && t != DType::kFloat64 && !narrow(t)) {
      b.unsupported = std::string(what) + " rounded to " + std::string(dtype_name(t)) +
                      " (the kernels round to bfloat16 or float16 only)";
      return b;
    }
  auto stat = [&](int value, const float** ptr, int64_t* stride) {
    if (value < 0) return true;
    BoundTensor t = ctx.tensor(value);
    if (t.layout.dtype != DType::kFloat32 || t.layout.numel() < a.rows) return false;
    *stride = flat_stride(t.layout, t.layout.numel());
    *ptr = static_cast<const float*>(t.ptr);
    return *stride >= 0;
  };
  if (!stat(p.stats == NormBwdStats::kSaved ? p.mean : -1, &a.mean, &a.mean_stride) ||
      !stat(p.rstd, &a.rstd, &a.rstd_stride)) {
    b.unsupported = "mean or rstd is not a float32 [rows] tensor";
    return b;
  }
  if (p.stats == NormBwdStats::kRecompute) {
    a.eps = static_cast<float>(p.eps);
    if (p.eps_value >= 0) {
      BoundTensor e = ctx.tensor(p.eps_value);
      a.eps_ptr = e.ptr;
      a.eps_dtype = e.layout.dtype;
      if (!is_floating(a.eps_dtype) || a.eps_dtype == DType::kFloat8E4M3 ||
          a.eps_dtype == DType::kFloat8E5M2) {
        b.unsupported = "eps tensor of dtype " + std::string(dtype_name(a.eps_dtype));
        return b;
      }
    }
    if (p.layernorm) {
      if (!(p.correction < static_cast<double>(p.cols))) {
        b.unsupported = "variance correction leaves no degrees of freedom";
        return b;
      }
      a.var_scale = static_cast<float>(p.cols / (p.cols - p.correction));
    }
  }
  if (p.w >= 0) {  // else a norm without weight: a.w stays null (w = 1)
    BoundTensor w = ctx.tensor(p.w);
    if (flat_stride(w.layout, a.cols) != 1) {
      b.unsupported = "weight '" + g.values[p.w].name + "' is not a contiguous [C]";
      return b;
    }
    a.w = w.ptr;
    a.w_dtype = w.layout.dtype;
  }
  a.w_offset = static_cast<float>(p.w_offset);
  a.w_round = p.w_round;
  a.g_round = p.g_round;
  a.xhat_round = p.xhat_round;
  a.dwt_round = p.dwt_round;
  a.recenter = p.recenter;
  a.dx_part_round = narrow(p.dx_part_round) ? p.dx_part_round : DType::kFloat32;
  if (p.dw >= 0) {  // else dx only: a.dw stays null, no column sums
    BoundTensor dw = ctx.tensor(p.dw);
    if (flat_stride(dw.layout, a.cols) != 1) {
      b.unsupported = "dw is not a contiguous [C]";
      return b;
    }
    a.dw = dw.ptr;
    a.dw_dtype = dw.layout.dtype;
    a.dw_round = p.dw_round;
  }
  if (p.db >= 0) {
    BoundTensor db = ctx.tensor(p.db);
    if (flat_stride(db.layout, a.cols) != 1) {
      b.unsupported = "db is not a contiguous [C]";
      return b;
    }
    a.db = db.ptr;
    a.db_dtype = db.layout.dtype;
    a.db_round = p.db_round;
  }
  b.unsupported = norm_bwd_supports(a);
  if (!b.unsupported.empty()) return b;
  if (v.role == Role::kBaseline) {
    void* ws = ctx.workspace(norm_bwd_workspace_bytes(a, NormBwdVariant::kBaseline, 0));
    b.launch = [a, ws](const LaunchContext& c) { norm_bwd_baseline(a, ws, c.stream); };
    return b;
  }
  const int64_t rpi = norm_bwd_geometry(a).rows_per_iter;
  int64_t split = p.split_size > 0 ? p.split_size : norm_bwd_default_split(a);
  split = (split + rpi - 1) / rpi * rpi;
  void* ws = ctx.workspace(norm_bwd_workspace_bytes(a, NormBwdVariant::kOptimized, split));
  b.launch = [a, split, ws](const LaunchContext& c) { norm_bwd_optimized(a, split, ws, c.stream); };
  return b;
}

}  // namespace replay::norm_bwd
