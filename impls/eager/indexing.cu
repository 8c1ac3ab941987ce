// Eager kernels of the indexing family (see impls/eager/indexing.hpp), one file top to bottom:
//   indexed gather    index, gather, embedding: out[i] = target[offset(i)] (raw element copy)
//   indexed scatter   index_put, scatter(.src/.value): out = self, then out[offset(i)] = src[i]
//   indexed add       index_put(accumulate), scatter_add, embedding_dense_backward: the target
//                     copied into (or zeroed in) a float32 accumulator (float64 for float64,
//                     int64 for integers), atomicAdd of every source element, then one cast
//                     into the output: each element is rounded once, as PyTorch's deterministic
//                     index_put and embedding backward do. Float32 atomics add in an arbitrary
//                     order: a float32 sum of m duplicates differs from the float64 reference by
//                     up to ~m ulps of the running sum (the numerics bounds' delta covers a few
//                     terms; integers are exact).
//   constant_pad      one thread per output element
//   cumsum            one block per row, cub::BlockScan in chunks of 256 (float accumulation,
//                     double for float64, int64 for integers, as PyTorch)
//   argmax / argmin   one block per row, cub::BlockReduce of (value, index), first index on ties
//   sort / topk       keys gathered per row (NaN made one positive NaN, -0.0 made 0.0, so the
//                     radix order is PyTorch's comparison order), cub::DeviceSegmentedRadixSort
//                     (stable) of (key, position), then values gathered by position; topk keeps
//                     the first k of each row.
// The addressing (domain, offsets) is workloads/ops/indexing.hpp's, shared with the reference.
#include "impls/eager/indexing.hpp"

#include <cub/cub.cuh>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "impls/cuda/cuda_check.hpp"
#include "impls/cuda/dtype_device.cuh"
#include "workloads/ops/indexing.hpp"

namespace replay {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535 * 8));
}

// Element i of p (dtype t) as acc_t; integers read exactly as integers (int64 beyond 2^53 too).
template <typename acc_t>
__device__ __forceinline__ acc_t load_acc(const void* p, int64_t i, DType t) {
  if constexpr (std::is_integral<acc_t>::value) {
    switch (t) {
      case DType::kInt64:
        return static_cast<acc_t>(static_cast<const int64_t*>(p)[i]);
      case DType::kInt32:
        return static_cast<acc_t>(static_cast<const int32_t*>(p)[i]);
      case DType::kBool:
        return static_cast<acc_t>(static_cast<const uint8_t*>(p)[i] != 0);
      default:
        return static_cast<acc_t>(load_elem<double>(p, i, t));
    }
  } else {
    return load_elem<acc_t>(p, i, t);
  }
}

// --- indexed gather / scatter / add ------------------------------------------------------------

// IndexAddressing on the device, plus a second linear map over the domain (`astride`: the
// gathered output's strides, or a scatter's source strides).
struct IdxDesc {
  int ndim = 0, nidx = 0;
  bool wrap = false;
  int64_t shape[kMaxDims] = {};
  int64_t base[kMaxDims] = {};
  int64_t astride[kMaxDims] = {};
  const void* ptr[kMaxDims] = {};
  bool is32[kMaxDims] = {};
  int64_t istride[kMaxDims][kMaxDims] = {};
  int64_t tstride[kMaxDims] = {};
  int64_t size[kMaxDims] = {};
};

// Target offset `off`, second offset `aoff` and the first index's value `first` of domain
// element i; false when an index is outside its dim.
__device__ bool locate(const IdxDesc& d, int64_t i, int64_t& off, int64_t& aoff, int64_t& first) {
  int64_t ioff[kMaxDims] = {};
  off = 0;
  aoff = 0;
  for (int k = d.ndim - 1; k >= 0; --k) {
    const int64_t c = i % d.shape[k];
    i /= d.shape[k];
    off += c * d.base[k];
    aoff += c * d.astride[k];
    for (int j = 0; j < d.nidx; ++j) ioff[j] += c * d.istride[j][k];
  }
  first = 0;
  for (int j = 0; j < d.nidx; ++j) {
    int64_t v = d.is32[j] ? static_cast<const int32_t*>(d.ptr[j])[ioff[j]]
                          : static_cast<const int64_t*>(d.ptr[j])[ioff[j]];
    if (d.wrap && v < 0) v += d.size[j];
    if (v < 0 || v >= d.size[j]) return false;
    if (j == 0) first = v;
    off += v * d.tstride[j];
  }
  return true;
}

