// Eager kernels of the neural-network ops (nn.hpp), one launch per op as PyTorch eager runs them
// (one more for a copy into or out of a contiguous temporary where an operand or output is not
// contiguous). Every kernel accumulates in acc_t: float, or double when a tensor is float64
// (PyTorch's acc_type); elements widen through load_elem and round once through store_elem
// (impls/cuda/dtype_device.cuh). Reductions run in a fixed order (warp shuffles, then shared
// memory across warps): deterministic.
//
//  softmax / log_softmax      one block per row; rows along `dim` of [outer, len, inner] (inner 1:
//                             contiguous rows). Pass 1 max, pass 2 sum exp(x - max), pass 3 writes
//                             exp(x - max) / sum or x - max - log(sum) (SoftMax.cu's
//                             cunn_SoftMaxForward, without its vectorized loads).
//  *_softmax_backward_data    one block per row: s = sum(g y) (log: sum g), then y (g - s)
//                             (log: g - exp(y) s).
//  nll_loss_forward           reduction none over a batch: one thread per row; otherwise one block
//                             sums -w[t] x[i, t] and w[t] over the rows (Loss.cu's reduce kernel).
//  nll_loss_backward          one thread per element of grad_input: -w[t] g (/ total_weight for
//                             mean) at the target's class, 0 elsewhere.
//  native_layer_norm          one block per row: two-pass mean and biased variance, rstd =
//                             1 / sqrt(var + eps), y = (x - mean) rstd w + b.
//  native_layer_norm_backward dx: one block per row, from the recorded mean and rstd; dw, db: one
//                             block per 32 columns, 16 row groups summed in shared memory.
//  native_group_norm          one block per (n, group) block of C/group x HxW elements; y from
//                             mean and rstd rounded to their dtype (the input's), as ATen reads
//                             them back.
//  native_group_norm_backward dx: one block per (n, group); dw, db: one block per channel.
//  native_dropout_backward    one thread per element: g * mask * scale.
#include "impls/eager/nn.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include "impls/cuda/cuda_check.hpp"
#include "impls/cuda/dtype_device.cuh"
#include "workloads/ops/nn.hpp"

