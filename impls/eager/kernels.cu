// Eager kernels: generic strided pointwise and generic reduction (see kernels.hpp).
#include "impls/eager/kernels.hpp"

#include <array>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "impls/cuda/cuda_check.hpp"
#include "impls/cuda/dtype_device.cuh"

namespace replay {

DeviceTensor device_tensor(void* ptr, const TensorMeta& meta) {
  if (meta.shape.size() > kMaxDims)
    throw std::invalid_argument("tensor " + meta.str() + " has more than " +
                                std::to_string(kMaxDims) + " dims");
  DeviceTensor t;
  t.ptr = ptr;
  t.dtype = meta.dtype;
  t.ndim = static_cast<int>(meta.shape.size());
  for (int i = 0; i < t.ndim; ++i) {
    t.shape[i] = meta.shape[i];
    t.stride[i] = meta.stride[i];
  }
  return t;
}

namespace {

// a's strides aligned to out's rank: broadcast dims get stride 0.
DeviceTensor align_to(const DeviceTensor& a, const DeviceTensor& out) {
  DeviceTensor r = a;
  r.ndim = out.ndim;
  int lead = out.ndim - a.ndim;
  for (int i = 0; i < out.ndim; ++i) {
    int j = i - lead;
    r.shape[i] = out.shape[i];
    r.stride[i] = (j < 0 || a.shape[j] == 1) ? 0 : a.stride[j];
  }
  return r;
}

constexpr int kMaxPwOperands = 3;

struct PointwiseArgs {
  DeviceTensor out;
  DeviceTensor in[kMaxPwOperands];
  bool is_tensor[kMaxPwOperands];
  double scalar[kMaxPwOperands];
  int nin;
  double alpha;
  int64_t numel;
  bool contiguous;  // every tensor operand and the output row-major over out's shape
};

template <typename T>
__device__ __forceinline__ bool is_nan(T v) {
  return v != v;  // false for integers
}

// The elementwise functions, one specialization each, chosen at compile time: the kernel is
// instantiated per function (no per-element switch), and a PointwiseFn without a specialization
// here does not compile (pointwise_table instantiates every one). kInt: whether the function has
// an integer form (computes in int64 for integer and bool compute types).
template <PointwiseFn F>
struct Pw;
#define REPLAY_PW(fn, has_int, expr)                                                  \
  template <>                                                                         \
  struct Pw<PointwiseFn::fn> {                                                        \
    static constexpr bool kInt = has_int;                                             \
    template <typename T>                                                             \
    __device__ static T f(T x, [[maybe_unused]] T y, [[maybe_unused]] T z,            \
                          [[maybe_unused]] T alpha, [[maybe_unused]] int64_t index) { \
      return expr;                                                                    \
    }                                                                                 \
  };
REPLAY_PW(kCopy, true, x)
REPLAY_PW(kRsqrt, false, T(1) / sqrt(x))
REPLAY_PW(kSqrt, false, sqrt(x))
REPLAY_PW(kNeg, true, -x)
REPLAY_PW(kAbs, true, x < T(0) ? -x : x)
REPLAY_PW(kExp, false, exp(x))
REPLAY_PW(kLog, false, log(x))
REPLAY_PW(kLog1p, false, log1p(x))
REPLAY_PW(kExpm1, false, expm1(x))
REPLAY_PW(kReciprocal, false, T(1) / x)
REPLAY_PW(kTanh, false, tanh(x))
REPLAY_PW(kSigmoid, false, T(1) / (T(1) + exp(-x)))
REPLAY_PW(kErf, false, erf(x))
REPLAY_PW(kSin, false, sin(x))
REPLAY_PW(kCos, false, cos(x))
REPLAY_PW(kSign, true, is_nan(x) ? x : T((T(0) < x) - (x < T(0))))
REPLAY_PW(kRelu, true, is_nan(x) ? x : (x > T(0) ? x : T(0)))
REPLAY_PW(kPow, false, y == T(2) ? x * x : pow(x, y))
REPLAY_PW(kAdd, true, x + alpha * y)
REPLAY_PW(kSub, true, x - alpha * y)
REPLAY_PW(kRsub, true, y - alpha * x)
REPLAY_PW(kMul, true, x* y)
REPLAY_PW(kDiv, false, x / y)
REPLAY_PW(kDivTrunc, false, trunc(x / y))
REPLAY_PW(kDivFloor, false, floor(x / y))
REPLAY_PW(kMaximum, true, is_nan(x) || is_nan(y) ? (is_nan(x) ? x : y) : (x > y ? x : y))
REPLAY_PW(kMinimum, true, is_nan(x) || is_nan(y) ? (is_nan(x) ? x : y) : (x < y ? x : y))
REPLAY_PW(kEq, true, T(x == y))
REPLAY_PW(kNe, true, T(x != y))
REPLAY_PW(kLt, true, T(x < y))
REPLAY_PW(kLe, true, T(x <= y))
REPLAY_PW(kGt, true, T(x > y))
REPLAY_PW(kGe, true, T(x >= y))
REPLAY_PW(kLogicalNot, true, T(x == T(0)))
REPLAY_PW(kLogicalAnd, true, T(x != T(0) && y != T(0)))
REPLAY_PW(kLogicalOr, true, T(x != T(0) || y != T(0)))
REPLAY_PW(kLogicalXor, true, T((x != T(0)) != (y != T(0))))
REPLAY_PW(kWhere, true, x != T(0) ? y : z)
REPLAY_PW(kClamp, true,
          is_nan(x) || is_nan(y) || is_nan(z) ? (is_nan(x) ? x : (is_nan(y) ? y : z))
                                              : ((x < y ? y : x) > z ? z : (x < y ? y : x)))
REPLAY_PW(kFill, true, x)
REPLAY_PW(kIota, true, x + y * T(index))
REPLAY_PW(kDropout, false, y < z ? x * alpha : T(0))
#undef REPLAY_PW

// Integer math in double where the function has no integer form is never instantiated: int64
// kernels exist only for kInt functions.
template <PointwiseFn F, typename acc_t>
constexpr bool kHasKernel = !std::is_same_v<acc_t, int64_t> || Pw<F>::kInt;

template <typename acc_t, typename index_t>
__device__ __forceinline__ acc_t load_operand(const PointwiseArgs& p, int k, index_t off) {
  return p.is_tensor[k] ? load_elem<acc_t>(p.in[k].ptr, off, p.in[k].dtype)
                        : static_cast<acc_t>(p.scalar[k]);
}

// index_t: uint32_t when every offset fits (64-bit division is several times slower), as
// PyTorch's TensorIterator does with its 32-bit indexing path. Contiguous launches skip the
// index arithmetic.
template <PointwiseFn F, typename acc_t, typename index_t>
__global__ void pointwise_kernel(PointwiseArgs p) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < p.numel;
       i += int64_t(gridDim.x) * blockDim.x) {
    index_t off[kMaxPwOperands] = {}, oo = static_cast<index_t>(i);
    if (p.contiguous) {
      for (int k = 0; k < kMaxPwOperands; ++k) off[k] = oo;
    } else {
      index_t rem = static_cast<index_t>(i);
      oo = 0;
      for (int d = p.out.ndim - 1; d >= 0; --d) {
        const auto size = static_cast<index_t>(p.out.shape[d]);
        const index_t c = rem % size;
        rem /= size;
        oo += c * static_cast<index_t>(p.out.stride[d]);
#pragma unroll
        for (int k = 0; k < kMaxPwOperands; ++k)
          off[k] += c * static_cast<index_t>(p.in[k].stride[d]);
      }
    }
    const acc_t x = p.nin > 0 ? load_operand<acc_t>(p, 0, off[0]) : acc_t(0);
    const acc_t y = p.nin > 1 ? load_operand<acc_t>(p, 1, off[1]) : acc_t(0);
    const acc_t z = p.nin > 2 ? load_operand<acc_t>(p, 2, off[2]) : acc_t(0);
    store_elem<acc_t>(p.out.ptr, oo, p.out.dtype,
                      Pw<F>::f(x, y, z, static_cast<acc_t>(p.alpha), static_cast<int64_t>(i)));
  }
}