template <typename T>
__global__ void gather_kernel(IdxDesc d, int64_t n, const T* __restrict__ src, T* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off, aoff, first;
    const bool ok = locate(d, i, off, aoff, first);
    out[aoff] = ok ? src[off] : T(0);
  }
}

// out[offset(i)] = src[aoff(i)], or `value` (its bits) when src is null.
template <typename T>
__global__ void scatter_kernel(IdxDesc d, int64_t n, const T* __restrict__ src, T value, T* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off, aoff, first;
    if (locate(d, i, off, aoff, first)) out[off] = src ? src[aoff] : value;
  }
}

__device__ __forceinline__ void atomic_add(float* p, float v) {
  atomicAdd(p, v);
}
__device__ __forceinline__ void atomic_add(double* p, double v) {
  atomicAdd(p, v);
}
__device__ __forceinline__ void atomic_add(long long* p, long long v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

// acc[offset(i)] += src[aoff(i)] (divided by counts[first index] when counts is given); domain
// elements whose first index is `skip` add nothing (embedding's padding_idx).
template <typename acc_t>
__global__ void add_kernel(IdxDesc d, int64_t n, const void* __restrict__ src, DType src_dtype,
                           acc_t* acc, const int* __restrict__ counts, int64_t skip) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off, aoff, first;
    if (!locate(d, i, off, aoff, first) || first == skip) continue;
    acc_t v = load_acc<acc_t>(src, aoff, src_dtype);
    if (counts) v = v / static_cast<acc_t>(counts[first]);
    atomic_add(acc + off, v);
  }
}

// counts[idx] += 1 for every in-range element of the contiguous-by-strides index tensor.
__global__ void count_kernel(IdxDesc d, int64_t n, int* counts) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off, aoff, first;
    if (locate(d, i, off, aoff, first)) atomicAdd(counts + first, 1);
  }
}

IdxDesc to_device(const IndexAddressing& a, const std::vector<DeviceTensor>& in,
                  const std::vector<int64_t>& astride, const Node& n) {
  IdxDesc d;
  if (a.domain.size() > static_cast<size_t>(kMaxDims) ||
      a.idx.size() > static_cast<size_t>(kMaxDims))
    throw std::invalid_argument("node " + n.id + ": indexing domain " + shape_str(a.domain) +
                                " has more than " + std::to_string(kMaxDims) + " dims");
  d.ndim = static_cast<int>(a.domain.size());
  d.nidx = static_cast<int>(a.idx.size());
  d.wrap = a.wrap_negative;
  for (int k = 0; k < d.ndim; ++k) {
    d.shape[k] = a.domain[k];
    d.base[k] = a.base_stride[k];
    d.astride[k] = astride.empty() ? 0 : astride[k];
  }
  for (int j = 0; j < d.nidx; ++j) {
    const auto& ix = a.idx[j];
    const DeviceTensor& t = in.at(ix.operand);
    d.ptr[j] = t.ptr;
    d.is32[j] = t.dtype == DType::kInt32;
    for (int k = 0; k < d.ndim; ++k) d.istride[j][k] = ix.stride[k];
    d.tstride[j] = ix.target_stride;
    d.size[j] = ix.size;
  }
  return d;
}

std::vector<int64_t> strides_of(const DeviceTensor& t) {
  return std::vector<int64_t>(t.stride, t.stride + t.ndim);
}
Shape shape_of(const DeviceTensor& t) {
  return Shape(t.shape, t.shape + t.ndim);
}
std::vector<int64_t> first_strides(const DeviceTensor& t, size_t k) {  // t's strides of dims < k
  return std::vector<int64_t>(t.stride, t.stride + std::min<size_t>(k, t.ndim));
}
// `t`'s strides broadcast (right-aligned, 0 on size-1 and missing dims) to `shape`.
std::vector<int64_t> broadcast_strides(const DeviceTensor& t, const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 0);
  const size_t lead = shape.size() - t.ndim;
  for (int q = 0; q < t.ndim; ++q)
    if (t.shape[q] != 1) s[lead + q] = t.stride[q];
  return s;
}

