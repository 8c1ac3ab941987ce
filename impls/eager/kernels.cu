// Eager kernels (kernels.hpp): one launch per op, like PyTorch eager. Memory-bound by design, so
// every path below is judged by bytes moved per second.
//
// POINTWISE (launch_pointwise, launch_copy). The host orders the dims as the output lays them out
// in memory (outermost first; an operand decides where the output does not: TensorIterator's
// reorder_dimensions), then coalesces the output's dims with every tensor operand's (broadcast
// dims have stride 0; adjacent dims d, d+1 merge when every tensor has stride[d] == shape[d+1] *
// stride[d+1], as TensorIterator's coalesce_dimensions does), then picks:
//  - vec path (pw_vec_kernel): coalesced dims [..., R, C] whose inner dim has the output's stride
//    1 and every tensor operand's 1 (a vector) or 0 (one element broadcast along the row: the
//    [R, C] op [R, 1] case; [R, C] op [C] has row stride 0); pointers and outer strides aligned;
//    C % 8 == 0 unless 1-D. Each thread takes 8 consecutive elements: every operand's vector is
//    loaded first (16-byte accesses, 8 bytes for 1-byte dtypes), then widened, computed, rounded
//    and stored as one vector. Each outer dim costs one 32-bit multiply-high division (FastDiv)
//    per 8 elements. So a permuted dense tensor (the [B, H, T, D] view of a [B, T, H, D] buffer
//    in rotary embeddings) becomes one dim, and a slice of its head dim [B, H, T, D/2] stays on
//    this path with rows of D/2. 128 threads per block, one vector per thread, as PyTorch's
//    vectorized_elementwise_kernel (ATen/native/cuda/CUDALoops.cuh), which vectorizes only the
//    contiguous case. Dtypes are template
//    arguments for the common cases (all operands and the output float32, or bfloat16; kCopy
//    casts bfloat16/float16 <-> float32, float32/bfloat16 -> float8_e4m3fn) and run-time
//    otherwise (a switch per operand and vector, never per element; raw loads of every operand
//    are issued before any conversion, so they are in flight together).
//  - nd path (pw_nd_kernel): anything else (an operand transposed against the output, a
//    strided output, misaligned pointers, C % 8 != 0, 64-bit operands under float math, float8
//    outputs of mixed dtypes): 4 elements per thread in a blocked layout (element u*128 + t of the
//    block's 512: coalesced), per-dim offsets with FastDiv when every offset fits 32 bits
//    (PyTorch's OffsetCalculator / IntDivider), 64-bit division otherwise.
//  The function is a run-time value: kernels are instantiated per function group (cheap
//  arithmetic / transcendental, so the cheap kernels keep few registers) and switch on it once
//  per thread. One kernel per function and dtype combination took ~10 CPU minutes to compile.
//  Both paths evaluate the same Pw<F>::f in the same opmath (float for float32 and narrower
//  floats, double for float64, int64 for integers and bool), widen through load_elem and round
//  once through store_elem (vec_io.cuh calls them with a compile-time dtype on a local of the
//  element's type): bit-identical to the scalar kernel they replace, and to each other (the GPU
//  tests compare the two paths' bits). Host enqueue: loops over <= 8 dims, no allocation.
//
// REDUCTIONS (launch_reduction). The host splits the input's dims into kept and reduced, drops
// size-1 dims and coalesces each group (kept dims together with the outputs' strides), then:
//  - inner path (inner_kernel): one reduced dim of stride 1 (contiguous rows, e.g. var_mean over
//    the last dim). bx threads per row (a power of two, 4..256, about 8 vectors of 8 elements per
//    thread: bx = 32 for 1600 elements, one warp per row) and 256/bx rows per block; 16-byte
//    vector loads after a scalar head that reaches 16-byte alignment (any row start works), a
//    scalar tail; loads in batches of 2-8 vectors per thread, all issued before any is used;
//    8 independent accumulators per thread; warp shuffles, then shared memory across the warps of
//    a row. var/var_mean read the row ONCE: the first pass keeps up to 8 vectors per thread in
//    registers (still packed: 4 registers per vector of bfloat16), the second pass takes the
//    squared deviations from them; only a row longer than 8 vectors per thread (> 16384 elements
//    at bx = 256) is partly read again, from L1/L2. Same two-pass arithmetic as before:
//    mean = sum / N, m2 = sum((x - mean)^2), var = m2 / max(N - correction, 0).
//  - outer path (outer_kernel): the innermost kept dim has stride 1 and the reduced dims (1, or 2
//    that do not coalesce) are strided: column reductions (sum over dim 0 of [16384, 1600], over
//    dims [0, 1] of [16, 1024, 1600]). Threads map to consecutive columns (a vector of 2-8
//    columns each: 16-byte loads, coalesced across the warp), threadIdx.y strides over rows in
//    batches of 8, and the block's rows are combined in shared memory by a fixed tree, all of a
//    thread's columns at once (log2(by) + 1 barriers; one column at a time took 8x as many). var /
//    var_mean run two launches (sums, then squared deviations around the mean), since no thread
//    sees a whole column.
//  - split: when the outputs give less than one wave of blocks (1600 float columns = 13 blocks;
//    one row of 134M elements = 1 block), the reduced range is split over gridDim.y to fill one
//    wave and no more (splits = slots / blocks, rounded down: a few blocks past the wave cost a
//    second wave; cudaOccupancyMaxActiveBlocksPerMultiprocessor, queried once per kernel). Each
//    block writes its partial to a workspace; the last block of each column/row group to finish
//    (an atomic counter: CUDA's threadFenceReduction sample, PyTorch Reduce.cuh's global_reduce)
//    combines the partials in split order (the outer path issues 4-8 splits' loads before it
//    combines them) and writes the result: one launch, deterministic (the
//    order of every combination is fixed; no float atomics). var_mean with split rows runs as two
//    such launches (sums, then squared deviations).
//  - generic path (reduction_kernel): everything else (reduced dims that are neither contiguous
//    rows nor columns, a reduction over nothing or over 1 element, float8/16-bit inputs with a
//    float64 output): one block per output, threads striding over the reduced elements, as before.
//  Accumulation: float, or double when the input or out0 is float64 or not floating. amax/amin
//  propagate NaN (float: PTX max.NaN / min.NaN, one instruction; the compare-and-select chain made
//  amax of bfloat16 ALU-bound); max.dim keeps the first index among equal maxima and the first
//  NaN. No result depends on the order in which blocks arrive.
//
// WORKSPACE (split reductions): each prepared launch owns its device buffer, allocated and
// zeroed when it is prepared (prepare_reduction, i.e. at the eager executor's lowering): the
// counters (one per column/row group, when split), the sums of a two-pass variance (one per
// output), the partial values (splits x outputs) and, for max.dim, the partial indices.
// Each last block resets its counter to 0, so launches back to back reuse the buffer; enqueueing
// then takes no lock and makes no CUDA call but the kernel launches, and a CUDA graph captures
// the buffer's fixed address. Like the launch's outputs, the buffer belongs to one launch site:
// the same prepared launch must not run concurrently on two streams. The one-shot
// launch_reduction allocates its buffer stream-ordered (cudaMallocAsync, cudaFreeAsync).
//
// Measured on an H100 (copy 3.05 TB/s; tests/gpu/test_eager_kernels.cpp EagerKernelsBench, cold
// L2; PyTorch 2.11 eager on the same machine in brackets): add bf16 [16384, 1600] 52 us (48);
// mul f32 [16384, 1600] x [16384, 1] 70 us (90); mul f32 x bf16 [1600] 71 us (103); convert
// bf16->f32 56 us (81), f32->bf16 50 us (49); var_mean over the last dim of [16384, 1600] bf16
// 33 us (74), f32 50 us (71); sum over dim 0 of f32 [16384, 1600] 50 us (61), over dims [0, 1] of
// [16, 1024, 1600] 51 us (62), over dim 1 39 us (41); amax of bf16 [16384, 8192] 98 us (105);
// copy f32 70 us (cudaMemcpyAsync 69). Host enqueue ~5 us per launch. Replayed graphs (replay
// run, eager): nanoGPT LayerNorm forward [16, 1024, 1600] 464 us (was 1244; PyTorch 488),
// LayerNorm backward 1342 us (was 3317; PyTorch 1240); litgpt RoPE forward [2, 4096, 40, 128]
// 1254 us (was 3947 before dims were ordered as the output lays them out, which keeps a permuted
// head-dim slice on the 16-byte vector path; PyTorch 2018), backward 2537 us (was 3275; PyTorch
// 2917); Meta Llama RoPE forward (2x4096 tokens, 32 q / 8 kv heads of 128) 1417 us (PyTorch 1346).
// Expected on an H200 (copy ~4.2 TB/s): the pointwise ops at copy speed (add bf16 ~38 us, the
// f32 broadcasts ~51 us), sum over dim 1 ~29 us, columns ~37 us, amax ~72 us; var_mean of bf16
// rows is latency-bound (~28-30 us), not bandwidth-bound.
//
// Sources: PyTorch ATen/native/cuda/CUDALoops.cuh, Loops.cuh, MemoryAccess.cuh (vectorized
// elementwise), Reduce.cuh (block/grid reduction configuration, split reductions with a semaphore
// and a last-block global reduce), ATen/cuda/detail/IntegerDivider.cuh and OffsetCalculator.cuh;
// CUB's BlockReduce (warp-shuffle then shared-memory reductions); llm.c's layernorm kernels (warp
// per row, 16-byte packed loads); the CUDA samples' threadFenceReduction. No code was copied.
#include "impls/eager/kernels.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "impls/cuda/cuda_check.hpp"
#include "impls/cuda/device_sms.hpp"
#include "impls/cuda/dtype_device.cuh"
#include "impls/eager/fast_div.cuh"
#include "impls/eager/pw_math.cuh"
#include "impls/eager/vec_io.cuh"

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

using eager::dsize;
using eager::kDyn;
using eager::kVec;
using eager::Raw8;

// ------------------------------------------------------------------------------------------------
// Host helpers

constexpr int64_t kMax32 = int64_t(1) << 31;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

int64_t pow2_ceil(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

bool aligned(const void* p, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

// Whether every element offset of t (and its element count) fits in 32 bits.
bool fits_32bit(const DeviceTensor& t) {
  int64_t span = 1, numel = 1;
  for (int i = 0; i < t.ndim; ++i) {
    span += (t.shape[i] - 1) * t.stride[i];
    numel *= t.shape[i];
  }
  return span < kMax32 && numel < kMax32;
}

// Order the dims of `n` (<= 4) strided views of one shape as memory lays them out, outermost
// first (TensorIterator's reorder_dimensions): size-1 dims are dropped, then dim a goes inside dim
// b when the first view (the output first) in which both have different non-zero strides has
// stride[a] < stride[b]; ties keep their order (insertion sort, stable). A permuted dense output
// becomes row-major, so coalesce() merges it to one dim and the kernels walk it in memory order.
// The linear index of an element changes: callers whose function reads it (iota) skip this.
// Returns the new rank (0 when every dim has size 1).
int reorder_dims(int ndim, int64_t* shape, int64_t (*stride)[kMaxDims], int n) {
  int64_t s[kMaxDims], st[4][kMaxDims];
  int m = 0;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    s[m] = shape[d];
    for (int t = 0; t < n; ++t) st[t][m] = stride[t][d];
    ++m;
  }
  auto inner_than = [&](int a, int b) {  // dim a belongs inside dim b
    for (int t = 0; t < n; ++t) {
      const int64_t sa = st[t][a], sb = st[t][b];
      if (sa == 0 || sb == 0 || sa == sb) continue;
      return sa < sb;
    }
    return false;
  };
  int perm[kMaxDims];
  for (int d = 0; d < m; ++d) perm[d] = d;
  for (int i = 1; i < m; ++i)
    for (int j = i; j > 0 && inner_than(perm[j - 1], perm[j]); --j) std::swap(perm[j - 1], perm[j]);
  for (int d = 0; d < m; ++d) {
    shape[d] = s[perm[d]];
    for (int t = 0; t < n; ++t) stride[t][d] = st[t][perm[d]];
  }
  return m;
}

// Merge adjacent dims of `n` strided views of one shape: drops size-1 dims, then merges d into
// d - 1 where every view has stride[d-1] == shape[d] * stride[d]. The linear (row-major) index of
// an element is unchanged. Returns the new rank (>= 1; [1] for a single element).
int coalesce(int ndim, int64_t* shape, int64_t (*stride)[kMaxDims], int n) {
  int m = 0;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    shape[m] = shape[d];
    for (int t = 0; t < n; ++t) stride[t][m] = stride[t][d];
    ++m;
  }
  if (m == 0) {
    shape[0] = 1;
    for (int t = 0; t < n; ++t) stride[t][0] = 0;
    return 1;
  }
  int r = 0;
  for (int d = 1; d < m; ++d) {
    bool merge = true;
    for (int t = 0; t < n && merge; ++t) merge = stride[t][r] == shape[d] * stride[t][d];
    if (merge) {
      shape[r] *= shape[d];
      for (int t = 0; t < n; ++t) stride[t][r] = stride[t][d];
    } else {
      ++r;
      shape[r] = shape[d];
      for (int t = 0; t < n; ++t) stride[t][r] = stride[t][d];
    }
  }
  return r + 1;
}