namespace replay {
namespace {

constexpr int kWarp = 32;

// A contiguous tensor as a kernel sees it.
struct Ten {
  const void* p = nullptr;
  DType dt = DType::kFloat32;
};
struct OutTen {
  void* p = nullptr;
  DType dt = DType::kFloat32;
};

template <typename T>
struct Sum {
  __device__ T operator()(T a, T b) const { return a + b; }
};
template <typename T>
struct Max {  // NaN-propagating
  __device__ T operator()(T a, T b) const { return (a != a || a > b) ? a : b; }
};

// The block's reduction of v (every thread gets it); blockDim.x a multiple of 32, at most 1024.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T identity) {
  __shared__ T smem[kWarp];
  for (int o = kWarp / 2; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int warps = blockDim.x / kWarp;
  __syncthreads();  // smem may still be read by an earlier call
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = lane < warps ? smem[lane] : identity;
  for (int o = kWarp / 2; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <typename acc_t>
__device__ acc_t ld(Ten t, int64_t i) {
  return load_elem<acc_t>(t.p, i, t.dt);
}
template <typename acc_t>
__device__ void st(OutTen t, int64_t i, acc_t v) {
  store_elem<acc_t>(t.p, i, t.dt, v);
}
// v rounded to dtype t and widened back.
template <typename acc_t>
__device__ acc_t round_as(acc_t v, DType t) {
  alignas(8) unsigned char buf[8];
  store_elem<acc_t>(buf, 0, t, v);
  return load_elem<acc_t>(buf, 0, t);
}
__device__ inline float exp_acc(float v) {
  return expf(v);
}
__device__ inline double exp_acc(double v) {
  return exp(v);
}
__device__ inline float log_acc(float v) {
  return logf(v);
}
__device__ inline double log_acc(double v) {
  return log(v);
}

// ---- softmax ------------------------------------------------------------------------------

struct RowArgs {
  int64_t len, inner;
};

template <typename acc_t, bool kLog>
__global__ void softmax_kernel(Ten x, OutTen y, RowArgs r) {
  const int64_t row = blockIdx.x;
  const int64_t base = (row / r.inner) * r.len * r.inner + row % r.inner;
  acc_t m = -INFINITY;
  for (int64_t j = threadIdx.x; j < r.len; j += blockDim.x)
    m = Max<acc_t>()(m, ld<acc_t>(x, base + j * r.inner));
  m = block_reduce(m, Max<acc_t>(), acc_t(-INFINITY));
  acc_t s = 0;
  for (int64_t j = threadIdx.x; j < r.len; j += blockDim.x)
    s += exp_acc(ld<acc_t>(x, base + j * r.inner) - m);
  s = block_reduce(s, Sum<acc_t>(), acc_t(0));
  const acc_t ls = log_acc(s);
  for (int64_t j = threadIdx.x; j < r.len; j += blockDim.x) {
    const int64_t e = base + j * r.inner;
    const acc_t v = ld<acc_t>(x, e) - m;
    st<acc_t>(y, e, kLog ? v - ls : exp_acc(v) / s);
  }
}

template <typename acc_t, bool kLog>
__global__ void softmax_backward_kernel(Ten g, Ten y, OutTen dx, RowArgs r) {
  const int64_t row = blockIdx.x;
  const int64_t base = (row / r.inner) * r.len * r.inner + row % r.inner;
  acc_t s = 0;
  for (int64_t j = threadIdx.x; j < r.len; j += blockDim.x) {
    const int64_t e = base + j * r.inner;
    s += kLog ? ld<acc_t>(g, e) : ld<acc_t>(g, e) * ld<acc_t>(y, e);
  }
  s = block_reduce(s, Sum<acc_t>(), acc_t(0));
  for (int64_t j = threadIdx.x; j < r.len; j += blockDim.x) {
    const int64_t e = base + j * r.inner;
    const acc_t gv = ld<acc_t>(g, e), yv = ld<acc_t>(y, e);
    st<acc_t>(dx, e, kLog ? gv - exp_acc(yv) * s : yv * (gv - s));
  }
}

// ---- nll_loss -----------------------------------------------------------------------------

struct NllArgs {
  int64_t N, C, ignore_index;
  int reduction;  // 0 none, 1 mean, 2 sum
  bool batch;     // self is [N, C] (else [C] with a 0-dim target)
};

// The class of row i, -1 for ignore_index, -2 when out of [0, C) (PyTorch asserts).
__device__ int64_t nll_class(const int64_t* target, int64_t i, const NllArgs& a) {
  const int64_t t = target[i];
  if (t == a.ignore_index) return -1;
  return t >= 0 && t < a.C ? t : -2;
}

template <typename acc_t>
__global__ void nll_none_kernel(Ten x, const int64_t* target, Ten w, OutTen out, OutTen tw,
                                NllArgs a) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i == 0) st<acc_t>(tw, 0, acc_t(0));
  if (i >= a.N) return;
  const int64_t t = nll_class(target, i, a);
  acc_t v = 0;
  if (t == -2)
    v = NAN;
  else if (t >= 0)
    v = -(w.p ? ld<acc_t>(w, t) : acc_t(1)) * ld<acc_t>(x, i * a.C + t);
  st<acc_t>(out, i, v);
}

template <typename acc_t>
__global__ void nll_reduce_kernel(Ten x, const int64_t* target, Ten w, OutTen out, OutTen tw,
                                  NllArgs a) {
  acc_t s = 0, ws = 0;
  bool bad = false;
  for (int64_t i = threadIdx.x; i < a.N; i += blockDim.x) {
    const int64_t t = nll_class(target, i, a);
    bad = bad || t == -2;
    if (t < 0) continue;
    const acc_t wt = w.p ? ld<acc_t>(w, t) : acc_t(1);
    s -= wt * ld<acc_t>(x, i * a.C + t);
    ws += wt;
  }
  s = block_reduce(s, Sum<acc_t>(), acc_t(0));
  ws = block_reduce(ws, Sum<acc_t>(), acc_t(0));
  const int any_bad = __syncthreads_or(bad);
  if (threadIdx.x == 0) {
    st<acc_t>(out, 0, any_bad ? acc_t(NAN) : a.reduction == 1 ? s / ws : s);
    st<acc_t>(tw, 0, ws);
  }
}

template <typename acc_t>
__global__ void nll_backward_kernel(Ten g, const int64_t* target, Ten w, Ten total, OutTen dx,
                                    NllArgs a) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= a.N * a.C) return;
  const int64_t i = e / a.C, c = e % a.C;
  const int64_t t = nll_class(target, i, a);
  acc_t v = 0;
  if (t == -2) {
    v = NAN;
  } else if (t == c) {
    const acc_t gv = ld<acc_t>(g, a.reduction == 0 && a.batch ? i : 0);
    v = -(w.p ? ld<acc_t>(w, t) : acc_t(1)) * gv;
    if (a.reduction == 1) v /= ld<acc_t>(total, 0);
  }
  st<acc_t>(dx, e, v);
}