using PointwiseKernel = void (*)(PointwiseArgs);

template <PointwiseFn F, typename acc_t, typename index_t>
constexpr PointwiseKernel kernel_or_null() {
  if constexpr (kHasKernel<F, acc_t>)
    return &pointwise_kernel<F, acc_t, index_t>;
  else
    return nullptr;
}

template <typename acc_t, typename index_t, size_t... I>
std::array<PointwiseKernel, sizeof...(I)> pointwise_table(std::index_sequence<I...>) {
  return {kernel_or_null<static_cast<PointwiseFn>(I), acc_t, index_t>()...};
}

// The kernel of function `f` for this accumulation and index type (nullptr: no such form).
template <typename acc_t, typename index_t>
PointwiseKernel pw_kernel(PointwiseFn f) {
  static const auto table = pointwise_table<acc_t, index_t>(
      std::make_index_sequence<static_cast<size_t>(PointwiseFn::kCount)>{});
  return table.at(static_cast<size_t>(f));
}

// Whether every element offset of t (and its element count) fits in 32 bits.
bool fits_32bit(const DeviceTensor& t) {
  int64_t span = 1, numel = 1;
  for (int i = 0; i < t.ndim; ++i) {
    span += (t.shape[i] - 1) * t.stride[i];
    numel *= t.shape[i];
  }
  return span < (int64_t(1) << 31) && numel < (int64_t(1) << 31);
}