// ------------------------------------------------------------------------------------------------
// Pointwise

constexpr int kMaxPwOperands = 3;
constexpr int kPwThreads = 128;
constexpr int kPwUnroll = 4;  // elements per thread on the nd path

// The elementwise functions (pw_math.cuh's table, with is_nan, pw_pow, pw_div_trunc,
// pw_div_floor, pw_rounding), one specialization each, chosen at compile time: the kernel is
// instantiated per function (no per-element switch), and a PointwiseFn without a row does not
// compile (the kernel tables instantiate every one).
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
REPLAY_PW_FUNCTIONS(REPLAY_PW)
#undef REPLAY_PW

// Integer math in double where the function has no integer form is never instantiated: the int64
// kernels carry only the kInt functions.
template <PointwiseFn F, typename acc_t>
constexpr bool kHasForm = !std::is_same_v<acc_t, int64_t> || Pw<F>::kInt;

// The transcendental functions. Kernels are instantiated per group, not per function, and switch
// on the function once per thread: the cheap group keeps few registers, and the file compiles in
// reasonable time (one kernel per function and dtype combination took ~10 CPU minutes).
constexpr bool is_math(PointwiseFn f) {
  switch (f) {
    case PointwiseFn::kExp:
    case PointwiseFn::kLog:
    case PointwiseFn::kLog1p:
    case PointwiseFn::kExpm1:
    case PointwiseFn::kTanh:
    case PointwiseFn::kSigmoid:
    case PointwiseFn::kErf:
    case PointwiseFn::kSin:
    case PointwiseFn::kCos:
    case PointwiseFn::kLog2:
    case PointwiseFn::kExp2:
    case PointwiseFn::kPow:
      return true;
    default:
      return false;
  }
}

template <size_t... I>
constexpr std::array<bool, sizeof...(I)> int_forms(std::index_sequence<I...>) {
  return {Pw<static_cast<PointwiseFn>(I)>::kInt...};
}
// Whether f has an integer form (host side).
bool has_int_form(PointwiseFn f) {
  static constexpr auto forms =
      int_forms(std::make_index_sequence<static_cast<size_t>(PointwiseFn::kCount)>{});
  return forms.at(static_cast<size_t>(f));
}

// Which functions a kernel carries: its group (kMath), or only kOnly when kOnly >= 0.
template <PointwiseFn F, typename acc_t, bool kMath, int kOnly>
constexpr bool kCarries = kHasForm<F, acc_t> &&
                          (kOnly >= 0 ? static_cast<int>(F) == kOnly : is_math(F) == kMath);

// r[u] = Pw<fn>::f(x[u][0], x[u][1], x[u][2], alpha, i0 + u * istep) for u < N: one switch on fn
// (the fold compiles to a jump table), the element loop inside each case.
template <typename acc_t, bool kMath, int kOnly, int N, size_t... I>
__device__ __forceinline__ void apply_fn(PointwiseFn fn, const acc_t (&x)[N][3], acc_t alpha,
                                         int64_t i0, int64_t istep, acc_t (&r)[N],
                                         std::index_sequence<I...>) {
  auto one = [&](auto tag) {
    constexpr PointwiseFn F = decltype(tag)::value;
    if constexpr (kCarries<F, acc_t, kMath, kOnly>) {
#pragma unroll
      for (int u = 0; u < N; ++u) r[u] = Pw<F>::f(x[u][0], x[u][1], x[u][2], alpha, i0 + u * istep);
    }
  };
  (void)((fn == static_cast<PointwiseFn>(I)
              ? (one(std::integral_constant<PointwiseFn, static_cast<PointwiseFn>(I)>{}), true)
              : false) ||
         ...);
}
template <typename acc_t, bool kMath, int kOnly, int N>
__device__ __forceinline__ void apply_fn(PointwiseFn fn, const acc_t (&x)[N][3], acc_t alpha,
                                         int64_t i0, int64_t istep, acc_t (&r)[N]) {
  apply_fn<acc_t, kMath, kOnly, N>(
      fn, x, alpha, i0, istep, r,
      std::make_index_sequence<static_cast<size_t>(PointwiseFn::kCount)>{});
}

// One pointwise launch: the coalesced geometry (row-major, outermost dim first) and the operands.
struct PwArgs {
  int ndim;  // coalesced dims, >= 1
  int nin;
  PointwiseFn fn;
  int64_t numel;
  int64_t shape[kMaxDims];
  int64_t out_stride[kMaxDims];
  int64_t in_stride[kMaxPwOperands][kMaxDims];  // 0 along broadcast dims and for scalars
  FastDiv div[kMaxDims];                        // by shape[d], where shape[d] <= 2^31
  void* out;
  const void* in[kMaxPwOperands];
  DType out_dtype;
  DType in_dtype[kMaxPwOperands];
  bool is_tensor[kMaxPwOperands];
  double scalar[kMaxPwOperands];
  double alpha;
};

// Operand and output dtypes the vec kernels with run-time dtypes handle: float accumulation reads
// dtypes of at most 4 bytes and writes float32, bfloat16, float16 or bool (float8 outputs have
// compile-time cast kernels; the rest goes to the nd path), double and int64 handle every dtype.
constexpr unsigned kFloatVecIn =
    eager::kNarrowFloats | eager::dmask(DType::kBool) | eager::dmask(DType::kInt32);
constexpr unsigned kFloatVecOut = eager::dmask(DType::kFloat32) | eager::dmask(DType::kBFloat16) |
                                  eager::dmask(DType::kFloat16) | eager::dmask(DType::kBool);
template <typename acc_t>
constexpr unsigned kVecIn = std::is_same_v<acc_t, float> ? kFloatVecIn : eager::kAllDtypes;
template <typename acc_t>
constexpr unsigned kVecOut = std::is_same_v<acc_t, float> ? kFloatVecOut : eager::kAllDtypes;

// The 1-D tail of a vec launch (numel % 8 elements): scalar accesses.
template <typename acc_t, bool kMath, int kOnly>
__device__ __forceinline__ void pw_tail(const PwArgs& p, int64_t i0) {
  for (int64_t i = i0; i < p.numel; ++i) {
    acc_t x[1][3];
#pragma unroll
    for (int k = 0; k < kMaxPwOperands; ++k) {
      x[0][k] = k >= p.nin       ? acc_t(0)
                : p.is_tensor[k] ? load_elem<acc_t>(p.in[k], i * p.in_stride[k][0], p.in_dtype[k])
                                 : static_cast<acc_t>(p.scalar[k]);
    }
    acc_t r[1] = {acc_t(0)};
    apply_fn<acc_t, kMath, kOnly, 1>(p.fn, x, static_cast<acc_t>(p.alpha), i, 0, r);
    store_elem<acc_t>(p.out, i, p.out_dtype, r[0]);
  }
}

// Vec path: contiguous inner dim, 8 consecutive elements per thread (see the top of the file).
// kIn: the dtype of every tensor operand, kOut: the output's; kDyn: read from p at run time.
template <typename acc_t, DType kIn, DType kOut, bool kMath, int kOnly>
__global__ void __launch_bounds__(kPwThreads) pw_vec_kernel(PwArgs p) {
  constexpr int kMaxSize = kIn != kDyn ? dsize(kIn) : std::is_same_v<acc_t, float> ? 4 : 8;
  const int64_t i0 = (int64_t(blockIdx.x) * kPwThreads + threadIdx.x) * kVec;
  if (i0 >= p.numel) return;
  if (i0 + kVec > p.numel) {  // only 1-D launches have a partial vector
    pw_tail<acc_t, kMath, kOnly>(p, i0);
    return;
  }
  const int last = p.ndim - 1;
  // Offsets of the row's first element (out: base[0], operand k: base[1 + k]): the row index split
  // over the outer dims, one multiply-high division per dim.
  int64_t col = i0, base[kMaxPwOperands + 1] = {};
  if (last) {
    uint32_t row = p.div[last].div(static_cast<uint32_t>(i0));
    col = i0 - int64_t(row) * p.shape[last];
#pragma unroll
    for (int d = kMaxDims - 2; d >= 0; --d) {
      if (d >= last) continue;
      uint32_t c = row;
      if (d > 0) {
        const uint32_t q = p.div[d].div(row);
        c = row - q * static_cast<uint32_t>(p.shape[d]);
        row = q;
      }
      base[0] += int64_t(c) * p.out_stride[d];
#pragma unroll
      for (int k = 0; k < kMaxPwOperands; ++k) base[k + 1] += int64_t(c) * p.in_stride[k][d];
    }
  }
  // Every operand's load is issued before any conversion waits on one.
  Raw8 raw[kMaxPwOperands];
#pragma unroll
  for (int k = 0; k < kMaxPwOperands; ++k) {
    if (k < p.nin && p.is_tensor[k]) {
      const DType dt = kIn == kDyn ? p.in_dtype[k] : kIn;
      const int64_t inner = p.in_stride[k][last];
      const int64_t off = col * inner + base[k + 1];
      eager::load_vec<kIn, kMaxSize>(raw[k], static_cast<const char*>(p.in[k]) + off * dsize(dt),
                                     dt, inner == 0);
    }
  }
  acc_t v[kMaxPwOperands][kVec];
#pragma unroll
  for (int k = 0; k < kMaxPwOperands; ++k) {
    if (k < p.nin && p.is_tensor[k]) {
      const DType dt = kIn == kDyn ? p.in_dtype[k] : kIn;
      if (p.in_stride[k][last] == 0) {
        eager::unpack<acc_t, kIn, kVecIn<acc_t>, 1>(raw[k], dt, v[k]);
#pragma unroll
        for (int e = 1; e < kVec; ++e) v[k][e] = v[k][0];
      } else {
        eager::unpack<acc_t, kIn, kVecIn<acc_t>, kVec>(raw[k], dt, v[k]);
      }
    } else {
      const acc_t s = k < p.nin ? static_cast<acc_t>(p.scalar[k]) : acc_t(0);
#pragma unroll
      for (int e = 0; e < kVec; ++e) v[k][e] = s;
    }
  }
  acc_t x[kVec][3], r[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) {
    r[e] = acc_t(0);
#pragma unroll
    for (int k = 0; k < kMaxPwOperands; ++k) x[e][k] = v[k][e];
  }
  apply_fn<acc_t, kMath, kOnly, kVec>(p.fn, x, static_cast<acc_t>(p.alpha), i0, 1, r);
  const DType odt = kOut == kDyn ? p.out_dtype : kOut;
  const int64_t oo = col + base[0];
  eager::pack_store<acc_t, kOut, kVecOut<acc_t>>(static_cast<char*>(p.out) + oo * dsize(odt), odt,
                                                 r);
}

