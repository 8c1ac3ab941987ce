// Eager kernels: generic strided pointwise and generic reduction (see kernels.hpp).
#include "impls/eager/kernels.hpp"

#include <array>
#include <stdexcept>
#include <string>
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

struct PointwiseArgs {
  DeviceTensor out, a, b;
  bool has_b;
  double scalar, alpha;
  int64_t numel;
  PointwiseFn op;
};

// The elementwise functions, one specialization each, chosen at compile time: the kernel is
// instantiated per function (no per-element switch), and a PointwiseFn without a specialization
// here does not compile (pw_kernel instantiates every one).
template <PointwiseFn F>
struct Pw;
#define REPLAY_PW(fn, expr)                                                      \
  template <>                                                                    \
  struct Pw<PointwiseFn::fn> {                                                   \
    template <typename T>                                                        \
    __device__ static T f(T x, [[maybe_unused]] T y, [[maybe_unused]] T alpha) { \
      return expr;                                                               \
    }                                                                            \
  };
REPLAY_PW(kCopy, x)
REPLAY_PW(kRsqrt, T(1) / sqrt(x))
REPLAY_PW(kSqrt, sqrt(x))
REPLAY_PW(kNeg, -x)
REPLAY_PW(kAbs, fabs(x))
REPLAY_PW(kExp, exp(x))
REPLAY_PW(kReciprocal, T(1) / x)
REPLAY_PW(kPow, y == T(2) ? x * x : pow(x, y))
REPLAY_PW(kAdd, x + alpha * y)
REPLAY_PW(kSub, x - alpha * y)
REPLAY_PW(kMul, x* y)
REPLAY_PW(kDiv, x / y)
#undef REPLAY_PW

// index_t: uint32_t when every offset fits (64-bit division is several times slower), as
// PyTorch's TensorIterator does with its 32-bit indexing path.
template <PointwiseFn F, typename acc_t, typename index_t>
__global__ void pointwise_kernel(PointwiseArgs p) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < p.numel;
       i += int64_t(gridDim.x) * blockDim.x) {
    index_t rem = static_cast<index_t>(i), oo = 0, ao = 0, bo = 0;
    for (int d = p.out.ndim - 1; d >= 0; --d) {
      const auto size = static_cast<index_t>(p.out.shape[d]);
      index_t c = rem % size;
      rem /= size;
      oo += c * static_cast<index_t>(p.out.stride[d]);
      ao += c * static_cast<index_t>(p.a.stride[d]);
      bo += c * static_cast<index_t>(p.b.stride[d]);
    }
    acc_t x = load_elem<acc_t>(p.a.ptr, ao, p.a.dtype);
    acc_t y = p.has_b ? load_elem<acc_t>(p.b.ptr, bo, p.b.dtype) : static_cast<acc_t>(p.scalar);
    store_elem<acc_t>(p.out.ptr, oo, p.out.dtype, Pw<F>::f(x, y, acc_t(p.alpha)));
  }
}

using PointwiseKernel = void (*)(PointwiseArgs);

template <typename acc_t, typename index_t, size_t... I>
std::array<PointwiseKernel, sizeof...(I)> pointwise_table(std::index_sequence<I...>) {
  return {&pointwise_kernel<static_cast<PointwiseFn>(I), acc_t, index_t>...};
}

// The kernel of function `f` for this accumulation and index type.
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
  float correction;
  void* out0;
  DType out0_dtype;
  void* out1;
  DType out1_dtype;
};

constexpr int kReduceThreads = 256;