bool row_major(const DeviceTensor& t) {
  int64_t expect = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.stride[d] != expect) return false;
    expect *= t.shape[d];
  }
  return true;
}

int grid_for(int64_t n, int threads) {
  int64_t blocks = (n + threads - 1) / threads;
  return static_cast<int>(std::min<int64_t>(std::max<int64_t>(blocks, 1), 65535 * 8));
}

struct ReduceArgs {
  const void* in;
  DType in_dtype;
  int nkept, nred;
  int64_t kept_shape[kMaxDims], kept_in_stride[kMaxDims], kept_out0_stride[kMaxDims],
      kept_out1_stride[kMaxDims];
  int64_t red_shape[kMaxDims], red_stride[kMaxDims];
  int64_t red_numel, out_numel;
  ReduceFn op;
  double correction;
  void* out0;
  DType out0_dtype;
  void* out1;
  DType out1_dtype;
};

constexpr int kReduceThreads = 256;

// A running reduction value: the accumulator, and for kMaxDim the index of the max.
template <typename acc_t>
struct RedVal {
  acc_t v;
  int64_t idx;
};

template <typename acc_t>
__device__ __forceinline__ RedVal<acc_t> red_identity(ReduceFn op) {
  switch (op) {
    case ReduceFn::kAmax:
    case ReduceFn::kMaxDim:
      return {acc_t(-INFINITY), INT64_MAX};
    case ReduceFn::kAmin:
      return {acc_t(INFINITY), INT64_MAX};
    case ReduceFn::kProd:
      return {acc_t(1), 0};
    default:
      return {acc_t(0), 0};
  }
}

// Combine two partial results. max/min propagate NaN (as torch.amax does); kMaxDim keeps the
// smallest index among equal maxima (and the first NaN).
template <typename acc_t>
__device__ __forceinline__ RedVal<acc_t> red_combine(ReduceFn op, RedVal<acc_t> a,
                                                     RedVal<acc_t> b) {
  switch (op) {
    case ReduceFn::kAmax:
    case ReduceFn::kMaxDim: {
      const bool an = is_nan(a.v), bn = is_nan(b.v);
      if (an || bn) return an && bn ? (a.idx <= b.idx ? a : b) : (an ? a : b);
      if (a.v != b.v) return a.v > b.v ? a : b;
      return a.idx <= b.idx ? a : b;
    }
    case ReduceFn::kAmin: {
      if (is_nan(a.v)) return a;
      if (is_nan(b.v)) return b;
      return a.v <= b.v ? a : b;
    }
    case ReduceFn::kProd:
      return {a.v * b.v, 0};
    default:
      return {a.v + b.v, 0};
  }
}

template <typename acc_t>
__device__ RedVal<acc_t> block_reduce(ReduceFn op, RedVal<acc_t> v, RedVal<acc_t>* smem) {
  for (int o = 16; o > 0; o >>= 1) {
    RedVal<acc_t> w{__shfl_xor_sync(0xffffffffu, v.v, o), __shfl_xor_sync(0xffffffffu, v.idx, o)};
    v = red_combine(op, v, w);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // smem may still be read by a previous call
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? smem[lane] : red_identity<acc_t>(op);
    for (int o = 16; o > 0; o >>= 1) {
      RedVal<acc_t> w{__shfl_xor_sync(0xffffffffu, v.v, o), __shfl_xor_sync(0xffffffffu, v.idx, o)};
      v = red_combine(op, v, w);
    }
    if (lane == 0) smem[0] = v;
  }
  __syncthreads();
  return smem[0];
}