// ---- layer norm and group norm ------------------------------------------------------------

// Blocks of `len` contiguous elements, block r at r * len; element j's channel (the index of
// its weight) is (r % groups) * per + j / hxw (layer norm: groups 1, per = len, hxw 1).
struct NormArgs {
  int64_t len, groups, per, hxw;
  double eps;
  __device__ int64_t channel(int64_t r, int64_t j) const { return (r % groups) * per + j / hxw; }
};

template <typename acc_t>
__global__ void norm_kernel(Ten x, Ten w, Ten b, OutTen y, OutTen mean, OutTen rstd, NormArgs a) {
  const int64_t r = blockIdx.x, base = r * a.len;
  acc_t s = 0;
  for (int64_t j = threadIdx.x; j < a.len; j += blockDim.x) s += ld<acc_t>(x, base + j);
  const acc_t mu = block_reduce(s, Sum<acc_t>(), acc_t(0)) / acc_t(a.len);
  acc_t m2 = 0;
  for (int64_t j = threadIdx.x; j < a.len; j += blockDim.x) {
    const acc_t d = ld<acc_t>(x, base + j) - mu;
    m2 += d * d;
  }
  const acc_t var = block_reduce(m2, Sum<acc_t>(), acc_t(0)) / acc_t(a.len);
  // y from mean and rstd as stored: group norm's are of the input's dtype, and ATen normalizes
  // with those (layer norm's are of acc_t: no rounding).
  const acc_t mu_s = round_as(mu, mean.dt);
  const acc_t rs = round_as(acc_t(1) / sqrt(var + acc_t(a.eps)), rstd.dt);
  if (threadIdx.x == 0) {
    st<acc_t>(mean, r, mu);
    st<acc_t>(rstd, r, rs);
  }
  for (int64_t j = threadIdx.x; j < a.len; j += blockDim.x) {
    const int64_t c = a.channel(r, j);
    acc_t v = (ld<acc_t>(x, base + j) - mu_s) * rs;
    if (w.p) v *= ld<acc_t>(w, c);
    if (b.p) v += ld<acc_t>(b, c);
    st<acc_t>(y, base + j, v);
  }
}