template <typename F>
void by_size(DType t, F f) {  // f(T{}) with T an unsigned integer of t's size
  switch (dtype_size(t)) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    default:
      return f(uint64_t{});
  }
}

EagerLaunch gather_launch(const IdxDesc& d, const DeviceTensor& src, const DeviceTensor& out) {
  int64_t n = 1;
  for (int k = 0; k < d.ndim; ++k) n *= d.shape[k];
  if (n == 0) return [](cudaStream_t) {};
  return [d, n, src, out](cudaStream_t s) {
    by_size(out.dtype, [&](auto tag) {
      using T = decltype(tag);
      gather_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(d, n, static_cast<const T*>(src.ptr),
                                                          static_cast<T*>(out.ptr));
    });
    REPLAY_CUDA(cudaGetLastError());
  };
}

// The accumulator dtype of a summing op with output dtype t.
DType acc_dtype(DType t) {
  if (t == DType::kFloat64) return DType::kFloat64;
  return is_floating(t) ? DType::kFloat32 : DType::kInt64;
}

DeviceTensor contiguous_like(void* ptr, DType dt, const DeviceTensor& t) {
  DeviceTensor c = t;
  c.ptr = ptr;
  c.dtype = dt;
  int64_t s = 1;
  for (int k = t.ndim - 1; k >= 0; --k) {
    c.stride[k] = s;
    s *= t.shape[k];
  }
  return c;
}

// Scatter (assign, value or add) of `src` (null for a value) over addressing `a`, whose target
// strides the callback builds from the target's: out's for an assignment, the accumulator's for
// an add. `self` (null: zeros) is copied into the target first.
EagerLaunch scatter_launch(const Node& n, const std::vector<DeviceTensor>& in,
                           const DeviceTensor* self, const DeviceTensor& out,
                           const std::function<IndexAddressing(const std::vector<int64_t>&)>& addr,
                           const DeviceTensor* src, const std::vector<int64_t>& src_stride,
                           bool add, double value, int64_t skip = -1, bool scale_by_count = false,
                           const DeviceTensor* count_index = nullptr) {
  if (!add) {
    const IdxDesc d = to_device(addr(strides_of(out)), in, src_stride, n);
    int64_t total = 1;
    for (int k = 0; k < d.ndim; ++k) total *= d.shape[k];
    EagerLaunch init = prepare_copy(out, *self);
    uint64_t bits = 0;
    store_as(out.dtype, value, &bits);
    const void* sp = src ? src->ptr : nullptr;
    return [init, d, total, sp, bits, out](cudaStream_t s) {
      init(s);
      if (total == 0) return;
      by_size(out.dtype, [&](auto tag) {
        using T = decltype(tag);
        T v;
        std::memcpy(&v, &bits, sizeof(T));
        scatter_kernel<T><<<blocks_for(total), kThreads, 0, s>>>(
            d, total, static_cast<const T*>(sp), v, static_cast<T*>(out.ptr));
      });
      REPLAY_CUDA(cudaGetLastError());
    };
  }
  const DType adt = acc_dtype(out.dtype);
  auto ws = std::make_shared<DeviceBuffer>(std::max<size_t>(numel(out) * dtype_size(adt), 1));
  const DeviceTensor acc = contiguous_like(ws->get(), adt, out);
  const IdxDesc d = to_device(addr(strides_of(acc)), in, src_stride, n);
  int64_t total = 1;
  for (int k = 0; k < d.ndim; ++k) total *= d.shape[k];
  EagerLaunch init = self ? prepare_copy(acc, *self) : EagerLaunch{};
  EagerLaunch fin = prepare_copy(out, acc);
  std::shared_ptr<DeviceBuffer> counts;
  IdxDesc cd;
  int64_t count_n = 0;
  if (scale_by_count) {  // counts of each index value, over the index tensor alone
    counts = std::make_shared<DeviceBuffer>(std::max<size_t>(out.shape[0] * sizeof(int), 1));
    IndexAddressing ca;
    ca.domain = shape_of(*count_index);
    ca.base_stride.assign(ca.domain.size(), 0);
    IndexAddressing::Index ix;
    ix.operand = 1;
    ix.stride = strides_of(*count_index);
    ix.target_stride = 0;
    ix.size = out.shape[0];
    ca.idx.push_back(ix);
    cd = to_device(ca, in, {}, n);
    count_n = numel(*count_index);
  }
  const size_t acc_bytes = numel(out) * dtype_size(adt);
  const void* sp = src->ptr;
  const DType sdt = src->dtype;
  return [=](cudaStream_t s) {
    if (init)
      init(s);
    else
      REPLAY_CUDA(cudaMemsetAsync(ws->get(), 0, acc_bytes, s));
    const int* cnt = nullptr;
    if (counts) {
      REPLAY_CUDA(cudaMemsetAsync(counts->get(), 0, out.shape[0] * sizeof(int), s));
      if (count_n > 0)
        count_kernel<<<blocks_for(count_n), kThreads, 0, s>>>(cd, count_n,
                                                              static_cast<int*>(counts->get()));
      cnt = static_cast<const int*>(counts->get());
    }
    if (total > 0) {
      if (adt == DType::kFloat32)
        add_kernel<float><<<blocks_for(total), kThreads, 0, s>>>(
            d, total, sp, sdt, static_cast<float*>(ws->get()), cnt, skip);
      else if (adt == DType::kFloat64)
        add_kernel<double><<<blocks_for(total), kThreads, 0, s>>>(
            d, total, sp, sdt, static_cast<double*>(ws->get()), cnt, skip);
      else
        add_kernel<long long><<<blocks_for(total), kThreads, 0, s>>>(
            d, total, sp, sdt, static_cast<long long*>(ws->get()), cnt, skip);
    }
    REPLAY_CUDA(cudaGetLastError());
    fin(s);
  };
}