template <typename index_t>
__device__ index_t red_offset(const ReduceArgs& p, index_t r) {
  if (p.nred == 1) return r * static_cast<index_t>(p.red_stride[0]);  // the common case
  index_t off = 0;
  for (int d = p.nred - 1; d >= 0; --d) {
    const auto size = static_cast<index_t>(p.red_shape[d]);
    off += (r % size) * static_cast<index_t>(p.red_stride[d]);
    r /= size;
  }
  return off;
}

template <typename acc_t, typename index_t>
__global__ void reduction_kernel(ReduceArgs p) {
  __shared__ RedVal<acc_t> smem[32];
  for (int64_t o = blockIdx.x; o < p.out_numel; o += gridDim.x) {
    int64_t rem = o, in_off = 0, o0 = 0, o1 = 0;
    for (int d = p.nkept - 1; d >= 0; --d) {
      int64_t c = rem % p.kept_shape[d];
      rem /= p.kept_shape[d];
      in_off += c * p.kept_in_stride[d];
      o0 += c * p.kept_out0_stride[d];
      o1 += c * p.kept_out1_stride[d];
    }
    const bool variance = p.op == ReduceFn::kVar || p.op == ReduceFn::kVarMean;
    const ReduceFn first = variance ? ReduceFn::kSum : p.op;
    RedVal<acc_t> acc = red_identity<acc_t>(first);
    for (int64_t r = threadIdx.x; r < p.red_numel; r += blockDim.x) {
      const acc_t x =
          load_elem<acc_t>(p.in, in_off + red_offset<index_t>(p, index_t(r)), p.in_dtype);
      acc = red_combine(first, acc, RedVal<acc_t>{x, r});
    }
    const RedVal<acc_t> total = block_reduce(first, acc, smem);
    if (variance) {  // two passes: the mean, then the sum of squared deviations
      const acc_t mean = total.v / acc_t(p.red_numel);
      RedVal<acc_t> ss{0, 0};
      for (int64_t r = threadIdx.x; r < p.red_numel; r += blockDim.x) {
        const acc_t d =
            load_elem<acc_t>(p.in, in_off + red_offset<index_t>(p, index_t(r)), p.in_dtype) - mean;
        ss.v += d * d;
      }
      const acc_t m2 = block_reduce(ReduceFn::kSum, ss, smem).v;
      if (threadIdx.x == 0) {
        const acc_t denom = acc_t(p.red_numel) - acc_t(p.correction);
        store_elem<acc_t>(p.out0, o0, p.out0_dtype, m2 / (denom > acc_t(0) ? denom : acc_t(0)));
        if (p.op == ReduceFn::kVarMean) store_elem<acc_t>(p.out1, o1, p.out1_dtype, mean);
      }
    } else if (threadIdx.x == 0) {
      const acc_t v = p.op == ReduceFn::kMean ? total.v / acc_t(p.red_numel) : total.v;
      store_elem<acc_t>(p.out0, o0, p.out0_dtype, v);
      if (p.op == ReduceFn::kMaxDim)
        store_elem<int64_t>(p.out1, o1, p.out1_dtype, total.idx == INT64_MAX ? 0 : total.idx);
    }
  }
}

}  // namespace

void launch_pointwise(PointwiseFn fn, const DeviceTensor& out, const std::vector<PwOperand>& in,
                      double alpha, DType compute, cudaStream_t stream) {
  if (in.size() > kMaxPwOperands)
    throw std::invalid_argument("pointwise kernel: " + std::to_string(in.size()) +
                                " operands (at most 3)");
  PointwiseArgs p{};
  p.out = out;
  p.nin = static_cast<int>(in.size());
  p.alpha = alpha;
  p.numel = 1;
  for (int i = 0; i < out.ndim; ++i) p.numel *= out.shape[i];
  if (p.numel == 0) return;
  bool small = fits_32bit(out);
  p.contiguous = row_major(out);
  for (size_t k = 0; k < in.size(); ++k) {
    p.is_tensor[k] = in[k].is_tensor;
    p.scalar[k] = in[k].scalar;
    if (!in[k].is_tensor) continue;
    p.in[k] = align_to(in[k].t, out);
    small = small && fits_32bit(in[k].t);
    // Contiguous fast path: same shape as out (no broadcast) and row-major.
    p.contiguous = p.contiguous && in[k].t.ndim == out.ndim && row_major(in[k].t);
    for (int d = 0; p.contiguous && d < out.ndim; ++d)
      p.contiguous = in[k].t.shape[d] == out.shape[d];
  }
  const bool f64 = compute == DType::kFloat64;
  const bool integral =
      compute == DType::kInt64 || compute == DType::kInt32 || compute == DType::kBool;
  PointwiseKernel kernel =
      f64        ? (small ? pw_kernel<double, uint32_t>(fn) : pw_kernel<double, int64_t>(fn))
      : integral ? (small ? pw_kernel<int64_t, uint32_t>(fn) : pw_kernel<int64_t, int64_t>(fn))
                 : (small ? pw_kernel<float, uint32_t>(fn) : pw_kernel<float, int64_t>(fn));
  if (!kernel)
    throw std::invalid_argument("pointwise function " + std::to_string(static_cast<int>(fn)) +
                                " has no form for compute dtype " +
                                std::string(dtype_name(compute)));
  constexpr int kThreads = 256;
  kernel<<<grid_for(p.numel, kThreads), kThreads, 0, stream>>>(p);
  REPLAY_CUDA_LAUNCH("pointwise_kernel");
}