// Raw bits of element `i` of a `size`-byte dtype at p (a switch on the size only).
__device__ __forceinline__ uint64_t load_bits(const void* p, int64_t i, int size) {
  switch (size) {
    case 1:
      return static_cast<const uint8_t*>(p)[i];
    case 2:
      return static_cast<const uint16_t*>(p)[i];
    case 4:
      return static_cast<const uint32_t*>(p)[i];
    default:
      return static_cast<const uint64_t*>(p)[i];
  }
}

// Element offsets of linear index i in the output (off[0]) and each operand (off[1 + k]).
template <typename index_t>
__device__ __forceinline__ void nd_offsets(const PwArgs& p, index_t i,
                                           index_t (&off)[kMaxPwOperands + 1]) {
#pragma unroll
  for (int k = 0; k <= kMaxPwOperands; ++k) off[k] = 0;
  index_t rem = i;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 1; --d) {
    if (d < p.ndim) {
      index_t q;
      if constexpr (sizeof(index_t) == 4)
        q = p.div[d].div(rem);
      else
        q = rem / static_cast<index_t>(p.shape[d]);
      const index_t c = rem - q * static_cast<index_t>(p.shape[d]);
      rem = q;
      off[0] += c * static_cast<index_t>(p.out_stride[d]);
#pragma unroll
      for (int k = 0; k < kMaxPwOperands; ++k)
        off[k + 1] += c * static_cast<index_t>(p.in_stride[k][d]);
    }
  }
  off[0] += rem * static_cast<index_t>(p.out_stride[0]);
#pragma unroll
  for (int k = 0; k < kMaxPwOperands; ++k)
    off[k + 1] += rem * static_cast<index_t>(p.in_stride[k][0]);
}

// nd path: any strides and dtypes, kPwUnroll elements per thread (elements b * 512 + u * 128 + t).
// index_t: uint32_t when every offset fits (64-bit division is several times slower), as
// PyTorch's TensorIterator does with its 32-bit indexing.
template <typename acc_t, typename index_t, bool kMath>
__global__ void __launch_bounds__(kPwThreads) pw_nd_kernel(PwArgs p) {
  constexpr int64_t kPerBlock = int64_t(kPwThreads) * kPwUnroll;
  const acc_t alpha = static_cast<acc_t>(p.alpha);
  for (int64_t b = blockIdx.x; b * kPerBlock < p.numel; b += gridDim.x) {
    const int64_t i0 = b * kPerBlock + threadIdx.x;
    index_t off[kPwUnroll][kMaxPwOperands + 1];
    bool ok[kPwUnroll];
#pragma unroll
    for (int u = 0; u < kPwUnroll; ++u) {
      ok[u] = i0 + u * kPwThreads < p.numel;
      if (ok[u]) nd_offsets<index_t>(p, static_cast<index_t>(i0 + u * kPwThreads), off[u]);
    }
    // Raw loads first (a switch on the size), then one conversion switch per operand.
    uint64_t bits[kPwUnroll][kMaxPwOperands];
#pragma unroll
    for (int k = 0; k < kMaxPwOperands; ++k)
#pragma unroll
      for (int u = 0; u < kPwUnroll; ++u) {
        bits[u][k] = 0;
        if (ok[u] && k < p.nin && p.is_tensor[k])
          bits[u][k] = load_bits(p.in[k], off[u][k + 1], dsize(p.in_dtype[k]));
      }
    acc_t x[kPwUnroll][3], r[kPwUnroll];
#pragma unroll
    for (int k = 0; k < kMaxPwOperands; ++k) {
      if (k < p.nin && p.is_tensor[k]) {
        eager::dispatch_dtype<eager::kAllDtypes>(p.in_dtype[k], [&](auto tag) {
          constexpr DType D = decltype(tag)::value;
#pragma unroll
          for (int u = 0; u < kPwUnroll; ++u) x[u][k] = eager::from_bits<acc_t, D>(bits[u][k]);
        });
      } else {
        const acc_t s = k < p.nin ? static_cast<acc_t>(p.scalar[k]) : acc_t(0);
#pragma unroll
        for (int u = 0; u < kPwUnroll; ++u) x[u][k] = s;
      }
    }
#pragma unroll
    for (int u = 0; u < kPwUnroll; ++u) r[u] = acc_t(0);
    apply_fn<acc_t, kMath, -1, kPwUnroll>(p.fn, x, alpha, i0, kPwThreads, r);
    eager::dispatch_dtype<eager::kAllDtypes>(p.out_dtype, [&](auto tag) {
      constexpr DType D = decltype(tag)::value;
#pragma unroll
      for (int u = 0; u < kPwUnroll; ++u)
        if (ok[u]) store_elem<acc_t>(p.out, off[u][0], D, r[u]);
    });
  }
}

using PwKernel = void (*)(PwArgs);

// Vec kernel with compile-time dtypes where there is one for (fn, operands, out), else the
// run-time-dtype one; nullptr where the vec kernels do not take these dtypes. `in`: the dtype of
// every tensor operand, or kDyn; `in_mask`: the set of the operands' dtypes.
template <typename acc_t>
PwKernel pick_vec_kernel(PointwiseFn fn, DType in, unsigned in_mask, DType out) {
  using D = DType;
  const bool math = is_math(fn);
  if constexpr (std::is_same_v<acc_t, float>) {
    if (in == out && out == D::kFloat32)
      return math ? &pw_vec_kernel<float, D::kFloat32, D::kFloat32, true, -1>
                  : &pw_vec_kernel<float, D::kFloat32, D::kFloat32, false, -1>;
    if (in == out && out == D::kBFloat16)
      return math ? &pw_vec_kernel<float, D::kBFloat16, D::kBFloat16, true, -1>
                  : &pw_vec_kernel<float, D::kBFloat16, D::kBFloat16, false, -1>;
    if (fn == PointwiseFn::kCopy) {
      constexpr int C = static_cast<int>(PointwiseFn::kCopy);
      if (in == D::kBFloat16 && out == D::kFloat32)
        return &pw_vec_kernel<float, D::kBFloat16, D::kFloat32, false, C>;
      if (in == D::kFloat32 && out == D::kBFloat16)
        return &pw_vec_kernel<float, D::kFloat32, D::kBFloat16, false, C>;
      if (in == D::kFloat16 && out == D::kFloat32)
        return &pw_vec_kernel<float, D::kFloat16, D::kFloat32, false, C>;
      if (in == D::kFloat32 && out == D::kFloat16)
        return &pw_vec_kernel<float, D::kFloat32, D::kFloat16, false, C>;
      if (in == D::kFloat32 && out == D::kFloat8E4M3)
        return &pw_vec_kernel<float, D::kFloat32, D::kFloat8E4M3, false, C>;
      if (in == D::kBFloat16 && out == D::kFloat8E4M3)
        return &pw_vec_kernel<float, D::kBFloat16, D::kFloat8E4M3, false, C>;
    }
  }
  if ((in_mask & ~kVecIn<acc_t>) != 0 || (eager::dmask(out) & kVecOut<acc_t>) == 0) return nullptr;
  // int64 too: pow is in the math group and has an integer form (the other math functions
  // have none, so the int64 math kernels carry pow alone).
  return math ? &pw_vec_kernel<acc_t, kDyn, kDyn, true, -1>
              : &pw_vec_kernel<acc_t, kDyn, kDyn, false, -1>;
}

template <typename acc_t>
PwKernel pick_nd_kernel(PointwiseFn fn, bool small) {
  if (is_math(fn))  // int64 too: pow (see pick_vec_kernel)
    return small ? &pw_nd_kernel<acc_t, uint32_t, true> : &pw_nd_kernel<acc_t, int64_t, true>;
  return small ? &pw_nd_kernel<acc_t, uint32_t, false> : &pw_nd_kernel<acc_t, int64_t, false>;
}

// Where the vec path applies to p (coalesced), dtypes aside: see the top of the file.
bool vec_layout(const PwArgs& p) {
  const int last = p.ndim - 1;
  if (p.out_stride[last] != 1) return false;
  if (last > 0 && (p.shape[last] % kVec != 0 || p.numel >= kMax32)) return false;
  // Every row starts on a vector boundary: the base pointer and every outer stride aligned.
  auto rows_aligned = [&](const void* ptr, const int64_t* stride, int al, int sz) {
    if (!aligned(ptr, al)) return false;
    for (int d = 0; d < last; ++d)
      if ((stride[d] * sz) % al != 0) return false;
    return true;
  };
  const int osz = dsize(p.out_dtype);
  if (!rows_aligned(p.out, p.out_stride, eager::vec_align(osz), osz)) return false;
  for (int k = 0; k < p.nin; ++k) {
    if (!p.is_tensor[k]) continue;
    const int sz = dsize(p.in_dtype[k]);
    if (!aligned(p.in[k], sz)) return false;
    const int64_t inner = p.in_stride[k][last];
    if (inner == 0) continue;  // one element per vector: element alignment is enough
    if (inner != 1 || !rows_aligned(p.in[k], p.in_stride[k], eager::vec_align(sz), sz))
      return false;
  }
  return true;
}

// One pointwise launch, prepared: kernel, grid and arguments. `kernel` is null when there is
// nothing to do (an empty output).
struct PwPlan {
  PwKernel kernel = nullptr;
  unsigned blocks = 0;
  bool vec = false;
  PwArgs p{};

  void launch(cudaStream_t stream) const {
    if (!kernel) return;
    kernel<<<blocks, kPwThreads, 0, stream>>>(p);
    REPLAY_CUDA_LAUNCH(vec ? "pw_vec_kernel" : "pw_nd_kernel");
  }
};