// --- constant_pad_nd ---------------------------------------------------------------------------

struct PadDesc {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};  // the output's
  int64_t ostride[kMaxDims] = {};
  int64_t istride[kMaxDims] = {};
  int64_t ishape[kMaxDims] = {};
  int64_t before[kMaxDims] = {};
};

template <typename T>
__global__ void pad_kernel(PadDesc d, int64_t n, const T* __restrict__ in, T value, T* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = i, ooff = 0, ioff = 0;
    bool inside = true;
    for (int k = d.ndim - 1; k >= 0; --k) {
      const int64_t c = r % d.shape[k];
      r /= d.shape[k];
      ooff += c * d.ostride[k];
      const int64_t ic = c - d.before[k];
      inside = inside && ic >= 0 && ic < d.ishape[k];
      ioff += ic * d.istride[k];
    }
    out[ooff] = inside ? in[ioff] : value;
  }
}

EagerLaunch pad_launch(const Node& n, const DeviceTensor& x, const DeviceTensor& out) {
  PadDesc d;
  d.ndim = out.ndim;
  for (int k = 0; k < out.ndim; ++k) {
    d.shape[k] = out.shape[k];
    d.ostride[k] = out.stride[k];
    d.istride[k] = x.stride[k];
    d.ishape[k] = x.shape[k];
  }
  for (size_t k = 0; k < n.sizes.size() / 2; ++k) d.before[out.ndim - 1 - k] = n.sizes[2 * k];
  const int64_t total = numel(out);
  uint64_t bits = 0;
  store_as(out.dtype, n.operands[1].scalar, &bits);
  return [d, total, bits, x, out](cudaStream_t s) {
    if (total == 0) return;
    by_size(out.dtype, [&](auto tag) {
      using T = decltype(tag);
      T v;
      std::memcpy(&v, &bits, sizeof(T));
      pad_kernel<T><<<blocks_for(total), kThreads, 0, s>>>(d, total, static_cast<const T*>(x.ptr),
                                                           v, static_cast<T*>(out.ptr));
    });
    REPLAY_CUDA(cudaGetLastError());
  };
}

// --- rows along one dim (cumsum, sort, topk) or over some dims (argmax, argmin) ----------------

// Row r's offset in each of up to three tensors: r decomposed over the kept dims' sizes.
struct RowDesc {
  int nkept = 0;
  int64_t kshape[kMaxDims] = {};
  int64_t kstride[3][kMaxDims] = {};
  int nred = 0;  // the reduced dims (one for a scan or a sort), element j decomposed over them
  int64_t rshape[kMaxDims] = {};
  int64_t rstride[3][kMaxDims] = {};
  int64_t rows = 1, len = 1;
};