void launch_copy(const DeviceTensor& dst, const DeviceTensor& src, cudaStream_t stream) {
  // Exact for every pair of dtypes: int64 through int64, float64 or int through double.
  auto wide = [](DType t) {
    return t == DType::kFloat64 || t == DType::kInt64 || t == DType::kInt32;
  };
  const bool ints = !is_floating(dst.dtype) && !is_floating(src.dtype);
  const DType compute = ints                                 ? DType::kInt64
                        : wide(dst.dtype) || wide(src.dtype) ? DType::kFloat64
                                                             : DType::kFloat32;
  launch_pointwise(PointwiseFn::kCopy, dst, {PwOperand{src, true, 0}}, 1, compute, stream);
}

void launch_reduction(ReduceFn op, const DeviceTensor& in, const std::vector<int64_t>& dims,
                      const DeviceTensor& out0, const DeviceTensor* out1, double correction,
                      cudaStream_t stream) {
  ReduceArgs p{};
  p.in = in.ptr;
  p.in_dtype = in.dtype;
  p.op = op;
  p.correction = correction;
  p.out0 = out0.ptr;
  p.out0_dtype = out0.dtype;
  p.out1 = out1 ? out1->ptr : nullptr;
  p.out1_dtype = out1 ? out1->dtype : DType::kFloat32;
  const bool keepdim = out0.ndim == in.ndim;
  p.red_numel = 1;
  p.out_numel = 1;
  int od = 0;  // output dim index
  for (int d = 0; d < in.ndim; ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (reduced) {
      p.red_shape[p.nred] = in.shape[d];
      p.red_stride[p.nred++] = in.stride[d];
      p.red_numel *= in.shape[d];
      if (keepdim) ++od;
    } else {
      p.kept_shape[p.nkept] = in.shape[d];
      p.kept_in_stride[p.nkept] = in.stride[d];
      p.kept_out0_stride[p.nkept] = out0.stride[od];
      p.kept_out1_stride[p.nkept] = out1 ? out1->stride[od] : 0;
      ++p.nkept;
      ++od;
      p.out_numel *= in.shape[d];
    }
  }
  if (p.out_numel == 0) return;
  int grid = static_cast<int>(std::min<int64_t>(p.out_numel, 65535 * 8));
  auto wide = [](DType t) { return t == DType::kFloat64 || !is_floating(t); };
  const bool f64 = wide(in.dtype) || wide(out0.dtype);
  if (f64 && fits_32bit(in))
    reduction_kernel<double, uint32_t><<<grid, kReduceThreads, 0, stream>>>(p);
  else if (f64)
    reduction_kernel<double, int64_t><<<grid, kReduceThreads, 0, stream>>>(p);
  else if (fits_32bit(in))
    reduction_kernel<float, uint32_t><<<grid, kReduceThreads, 0, stream>>>(p);
  else
    reduction_kernel<float, int64_t><<<grid, kReduceThreads, 0, stream>>>(p);
  REPLAY_CUDA_LAUNCH("reduction_kernel");
}

void poison(void* ptr, size_t bytes, cudaStream_t stream) {
  if (bytes) REPLAY_CUDA(cudaMemsetAsync(ptr, 0xFF, bytes, stream));
}

}  // namespace replay