PwPlan plan_pointwise(PointwiseFn fn, const DeviceTensor& out, const PwOperand* in, size_t nin,
                      double alpha, DType compute) {
  PwPlan plan;
  if (nin > kMaxPwOperands)
    throw std::invalid_argument("pointwise kernel: " + std::to_string(nin) +
                                " operands (at most 3)");
  int64_t numel = 1;
  for (int i = 0; i < out.ndim; ++i) numel *= out.shape[i];
  if (numel == 0) return plan;
  const bool f64 = compute == DType::kFloat64;
  const bool integral =
      compute == DType::kInt64 || compute == DType::kInt32 || compute == DType::kBool;
  if (static_cast<size_t>(fn) >= static_cast<size_t>(PointwiseFn::kCount) ||
      (integral && !has_int_form(fn)))
    throw std::invalid_argument("pointwise function " + std::to_string(static_cast<int>(fn)) +
                                " has no form for compute dtype " +
                                std::string(dtype_name(compute)));

  PwArgs& p = plan.p;
  p.nin = static_cast<int>(nin);
  p.fn = fn;
  p.alpha = alpha;
  p.numel = numel;
  p.out = out.ptr;
  p.out_dtype = out.dtype;
  bool small = fits_32bit(out);
  int64_t stride[1 + kMaxPwOperands][kMaxDims] = {};
  for (int d = 0; d < out.ndim; ++d) {
    p.shape[d] = out.shape[d];
    stride[0][d] = out.stride[d];
  }
  DType common = kDyn;  // the dtype of every tensor operand, if they share one
  unsigned in_mask = 0;
  for (size_t k = 0; k < nin; ++k) {
    p.is_tensor[k] = in[k].is_tensor;
    p.scalar[k] = in[k].scalar;
    if (!in[k].is_tensor) continue;
    const DeviceTensor& t = in[k].t;
    p.in[k] = t.ptr;
    p.in_dtype[k] = t.dtype;
    small = small && fits_32bit(t);
    const int lead = out.ndim - t.ndim;  // broadcast: missing leading dims and size-1 dims
    for (int d = 0; d < out.ndim; ++d) {
      const int j = d - lead;
      stride[1 + k][d] = (j < 0 || t.shape[j] == 1) ? 0 : t.stride[j];
    }
    common = in_mask == 0 || common == t.dtype ? t.dtype : kDyn;
    in_mask |= eager::dmask(t.dtype);
  }
  int ndim = out.ndim;
  if (fn != PointwiseFn::kIota)
    ndim = reorder_dims(ndim, p.shape, stride, 1 + static_cast<int>(nin));
  p.ndim = coalesce(ndim, p.shape, stride, 1 + static_cast<int>(nin));
  for (int d = 0; d < p.ndim; ++d) {
    p.out_stride[d] = stride[0][d];
    for (size_t k = 0; k < nin; ++k) p.in_stride[k][d] = stride[1 + k][d];
    if (p.shape[d] <= kMax32) p.div[d] = FastDiv(static_cast<uint32_t>(p.shape[d]));
  }

  PwKernel kernel = nullptr;
  if (vec_layout(p))
    kernel = f64        ? pick_vec_kernel<double>(fn, common, in_mask, out.dtype)
             : integral ? pick_vec_kernel<int64_t>(fn, common, in_mask, out.dtype)
                        : pick_vec_kernel<float>(fn, common, in_mask, out.dtype);
  const bool vec = kernel != nullptr;
  if (!vec)
    kernel = f64        ? pick_nd_kernel<double>(fn, small)
             : integral ? pick_nd_kernel<int64_t>(fn, small)
                        : pick_nd_kernel<float>(fn, small);
  const int64_t blocks =
      vec ? ceil_div(numel, int64_t(kVec) * kPwThreads)
          : std::min<int64_t>(ceil_div(numel, int64_t(kPwThreads) * kPwUnroll), int64_t(1) << 30);
  plan.kernel = kernel;
  plan.blocks = static_cast<unsigned>(blocks);
  plan.vec = vec;
  return plan;
}

void pointwise(PointwiseFn fn, const DeviceTensor& out, const PwOperand* in, size_t nin,
               double alpha, DType compute, cudaStream_t stream) {
  plan_pointwise(fn, out, in, nin, alpha, compute).launch(stream);
}

// ------------------------------------------------------------------------------------------------
// Reductions: the generic path (one block per output)

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
        if (p.op == ReduceFn::kVarMean && p.out1) store_elem<acc_t>(p.out1, o1, p.out1_dtype, mean);
      }
    } else if (threadIdx.x == 0) {
      const acc_t v = p.op == ReduceFn::kMean ? total.v / acc_t(p.red_numel) : total.v;
      store_elem<acc_t>(p.out0, o0, p.out0_dtype, v);
      if (p.op == ReduceFn::kMaxDim && p.out1)
        store_elem<int64_t>(p.out1, o1, p.out1_dtype, total.idx == INT64_MAX ? 0 : total.idx);
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Reductions: the inner (contiguous rows) and outer (columns) paths

// What a kernel accumulates: kVar is the fused two-pass variance of a whole row (inner path, not
// split); kSqDev the sum of squared deviations around a mean computed by an earlier launch.
enum class RK { kSum, kProd, kMax, kMin, kArgMax, kVar, kSqDev };

// max / min that return NaN when either operand is NaN (PTX max.NaN / min.NaN, sm_80+).
__device__ __forceinline__ float max_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
__device__ __forceinline__ float min_nan(float a, float b) {
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

template <RK K, typename acc_t>
struct RedOp {
  __device__ static __forceinline__ RedVal<acc_t> identity() {
    if constexpr (K == RK::kProd)
      return {acc_t(1), 0};
    else if constexpr (K == RK::kMax || K == RK::kArgMax)
      return {acc_t(-INFINITY), INT64_MAX};
    else if constexpr (K == RK::kMin)
      return {acc_t(INFINITY), INT64_MAX};
    else
      return {acc_t(0), 0};
  }
  // The same rules as red_combine; each is independent of the order of its operands' arrival
  // (up to the sign of zero and NaN payloads for amax/amin).
  __device__ static __forceinline__ RedVal<acc_t> combine(RedVal<acc_t> a, RedVal<acc_t> b) {
    if constexpr (K == RK::kArgMax) {
      const bool an = is_nan(a.v), bn = is_nan(b.v);
      if (an || bn) return an && bn ? (a.idx <= b.idx ? a : b) : (an ? a : b);
      if (a.v != b.v) return a.v > b.v ? a : b;
      return a.idx <= b.idx ? a : b;
    } else if constexpr (K == RK::kMax && std::is_same_v<acc_t, float>) {
      return {max_nan(a.v, b.v), 0};  // one instruction: the compare-and-select chain made
                                      // amax of bfloat16 ALU-bound
    } else if constexpr (K == RK::kMin && std::is_same_v<acc_t, float>) {
      return {min_nan(a.v, b.v), 0};
    } else if constexpr (K == RK::kMax) {
      if (is_nan(a.v)) return a;
      if (is_nan(b.v)) return b;
      return b.v > a.v ? b : a;
    } else if constexpr (K == RK::kMin) {
      if (is_nan(a.v)) return a;
      if (is_nan(b.v)) return b;
      return b.v < a.v ? b : a;
    } else if constexpr (K == RK::kProd) {
      return {a.v * b.v, 0};
    } else {
      return {a.v + b.v, 0};
    }
  }
};

// An input element as the accumulator sees it: its value and index, or its squared deviation.
template <RK K, typename acc_t>
__device__ __forceinline__ RedVal<acc_t> lift(acc_t x, int64_t i, acc_t mean) {
  if constexpr (K == RK::kSqDev) {
    const acc_t d = x - mean;
    return {d * d, 0};
  } else {
    return {x, i};
  }
}

// Input dtypes of the inner and outer paths: the narrow floats under float accumulation; under
// double accumulation float64, the integers, bool and float32 (a narrow float with a float64
// output takes the generic path).
constexpr unsigned kRedDoubleIn = eager::dmask(DType::kFloat64) | eager::dmask(DType::kInt64) |
                                  eager::dmask(DType::kInt32) | eager::dmask(DType::kBool) |
                                  eager::dmask(DType::kFloat32);
template <typename acc_t>
constexpr unsigned kRedIn = std::is_same_v<acc_t, float> ? eager::kNarrowFloats : kRedDoubleIn;

struct FastRedArgs {
  const void* in;
  DType in_dtype;
  ReduceFn op;  // what to write: kSum also for the first launch of a split variance
  double correction;
  int64_t red_numel;  // elements reduced per output
  void* out0;
  DType out0_dtype;
  void* out1;
  DType out1_dtype;
  // Kept dims, outermost first: every kept dim (inner path), the kept dims but the columns (outer).
  int nkept;
  int64_t kshape[kMaxDims], k_in[kMaxDims], k_o0[kMaxDims], k_o1[kMaxDims];
  int64_t rows;  // inner: outputs; outer: product of kshape
  // outer path: columns (stride 1 in the input), column strides of the outputs, vector width,
  // column strips per kept index; the reduced dims: r_in0 (and, nred == 2, rshape1, r_in1).
  int64_t cols, c_o0, c_o1, strips;
  int vc;
  int nred;
  int64_t rshape1, r_in0, r_in1;
  FastDiv rdiv;  // by rshape1
  // split over gridDim.y: vectors (inner) or rows (outer) per split
  int splits;
  int64_t per_split;
  int64_t out_count;   // outputs: partials are [split][out_count]
  void* ws_v;          // acc_t partial values
  int64_t* ws_i;       // partial indices (kArgMax)
  unsigned* counters;  // one per blockIdx.x, 0 between launches
  const void* means;   // kSqDev: acc_t sums per output (linear), from the first launch
};

__device__ __forceinline__ void kept_offsets(const FastRedArgs& p, int64_t o, int64_t& in,
                                             int64_t& o0, int64_t& o1) {
  in = o0 = o1 = 0;
  for (int d = p.nkept - 1; d >= 0; --d) {
    int64_t c = o;
    if (d > 0) {
      const int64_t q = o / p.kshape[d];
      c = o - q * p.kshape[d];
      o = q;
    }
    in += c * p.k_in[d];
    o0 += c * p.k_o0[d];
    o1 += c * p.k_o1[d];
  }
}

// The result of one output: out0 (and out1: the mean of var_mean, the index of max.dim). Not
// inlined: the stores switch over every dtype, and the outer path writes up to 8 columns per
// thread.
template <typename acc_t>
__device__ __noinline__ void store_result(ReduceFn op, int64_t n, double correction, void* out0,
                                          DType out0_dtype, int64_t o0, void* out1,
                                          DType out1_dtype, int64_t o1, acc_t v, int64_t idx,
                                          acc_t mean) {
  switch (op) {
    case ReduceFn::kVar:
    case ReduceFn::kVarMean: {
      const acc_t denom = acc_t(n) - acc_t(correction);
      store_elem<acc_t>(out0, o0, out0_dtype, v / (denom > acc_t(0) ? denom : acc_t(0)));
      if (op == ReduceFn::kVarMean && out1) store_elem<acc_t>(out1, o1, out1_dtype, mean);
      return;
    }
    case ReduceFn::kMean:
      store_elem<acc_t>(out0, o0, out0_dtype, v / acc_t(n));
      return;
    case ReduceFn::kMaxDim:
      store_elem<acc_t>(out0, o0, out0_dtype, v);
      if (out1) store_elem<int64_t>(out1, o1, out1_dtype, idx == INT64_MAX ? 0 : idx);
      return;
    default:
      store_elem<acc_t>(out0, o0, out0_dtype, v);
      return;
  }
}

template <typename acc_t>
__device__ __forceinline__ void write_result(const FastRedArgs& p, int64_t o0, int64_t o1,
                                             RedVal<acc_t> t, acc_t mean) {
  store_result<acc_t>(p.op, p.red_numel, p.correction, p.out0, p.out0_dtype, o0, p.out1,
                      p.out1_dtype, o1, t.v, t.idx, mean);
}

template <RK K, typename acc_t>
__device__ __forceinline__ void store_partial(const FastRedArgs& p, int64_t o, RedVal<acc_t> v) {
  const int64_t at = int64_t(blockIdx.y) * p.out_count + o;
  static_cast<acc_t*>(p.ws_v)[at] = v.v;
  if constexpr (K == RK::kArgMax) p.ws_i[at] = v.idx;
}

template <RK K, typename acc_t>
__device__ __forceinline__ RedVal<acc_t> load_partial(const FastRedArgs& p, int64_t split,
                                                      int64_t o) {
  const int64_t at = split * p.out_count + o;  // written by other blocks: read through L2
  RedVal<acc_t> v{__ldcg(static_cast<const acc_t*>(p.ws_v) + at), 0};
  if constexpr (K == RK::kArgMax) v.idx = __ldcg(reinterpret_cast<const long long*>(p.ws_i) + at);
  return v;
}

// After each block stored its partials: true in the last block of this blockIdx.x to arrive
// (which then combines all of them), after resetting the counter for the next launch.
__device__ __forceinline__ bool last_split_block(unsigned* counter) {
  __shared__ bool am_last;
  __threadfence();  // this block's partials are visible before its arrival is counted
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    const unsigned prev = atomicAdd(counter, 1u);
    am_last = prev == gridDim.y - 1;
    if (am_last) *counter = 0;  // every block of the group has arrived
  }
  __syncthreads();
  const bool last = am_last;
  if (last) __threadfence();
  return last;
}

// Reduce over the bx threads of a row (threadIdx.x; bx a power of two); every thread of the row
// gets the result, combined in a fixed order. Called by every thread of the block.
template <RK K, typename acc_t>
__device__ __forceinline__ RedVal<acc_t> group_reduce(RedVal<acc_t> v, int bx,
                                                      RedVal<acc_t>* smem) {
  using Op = RedOp<K, acc_t>;
  const int width = bx < 32 ? bx : 32;
  for (int o = width / 2; o > 0; o >>= 1) {
    RedVal<acc_t> w;
    w.v = __shfl_xor_sync(0xffffffffu, v.v, o);
    w.idx =
        K == RK::kArgMax
            ? static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(v.idx), o))
            : 0;
    v = Op::combine(v, w);
  }
  if (bx > 32) {
    const int wpr = bx / 32, at = threadIdx.y * wpr;
    __syncthreads();  // smem may still be read by a previous call
    if (threadIdx.x % 32 == 0) smem[at + threadIdx.x / 32] = v;
    __syncthreads();
    v = smem[at];
    for (int i = 1; i < wpr; ++i) v = Op::combine(v, smem[at + i]);
  }
  return v;
}