// dx = rstd (gw - mean(gw) - xhat mean(gw xhat)) over block r, with the recorded mean and rstd.
template <typename acc_t>
__global__ void norm_backward_dx_kernel(Ten g, Ten x, Ten mean, Ten rstd, Ten w, OutTen dx,
                                        NormArgs a) {
  const int64_t r = blockIdx.x, base = r * a.len;
  const acc_t mu = ld<acc_t>(mean, r), rs = ld<acc_t>(rstd, r);
  acc_t s1 = 0, s2 = 0;
  for (int64_t j = threadIdx.x; j < a.len; j += blockDim.x) {
    const acc_t gw = ld<acc_t>(g, base + j) * (w.p ? ld<acc_t>(w, a.channel(r, j)) : acc_t(1));
    s1 += gw;
    s2 += gw * (ld<acc_t>(x, base + j) - mu) * rs;
  }
  const acc_t m1 = block_reduce(s1, Sum<acc_t>(), acc_t(0)) / acc_t(a.len);
  const acc_t m2 = block_reduce(s2, Sum<acc_t>(), acc_t(0)) / acc_t(a.len);
  for (int64_t j = threadIdx.x; j < a.len; j += blockDim.x) {
    const acc_t gw = ld<acc_t>(g, base + j) * (w.p ? ld<acc_t>(w, a.channel(r, j)) : acc_t(1));
    const acc_t xhat = (ld<acc_t>(x, base + j) - mu) * rs;
    st<acc_t>(dx, base + j, rs * (gw - m1 - xhat * m2));
  }
}

// Layer norm dw, db: column j sums g xhat and g over the M rows. Block (32, 16): threadIdx.x a
// column of the block's 32, threadIdx.y strides over rows; the 16 partials meet in shared memory.
constexpr int kColX = 32, kColY = 16;
template <typename acc_t>
__global__ void layer_norm_dw_kernel(Ten g, Ten x, Ten mean, Ten rstd, OutTen dw, OutTen db,
                                     int64_t M, int64_t N) {
  __shared__ acc_t sw[kColY][kColX + 1], sb[kColY][kColX + 1];
  const int64_t j = blockIdx.x * int64_t(kColX) + threadIdx.x;
  acc_t pw = 0, pb = 0;
  if (j < N)
    for (int64_t r = threadIdx.y; r < M; r += kColY) {
      const acc_t gv = ld<acc_t>(g, r * N + j);
      pw += gv * (ld<acc_t>(x, r * N + j) - ld<acc_t>(mean, r)) * ld<acc_t>(rstd, r);
      pb += gv;
    }
  sw[threadIdx.y][threadIdx.x] = pw;
  sb[threadIdx.y][threadIdx.x] = pb;
  __syncthreads();
  if (threadIdx.y != 0 || j >= N) return;
  acc_t tw = 0, tb = 0;
  for (int k = 0; k < kColY; ++k) {
    tw += sw[k][threadIdx.x];
    tb += sb[k][threadIdx.x];
  }
  if (dw.p) st<acc_t>(dw, j, tw);
  if (db.p) st<acc_t>(db, j, tb);
}

// Group norm dw, db: one block per channel c, summing over its N x HxW elements.
template <typename acc_t>
__global__ void group_norm_dw_kernel(Ten g, Ten x, Ten mean, Ten rstd, OutTen dw, OutTen db,
                                     int64_t N, int64_t C, int64_t hxw, int64_t groups) {
  const int64_t c = blockIdx.x, grp = c / (C / groups);
  acc_t pw = 0, pb = 0;
  for (int64_t k = threadIdx.x; k < N * hxw; k += blockDim.x) {
    const int64_t n = k / hxw, e = (n * C + c) * hxw + k % hxw, r = n * groups + grp;
    const acc_t gv = ld<acc_t>(g, e);
    pw += gv * (ld<acc_t>(x, e) - ld<acc_t>(mean, r)) * ld<acc_t>(rstd, r);
    pb += gv;
  }
  pw = block_reduce(pw, Sum<acc_t>(), acc_t(0));
  pb = block_reduce(pb, Sum<acc_t>(), acc_t(0));
  if (threadIdx.x != 0) return;
  if (dw.p) st<acc_t>(dw, c, pw);
  if (db.p) st<acc_t>(db, c, pb);
}