__device__ __forceinline__ int64_t row_offset(const RowDesc& d, int t, int64_t r) {
  int64_t off = 0;
  for (int k = d.nkept - 1; k >= 0; --k) {
    off += (r % d.kshape[k]) * d.kstride[t][k];
    r /= d.kshape[k];
  }
  return off;
}
__device__ __forceinline__ int64_t elem_offset(const RowDesc& d, int t, int64_t j) {
  int64_t off = 0;
  for (int k = d.nred - 1; k >= 0; --k) {
    off += (j % d.rshape[k]) * d.rstride[t][k];
    j /= d.rshape[k];
  }
  return off;
}

// Rows of `x` over `dims` (sorted); tensors[t] gives the strides of tensor t: tensors[0] is x,
// the others have x's rank when `keepdim`, else only the kept dims (a reduction's output).
RowDesc row_desc(const DeviceTensor& x, const std::vector<int64_t>& dims,
                 const std::vector<const DeviceTensor*>& tensors, bool keepdim) {
  RowDesc d;
  int kept_pos = 0;
  for (int k = 0; k < x.ndim; ++k) {
    const bool red = std::find(dims.begin(), dims.end(), k) != dims.end();
    for (size_t t = 0; t < tensors.size(); ++t) {
      const DeviceTensor& o = *tensors[t];
      if (red) {
        d.rstride[t][d.nred] = o.stride[k];
      } else {
        d.kstride[t][d.nkept] = keepdim || t == 0 ? o.stride[k] : o.stride[kept_pos];
      }
    }
    if (red) {
      d.rshape[d.nred++] = x.shape[k];
      d.len *= x.shape[k];
    } else {
      d.kshape[d.nkept++] = x.shape[k];
      d.rows *= x.shape[k];
      ++kept_pos;
    }
  }
  return d;
}

template <typename acc_t>
__global__ void cumsum_kernel(RowDesc d, const void* __restrict__ in, DType in_dt, void* out,
                              DType out_dt) {
  using Scan = cub::BlockScan<acc_t, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  for (int64_t r = blockIdx.x; r < d.rows; r += gridDim.x) {
    const int64_t ib = row_offset(d, 0, r), ob = row_offset(d, 1, r);
    acc_t carry = 0;
    for (int64_t c0 = 0; c0 < d.len; c0 += kThreads) {
      const int64_t j = c0 + threadIdx.x;
      const acc_t x = j < d.len ? load_acc<acc_t>(in, ib + j * d.rstride[0][0], in_dt) : acc_t(0);
      acc_t y, total;
      Scan(tmp).InclusiveSum(x, y, total);
      if (j < d.len) store_elem<acc_t>(out, ob + j * d.rstride[1][0], out_dt, y + carry);
      carry += total;
      __syncthreads();
    }
  }
}

EagerLaunch cumsum_launch(const Node& n, const DeviceTensor& x, const DeviceTensor& out) {
  DeviceTensor x1 = x, o1 = out;
  if (x.ndim == 0) {  // a 0-d scan is a copy
    return prepare_copy(out, x);
  }
  const RowDesc d = row_desc(x1, {n.dim}, {&x1, &o1}, true);
  const DType adt = out.dtype == DType::kFloat64 ? DType::kFloat64
                    : is_floating(out.dtype)     ? DType::kFloat32
                                                 : DType::kInt64;
  const int grid = static_cast<int>(std::min<int64_t>(d.rows, 65535 * 4));
  return [d, grid, adt, x, out](cudaStream_t s) {
    if (d.rows == 0 || d.len == 0) return;
    if (adt == DType::kFloat32)
      cumsum_kernel<float><<<grid, kThreads, 0, s>>>(d, x.ptr, x.dtype, out.ptr, out.dtype);
    else if (adt == DType::kFloat64)
      cumsum_kernel<double><<<grid, kThreads, 0, s>>>(d, x.ptr, x.dtype, out.ptr, out.dtype);
    else
      cumsum_kernel<long long><<<grid, kThreads, 0, s>>>(d, x.ptr, x.dtype, out.ptr, out.dtype);
    REPLAY_CUDA(cudaGetLastError());
  };
}

// (value, index) with argmax's order: NaN above everything, the lower index among equals.
template <typename K>
struct ArgPair {
  K v;
  int64_t i;
};
template <typename K, bool kMax>
struct ArgBetter {
  __device__ __forceinline__ ArgPair<K> operator()(const ArgPair<K>& a, const ArgPair<K>& b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    const bool an = a.v != a.v, bn = b.v != b.v;  // NaN (never for integer K)
    if (an || bn) {
      if (an && bn) return a.i < b.i ? a : b;
      return an ? a : b;
    }
    if (a.v == b.v) return a.i < b.i ? a : b;
    return (kMax ? a.v > b.v : a.v < b.v) ? a : b;
  }
};