__device__ float block_reduce(float v, bool is_max, float* smem) {
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // smem may still be read by a previous call
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < blockDim.x / 32 ? smem[lane] : (is_max ? -INFINITY : 0.f);
    for (int o = 16; o > 0; o >>= 1) {
      float w = __shfl_xor_sync(0xffffffffu, v, o);
      v = is_max ? fmaxf(v, w) : v + w;
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

template <typename index_t>
__global__ void reduction_kernel(ReduceArgs p) {
  __shared__ float smem[32];
  for (int64_t o = blockIdx.x; o < p.out_numel; o += gridDim.x) {
    int64_t rem = o, in_off = 0, o0 = 0, o1 = 0;
    for (int d = p.nkept - 1; d >= 0; --d) {
      int64_t c = rem % p.kept_shape[d];
      rem /= p.kept_shape[d];
      in_off += c * p.kept_in_stride[d];
      o0 += c * p.kept_out0_stride[d];
      o1 += c * p.kept_out1_stride[d];
    }
    const bool is_max = p.op == ReduceFn::kAmax;
    float acc = is_max ? -INFINITY : 0.f;
    for (int64_t r = threadIdx.x; r < p.red_numel; r += blockDim.x) {
      float x = load_elem<float>(p.in, in_off + red_offset<index_t>(p, index_t(r)), p.in_dtype);
      acc = is_max ? fmaxf(acc, x) : acc + x;
    }
    float total = block_reduce(acc, is_max, smem);
    if (p.op == ReduceFn::kVarMean) {
      float mean = total / float(p.red_numel);
      float ss = 0.f;
      for (int64_t r = threadIdx.x; r < p.red_numel; r += blockDim.x) {
        float d =
            load_elem<float>(p.in, in_off + red_offset<index_t>(p, index_t(r)), p.in_dtype) - mean;
        ss += d * d;
      }
      float m2 = block_reduce(ss, false, smem);
      if (threadIdx.x == 0) {
        store_elem<float>(p.out0, o0, p.out0_dtype,
                          m2 / fmaxf(float(p.red_numel) - p.correction, 0.f));
        store_elem<float>(p.out1, o1, p.out1_dtype, mean);
      }
    } else if (threadIdx.x == 0) {
      float v = p.op == ReduceFn::kMean ? total / float(p.red_numel) : total;
      store_elem<float>(p.out0, o0, p.out0_dtype, v);
    }
  }
}

}  // namespace

void launch_pointwise(PointwiseFn op, const DeviceTensor& out, const DeviceTensor& a,
                      const DeviceTensor* b, double scalar, double alpha, cudaStream_t stream) {
  PointwiseArgs p{};
  p.out = out;
  p.a = align_to(a, out);
  p.has_b = b != nullptr;
  if (b) p.b = align_to(*b, out);
  p.scalar = scalar;
  p.alpha = alpha;
  p.op = op;
  p.numel = 1;
  for (int i = 0; i < out.ndim; ++i) p.numel *= out.shape[i];
  if (p.numel == 0) return;
  bool f64 = out.dtype == DType::kFloat64 || a.dtype == DType::kFloat64 ||
             (b && b->dtype == DType::kFloat64);
  constexpr int kThreads = 256;
  const bool small = fits_32bit(out) && fits_32bit(a) && (!b || fits_32bit(*b));
  const int grid = grid_for(p.numel, kThreads);
  const PointwiseKernel kernel =
      f64 ? (small ? pw_kernel<double, uint32_t>(op) : pw_kernel<double, int64_t>(op))
          : (small ? pw_kernel<float, uint32_t>(op) : pw_kernel<float, int64_t>(op));
  kernel<<<grid, kThreads, 0, stream>>>(p);
  REPLAY_CUDA_LAUNCH("pointwise_kernel");
}

void launch_reduction(ReduceFn op, const DeviceTensor& in, const std::vector<int64_t>& dims,
                      const DeviceTensor& out0, const DeviceTensor* out1, double correction,
                      cudaStream_t stream) {
  ReduceArgs p{};
  p.in = in.ptr;
  p.in_dtype = in.dtype;
  p.op = op;
  p.correction = static_cast<float>(correction);
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
  if (fits_32bit(in))
    reduction_kernel<uint32_t><<<grid, kReduceThreads, 0, stream>>>(p);
  else
    reduction_kernel<int64_t><<<grid, kReduceThreads, 0, stream>>>(p);
  REPLAY_CUDA_LAUNCH("reduction_kernel");
}

void poison(void* ptr, size_t bytes, cudaStream_t stream) {
  if (bytes) REPLAY_CUDA(cudaMemsetAsync(ptr, 0xFF, bytes, stream));
}

}  // namespace replay