// Where a row's vectors are: `head` scalar elements up to the first 16-byte aligned address,
// nvec vectors, scalar elements from tail0; this split's vectors [j0, j1).
struct RowSplit {
  int64_t head, nvec, tail0, j0, j1;
  bool first, last;
};

template <int S>
__device__ __forceinline__ RowSplit row_split(const FastRedArgs& p, const char* base, bool valid) {
  constexpr int A = eager::vec_align(S);
  RowSplit r{};
  const int64_t L = p.red_numel;
  if (valid) {
    r.head = ((A - static_cast<int64_t>(reinterpret_cast<uintptr_t>(base) % A)) % A) / S;
    if (r.head > L) r.head = L;
    r.nvec = (L - r.head) / kVec;
  }
  r.tail0 = r.head + r.nvec * kVec;
  r.j0 = int64_t(blockIdx.y) * p.per_split;
  r.j1 = r.j0 + p.per_split < r.nvec ? r.j0 + p.per_split : r.nvec;
  r.first = blockIdx.y == 0;
  r.last = blockIdx.y == gridDim.y - 1;
  return r;
}

// One row (or this split of it), every kind but kVar.
template <typename acc_t, RK K, DType D>
__device__ __forceinline__ RedVal<acc_t> inner_reduce(const FastRedArgs& p, bool valid,
                                                      int64_t in_off, int tx, int bx,
                                                      RedVal<acc_t>* smem, acc_t mean) {
  using Op = RedOp<K, acc_t>;
  constexpr int S = dsize(D);
  const char* base = static_cast<const char*>(p.in) + in_off * S;
  const RowSplit rs = row_split<S>(p, base, valid);
  RedVal<acc_t> acc[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) acc[e] = Op::identity();
  if (valid) {
    if (rs.first)
      for (int64_t i = tx; i < rs.head; i += bx)
        acc[0] = Op::combine(acc[0], lift<K>(load_elem<acc_t>(base, i, D), i, mean));
    // Batches of kB vectors per thread, every load of a batch issued before any is used
    // (predicated at the end of the range): 64-128 bytes in flight per thread.
    constexpr int kB = S <= 2 ? 8 : S == 4 ? 4 : 2;
    for (int64_t jb = rs.j0 + tx; jb < rs.j1; jb += int64_t(kB) * bx) {
      Raw8 r[kB];
#pragma unroll
      for (int u = 0; u < kB; ++u) {
        const int64_t j = jb + int64_t(u) * bx;
        if (j < rs.j1) eager::load_bytes<S * kVec>(r[u], base + (rs.head + j * kVec) * S);
      }
#pragma unroll
      for (int u = 0; u < kB; ++u) {
        const int64_t j = jb + int64_t(u) * bx;
        if (j < rs.j1) {
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            const acc_t x = eager::from_bits<acc_t, D>(eager::get_bits<S>(r[u], e));
            acc[e] = Op::combine(acc[e], lift<K>(x, rs.head + j * kVec + e, mean));
          }
        }
      }
    }
    if (rs.last)
      for (int64_t i = rs.tail0 + tx; i < p.red_numel; i += bx)
        acc[0] = Op::combine(acc[0], lift<K>(load_elem<acc_t>(base, i, D), i, mean));
  }
  RedVal<acc_t> t = acc[0];
#pragma unroll
  for (int e = 1; e < kVec; ++e) t = Op::combine(t, acc[e]);
  return group_reduce<K>(t, bx, smem);
}

// Vectors per thread the fused variance keeps in registers (the host sizes bx to fit a row in it).
template <typename acc_t>
constexpr int kVarCache = sizeof(acc_t) == 4 ? 8 : 2;

// The variance of a whole row, reading it once: the first pass keeps up to kC vectors per thread
// in registers, the second takes the squared deviations from them (what does not fit is read
// again). Same arithmetic as the generic kernel: mean = sum / N, m2 = sum((x - mean)^2).
template <typename acc_t, DType D>
__device__ __forceinline__ void inner_var(const FastRedArgs& p, bool valid, int64_t in_off, int tx,
                                          int bx, RedVal<acc_t>* smem, RedVal<acc_t>& total,
                                          acc_t& mean) {
  constexpr int S = dsize(D);
  constexpr int kC = kVarCache<acc_t>;
  const char* base = static_cast<const char*>(p.in) + in_off * S;
  const RowSplit rs = row_split<S>(p, base, valid);
  const int64_t L = p.red_numel;
  // The cached vectors stay packed (4 registers per vector of 16-bit elements) and are widened
  // in each pass: fewer registers, more rows in flight.
  Raw8 c[kC];
  acc_t s[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) s[e] = acc_t(0);
  if (valid) {
#pragma unroll
    for (int k = 0; k < kC; ++k) {
      const int64_t j = tx + int64_t(k) * bx;
      if (j < rs.nvec) eager::load_bytes<S * kVec>(c[k], base + (rs.head + j * kVec) * S);
    }
#pragma unroll
    for (int k = 0; k < kC; ++k) {
      const int64_t j = tx + int64_t(k) * bx;
      if (j < rs.nvec) {
#pragma unroll
        for (int e = 0; e < kVec; ++e)
          s[e] += eager::from_bits<acc_t, D>(eager::get_bits<S>(c[k], e));
      }
    }
    for (int64_t j = tx + int64_t(kC) * bx; j < rs.nvec; j += bx) {
      Raw8 q;
      eager::load_bytes<S * kVec>(q, base + (rs.head + j * kVec) * S);
#pragma unroll
      for (int e = 0; e < kVec; ++e) s[e] += eager::from_bits<acc_t, D>(eager::get_bits<S>(q, e));
    }
    for (int64_t i = tx; i < rs.head; i += bx) s[0] += load_elem<acc_t>(base, i, D);
    for (int64_t i = rs.tail0 + tx; i < L; i += bx) s[0] += load_elem<acc_t>(base, i, D);
  }
  acc_t sum = s[0];
#pragma unroll
  for (int e = 1; e < kVec; ++e) sum += s[e];
  const acc_t mu = group_reduce<RK::kSum>(RedVal<acc_t>{sum, 0}, bx, smem).v / acc_t(L);
#pragma unroll
  for (int e = 0; e < kVec; ++e) s[e] = acc_t(0);
  if (valid) {
#pragma unroll
    for (int k = 0; k < kC; ++k) {
      const int64_t j = tx + int64_t(k) * bx;
      if (j < rs.nvec) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          const acc_t d = eager::from_bits<acc_t, D>(eager::get_bits<S>(c[k], e)) - mu;
          s[e] += d * d;
        }
      }
    }
    for (int64_t j = tx + int64_t(kC) * bx; j < rs.nvec; j += bx) {
      Raw8 q;
      eager::load_bytes<S * kVec>(q, base + (rs.head + j * kVec) * S);
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const acc_t d = eager::from_bits<acc_t, D>(eager::get_bits<S>(q, e)) - mu;
        s[e] += d * d;
      }
    }
    for (int64_t i = tx; i < rs.head; i += bx) {
      const acc_t d = load_elem<acc_t>(base, i, D) - mu;
      s[0] += d * d;
    }
    for (int64_t i = rs.tail0 + tx; i < L; i += bx) {
      const acc_t d = load_elem<acc_t>(base, i, D) - mu;
      s[0] += d * d;
    }
  }
  acc_t m2 = s[0];
#pragma unroll
  for (int e = 1; e < kVec; ++e) m2 += s[e];
  total = group_reduce<RK::kSum>(RedVal<acc_t>{m2, 0}, bx, smem);
  mean = mu;
}

// Inner path: block (bx, 256 / bx), row blockIdx.x * blockDim.y + threadIdx.y, split blockIdx.y.
template <typename acc_t, RK K>
__global__ void __launch_bounds__(256) inner_kernel(FastRedArgs p) {
  using Op = RedOp<K, acc_t>;
  __shared__ RedVal<acc_t> smem[32];
  const int tx = threadIdx.x, bx = blockDim.x;
  const int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool valid = row < p.rows;
  int64_t in_off = 0, o0 = 0, o1 = 0;
  if (valid) kept_offsets(p, row, in_off, o0, o1);
  RedVal<acc_t> total = Op::identity();
  acc_t mean = acc_t(0);
  if constexpr (K == RK::kSqDev) {
    if (valid) mean = static_cast<const acc_t*>(p.means)[row] / acc_t(p.red_numel);
  }
  eager::dispatch_dtype<kRedIn<acc_t>>(p.in_dtype, [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    if constexpr (K == RK::kVar)
      inner_var<acc_t, D>(p, valid, in_off, tx, bx, smem, total, mean);
    else
      total = inner_reduce<acc_t, K, D>(p, valid, in_off, tx, bx, smem, mean);
  });
  if (p.splits > 1) {
    if (tx == 0 && valid) store_partial<K>(p, row, total);
    if (!last_split_block(&p.counters[blockIdx.x])) return;
    RedVal<acc_t> t = Op::identity();
    if (valid)
      for (int q = tx; q < p.splits; q += bx) t = Op::combine(t, load_partial<K, acc_t>(p, q, row));
    total = group_reduce<K>(t, bx, smem);
  }
  if (tx == 0 && valid) write_result(p, o0, o1, total, mean);
}

// Combine the by rows of partials (threadIdx.y) of each column in shared memory by a fixed tree;
// the result is in the threads of threadIdx.y == 0. All VC columns of a thread go through the
// tree together (smem holds VC * blockDim.x * blockDim.y entries, laid out [e][ty][tx] so a warp's
// accesses are consecutive): log2(by) + 1 barriers, not VC times as many. Per column the order of
// the combinations is the same tree as one column at a time.
template <RK K, typename acc_t, int VC>
__device__ __forceinline__ void col_reduce(RedVal<acc_t> (&acc)[VC], RedVal<acc_t>* smem) {
  using Op = RedOp<K, acc_t>;
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
  const int plane = bx * by;
#pragma unroll
  for (int e = 0; e < VC; ++e) smem[e * plane + ty * bx + tx] = acc[e];
  __syncthreads();
  for (int h = by / 2; h > 0; h >>= 1) {
    if (ty < h)
#pragma unroll
      for (int e = 0; e < VC; ++e) {
        RedVal<acc_t>* a = smem + e * plane + ty * bx + tx;
        *a = Op::combine(*a, a[h * bx]);
      }
    __syncthreads();
  }
  if (ty == 0)
#pragma unroll
    for (int e = 0; e < VC; ++e) acc[e] = smem[e * plane + tx];
  __syncthreads();
}