template <typename K, bool kMax>
__global__ void arg_kernel(RowDesc d, const void* __restrict__ in, DType in_dt, int64_t* out) {
  using Reduce = cub::BlockReduce<ArgPair<K>, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const ArgBetter<K, kMax> better;
  for (int64_t r = blockIdx.x; r < d.rows; r += gridDim.x) {
    const int64_t ib = row_offset(d, 0, r);
    ArgPair<K> best{K(0), -1};
    for (int64_t j = threadIdx.x; j < d.len; j += kThreads)
      best = better(best, ArgPair<K>{load_acc<K>(in, ib + elem_offset(d, 0, j), in_dt), j});
    const ArgPair<K> all = Reduce(tmp).Reduce(best, better);
    if (threadIdx.x == 0) out[row_offset(d, 1, r)] = all.i;
    __syncthreads();
  }
}

EagerLaunch arg_launch(const Node& n, bool max, const DeviceTensor& x, const DeviceTensor& out) {
  const RowDesc d = row_desc(x, n.dims, {&x, &out}, n.keepdim || x.ndim == 0);
  const int grid = static_cast<int>(std::max<int64_t>(std::min<int64_t>(d.rows, 65535 * 4), 1));
  const bool fp = is_floating(x.dtype);
  return [d, grid, fp, max, x, out](cudaStream_t s) {
    if (d.rows == 0) return;
    auto* o = static_cast<int64_t*>(out.ptr);
    if (fp && max)
      arg_kernel<double, true><<<grid, kThreads, 0, s>>>(d, x.ptr, x.dtype, o);
    else if (fp)
      arg_kernel<double, false><<<grid, kThreads, 0, s>>>(d, x.ptr, x.dtype, o);
    else if (max)
      arg_kernel<long long, true><<<grid, kThreads, 0, s>>>(d, x.ptr, x.dtype, o);
    else
      arg_kernel<long long, false><<<grid, kThreads, 0, s>>>(d, x.ptr, x.dtype, o);
    REPLAY_CUDA(cudaGetLastError());
  };
}

// --- sort / topk --------------------------------------------------------------------------------

template <typename K>
__device__ __forceinline__ K sort_key(const void* p, int64_t off, DType dt) {
  K v = load_acc<K>(p, off, dt);
  if constexpr (std::is_floating_point<K>::value) {
    if (v != v) return K(NAN);   // one positive NaN: the radix order puts it above +inf
    if (v == K(0)) return K(0);  // -0.0 equals 0.0
  }
  return v;
}

template <typename K>
__global__ void sort_keys_kernel(RowDesc d, const void* __restrict__ in, DType in_dt, K* keys,
                                 int* pos) {
  const int64_t n = d.rows * d.len;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / d.len, j = i % d.len;
    keys[i] = sort_key<K>(in, row_offset(d, 0, r) + j * d.rstride[0][0], in_dt);
    pos[i] = static_cast<int>(j);
  }
}

template <typename T>
__global__ void sort_write_kernel(RowDesc d, int64_t k, const int* __restrict__ pos,
                                  const T* __restrict__ in, T* values, int64_t* indices) {
  const int64_t n = d.rows * k;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / k, j = i % k;
    const int64_t p = pos[r * d.len + j];
    values[row_offset(d, 1, r) + j * d.rstride[1][0]] =
        in[row_offset(d, 0, r) + p * d.rstride[0][0]];
    indices[row_offset(d, 2, r) + j * d.rstride[2][0]] = p;
  }
}

__global__ void segment_offsets_kernel(int* offsets, int64_t rows, int64_t len) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r <= rows;
       r += int64_t(gridDim.x) * blockDim.x)
    offsets[r] = static_cast<int>(r * len);
}