// ---- dropout backward ---------------------------------------------------------------------

template <typename acc_t>
__global__ void dropout_backward_kernel(Ten g, const bool* mask, OutTen dx, int64_t n,
                                        acc_t scale) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) st<acc_t>(dx, i, ld<acc_t>(g, i) * acc_t(mask[i] ? 1 : 0) * scale);
}

// ---- host side ----------------------------------------------------------------------------

int block_for(int64_t len) {  // threads per row: a power of two in [32, 512]
  int t = kWarp;
  while (t < 512 && t < len) t *= 2;
  return t;
}
unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  if (blocks > int64_t{INT32_MAX})
    throw std::invalid_argument("nn kernel: " + std::to_string(n) + " elements is too many");
  return static_cast<unsigned>(std::max<int64_t>(blocks, 1));
}
unsigned rows_grid(int64_t rows) {
  if (rows > int64_t{INT32_MAX})
    throw std::invalid_argument("nn kernel: " + std::to_string(rows) + " rows is too many");
  return static_cast<unsigned>(rows);
}

// The operands and outputs made contiguous: temporaries (owned by the step) with a copy in before
// the kernel or out after it.
struct Staged {
  std::vector<DeviceTensor> in, out;
  std::vector<EagerLaunch> before, after;
  std::vector<std::shared_ptr<DeviceBuffer>> temps;
};
Staged stage(const std::vector<DeviceTensor>& in, const std::vector<DeviceTensor>& out) {
  Staged s{in, out, {}, {}, {}};
  auto temp = [&](const DeviceTensor& t) {
    s.temps.push_back(
        std::make_shared<DeviceBuffer>(static_cast<size_t>(numel(t)) * dtype_size(t.dtype)));
    return with_contiguous_strides(t, s.temps.back()->get());
  };
  for (auto& t : s.in)
    if (t.ptr && !is_contiguous(t)) {
      const DeviceTensor c = temp(t);
      s.before.push_back(prepare_copy(c, t));
      t = c;
    }
  for (auto& t : s.out)
    if (t.ptr && numel(t) > 0 && !is_contiguous(t)) {
      const DeviceTensor c = temp(t);
      s.after.push_back(prepare_copy(t, c));
      t = c;
    }
  return s;
}

Ten ten(const DeviceTensor& t) {
  return {t.ptr, t.dtype};
}
OutTen out_ten(const DeviceTensor& t, bool wanted = true) {
  return {wanted ? t.ptr : nullptr, t.dtype};
}

bool any_double(const std::vector<DeviceTensor>& a, const std::vector<DeviceTensor>& b) {
  for (const auto* v : {&a, &b})
    for (const auto& t : *v)
      if (t.ptr && t.dtype == DType::kFloat64) return true;
  return false;
}