__device__ __forceinline__ int64_t outer_row_offset(const FastRedArgs& p, int64_t r) {
  if (p.nred == 1) return r * p.r_in0;
  const int64_t q = p.rdiv.div(static_cast<uint32_t>(r));
  return q * p.r_in0 + (r - q * p.rshape1) * p.r_in1;
}

// Columns per thread on the outer path's vector form: 16 bytes (8 bytes for 1-byte dtypes).
__host__ __device__ constexpr int outer_vec(DType t) {
  return dsize(t) >= 2 ? 16 / dsize(t) : 8;
}

template <typename acc_t, RK K, DType D, int VC>
__device__ __forceinline__ void outer_body(const FastRedArgs& p, RedVal<acc_t>* smem) {
  using Op = RedOp<K, acc_t>;
  constexpr int S = dsize(D);
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
  const int64_t ko = blockIdx.x / p.strips, strip = blockIdx.x - ko * p.strips;
  const int64_t c0 = (strip * bx + tx) * VC;
  const bool valid = c0 < p.cols;  // VC divides cols
  int64_t in_off, o0, o1;
  kept_offsets(p, ko, in_off, o0, o1);
  in_off += c0;
  o0 += c0 * p.c_o0;
  o1 += c0 * p.c_o1;
  const int64_t olin = ko * p.cols + c0;  // linear output index: partials, means
  const char* base = static_cast<const char*>(p.in) + in_off * S;
  acc_t mean[VC];
#pragma unroll
  for (int e = 0; e < VC; ++e) mean[e] = acc_t(0);
  if constexpr (K == RK::kSqDev) {
    if (valid)
#pragma unroll
      for (int e = 0; e < VC; ++e)
        mean[e] = static_cast<const acc_t*>(p.means)[olin + e] / acc_t(p.red_numel);
  }
  RedVal<acc_t> acc[VC];
#pragma unroll
  for (int e = 0; e < VC; ++e) acc[e] = Op::identity();
  const int64_t r0 = int64_t(blockIdx.y) * p.per_split;
  const int64_t r1 = r0 + p.per_split < p.red_numel ? r0 + p.per_split : p.red_numel;
  if (valid) {
    // Batches of kB rows per thread, every load of a batch issued before any is used.
    constexpr int kB = 8;
    for (int64_t rb = r0 + ty; rb < r1; rb += int64_t(kB) * by) {
      Raw8 raw[kB];
#pragma unroll
      for (int u = 0; u < kB; ++u) {
        const int64_t r = rb + int64_t(u) * by;
        if (r < r1) eager::load_bytes<S * VC>(raw[u], base + outer_row_offset(p, r) * S);
      }
#pragma unroll
      for (int u = 0; u < kB; ++u) {
        const int64_t r = rb + int64_t(u) * by;
        if (r < r1) {
#pragma unroll
          for (int e = 0; e < VC; ++e) {
            const acc_t x = eager::from_bits<acc_t, D>(eager::get_bits<S>(raw[u], e));
            acc[e] = Op::combine(acc[e], lift<K>(x, r, mean[e]));
          }
        }
      }
    }
  }
  col_reduce<K>(acc, smem);
  if (p.splits > 1) {
    if (ty == 0 && valid)
#pragma unroll
      for (int e = 0; e < VC; ++e) store_partial<K>(p, olin + e, acc[e]);
    if (!last_split_block(&p.counters[blockIdx.x])) return;
#pragma unroll
    for (int e = 0; e < VC; ++e) acc[e] = Op::identity();
    // The partials of splits ty, ty + by, ... in that order, kP splits' loads issued before any
    // is combined (one L2 round trip per kP splits, not per split).
    if (valid) {
      constexpr int kP = VC >= 8 ? 4 : 8;
      for (int q0 = ty; q0 < p.splits; q0 += kP * by) {
        RedVal<acc_t> part[kP][VC];
#pragma unroll
        for (int u = 0; u < kP; ++u) {
          const int q = q0 + u * by;
#pragma unroll
          for (int e = 0; e < VC; ++e)
            part[u][e] = q < p.splits ? load_partial<K, acc_t>(p, q, olin + e) : Op::identity();
        }
#pragma unroll
        for (int u = 0; u < kP; ++u)
          if (q0 + u * by < p.splits)
#pragma unroll
            for (int e = 0; e < VC; ++e) acc[e] = Op::combine(acc[e], part[u][e]);
      }
    }
    col_reduce<K>(acc, smem);
  }
  if (ty == 0 && valid)
#pragma unroll
    for (int e = 0; e < VC; ++e) write_result(p, o0 + e * p.c_o0, o1 + e * p.c_o1, acc[e], mean[e]);
}

// Outer path: block (bx, by), columns [(strip * bx + threadIdx.x) * vc, + vc) of kept index
// blockIdx.x / strips, rows threadIdx.y + k * by of split blockIdx.y.
template <typename acc_t, RK K>
__global__ void __launch_bounds__(256) outer_kernel(FastRedArgs p) {
  __shared__ RedVal<acc_t> smem[256 * 8];  // col_reduce: VC <= 8 columns of 256 threads
  eager::dispatch_dtype<kRedIn<acc_t>>(p.in_dtype, [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    if (p.vc == 1)
      outer_body<acc_t, K, D, 1>(p, smem);
    else
      outer_body<acc_t, K, D, outer_vec(D)>(p, smem);
  });
}

// ------------------------------------------------------------------------------------------------
// Workspace of the split reductions (see the top of the file).

constexpr int64_t kMaxCounters = 16384;  // column/row groups a split reduction may have

size_t align_up(size_t n) {
  return (n + 255) / 256 * 256;
}

// ------------------------------------------------------------------------------------------------
// Reductions: host side

// Kept and reduced dims of a reduction, size-1 dims dropped, each group coalesced.
struct RedGeom {
  int nk = 0, nr = 0;
  int64_t ks[kMaxDims], kin[kMaxDims], ko0[kMaxDims], ko1[kMaxDims];
  int64_t rs[kMaxDims], rin[kMaxDims];
  int64_t red_numel = 1, out_numel = 1;
};

// Merge adjacent entries i-1, i of n views (strides[v][.]) over `shape` where
// strides[v][i-1] == shape[i] * strides[v][i] for every view.
int merge_dims(int n, int64_t* shape, int64_t** strides, int nviews) {
  if (n == 0) return 0;
  int r = 0;
  for (int d = 1; d < n; ++d) {
    bool merge = true;
    for (int v = 0; v < nviews && merge; ++v) merge = strides[v][r] == shape[d] * strides[v][d];
    if (merge) {
      shape[r] *= shape[d];
      for (int v = 0; v < nviews; ++v) strides[v][r] = strides[v][d];
    } else {
      ++r;
      shape[r] = shape[d];
      for (int v = 0; v < nviews; ++v) strides[v][r] = strides[v][d];
    }
  }
  return r + 1;
}

RedGeom reduction_geometry(const DeviceTensor& in, const std::vector<int64_t>& dims,
                           const DeviceTensor& out0, const DeviceTensor* out1) {
  RedGeom g;
  const bool keepdim = out0.ndim == in.ndim;
  int od = 0;
  for (int d = 0; d < in.ndim; ++d) {
    const bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (reduced) {
      g.red_numel *= in.shape[d];
      if (in.shape[d] != 1) {
        g.rs[g.nr] = in.shape[d];
        g.rin[g.nr++] = in.stride[d];
      }
      if (keepdim) ++od;
    } else {
      g.out_numel *= in.shape[d];
      if (in.shape[d] != 1) {
        g.ks[g.nk] = in.shape[d];
        g.kin[g.nk] = in.stride[d];
        g.ko0[g.nk] = out0.stride[od];
        g.ko1[g.nk] = out1 ? out1->stride[od] : 0;
        ++g.nk;
      }
      ++od;
    }
  }
  int64_t* kst[3] = {g.kin, g.ko0, g.ko1};
  g.nk = merge_dims(g.nk, g.ks, kst, 3);
  int64_t* rst[1] = {g.rin};
  g.nr = merge_dims(g.nr, g.rs, rst, 1);
  return g;
}

RK kind_of(ReduceFn op) {
  switch (op) {
    case ReduceFn::kProd:
      return RK::kProd;
    case ReduceFn::kAmax:
      return RK::kMax;
    case ReduceFn::kAmin:
      return RK::kMin;
    case ReduceFn::kMaxDim:
      return RK::kArgMax;
    case ReduceFn::kVar:
    case ReduceFn::kVarMean:
      return RK::kVar;
    default:
      return RK::kSum;
  }
}

using RedKernel = void (*)(FastRedArgs);

template <typename acc_t>
RedKernel inner_kernel_of(RK k) {
  switch (k) {
    case RK::kSum:
      return &inner_kernel<acc_t, RK::kSum>;
    case RK::kProd:
      return &inner_kernel<acc_t, RK::kProd>;
    case RK::kMax:
      return &inner_kernel<acc_t, RK::kMax>;
    case RK::kMin:
      return &inner_kernel<acc_t, RK::kMin>;
    case RK::kArgMax:
      return &inner_kernel<acc_t, RK::kArgMax>;
    case RK::kVar:
      return &inner_kernel<acc_t, RK::kVar>;
    case RK::kSqDev:
      return &inner_kernel<acc_t, RK::kSqDev>;
  }
  return nullptr;
}

template <typename acc_t>
RedKernel outer_kernel_of(RK k) {
  switch (k) {
    case RK::kSum:
      return &outer_kernel<acc_t, RK::kSum>;
    case RK::kProd:
      return &outer_kernel<acc_t, RK::kProd>;
    case RK::kMax:
      return &outer_kernel<acc_t, RK::kMax>;
    case RK::kMin:
      return &outer_kernel<acc_t, RK::kMin>;
    case RK::kArgMax:
      return &outer_kernel<acc_t, RK::kArgMax>;
    case RK::kSqDev:
      return &outer_kernel<acc_t, RK::kSqDev>;
    case RK::kVar:
      break;  // the outer path runs variance as kSum then kSqDev
  }
  return nullptr;
}

// Contiguous strides of `shape` (n dims): where the first launch of a split variance writes sums.
void contiguous(int n, const int64_t* shape, int64_t* stride) {
  int64_t s = 1;
  for (int d = n - 1; d >= 0; --d) {
    stride[d] = s;
    s *= shape[d];
  }
}

// Where a split or two-pass reduction keeps its scratch data in its workspace (byte offsets):
// the counters (one per blockIdx.x), the sums of a two-pass variance, the partial values and
// indices. bytes == 0: the reduction runs as one launch without a workspace.
struct WsLayout {
  bool two_pass = false;
  size_t means = 0, parts = 0, idx = 0, bytes = 0;
};

template <typename acc_t>
WsLayout fast_workspace(bool inner, RK kind, const FastRedArgs& a, dim3 grid) {
  WsLayout w;
  const bool variance = a.op == ReduceFn::kVar || a.op == ReduceFn::kVarMean;
  w.two_pass = variance && (!inner || a.splits > 1);
  if (a.splits <= 1 && !w.two_pass) return w;
  const size_t n = static_cast<size_t>(a.out_count);
  w.means = a.splits > 1 ? align_up(size_t(grid.x) * sizeof(unsigned)) : 0;  // counters first
  w.parts = w.means + (w.two_pass ? align_up(n * sizeof(acc_t)) : 0);
  w.idx = w.parts + (a.splits > 1 ? align_up(size_t(a.splits) * n * sizeof(acc_t)) : 0);
  w.bytes =
      w.idx +
      (a.splits > 1 && kind == RK::kArgMax ? align_up(size_t(a.splits) * n * sizeof(int64_t)) : 0);
  return w;
}