template <typename K>
size_t sort_temp_bytes(bool descending, int64_t items, int64_t rows) {
  size_t bytes = 0;
  if (descending)
    REPLAY_CUDA(cub::DeviceSegmentedRadixSort::SortPairsDescending(
        nullptr, bytes, static_cast<const K*>(nullptr), static_cast<K*>(nullptr),
        static_cast<const int*>(nullptr), static_cast<int*>(nullptr), static_cast<int>(items),
        static_cast<int>(rows), static_cast<const int*>(nullptr),
        static_cast<const int*>(nullptr)));
  else
    REPLAY_CUDA(cub::DeviceSegmentedRadixSort::SortPairs(
        nullptr, bytes, static_cast<const K*>(nullptr), static_cast<K*>(nullptr),
        static_cast<const int*>(nullptr), static_cast<int*>(nullptr), static_cast<int>(items),
        static_cast<int>(rows), static_cast<const int*>(nullptr),
        static_cast<const int*>(nullptr)));
  return bytes;
}

template <typename K>
EagerLaunch sort_launch_t(const RowDesc& d, int64_t k, bool descending, const DeviceTensor& x,
                          const DeviceTensor& values, const DeviceTensor& indices) {
  const int64_t items = d.rows * d.len;
  const size_t temp = sort_temp_bytes<K>(descending, items, d.rows);
  // keys in, keys out, positions in, positions out, offsets, CUB's temporary storage
  auto keys = std::make_shared<DeviceBuffer>(2 * items * sizeof(K) + 1);
  auto pos = std::make_shared<DeviceBuffer>(2 * items * sizeof(int) + 1);
  auto offsets = std::make_shared<DeviceBuffer>((d.rows + 1) * sizeof(int));
  auto tmp = std::make_shared<DeviceBuffer>(temp + 1);
  return [=](cudaStream_t s) {
    if (items == 0) return;
    K* kin = static_cast<K*>(keys->get());
    K* kout = kin + items;
    int* pin = static_cast<int*>(pos->get());
    int* pout = pin + items;
    int* off = static_cast<int*>(offsets->get());
    segment_offsets_kernel<<<blocks_for(d.rows + 1), kThreads, 0, s>>>(off, d.rows, d.len);
    sort_keys_kernel<K><<<blocks_for(items), kThreads, 0, s>>>(d, x.ptr, x.dtype, kin, pin);
    size_t bytes = temp;
    if (descending)
      REPLAY_CUDA(cub::DeviceSegmentedRadixSort::SortPairsDescending(
          tmp->get(), bytes, kin, kout, pin, pout, static_cast<int>(items),
          static_cast<int>(d.rows), off, off + 1, 0, static_cast<int>(sizeof(K) * 8), s));
    else
      REPLAY_CUDA(cub::DeviceSegmentedRadixSort::SortPairs(
          tmp->get(), bytes, kin, kout, pin, pout, static_cast<int>(items),
          static_cast<int>(d.rows), off, off + 1, 0, static_cast<int>(sizeof(K) * 8), s));
    const int64_t n = d.rows * k;
    if (n > 0)
      by_size(x.dtype, [&](auto tag) {
        using T = decltype(tag);
        sort_write_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(
            d, k, pout, static_cast<const T*>(x.ptr), static_cast<T*>(values.ptr),
            static_cast<int64_t*>(indices.ptr));
      });
    REPLAY_CUDA(cudaGetLastError());
  };
}

EagerLaunch sort_launch(const Node& n, const DeviceTensor& x, const DeviceTensor& values,
                        const DeviceTensor& indices) {
  DeviceTensor x1 = x, v1 = values, i1 = indices;
  if (x.ndim == 0) {  // a 0-d tensor: one row of one element
    for (DeviceTensor* t : {&x1, &v1, &i1}) {
      t->ndim = 1;
      t->shape[0] = 1;
      t->stride[0] = 1;
    }
  }
  const int64_t len = x1.shape[n.dim];
  const int64_t k = n.op == Op::kTopk ? n.offset : len;
  // The row layout comes from x; values and indices have k along dim, the same kept dims.
  RowDesc d = row_desc(x1, {n.dim}, {&x1, &v1, &i1}, true);
  if (d.rows * d.len > INT32_MAX)
    throw std::invalid_argument("node " + n.id + ": sort of " + std::to_string(d.rows * d.len) +
                                " elements (CUB's segmented sort takes at most 2^31)");
  const bool descending = n.flag;
  if (x.dtype == DType::kFloat64) return sort_launch_t<double>(d, k, descending, x1, v1, i1);
  if (is_floating(x.dtype)) return sort_launch_t<float>(d, k, descending, x1, v1, i1);
  return sort_launch_t<long long>(d, k, descending, x1, v1, i1);
}

}  // namespace