// The kernel launch of node `n` on the staged (contiguous) tensors.
template <typename acc_t>
EagerLaunch kernel_launch(const Graph& g, const Node& n, NnFn fn, const Staged& s) {
  const auto& in = s.in;
  const auto& out = s.out;
  const auto shape_of = [&](size_t k) -> const Shape& { return g.meta(n.operands[k].value).shape; };
  switch (fn) {
    case NnFn::kSoftmax:
    case NnFn::kLogSoftmax: {
      const RowGeometry geo = softmax_rows(shape_of(0), n.dim);
      const RowArgs r{geo.len, geo.inner};
      const unsigned rows = rows_grid(geo.rows());
      const int threads = block_for(geo.len);
      const Ten x = ten(in[0]);
      const OutTen y = out_ten(out[0]);
      auto k = fn == NnFn::kSoftmax ? softmax_kernel<acc_t, false> : softmax_kernel<acc_t, true>;
      return [=](cudaStream_t st) {
        if (rows == 0) return;
        k<<<rows, threads, 0, st>>>(x, y, r);
        REPLAY_CUDA_LAUNCH("softmax_kernel");
      };
    }
    case NnFn::kSoftmaxBackward:
    case NnFn::kLogSoftmaxBackward: {
      const RowGeometry geo = softmax_rows(shape_of(0), n.dim);
      const RowArgs r{geo.len, geo.inner};
      const unsigned rows = rows_grid(geo.rows());
      const int threads = block_for(geo.len);
      const Ten gr = ten(in[0]), y = ten(in[1]);
      const OutTen dx = out_ten(out[0]);
      auto k = fn == NnFn::kSoftmaxBackward ? softmax_backward_kernel<acc_t, false>
                                            : softmax_backward_kernel<acc_t, true>;
      return [=](cudaStream_t st) {
        if (rows == 0) return;
        k<<<rows, threads, 0, st>>>(gr, y, dx, r);
        REPLAY_CUDA_LAUNCH("softmax_backward_kernel");
      };
    }
    case NnFn::kNllLossForward:
    case NnFn::kNllLossBackward: {
      const bool fwd = fn == NnFn::kNllLossForward;
      const Shape& xs = shape_of(fwd ? 0 : 1);
      NllArgs a{xs.size() == 2 ? xs[0] : 1, xs.back(), n.ignore_index, nll_reduction(n),
                xs.size() == 2};
      const auto* target = static_cast<const int64_t*>(in[fwd ? 1 : 2].ptr);
      const Ten w = ten(in[fwd ? 2 : 3]);
      if (fwd) {
        const Ten x = ten(in[0]);
        const OutTen o = out_ten(out[0]), tw = out_ten(out[1]);
        if (a.reduction == 0 && a.batch) {
          const unsigned blocks = grid_for(a.N, 256);
          return [=](cudaStream_t st) {
            nll_none_kernel<acc_t><<<blocks, 256, 0, st>>>(x, target, w, o, tw, a);
            REPLAY_CUDA_LAUNCH("nll_none_kernel");
          };
        }
        return [=](cudaStream_t st) {
          nll_reduce_kernel<acc_t><<<1, 1024, 0, st>>>(x, target, w, o, tw, a);
          REPLAY_CUDA_LAUNCH("nll_reduce_kernel");
        };
      }
      const Ten gr = ten(in[0]), total = ten(in[4]);
      const OutTen dx = out_ten(out[0]);
      const unsigned blocks = grid_for(a.N * a.C, 256);
      return [=](cudaStream_t st) {
        if (a.N * a.C == 0) return;
        nll_backward_kernel<acc_t><<<blocks, 256, 0, st>>>(gr, target, w, total, dx, a);
        REPLAY_CUDA_LAUNCH("nll_backward_kernel");
      };
    }
    case NnFn::kLayerNorm:
    case NnFn::kGroupNorm: {
      const Shape& xs = shape_of(0);
      int64_t rows = 0;
      NormArgs a{};
      a.eps = n.eps;
      if (fn == NnFn::kLayerNorm) {
        int64_t N = 1;
        for (int64_t d : n.sizes) N *= d;
        int64_t total = 1;
        for (int64_t d : xs) total *= d;
        a = {N, 1, N, 1, n.eps};
        rows = N == 0 ? 0 : total / N;
      } else {
        const GroupNormDims d = group_norm_dims(n);
        a = {d.group_size(), d.group, d.channels_per_group(), std::max<int64_t>(d.HxW, 1), n.eps};
        rows = d.N * d.group;
      }
      const unsigned grid = rows_grid(rows);
      const int threads = block_for(a.len);
      const Ten x = ten(in[0]), w = ten(in[1]), b = ten(in[2]);
      const OutTen y = out_ten(out[0]), mean = out_ten(out[1]), rstd = out_ten(out[2]);
      return [=](cudaStream_t st) {
        if (grid == 0) return;
        norm_kernel<acc_t><<<grid, threads, 0, st>>>(x, w, b, y, mean, rstd, a);
        REPLAY_CUDA_LAUNCH("norm_kernel");
      };
    }
    case NnFn::kLayerNormBackward:
    case NnFn::kGroupNormBackward: {
      const bool layer = fn == NnFn::kLayerNormBackward;
      const Shape& xs = shape_of(1);
      int64_t total = 1;
      for (int64_t d : xs) total *= d;
      const auto& mask = n.output_mask;
      const Ten gr = ten(in[0]), x = ten(in[1]), mean = ten(in[2]), rstd = ten(in[3]),
                w = ten(in[4]);
      const OutTen dx = out_ten(out[0], mask[0]), dw = out_ten(out[1], mask[1]),
                   db = out_ten(out[2], mask[2]);
      NormArgs a{};
      int64_t rows = 0;
      GroupNormDims d{};
      if (layer) {
        int64_t N = 1;
        for (int64_t s : n.sizes) N *= s;
        a = {N, 1, N, 1, 0};
        rows = N == 0 ? 0 : total / N;
      } else {
        d = group_norm_dims(n);
        a = {d.group_size(), d.group, d.channels_per_group(), std::max<int64_t>(d.HxW, 1), 0};
        rows = d.N * d.group;
      }
      const unsigned grid = rows_grid(rows);
      const int threads = block_for(a.len);
      const bool params = mask[1] || mask[2];
      const unsigned col_blocks = layer ? grid_for(a.len, kColX) : rows_grid(d.C);
      const int64_t M = rows, Ncols = a.len;
      return [=](cudaStream_t st) {
        if (mask[0] && grid > 0) {
          norm_backward_dx_kernel<acc_t><<<grid, threads, 0, st>>>(gr, x, mean, rstd, w, dx, a);
          REPLAY_CUDA_LAUNCH("norm_backward_dx_kernel");
        }
        if (!params) return;
        if (layer) {
          if (Ncols == 0) return;
          layer_norm_dw_kernel<acc_t>
              <<<col_blocks, dim3(kColX, kColY), 0, st>>>(gr, x, mean, rstd, dw, db, M, Ncols);
          REPLAY_CUDA_LAUNCH("layer_norm_dw_kernel");
        } else {
          if (col_blocks == 0) return;
          group_norm_dw_kernel<acc_t>
              <<<col_blocks, 256, 0, st>>>(gr, x, mean, rstd, dw, db, d.N, d.C, a.hxw, d.group);
          REPLAY_CUDA_LAUNCH("group_norm_dw_kernel");
        }
      };
    }
    case NnFn::kDropoutBackward: {
      const int64_t cnt = numel(in[0]);
      const Ten gr = ten(in[0]);
      const auto* mask = static_cast<const bool*>(in[1].ptr);
      const OutTen dx = out_ten(out[0]);
      const auto scale = static_cast<acc_t>(n.operands[2].scalar);
      const unsigned blocks = grid_for(cnt, 256);
      return [=](cudaStream_t st) {
        if (cnt == 0) return;
        dropout_backward_kernel<acc_t><<<blocks, 256, 0, st>>>(gr, mask, dx, cnt, scale);
        REPLAY_CUDA_LAUNCH("dropout_backward_kernel");
      };
    }
    case NnFn::kCount:
      break;
  }
  throw std::invalid_argument("node " + n.id + ": bad nn lowering");
}

}  // namespace

EagerLaunch prepare_nn(const Graph& g, const Node& n, NnFn fn, const std::vector<DeviceTensor>& in,
                       const std::vector<DeviceTensor>& out) {
  Staged s = stage(in, out);
  EagerLaunch k = any_double(s.in, s.out) ? kernel_launch<double>(g, n, fn, s)
                                          : kernel_launch<float>(g, n, fn, s);
  if (s.before.empty() && s.after.empty()) return k;
  return [before = s.before, after = s.after, temps = s.temps, k](cudaStream_t st) {
    for (const auto& c : before) c(st);
    k(st);
    for (const auto& c : after) c(st);
  };
}

}  // namespace replay