// Launch `kind` (and, for a variance that needs it, the sums first) with the workspace `ws`
// (w.bytes bytes, counters zero; unused when w.bytes == 0).
template <typename acc_t>
void launch_fast(bool inner, RK kind, FastRedArgs a, dim3 grid, dim3 block, const WsLayout& w,
                 char* ws, cudaStream_t stream) {
  auto launch = [&](RK k, const FastRedArgs& args) {
    RedKernel f = inner ? inner_kernel_of<acc_t>(k) : outer_kernel_of<acc_t>(k);
    f<<<grid, block, 0, stream>>>(args);
    REPLAY_CUDA_LAUNCH(inner ? "inner_kernel" : "outer_kernel");
  };
  if (w.bytes == 0) {
    launch(kind, a);
    return;
  }
  a.counters = a.splits > 1 ? reinterpret_cast<unsigned*>(ws) : nullptr;
  a.ws_v = ws + w.parts;
  a.ws_i = reinterpret_cast<int64_t*>(ws + w.idx);
  if (!w.two_pass) {
    launch(kind, a);
    return;
  }
  FastRedArgs s = a;  // sums into the means buffer, linear over the outputs
  s.op = ReduceFn::kSum;
  s.out0 = ws + w.means;
  s.out0_dtype = std::is_same_v<acc_t, double> ? DType::kFloat64 : DType::kFloat32;
  s.out1 = nullptr;
  if (inner) {
    contiguous(s.nkept, s.kshape, s.k_o0);
  } else {
    int64_t shape[kMaxDims + 1], stride[kMaxDims + 1];
    std::copy(s.kshape, s.kshape + s.nkept, shape);
    shape[s.nkept] = s.cols;
    contiguous(s.nkept + 1, shape, stride);
    std::copy(stride, stride + s.nkept, s.k_o0);
    s.c_o0 = 1;
  }
  launch(RK::kSum, s);
  a.means = ws + w.means;
  launch(RK::kSqDev, a);
}

// A fast-path reduction ready to enqueue, given a workspace of ws_bytes (zeroed counters).
struct FastReduction {
  std::function<void(char* ws, cudaStream_t)> launch;  ///< empty: the fast paths do not apply
  size_t ws_bytes = 0;
};

// The inner or outer path for this reduction; false where neither applies (generic path).
// Resident blocks per multiprocessor of `kernel` at `threads` per block (queried once).
int blocks_per_sm(const void* kernel, int threads) {
  struct Entry {
    const void* kernel;
    int threads, device, blocks;
  };
  static std::mutex mu;
  static std::vector<Entry> cache;
  int dev = 0;
  REPLAY_CUDA(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  for (const Entry& e : cache)
    if (e.kernel == kernel && e.threads == threads && e.device == dev) return e.blocks;
  int n = 0;
  REPLAY_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, 0));
  n = std::max(n, 1);
  cache.push_back({kernel, threads, dev, n});
  return n;
}

// Rows per thread a split of the outer path keeps at least: 8, or REPLAY_OUTER_MIN_ROWS (a sweep
// knob, read once: reports/current/h200/linear, job 13). It changes the split count, so the
// order of the additions and with it eager's bits: for sweeps only.
int64_t outer_min_rows() {
  static const int64_t v = [] {
    const char* e = std::getenv("REPLAY_OUTER_MIN_ROWS");
    const long n = e ? std::strtol(e, nullptr, 10) : 0;
    return n >= 1 && n <= 4096 ? int64_t(n) : int64_t(8);
  }();
  return v;
}

template <typename acc_t>
FastReduction fast_reduction(ReduceFn op, const DeviceTensor& in, const std::vector<int64_t>& dims,
                             const DeviceTensor& out0, const DeviceTensor* out1,
                             double correction) {
  const RedGeom g = reduction_geometry(in, dims, out0, out1);
  if (g.red_numel < 2 || g.nr == 0 || g.out_numel < 1) return {};
  const int S = dsize(in.dtype);
  if (!aligned(in.ptr, S)) return {};
  if ((eager::dmask(in.dtype) & kRedIn<acc_t>) == 0) return {};
  const bool inner = g.nr == 1 && g.rin[0] == 1;
  const bool outer = !inner && g.nk >= 1 && g.kin[g.nk - 1] == 1 &&
                     (g.nr == 1 || (g.nr == 2 && g.red_numel < kMax32));
  if (!inner && !outer) return {};

  FastRedArgs a{};
  a.in = in.ptr;
  a.in_dtype = in.dtype;
  a.op = op;
  a.correction = correction;
  a.red_numel = g.red_numel;
  a.out0 = out0.ptr;
  a.out0_dtype = out0.dtype;
  a.out1 = out1 ? out1->ptr : nullptr;
  a.out1_dtype = out1 ? out1->dtype : DType::kInt64;
  a.out_count = g.out_numel;
  RK kind = kind_of(op);
  // The kernel whose occupancy sizes a split: a split variance runs kSum and kSqDev.
  const RK occ_kind = kind == RK::kVar ? RK::kSum : kind;
  dim3 grid, block;

  if (inner) {
    a.nkept = g.nk;
    for (int d = 0; d < g.nk; ++d) {
      a.kshape[d] = g.ks[d];
      a.k_in[d] = g.kin[d];
      a.k_o0[d] = g.ko0[d];
      a.k_o1[d] = g.ko1[d];
    }
    a.rows = g.out_numel;
    const int64_t L = g.red_numel;
    // About 8 vectors per thread: one warp per row of 1600 elements. (Two warps per row with a
    // 4-vector variance cache measured slower on an H100: 49.8 vs 32.8 us for var_mean over
    // [16384, 1600] bfloat16.)
    const int bx = static_cast<int>(std::clamp<int64_t>(pow2_ceil(ceil_div(L, 64)), 4, 256));
    const int by = 256 / bx;
    const int64_t blocks = ceil_div(a.rows, by);
    if (blocks >= kMax32) return {};
    const int64_t nvec = ceil_div(L, kVec);
    // Split rows when the rows fill less than half of one wave and each thread still gets >= 8
    // vectors per split.
    int64_t splits = 1;
    const int64_t target =
        int64_t(device_sms()) *
        blocks_per_sm(reinterpret_cast<const void*>(inner_kernel_of<acc_t>(occ_kind)), 256);
    // target / blocks, not rounded up: a grid of blocks * splits must not spill into a second,
    // nearly empty wave (Hopper: 16 column blocks x 25 splits = 400 blocks on 396 slots left 4
    // blocks for a second wave).
    if (blocks * 2 <= target && nvec >= int64_t(bx) * 16 && blocks <= kMaxCounters)
      splits = std::min({target / blocks, ceil_div(nvec, int64_t(bx) * 8), int64_t(65535)});
    a.per_split = ceil_div(nvec, splits);
    a.splits = static_cast<int>(ceil_div(nvec, a.per_split));
    if (a.splits == 1) a.per_split = nvec + 1;
    if (kind == RK::kVar && a.splits > 1) kind = RK::kSqDev;  // launch_fast: sums first
    grid = dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(a.splits));
    block = dim3(bx, by);
  } else {
    const int ko_dims = g.nk - 1;  // kept dims but the columns
    a.nkept = ko_dims;
    a.rows = 1;
    for (int d = 0; d < ko_dims; ++d) {
      a.kshape[d] = g.ks[d];
      a.k_in[d] = g.kin[d];
      a.k_o0[d] = g.ko0[d];
      a.k_o1[d] = g.ko1[d];
      a.rows *= g.ks[d];
    }
    a.cols = g.ks[g.nk - 1];
    a.c_o0 = g.ko0[g.nk - 1];
    a.c_o1 = g.ko1[g.nk - 1];
    a.nred = g.nr;
    a.r_in0 = g.rin[0];
    if (g.nr == 2) {
      a.rshape1 = g.rs[1];
      a.r_in1 = g.rin[1];
      a.rdiv = FastDiv(static_cast<uint32_t>(g.rs[1]));
    }
    // Vector of columns per thread where the columns divide and every row start is aligned.
    const int vm = outer_vec(in.dtype);
    bool vec = a.cols % vm == 0 && aligned(in.ptr, int64_t(vm) * S);
    for (int d = 0; d < g.nr; ++d) vec = vec && g.rin[d] % vm == 0;
    for (int d = 0; d < ko_dims; ++d) vec = vec && g.kin[d] % vm == 0;
    a.vc = vec ? vm : 1;
    const int64_t nvc = ceil_div(a.cols, a.vc);
    const int64_t Nr = g.red_numel;
    int bx = static_cast<int>(std::min<int64_t>(32, pow2_ceil(nvc)));
    const int by = static_cast<int>(std::min<int64_t>(256 / bx, pow2_ceil(Nr)));
    if (bx * by < 256) bx = static_cast<int>(std::min<int64_t>(pow2_ceil(nvc), 256 / by));
    a.strips = ceil_div(nvc, bx);
    const int64_t blocks = a.strips * a.rows;
    if (blocks >= kMax32) return {};
    // Split the rows when the column blocks fill less than one wave, >= 8 rows per thread; the
    // split grid stays within one wave (wave / blocks, rounded down).
    const int64_t wave =
        int64_t(device_sms()) *
        blocks_per_sm(reinterpret_cast<const void*>(outer_kernel_of<acc_t>(occ_kind)), bx * by);
    int64_t splits = 1;
    const int64_t min_rows = outer_min_rows();
    if (blocks < wave && Nr >= int64_t(by) * 2 * min_rows && blocks <= kMaxCounters)
      splits = std::min({wave / blocks, ceil_div(Nr, int64_t(by) * min_rows), int64_t(65535)});
    a.per_split = ceil_div(Nr, splits);
    a.splits = static_cast<int>(ceil_div(Nr, a.per_split));
    if (kind == RK::kVar) kind = RK::kSqDev;  // launch_fast: sums first
    grid = dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(a.splits));
    block = dim3(bx, by);
  }
  const WsLayout w = fast_workspace<acc_t>(inner, kind, a, grid);
  return {[inner, kind, a, grid, block, w](char* ws, cudaStream_t s) {
            launch_fast<acc_t>(inner, kind, a, grid, block, w, ws, s);
          },
          w.bytes};
}

}  // namespace

void launch_pointwise(PointwiseFn fn, const DeviceTensor& out, const std::vector<PwOperand>& in,
                      double alpha, DType compute, cudaStream_t stream) {
  pointwise(fn, out, in.data(), in.size(), alpha, compute, stream);
}

EagerLaunch prepare_pointwise(PointwiseFn fn, const DeviceTensor& out,
                              const std::vector<PwOperand>& in, double alpha, DType compute) {
  const auto plan =
      std::make_shared<const PwPlan>(plan_pointwise(fn, out, in.data(), in.size(), alpha, compute));
  return [plan](cudaStream_t s) { plan->launch(s); };
}

namespace {
// The compute dtype of a copy: exact for every pair of dtypes (int64 through int64, float64 or
// int through double).
DType copy_compute(const DeviceTensor& dst, const DeviceTensor& src) {
  auto wide = [](DType t) {
    return t == DType::kFloat64 || t == DType::kInt64 || t == DType::kInt32;
  };
  const bool ints = !is_floating(dst.dtype) && !is_floating(src.dtype);
  return ints                                 ? DType::kInt64
         : wide(dst.dtype) || wide(src.dtype) ? DType::kFloat64
                                              : DType::kFloat32;
}
}  // namespace