EagerLaunch lower_indexing(const Graph& g, const Node& n, IndexingFn fn,
                           const std::vector<DeviceTensor>& in,
                           const std::vector<DeviceTensor>& out) {
  (void)g;
  const DeviceTensor& o = out.at(0);
  // Index tensors of index / index_put: operands from `first` on, -1 for None.
  auto advanced = [&](size_t first, const DeviceTensor& target,
                      const std::vector<int64_t>& target_stride) {
    std::vector<int> ops;
    std::vector<Shape> shapes;
    std::vector<std::vector<int64_t>> strides;
    for (size_t k = first; k < n.operands.size(); ++k) {
      const bool none = n.operands[k].none;
      ops.push_back(none ? -1 : static_cast<int>(k));
      shapes.push_back(none ? Shape{} : shape_of(in.at(k)));
      strides.push_back(none ? std::vector<int64_t>{} : strides_of(in.at(k)));
    }
    return advanced_index(shape_of(target), target_stride, ops, shapes, strides);
  };
  switch (fn) {
    case IndexingFn::kIndex: {
      const IndexAddressing a = advanced(1, in.at(0), strides_of(in.at(0)));
      return gather_launch(to_device(a, in, strides_of(o), n), in.at(0), o);
    }
    case IndexingFn::kGather: {
      const IndexAddressing a = dim_index(shape_of(in.at(0)), strides_of(in.at(0)), n.dim, 1,
                                          shape_of(in.at(1)), strides_of(in.at(1)));
      return gather_launch(to_device(a, in, strides_of(o), n), in.at(0), o);
    }
    case IndexingFn::kEmbedding: {
      const IndexAddressing a = embedding_index(shape_of(in.at(0)), strides_of(in.at(0)), 1,
                                                shape_of(in.at(1)), strides_of(in.at(1)));
      return gather_launch(to_device(a, in, strides_of(o), n), in.at(0), o);
    }
    case IndexingFn::kIndexPut: {
      const Shape domain = advanced(2, in.at(0), strides_of(in.at(0))).domain;
      const std::vector<int64_t> vs = broadcast_strides(in.at(1), domain);
      auto addr = [&](const std::vector<int64_t>& ts) { return advanced(2, o, ts); };
      return scatter_launch(n, in, &in.at(0), o, addr, &in.at(1), vs, n.flag, 0);
    }
    case IndexingFn::kScatter:
    case IndexingFn::kScatterAdd: {
      auto addr = [&](const std::vector<int64_t>& ts) {
        return dim_index(shape_of(o), ts, n.dim, 1, shape_of(in.at(1)), strides_of(in.at(1)));
      };
      const bool has_src = n.operands[2].is_tensor();
      const std::vector<int64_t> ss =
          has_src ? first_strides(in.at(2), in.at(1).ndim) : std::vector<int64_t>{};
      return scatter_launch(n, in, &in.at(0), o, addr, has_src ? &in.at(2) : nullptr, ss,
                            fn == IndexingFn::kScatterAdd, has_src ? 0 : n.operands[2].scalar);
    }
    case IndexingFn::kEmbeddingBackward: {
      auto addr = [&](const std::vector<int64_t>& ts) {
        return embedding_index(shape_of(o), ts, 1, shape_of(in.at(1)), strides_of(in.at(1)));
      };
      return scatter_launch(n, in, nullptr, o, addr, &in.at(0), strides_of(in.at(0)), true, 0,
                            n.offset < 0 ? -1 : n.offset, n.flag, &in.at(1));
    }
    case IndexingFn::kConstantPad:
      return pad_launch(n, in.at(0), o);
    case IndexingFn::kCumsum:
      return cumsum_launch(n, in.at(0), o);
    case IndexingFn::kArgmax:
    case IndexingFn::kArgmin:
      return arg_launch(n, fn == IndexingFn::kArgmax, in.at(0), o);
    case IndexingFn::kSort:
      return sort_launch(n, in.at(0), out.at(0), out.at(1));
    case IndexingFn::kCount:
      break;
  }
  throw std::invalid_argument("node " + n.id + ": bad indexing lowering");
}

}  // namespace replay