namespace {
// --- same-dtype copies that transpose: the `.t().contiguous()` / clone-of-a-permute of training
// graphs (a float8 weight's transposed copy for the backward, a permuted activation). The
// pointwise nd kernel reads one side 1 element per thread across rows (a 16 MB float8 transpose
// took 140 µs on an H200); this one stages 32 x 32 tiles in shared memory so both sides are read
// and written along their contiguous dim. The bits move as they are (a same-dtype copy is exact:
// -0, NaN payloads and all).

constexpr int kTile = 32, kTileRows = 8;

struct TransposeCopyArgs {
  char* dst = nullptr;
  const char* src = nullptr;
  int64_t na = 0, nb = 0;        ///< a: the dim contiguous in dst; b: the dim contiguous in src
  int64_t dst_b = 0, src_a = 0;  ///< the other strides (elements): dst along b, src along a
  int64_t nz = 1, dst_z = 0, src_z = 0;       ///< one more (batch) dim, or nz = 1
  bool src_words = false, dst_words = false;  ///< 4-byte accesses are aligned on that side
};

// A tile is kTile elements along a by kTile * E along b, E = the elements of 1 or 2 bytes in a
// 32-bit word (1 for wider ones): each thread moves whole 32-bit words on both sides (a float8
// transpose moving one byte per thread had too few bytes in flight: 0.8 TB/s on an H200).
template <typename W>  // W: an unsigned word of the element's size
__global__ void __launch_bounds__(kTile* kTileRows) transpose_copy_kernel(TransposeCopyArgs a) {
  constexpr int E = sizeof(W) < 4 ? 4 / static_cast<int>(sizeof(W)) : 1;
  constexpr int TB = kTile * E;                    // tile extent along b, elements
  __shared__ __align__(16) W tile[kTile][TB + E];  // rows stay word-aligned; banks shift by one
  const W* src = reinterpret_cast<const W*>(a.src) + static_cast<int64_t>(blockIdx.z) * a.src_z;
  W* dst = reinterpret_cast<W*>(a.dst) + static_cast<int64_t>(blockIdx.z) * a.dst_z;
  const int64_t a0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t b0 = static_cast<int64_t>(blockIdx.y) * TB;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  for (int k = ty; k < kTile; k += kTileRows) {  // read along b (src's unit stride)
    const int64_t ia = a0 + k, ib = b0 + tx * E;
    if (ia >= a.na) continue;
    const W* p = src + ia * a.src_a + ib;
    if constexpr (E > 1) {
      if (a.src_words && ib + E <= a.nb) {
        *reinterpret_cast<uint32_t*>(&tile[k][tx * E]) = *reinterpret_cast<const uint32_t*>(p);
        continue;
      }
    }
#pragma unroll
    for (int e = 0; e < E; ++e)
      if (ib + e < a.nb) tile[k][tx * E + e] = p[e];
  }
  __syncthreads();
  constexpr int kWordsPerRow = kTile / E;  // along a, per b
  const int tid = ty * kTile + tx;
  for (int w = tid; w < TB * kWordsPerRow; w += kTile * kTileRows) {  // write along a
    const int lb = w / kWordsPerRow, la = (w % kWordsPerRow) * E;
    const int64_t ib = b0 + lb, ia = a0 + la;
    if (ib >= a.nb) continue;
    W* q = dst + ib * a.dst_b + ia;
    if constexpr (E > 1) {
      if (a.dst_words && ia + E <= a.na) {
        union {
          uint32_t u;
          W e[E];
        } v;
#pragma unroll
        for (int e = 0; e < E; ++e) v.e[e] = tile[la + e][lb];
        *reinterpret_cast<uint32_t*>(q) = v.u;
        continue;
      }
    }
#pragma unroll
    for (int e = 0; e < E; ++e)
      if (ia + e < a.na) q[e] = tile[la + e][lb];
  }
}

// The tiled launch for `dst = src` when both have one dtype and one shape, and (size-1 dims
// dropped) two or three dims of which one has unit stride in dst, another unit stride in src (each
// at least 8 long), and at most one more (a batch); else an empty launch (the pointwise kernel
// copies it).
EagerLaunch transpose_copy(const DeviceTensor& dst, const DeviceTensor& src) {
  if (dst.dtype != src.dtype || dst.ndim != src.ndim) return {};
  std::vector<int> dims;
  for (int d = 0; d < dst.ndim; ++d) {
    if (dst.shape[d] != src.shape[d]) return {};
    if (dst.shape[d] == 0) return {};
    if (dst.shape[d] > 1) dims.push_back(d);
  }
  if (dims.size() < 2 || dims.size() > 3) return {};
  int da = -1, db = -1;
  for (int d : dims) {
    if (dst.stride[d] == 1 && da < 0) da = d;
    if (src.stride[d] == 1 && db < 0) db = d;
  }
  if (da < 0 || db < 0 || da == db) return {};
  // Both transposed extents at least a quarter tile: below that most of a tile's threads idle
  // (Cohere's repeat_interleave of its table, a [8192, 64, 2] float32 clone of an expand over the
  // last dim, has 2 elements along dst's unit-stride dim: 44.7 µs in tiles against 9.7 µs in the
  // pointwise kernel, H200).
  if (dst.shape[da] < kTile / 4 || dst.shape[db] < kTile / 4) return {};
  TransposeCopyArgs a;
  a.dst = static_cast<char*>(dst.ptr);
  a.src = static_cast<const char*>(src.ptr);
  a.na = dst.shape[da];
  a.nb = dst.shape[db];
  a.dst_b = dst.stride[db];
  a.src_a = src.stride[da];
  for (int d : dims)
    if (d != da && d != db) {
      a.nz = dst.shape[d];
      a.dst_z = dst.stride[d];
      a.src_z = src.stride[d];
    }
  const int64_t es = static_cast<int64_t>(dtype_size(dst.dtype));
  const int64_t per_word = es < 4 ? 4 / es : 1;
  auto aligned = [es](const void* p, int64_t s1, int64_t s2) {
    return reinterpret_cast<uintptr_t>(p) % 4 == 0 && (s1 * es) % 4 == 0 && (s2 * es) % 4 == 0;
  };
  a.src_words = aligned(src.ptr, a.src_a, a.src_z);
  a.dst_words = aligned(dst.ptr, a.dst_b, a.dst_z);
  const int64_t ta = (a.na + kTile - 1) / kTile;
  const int64_t tb = (a.nb + kTile * per_word - 1) / (kTile * per_word);
  if (ta > INT32_MAX || tb > 65535 || a.nz > 65535) return {};
  void (*kernel)(TransposeCopyArgs) = nullptr;
  switch (dtype_size(dst.dtype)) {
    case 1:
      kernel = transpose_copy_kernel<uint8_t>;
      break;
    case 2:
      kernel = transpose_copy_kernel<uint16_t>;
      break;
    case 4:
      kernel = transpose_copy_kernel<uint32_t>;
      break;
    case 8:
      kernel = transpose_copy_kernel<uint64_t>;
      break;
    default:
      return {};
  }
  const dim3 grid(static_cast<unsigned>(ta), static_cast<unsigned>(tb),
                  static_cast<unsigned>(a.nz));
  return [a, kernel, grid](cudaStream_t s) {
    kernel<<<grid, dim3(kTile, kTileRows), 0, s>>>(a);
    REPLAY_CUDA_LAUNCH("transpose_copy_kernel");
  };
}
}  // namespace

bool copy_takes_tiles(const DeviceTensor& dst, const DeviceTensor& src) {
  return static_cast<bool>(transpose_copy(dst, src));
}

EagerLaunch prepare_copy(const DeviceTensor& dst, const DeviceTensor& src) {
  if (EagerLaunch t = transpose_copy(dst, src)) return t;
  return prepare_pointwise(PointwiseFn::kCopy, dst, {PwOperand{src, true, 0}}, 1,
                           copy_compute(dst, src));
}

void launch_copy(const DeviceTensor& dst, const DeviceTensor& src, cudaStream_t stream) {
  if (EagerLaunch t = transpose_copy(dst, src)) return t(stream);
  const PwOperand op{src, true, 0};
  pointwise(PointwiseFn::kCopy, dst, &op, 1, 1, copy_compute(dst, src), stream);
}

namespace {
// A reduction's launch: the fast path (with the workspace it needs), else the generic kernel.
struct PlannedReduction {
  FastReduction fast;
  EagerLaunch generic;
};

PlannedReduction plan_reduction(ReduceFn op, const DeviceTensor& in,
                                const std::vector<int64_t>& dims, const DeviceTensor& out0,
                                const DeviceTensor* out1, double correction) {
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
  if (p.out_numel == 0) return {{}, [](cudaStream_t) {}};
  auto wide = [](DType t) { return t == DType::kFloat64 || !is_floating(t); };
  const bool f64 = wide(in.dtype) || wide(out0.dtype);
  FastReduction fast = f64 ? fast_reduction<double>(op, in, dims, out0, out1, correction)
                           : fast_reduction<float>(op, in, dims, out0, out1, correction);
  if (fast.launch) return {std::move(fast), {}};
  const int grid = static_cast<int>(std::min<int64_t>(p.out_numel, 65535 * 8));
  void (*kernel)(ReduceArgs) = f64 && fits_32bit(in) ? reduction_kernel<double, uint32_t>
                               : f64                 ? reduction_kernel<double, int64_t>
                               : fits_32bit(in)      ? reduction_kernel<float, uint32_t>
                                                     : reduction_kernel<float, int64_t>;
  return {{}, [kernel, grid, p](cudaStream_t s) {
            kernel<<<grid, kReduceThreads, 0, s>>>(p);
            REPLAY_CUDA_LAUNCH("reduction_kernel");
          }};
}
}  // namespace

void launch_reduction(ReduceFn op, const DeviceTensor& in, const std::vector<int64_t>& dims,
                      const DeviceTensor& out0, const DeviceTensor* out1, double correction,
                      cudaStream_t stream) {
  const PlannedReduction r = plan_reduction(op, in, dims, out0, out1, correction);
  if (!r.fast.launch) return r.generic(stream);
  if (r.fast.ws_bytes == 0) return r.fast.launch(nullptr, stream);
  void* ws = nullptr;  // stream-ordered: freed after this launch, whatever stream it runs on
  REPLAY_CUDA(cudaMallocAsync(&ws, r.fast.ws_bytes, stream));
  try {
    REPLAY_CUDA(cudaMemsetAsync(ws, 0, r.fast.ws_bytes, stream));
    r.fast.launch(static_cast<char*>(ws), stream);
  } catch (...) {
    cudaFreeAsync(ws, stream);
    throw;
  }
  REPLAY_CUDA(cudaFreeAsync(ws, stream));
}

EagerLaunch prepare_reduction(ReduceFn op, const DeviceTensor& in, const std::vector<int64_t>& dims,
                              const DeviceTensor& out0, const DeviceTensor* out1,
                              double correction) {
  PlannedReduction r = plan_reduction(op, in, dims, out0, out1, correction);
  if (!r.fast.launch) return std::move(r.generic);
  auto f = std::move(r.fast.launch);
  if (r.fast.ws_bytes == 0) return [f](cudaStream_t s) { f(nullptr, s); };
  // This launch site's workspace, zeroed before any launch (on the legacy stream, waited for:
  // the launches may come on any stream).
  auto ws = std::make_shared<DeviceBuffer>(r.fast.ws_bytes);
  REPLAY_CUDA(cudaMemsetAsync(ws->get(), 0, r.fast.ws_bytes, nullptr));
  REPLAY_CUDA(cudaStreamSynchronize(nullptr));
  return [f, ws](cudaStream_t s) { f(static_cast<char*>(ws->get()), s); };
}

void poison(void* ptr, size_t bytes, cudaStream_t stream) {
  if (bytes) REPLAY_CUDA(cudaMemsetAsync(ptr, 0xFF, bytes, stream));
}

}  // namespace replay
