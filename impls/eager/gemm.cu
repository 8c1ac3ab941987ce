// Eager matmuls through cuBLASLt (see gemm.hpp). Descriptor setup follows the cuBLASLt
// documentation (cublasLtMatmul, "FP8 data types" and "Outer vector scaling") and PyTorch's
// at::cuda::blas::gemm_and_bias / scaled_gemm: column-major view of row-major tensors, pointer
// alignments in the heuristic's preferences, A/B scale pointers swapped with the operands.
#include "impls/eager/gemm.hpp"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "impls/cuda/cuda_check.hpp"
#include "impls/cuda/dtype_device.cuh"
#include "impls/eager/gemm_choice.hpp"

namespace replay {
namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

GemmCounters g_counters;

// --- errors ------------------------------------------------------------------------------------

[[noreturn]] void lt_fail(const std::string& node, const char* what, cublasStatus_t s) {
  throw RuntimeFailure("node " + node + ": " + what + " failed: " + cublasLtGetStatusName(s) +
                       " (" + cublasLtGetStatusString(s) + ")");
}
void lt_check(const std::string& node, const char* what, cublasStatus_t s) {
  if (s != CUBLAS_STATUS_SUCCESS) lt_fail(node, what, s);
}

// --- cuBLASLt objects --------------------------------------------------------------------------

struct DescDeleter {
  void operator()(std::remove_pointer_t<cublasLtMatmulDesc_t>* d) const {
    cublasLtMatmulDescDestroy(d);
  }
};
struct LayoutDeleter {
  void operator()(std::remove_pointer_t<cublasLtMatrixLayout_t>* l) const {
    cublasLtMatrixLayoutDestroy(l);
  }
};
struct PrefDeleter {
  void operator()(std::remove_pointer_t<cublasLtMatmulPreference_t>* p) const {
    cublasLtMatmulPreferenceDestroy(p);
  }
};
using DescPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulDesc_t>, DescDeleter>;
using LayoutPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>, LayoutDeleter>;
using PrefPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, PrefDeleter>;

// One handle and one workspace per device, created at the first launch on it, kept for the
// process (destroying them at exit could run after the CUDA context is gone).
struct LtDevice {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};
LtDevice& lt_device(int device, const std::string& node) {
  static std::map<int, LtDevice> devices;
  LtDevice& d = devices[device];
  if (!d.handle) {
    lt_check(node, "cublasLtCreate", cublasLtCreate(&d.handle));
    REPLAY_CUDA(cudaMalloc(&d.workspace, kWorkspaceBytes));
  }
  return d;
}

// Chosen algorithms by "device|problem key" (LtCall::key); std::nullopt where the heuristic
// had none (asked once, too).
std::unordered_map<std::string, std::optional<cublasLtMatmulAlgo_t>>& algo_cache() {
  static std::unordered_map<std::string, std::optional<cublasLtMatmulAlgo_t>> cache;
  return cache;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kFloat32:
      return CUDA_R_32F;
    case DType::kFloat64:
      return CUDA_R_64F;
    case DType::kBFloat16:
      return CUDA_R_16BF;
    case DType::kFloat16:
      return CUDA_R_16F;
    case DType::kFloat8E4M3:
      return CUDA_R_8F_E4M3;
    case DType::kFloat8E5M2:
      return CUDA_R_8F_E5M2;
    default:
      break;
  }
  throw std::invalid_argument("cuBLASLt matmuls do not take " + std::string(dtype_name(t)));
}

// Largest power of two (at most 256) dividing the address and, for batches, the batch offset in
// bytes: the alignment every matrix of the operand has.
uint32_t alignment(const void* p, int64_t batch_bytes) {
  uint64_t v = reinterpret_cast<uintptr_t>(p) | static_cast<uint64_t>(batch_bytes) | 256;
  return static_cast<uint32_t>(v & (~v + 1));
}

// --- our side: operands as batches of row-major-indexed matrices -------------------------------

// One operand as `batch` matrices [rows, cols]: element (b, r, c) at ptr + b * bstride + r *
// rstride + c * cstride elements.
struct Mat {
  void* ptr = nullptr;
  DType dtype = DType::kFloat32;
  int64_t batch = 1, rows = 0, cols = 0;
  int64_t bstride = 0, rstride = 0, cstride = 0;
};

Mat as_mat(const DeviceTensor& t) {
  Mat m;
  m.ptr = t.ptr;
  m.dtype = t.dtype;
  if (t.ndim == 3) {
    m.batch = t.shape[0];
    m.bstride = t.stride[0];
  }
  m.rows = t.shape[t.ndim - 2];
  m.cols = t.shape[t.ndim - 1];
  m.rstride = t.stride[t.ndim - 2];
  m.cstride = t.stride[t.ndim - 1];
  return m;
}

DeviceTensor as_tensor(const Mat& m) {
  DeviceTensor t;
  t.ptr = m.ptr;
  t.dtype = m.dtype;
  t.ndim = 3;
  t.shape[0] = m.batch;
  t.shape[1] = m.rows;
  t.shape[2] = m.cols;
  t.stride[0] = m.bstride;
  t.stride[1] = m.rstride;
  t.stride[2] = m.cstride;
  return t;
}

// `src` broadcast (trailing dims aligned, size-1 and missing dims with stride 0) to `shape`.
DeviceTensor broadcast_as(const DeviceTensor& src, std::initializer_list<int64_t> shape) {
  DeviceTensor t;
  t.ptr = src.ptr;
  t.dtype = src.dtype;
  t.ndim = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  for (int d = 0; d < t.ndim; ++d) {
    const int j = d - (t.ndim - src.ndim);
    t.stride[d] = (j < 0 || src.shape[j] == 1) ? 0 : src.stride[j];
  }
  return t;
}

// How cuBLASLt can read a matrix in place: a row-major [R, C] matrix is the column-major [C, R]
// matrix X^T (leading dimension its row stride); a column-major one is X itself (leading
// dimension its column stride). Size-1 dims take any stride.
struct Stored {
  bool col_major = false;
  int64_t ld = 1;
};
std::optional<Stored> stored(const Mat& m) {
  const int64_t R = m.rows, C = m.cols;
  if ((m.cstride == 1 || C == 1) && (R == 1 || m.rstride >= std::max<int64_t>(C, 1)))
    return Stored{false, R == 1 ? std::max<int64_t>(C, 1) : m.rstride};
  if ((m.rstride == 1 || R == 1) && (C == 1 || m.cstride >= std::max<int64_t>(R, 1)))
    return Stored{true, C == 1 ? std::max<int64_t>(R, 1) : m.cstride};
  return std::nullopt;
}
// A batch with stride 0 (broadcast) is copied, as PyTorch does.
bool batch_ok(const Mat& m) {
  return m.batch <= 1 || m.bstride > 0;
}

// --- kernels -----------------------------------------------------------------------------------

// dst = scale * src elementwise over dst's shape (src already broadcast to it; a null src
// gives 0), computed in acc_t and rounded once to dst's dtype.
template <typename acc_t>
__global__ void strided_copy_kernel(DeviceTensor dst, DeviceTensor src, int64_t n, acc_t scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rem = i, od = 0, os = 0;
    for (int d = dst.ndim - 1; d >= 0; --d) {
      const int64_t idx = rem % dst.shape[d];
      rem /= dst.shape[d];
      od += idx * dst.stride[d];
      os += idx * src.stride[d];
    }
    acc_t v = src.ptr ? load_elem<acc_t>(src.ptr, os, src.dtype) : acc_t(0);
    if (scale != acc_t(1)) v *= scale;
    store_elem<acc_t>(dst.ptr, od, dst.dtype, v);
  }
}

int grid_for(int64_t n, int threads) {
  return static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 8192));
}

void launch_strided_copy(const DeviceTensor& dst, const DeviceTensor& src, double scale,
                         cudaStream_t s) {
  const int64_t n = numel(dst);
  if (n == 0) return;
  constexpr int kThreads = 256;
  if (dst.dtype == DType::kFloat64 || src.dtype == DType::kFloat64)
    strided_copy_kernel<double><<<grid_for(n, kThreads), kThreads, 0, s>>>(dst, src, n, scale);
  else
    strided_copy_kernel<float>
        <<<grid_for(n, kThreads), kThreads, 0, s>>>(dst, src, n, static_cast<float>(scale));
  REPLAY_CUDA_LAUNCH("strided_copy_kernel");
}

// _scaled_mm fallback epilogue (ScaledEpilogue, gemm.hpp).
__global__ void scaled_epilogue_kernel(ScaledEpilogue e) {
  const int64_t n = e.M * e.N;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = i / e.N, j = i % e.N;
    float v = e.acc[i] * (e.sa[m * e.sa_stride] * e.sb[j * e.sb_stride]);
    if (e.bias) v += load_elem<float>(e.bias, j * e.bias_stride, e.bias_dtype);
    store_elem<float>(e.out.ptr, m * e.out.stride[1] + j * e.out.stride[2], e.out.dtype, v);
  }
}

// --- one cublasLtMatmul ------------------------------------------------------------------------

// What one cuBLASLt call computes, on our side: d = a @ b (+ epilogue), batch-strided.
struct GemmSpec {
  Mat a, b, d;                      // a [batch, M, K], b [batch, K, N], d [batch, M, N] row-major
  Stored la, lb;                    // how a and b are read (stored(a), stored(b))
  int64_t ldd = 1;                  // d's row stride
  DType c_dtype = DType::kFloat32;  // cuBLASLt's C (= D pointer) type
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  double alpha = 1, beta = 0;
  // _scaled_mm
  const void* scale_a = nullptr;  // float32 device pointers (one value, or vectors M / N)
  const void* scale_b = nullptr;
  bool outer_vec = false;
  bool set_fast_accum = false, fast_accum = false;
  // bias epilogue: a vector over N (cuBLASLt's D rows), per matrix `bias_bstride` apart
  const void* bias = nullptr;
  DType bias_dtype = DType::kFloat32;
  int64_t bias_bstride = 0;
  // bias gradient epilogue (prepare_matmul): cuBLASLt's BGRADA (over our b) or BGRADB (our a)
  void* bias_grad = nullptr;
  BiasGrad bias_grad_of = BiasGrad::kNone;
};

struct LtCall {
  std::string node;
  DescPtr desc;
  LayoutPtr la, lb, lc, ld;  // cuBLASLt's A (our b), B (our a), C, D
  const void* A = nullptr;
  const void* B = nullptr;
  void* D = nullptr;
  bool f64 = false;
  float alpha_f = 1, beta_f = 0;
  double alpha_d = 1, beta_d = 0;
  uint32_t align_a = 256, align_b = 256, align_d = 256;
  bool no_split_k = false;  // only candidates with one K split (the bias gradient epilogues)
  std::string key;          // problem key of the algorithm cache (device prepended at resolve())
  std::string problem;      // the problem in words (GemmChoice::problem)
  // The workspace handed to cublasLtMatmul: the whole device workspace, or what the algorithm
  // chose_algo kept asks for (the heuristic's workspaceSize for it).
  size_t ws_bytes = kWorkspaceBytes;
  // Resolved at the first launch.
  bool ready = false, ran = false;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  cublasLtMatmulAlgo_t algo{};

  // Handle and workspace of the current device.
  void bind_device() {
    int dev = 0;
    REPLAY_CUDA(cudaGetDevice(&dev));
    LtDevice& ctx = lt_device(dev, node);
    handle = ctx.handle;
    workspace = ctx.workspace;
    device = dev;
  }
  int device = 0;

  // The heuristic's first `want` candidates (empty: none fits; `st` the failure otherwise).
  std::vector<cublasLtMatmulHeuristicResult_t> heuristics(int want, cublasStatus_t& st) {
    cublasLtMatmulPreference_t raw = nullptr;
    lt_check(node, "cublasLtMatmulPreferenceCreate", cublasLtMatmulPreferenceCreate(&raw));
    PrefPtr pref(raw);
    const uint64_t ws = kWorkspaceBytes;
    // Split-K partial sums only in the compute type, or no split-K: the in-place and output-type
    // schemes add partial results in the output's dtype (bfloat16/float16 roundings; on an H100
    // a bf16 addmm with beta = 1 came out with rel_l2 2.5e-3, ten times its bound), and in-place
    // reductions are not run-to-run deterministic.
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*> attrs32[] = {
        {CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d}};
    lt_check(node, "cublasLtMatmulPreferenceSetAttribute",
             cublasLtMatmulPreferenceSetAttribute(
                 pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    for (const auto& [attr, value] : attrs32)
      lt_check(node, "cublasLtMatmulPreferenceSetAttribute",
               cublasLtMatmulPreferenceSetAttribute(pref.get(), attr, value, sizeof(uint32_t)));
    std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(want));
    int returned = 0;
    ++g_counters.heuristic_queries;
    st = cublasLtMatmulAlgoGetHeuristic(handle, desc.get(), la.get(), lb.get(), lc.get(), ld.get(),
                                        pref.get(), want, results.data(), &returned);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) returned = 0;
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) return {};
    st = CUBLAS_STATUS_SUCCESS;
    results.resize(static_cast<size_t>(std::max(returned, 0)));
    // Belt and braces: only the deterministic reduction schemes, whatever the mask did.
    // A configuration that cannot be read counts as excluded (fails closed).
    auto undeterministic = [](const cublasLtMatmulHeuristicResult_t& r) {
      uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
      size_t written = 0;
      const cublasStatus_t q = cublasLtMatmulAlgoConfigGetAttribute(
          &r.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme), &written);
      return r.state != CUBLAS_STATUS_SUCCESS || q != CUBLAS_STATUS_SUCCESS ||
             (scheme != CUBLASLT_REDUCTION_SCHEME_NONE &&
              scheme != CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
    };
    auto split = [](const cublasLtMatmulHeuristicResult_t& r) {
      uint32_t splits = 1;
      size_t written = 0;
      const cublasStatus_t q = cublasLtMatmulAlgoConfigGetAttribute(
          &r.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits), &written);
      return q != CUBLAS_STATUS_SUCCESS || splits > 1;
    };
    if (no_split_k)
      results.erase(std::remove_if(results.begin(), results.end(), split), results.end());
    results.erase(std::remove_if(results.begin(), results.end(), undeterministic), results.end());
    return results;
  }

  // Handle, workspace and algorithm (cached): CUBLAS_STATUS_NOT_SUPPORTED when the heuristic
  // has none.
  cublasStatus_t resolve() {
    bind_device();
    const std::string k = std::to_string(device) + "|" + key;
    auto& cache = algo_cache();
    if (auto it = cache.find(k); it != cache.end()) {
      if (!it->second) return CUBLAS_STATUS_NOT_SUPPORTED;
      algo = *it->second;
      ready = true;
      return CUBLAS_STATUS_SUCCESS;
    }
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    const auto results = heuristics(1, st);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (results.empty()) {
      cache.emplace(k, std::nullopt);
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    cache.emplace(k, results[0].algo);
    algo = results[0].algo;
    ready = true;
    return CUBLAS_STATUS_SUCCESS;
  }

  cublasStatus_t matmul(cudaStream_t s) {
    ++g_counters.matmuls;
    const void* alpha = f64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
    const void* beta = f64 ? static_cast<const void*>(&beta_d) : &beta_f;
    return cublasLtMatmul(handle, desc.get(), alpha, A, la.get(), B, lb.get(), beta, D, lc.get(), D,
                          ld.get(), &algo, ws_bytes ? workspace : nullptr, ws_bytes, s);
  }
};

template <typename T>
void set_desc(LtCall& c, cublasLtMatmulDescAttributes_t attr, const T& v) {
  lt_check(c.node, "cublasLtMatmulDescSetAttribute",
           cublasLtMatmulDescSetAttribute(c.desc.get(), attr, &v, sizeof(v)));
}

LayoutPtr make_layout(LtCall& c, DType t, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                      int64_t bstride) {
  cublasLtMatrixLayout_t raw = nullptr;
  lt_check(c.node, "cublasLtMatrixLayoutCreate",
           cublasLtMatrixLayoutCreate(&raw, cuda_type(t), static_cast<uint64_t>(rows),
                                      static_cast<uint64_t>(cols), ld));
  LayoutPtr l(raw);
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    lt_check(c.node, "cublasLtMatrixLayoutSetAttribute",
             cublasLtMatrixLayoutSetAttribute(l.get(), CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                              sizeof(count)));
    lt_check(c.node, "cublasLtMatrixLayoutSetAttribute",
             cublasLtMatrixLayoutSetAttribute(l.get(), CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                              &bstride, sizeof(bstride)));
  }
  c.key += "|" + std::to_string(static_cast<int>(t)) + ":" + std::to_string(rows) + "x" +
           std::to_string(cols) + "/" + std::to_string(ld) + "b" + std::to_string(batch) + "s" +
           std::to_string(bstride);
  return l;
}

// The cuBLASLt call for `g`: column-major D^T [N, M] = op(B^T) op(A^T), i.e. cuBLASLt's A is our
// b and its B our a; a column-major operand enters through the transpose flag.
std::unique_ptr<LtCall> build_call(const std::string& node, const GemmSpec& g) {
  auto c = std::make_unique<LtCall>();
  c->node = node;
  const int64_t batch = g.d.batch, M = g.d.rows, N = g.d.cols, K = g.a.cols;
  c->f64 = g.compute == CUBLAS_COMPUTE_64F;
  cublasLtMatmulDesc_t raw = nullptr;
  lt_check(node, "cublasLtMatmulDescCreate",
           cublasLtMatmulDescCreate(&raw, g.compute, c->f64 ? CUDA_R_64F : CUDA_R_32F));
  c->desc.reset(raw);
  const int32_t transa = g.lb.col_major ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int32_t transb = g.la.col_major ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(*c, CUBLASLT_MATMUL_DESC_TRANSA, transa);
  set_desc(*c, CUBLASLT_MATMUL_DESC_TRANSB, transb);
  c->key = std::to_string(static_cast<int>(g.compute)) + "|t" + std::to_string(transa) +
           std::to_string(transb);
  // Our b [K, N]: row-major -> stored [N, K] (op N); column-major -> stored [K, N] (op T).
  c->la = g.lb.col_major ? make_layout(*c, g.b.dtype, K, N, g.lb.ld, batch, g.b.bstride)
                         : make_layout(*c, g.b.dtype, N, K, g.lb.ld, batch, g.b.bstride);
  // Our a [M, K]: row-major -> stored [K, M] (op N); column-major -> stored [M, K] (op T).
  c->lb = g.la.col_major ? make_layout(*c, g.a.dtype, M, K, g.la.ld, batch, g.a.bstride)
                         : make_layout(*c, g.a.dtype, K, M, g.la.ld, batch, g.a.bstride);
  c->lc = make_layout(*c, g.c_dtype, N, M, g.ldd, batch, g.d.bstride);
  c->ld = make_layout(*c, g.d.dtype, N, M, g.ldd, batch, g.d.bstride);
  c->A = g.b.ptr;
  c->B = g.a.ptr;
  c->D = g.d.ptr;
  c->alpha_f = static_cast<float>(g.alpha);
  c->beta_f = static_cast<float>(g.beta);
  c->alpha_d = g.alpha;
  c->beta_d = g.beta;
  auto bytes = [&](const Mat& m) {
    return batch > 1 ? m.bstride * static_cast<int64_t>(dtype_size(m.dtype)) : 0;
  };
  c->align_a = alignment(g.b.ptr, bytes(g.b));
  c->align_b = alignment(g.a.ptr, bytes(g.a));
  c->align_d = alignment(g.d.ptr, bytes(g.d));
  c->key += "|al" + std::to_string(c->align_a) + "," + std::to_string(c->align_b) + "," +
            std::to_string(c->align_d);
  c->problem =
      std::string(dtype_name(g.a.dtype)) + (batch > 1 ? " " + std::to_string(batch) + " x" : "") +
      " [" + std::to_string(M) + ", " + std::to_string(K) + "] @ [" + std::to_string(K) + ", " +
      std::to_string(N) + "]" + (g.la.col_major ? " (a column-major)" : "") +
      (g.lb.col_major ? " (b column-major)" : "") + " -> " + std::string(dtype_name(g.d.dtype));
  if (g.scale_a || g.scale_b) {  // cuBLASLt's A is our b: its scale is scale_b, and vice versa
    set_desc(*c, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, g.scale_b);
    set_desc(*c, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, g.scale_a);
    if (g.outer_vec) {
      const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      set_desc(*c, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode);
      set_desc(*c, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode);
    }
    c->problem += g.outer_vec ? ", rowwise scales" : ", tensorwise scales";
    c->key += std::string("|scale") + (g.outer_vec ? "vec" : "scalar") +
              std::to_string(alignment(g.scale_a, 0)) + "," +
              std::to_string(alignment(g.scale_b, 0));
  }
  if (g.set_fast_accum) {
    const int8_t fast = g.fast_accum ? 1 : 0;
    set_desc(*c, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast);
    c->key += "|fast" + std::to_string(fast);
    if (g.fast_accum) c->problem += ", fast accumulation";
  }
  if (g.bias) {
    const uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const int32_t bias_type = cuda_type(g.bias_dtype);
    set_desc(*c, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    set_desc(*c, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
    set_desc(*c, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type);
    if (batch > 1) set_desc(*c, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, g.bias_bstride);
    c->problem += ", bias";
    c->key += "|bias" + std::to_string(bias_type) + "@" + std::to_string(alignment(g.bias, 0)) +
              "s" + std::to_string(g.bias_bstride);
  }
  if (g.bias_grad) {  // cuBLASLt's A is our b (BGRADA: over N), its B our a (BGRADB: over M)
    const bool of_a = g.bias_grad_of == BiasGrad::kRowsOfA;
    const uint32_t epilogue = of_a ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_BGRADA;
    const int32_t bias_type = cuda_type(g.d.dtype);
    set_desc(*c, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    set_desc(*c, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(g.bias_grad));
    set_desc(*c, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type);
    c->no_split_k = true;
    c->problem += of_a ? ", bias gradient of a (BGRADB)" : ", bias gradient of b (BGRADA)";
    c->key += std::string("|bgrad") + (of_a ? "B" : "A") + "@" +
              std::to_string(alignment(g.bias_grad, 0));
  }
  return c;
}

// --- the plan of one node ----------------------------------------------------------------------

struct Copy {
  DeviceTensor dst, src;  // src broadcast to dst's shape; a null src.ptr writes 0
  double scale = 1;
};

// A GEMM and what follows it: copies out of a temporary output, or the scaled epilogue.
struct Stage {
  std::unique_ptr<LtCall> call;
  std::vector<Copy> post;
  std::optional<ScaledEpilogue> epilogue;
};

struct GemmPlan {
  std::string node;
  std::vector<std::shared_ptr<DeviceBuffer>> temps;
  std::vector<Copy> pre;  // operand layouts, C = self, K == 0 results
  std::optional<Stage> direct;
  std::optional<Stage> fallback;
  std::function<Stage()> make_fallback;  // _scaled_mm: the float32-GEMM + scale path

  void run_post(const Stage& st, cudaStream_t s) {
    for (const Copy& c : st.post) launch_strided_copy(c.dst, c.src, c.scale, s);
    if (st.epilogue) launch_scaled_epilogue(*st.epilogue, s);
  }

  void run(cudaStream_t s) {
    for (const Copy& c : pre) launch_strided_copy(c.dst, c.src, c.scale, s);
    if (direct) {
      LtCall& c = *direct->call;
      cublasStatus_t st = c.ready ? CUBLAS_STATUS_SUCCESS : c.resolve();
      const char* what = "cublasLtMatmulAlgoGetHeuristic";
      if (st == CUBLAS_STATUS_SUCCESS) {
        what = "cublasLtMatmul";
        st = c.matmul(s);
      }
      if (st == CUBLAS_STATUS_SUCCESS) {
        c.ran = true;
        return run_post(*direct, s);
      }
      // A configuration cuBLASLt refuses (no algorithm, or an invalid value at the first call:
      // rowwise scales on a GPU without outer-vector scaling) falls back once; a failure after
      // the configuration has run is an error.
      if (!make_fallback || c.ran) lt_fail(node, what, st);
      fallback = make_fallback();
      direct.reset();
    }
    if (fallback) {
      LtCall& c = *fallback->call;
      if (!c.ready)
        lt_check(node, "cublasLtMatmulAlgoGetHeuristic (float8, float32 output)", c.resolve());
      lt_check(node, "cublasLtMatmul (float8, float32 output)", c.matmul(s));
      run_post(*fallback, s);
    }
  }
};

// A fresh buffer for `m` in row-major (or column-major) order per matrix, batch-contiguous.
Mat make_temp(GemmPlan& p, const Mat& m, bool col_major) {
  const size_t bytes = static_cast<size_t>(m.batch * m.rows * m.cols) * dtype_size(m.dtype);
  p.temps.push_back(std::make_shared<DeviceBuffer>(std::max<size_t>(bytes, 256)));
  Mat t = m;
  t.ptr = p.temps.back()->get();
  t.bstride = m.rows * m.cols;
  t.rstride = col_major ? 1 : m.cols;
  t.cstride = col_major ? m.rows : 1;
  return t;
}

// `m` as cuBLASLt can read it: in place when row- or column-major per matrix with a positive
// batch stride (and `need` satisfied), else a temporary copied before each GEMM.
std::pair<Mat, Stored> prepare_operand(GemmPlan& p, const Mat& m,
                                       const std::function<bool(const Mat&, Stored)>& need,
                                       bool temp_col_major) {
  if (auto st = stored(m); st && batch_ok(m) && need(m, *st)) return {m, *st};
  Mat t = make_temp(p, m, temp_col_major);
  p.pre.push_back({as_tensor(t), as_tensor(m), 1});
  ++g_counters.copied_operands;
  return {t, Stored{temp_col_major, std::max<int64_t>(temp_col_major ? m.rows : m.cols, 1)}};
}

// The GEMM output: `d` when row-major per matrix, else a temporary copied into `d` after.
Mat prepare_output(GemmPlan& p, const Mat& d, std::vector<Copy>& post) {
  if (auto st = stored(d); st && !st->col_major && batch_ok(d)) return d;
  Mat t = make_temp(p, d, false);
  post.push_back({as_tensor(d), as_tensor(t), 1});
  return t;
}

int64_t row_stride(const Mat& d) {
  return stored(d)->ld;
}

void expect_rank(const Node& n, const DeviceTensor& t, int rank, const char* what) {
  if (t.ndim != rank)
    throw std::invalid_argument("node " + n.id + ": " + std::string(op_name(n.op)) + " expects " +
                                what + " of rank " + std::to_string(rank) + ", got rank " +
                                std::to_string(t.ndim));
}

// mm / bmm / addmm / baddbmm.
void plan_matmul(GemmPlan& p, const Node& n, const DeviceTensor* self, const DeviceTensor& a_t,
                 const DeviceTensor& b_t, const DeviceTensor& out) {
  const int rank = (n.op == Op::kBmm || n.op == Op::kBaddbmm) ? 3 : 2;
  expect_rank(n, a_t, rank, "its first matrix operand");
  expect_rank(n, b_t, rank, "its second matrix operand");
  expect_rank(n, out, rank, "an output");
  if (self && self->ndim > rank)
    throw std::invalid_argument("node " + n.id + ": self has more dims than the product");
  const Mat a = as_mat(a_t), b = as_mat(b_t), d = as_mat(out);
  const int64_t batch = d.batch, M = d.rows, N = d.cols, K = a.cols;
  if (batch == 0 || M == 0 || N == 0) return;
  double beta = self ? n.beta : 0;
  if (K == 0) {  // an empty sum: beta * self, or 0
    if (self && beta != 0)
      p.pre.push_back({as_tensor(d), broadcast_as(*self, {batch, M, N}), beta});
    else
      p.pre.push_back({as_tensor(d), DeviceTensor{}, 1});
    return;
  }
  Stage st;
  GemmSpec g;
  const auto any = [](const Mat&, Stored) { return true; };
  std::tie(g.a, g.la) = prepare_operand(p, a, any, false);
  std::tie(g.b, g.lb) = prepare_operand(p, b, any, false);
  g.compute = d.dtype == DType::kFloat64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  g.alpha = n.alpha;
  // self broadcast to [batch, M, N]: a vector over N (unit stride, constant over M) takes
  // cuBLASLt's bias epilogue when beta == 1, as PyTorch's gemm_and_bias does for nn.Linear's
  // addmm (here also for baddbmm, with a bias batch stride).
  const DeviceTensor c = self ? broadcast_as(*self, {batch, M, N}) : DeviceTensor{};
  const bool epilogue = self && beta == 1 && d.dtype != DType::kFloat64 && c.stride[1] == 0 &&
                        (N == 1 || c.stride[2] == 1);
  // Any other self enters as cuBLASLt's C (in place in D) with beta. For bfloat16/float16, D and
  // C are then a float32 temporary, rounded into the output by a copy after the GEMM: with a
  // bfloat16 C and beta == 1, cuBLASLt (13.1, H100) rounds alpha * acc to bfloat16 before adding
  // C (rel_l2 2.9e-3 on every shape tried, 15x the bound; beta 2 or 0.5 were exact).
  const bool stage_f32 =
      self && !epilogue && beta != 0 && (d.dtype == DType::kBFloat16 || d.dtype == DType::kFloat16);
  if (stage_f32) {
    Mat t = d;
    t.dtype = DType::kFloat32;
    g.d = make_temp(p, t, false);
    st.post.push_back({as_tensor(d), as_tensor(g.d), 1});
  } else {
    g.d = prepare_output(p, d, st.post);
  }
  g.ldd = row_stride(g.d);
  g.c_dtype = g.d.dtype;
  if (epilogue) {
    g.bias = self->ptr;
    g.bias_dtype = self->dtype;
    g.bias_bstride = batch > 1 ? c.stride[0] : 0;
    beta = 0;
  } else if (self && beta != 0) {  // C = self broadcast into D, scaled by beta in the GEMM
    p.pre.push_back({as_tensor(g.d), c, 1});
  }
  g.beta = beta;
  st.call = build_call(n.id, g);
  p.direct = std::move(st);
}

bool is_16bit_or_32bit_float(DType t) {
  return t == DType::kBFloat16 || t == DType::kFloat16 || t == DType::kFloat32;
}

// _scaled_mm.
void plan_scaled_mm(GemmPlan& p, const Node& n, const std::vector<DeviceTensor>& in,
                    const DeviceTensor& out) {
  if (in.size() < 4) throw std::invalid_argument("node " + n.id + ": _scaled_mm needs 4 operands");
  expect_rank(n, in[0], 2, "self");
  expect_rank(n, in[1], 2, "mat2");
  expect_rank(n, out, 2, "an output");
  const Mat a = as_mat(in[0]), b = as_mat(in[1]), d = as_mat(out);
  const int64_t M = d.rows, N = d.cols, K = a.cols;
  const DeviceTensor &sa = in[2], &sb = in[3];
  const DeviceTensor* bias =
      n.operands.size() > 4 && n.operands[4].is_tensor() ? &in.at(4) : nullptr;
  if (bias) expect_rank(n, *bias, 1, "bias");
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: the bias, or 0
    if (bias)
      p.pre.push_back({as_tensor(d), broadcast_as(*bias, {1, M, N}), 1});
    else
      p.pre.push_back({as_tensor(d), DeviceTensor{}, 1});
    return;
  }
  const bool rowwise = !(numel(sa) == 1 && numel(sb) == 1);
  // Hopper's float8 kernels take only the TN layout: self row-major, mat2 column-major, leading
  // dimensions and addresses multiples of 16 bytes.
  const auto aligned16 = [](const Mat& m, Stored st) {
    return st.ld % 16 == 0 && reinterpret_cast<uintptr_t>(m.ptr) % 16 == 0;
  };
  GemmSpec g;
  std::tie(g.a, g.la) = prepare_operand(
      p, a, [&](const Mat& m, Stored st) { return !st.col_major && aligned16(m, st); }, false);
  std::tie(g.b, g.lb) = prepare_operand(
      p, b, [&](const Mat& m, Stored st) { return st.col_major && aligned16(m, st); }, true);
  g.compute = CUBLAS_COMPUTE_32F;
  g.set_fast_accum = true;
  g.fast_accum = n.flag;
  // Per-row scale strides (tensorwise: 0).
  const int64_t sa_stride = rowwise && M > 1 ? sa.stride[0] : 0;
  const int64_t sb_stride = rowwise && N > 1 ? sb.stride[sb.ndim - 1] : 0;

  // The fallback: unscaled float8 GEMM into a float32 [M, N] temporary, then the scale kernel.
  const std::string id = n.id;
  GemmPlan* plan = &p;  // the plan owns this function
  const std::optional<DeviceTensor> bias_t =
      bias ? std::optional<DeviceTensor>(*bias) : std::nullopt;
  p.make_fallback = [plan, g, id, M, N, sa, sb, sa_stride, sb_stride, bias_t, out]() {
    ++g_counters.scaled_fallbacks;
    GemmSpec f = g;
    f.scale_a = f.scale_b = nullptr;
    f.outer_vec = false;
    f.bias = nullptr;
    f.alpha = 1;
    f.beta = 0;
    Mat acc;
    acc.dtype = DType::kFloat32;
    acc.rows = M;
    acc.cols = N;
    acc = make_temp(*plan, acc, false);
    f.d = acc;
    f.ldd = N;
    f.c_dtype = DType::kFloat32;
    Stage st;
    st.call = build_call(id, f);
    ScaledEpilogue e;
    e.acc = static_cast<const float*>(acc.ptr);
    e.M = M;
    e.N = N;
    e.sa = static_cast<const float*>(sa.ptr);
    e.sa_stride = sa_stride;
    e.sb = static_cast<const float*>(sb.ptr);
    e.sb_stride = sb_stride;
    if (bias_t) {
      e.bias = bias_t->ptr;
      e.bias_dtype = bias_t->dtype;
      e.bias_stride = bias_t->stride[0];
    }
    e.out = as_tensor(as_mat(out));
    st.epilogue = e;
    return st;
  };

  // The direct path, where cuBLASLt takes the combination (its float8 table: bias bfloat16 with a
  // bfloat16 or float32 output, float16 with float16; outer-vector scales need unit strides).
  const DType od = d.dtype;
  bool direct = is_16bit_or_32bit_float(od);
  if (bias)
    direct =
        direct && (N == 1 || bias->stride[0] == 1) &&
        ((bias->dtype == DType::kBFloat16 && (od == DType::kBFloat16 || od == DType::kFloat32)) ||
         (bias->dtype == DType::kFloat16 && od == DType::kFloat16));
  if (rowwise) direct = direct && (M == 1 || sa.stride[0] == 1) && (N == 1 || sb_stride == 1);
  if (!direct) {
    p.fallback = p.make_fallback();
    return;
  }
  Stage st;
  g.d = prepare_output(p, d, st.post);
  g.ldd = row_stride(g.d);
  g.c_dtype = od;
  g.scale_a = sa.ptr;
  g.scale_b = sb.ptr;
  g.outer_vec = rowwise;
  if (bias) {
    g.bias = bias->ptr;
    g.bias_dtype = bias->dtype;
  }
  st.call = build_call(n.id, g);
  p.direct = std::move(st);
}

// --- a fusion's matmul: algorithm choice -------------------------------------------------------

// Heuristic candidates timed: the float8 kernels' list is short (8 is all of it at the shapes
// measured); the 16-bit and float32 one is longer, and its later entries were not timed before.
constexpr int kTuneCandidatesFloat8 = 8;
constexpr int kTuneCandidates = 16;
constexpr int kTuneReps = 5;          // timed launches per candidate (after one warm-up)
constexpr double kTuneMargin = 0.97;  // a later candidate must be 3 % faster to replace one

// "id 66 tile 20 stages 8 splitK 1 reduction 0 swizzle 0" for logs and tests.
std::string algo_str(const cublasLtMatmulAlgo_t& a) {
  auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attr) {
    uint32_t v = 0;
    size_t written = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof(v), &written);
    return std::to_string(v);
  };
  return "id " + get(CUBLASLT_ALGO_CONFIG_ID) + " tile " + get(CUBLASLT_ALGO_CONFIG_TILE_ID) +
         " stages " + get(CUBLASLT_ALGO_CONFIG_STAGES_ID) + " splitK " +
         get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM) + " reduction " +
         get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) + " swizzle " +
         get(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
}

// A CUDA stream and two events, destroyed on every path out of the tuning loop.
struct TuneStream {
  cudaStream_t s = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  TuneStream() {
    REPLAY_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    REPLAY_CUDA(cudaEventCreate(&start));
    REPLAY_CUDA(cudaEventCreate(&stop));
  }
  ~TuneStream() {
    cudaStreamSynchronize(s);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaStreamDestroy(s);
  }
  TuneStream(const TuneStream&) = delete;
  TuneStream& operator=(const TuneStream&) = delete;
};

// Sets c.algo and c.ws_bytes for a fusion's matmul (prepare_matmul with tune,
// prepare_scaled_matmul; see gemm.hpp), once per (device, problem, tune) for the process, and
// records the choice (gemm_choice.hpp) under c.node, also when it came from the cache. `want`:
// heuristic candidates to consider when tuning; `none`: the reason when the heuristic has none.
// Returns that reason, or "".
std::string choose_algo(LtCall& c, bool tune, int want, const std::string& none, GemmChoice& rec) {
  struct Choice {
    std::optional<cublasLtMatmulAlgo_t> algo;
    size_t ws = 0;
    GemmChoice rec;
  };
  static std::unordered_map<std::string, Choice> chosen;
  c.bind_device();
  const std::string k = std::to_string(c.device) + (tune ? "|tuned|" : "|first|") + c.key;
  auto done = [&](const Choice& ch) {
    rec = ch.rec;
    rec.name = c.node;
    if (!ch.algo) {  // left unresolved: a launch resolves the heuristic's first, as untuned
      c.ws_bytes = kWorkspaceBytes;
      return none;
    }
    c.algo = *ch.algo;
    c.ws_bytes = ch.ws;
    c.ready = true;
    record_gemm_choice(rec);
    return std::string();
  };
  if (auto it = chosen.find(k); it != chosen.end()) return done(it->second);
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  const auto cands = c.heuristics(tune ? want : 1, st);
  if (st != CUBLAS_STATUS_SUCCESS) lt_fail(c.node, "cublasLtMatmulAlgoGetHeuristic", st);
  Choice ch;
  ch.rec.problem = c.problem;
  ch.rec.candidates = static_cast<int>(cands.size());
  size_t best = 0;
  bool found = !cands.empty();
  if (tune && cands.size() > 1) {
    ++g_counters.tuned_problems;
    ch.rec.tuned = true;
    TuneStream ts;
    std::vector<double>& us = ch.rec.candidate_us;
    us.assign(cands.size(), -1);
    for (size_t i = 0; i < cands.size(); ++i) {
      c.algo = cands[i].algo;
      c.ws_bytes = cands[i].workspaceSize;
      if (c.matmul(ts.s) != CUBLAS_STATUS_SUCCESS) continue;  // warm-up; a refusal skips it
      REPLAY_CUDA(cudaEventRecord(ts.start, ts.s));
      bool ok = true;
      for (int r = 0; r < kTuneReps && ok; ++r) ok = c.matmul(ts.s) == CUBLAS_STATUS_SUCCESS;
      REPLAY_CUDA(cudaEventRecord(ts.stop, ts.s));
      REPLAY_CUDA(cudaEventSynchronize(ts.stop));
      float ms = 0;
      if (ok) REPLAY_CUDA(cudaEventElapsedTime(&ms, ts.start, ts.stop));
      if (ok) us[i] = 1e3 * ms / kTuneReps;
    }
    found = false;
    for (size_t i = 0; i < cands.size(); ++i) {
      if (us[i] < 0) continue;
      if (!found || us[i] < us[best] * kTuneMargin) best = i;
      found = true;
    }
  }
  if (found) {
    ch.algo = cands[best].algo;
    ch.ws = cands[best].workspaceSize;
    ch.rec.algo = algo_str(cands[best].algo);
    ch.rec.chosen = static_cast<int>(best);
    ch.rec.workspace_bytes = ch.ws;
  }
  return done(chosen.emplace(k, std::move(ch)).first->second);
}

bool is_float8(DType t) {
  return t == DType::kFloat8E4M3 || t == DType::kFloat8E5M2;
}

std::string mat_str(const Mat& m) {
  return std::string(dtype_name(m.dtype)) + " [" + std::to_string(m.rows) + ", " +
         std::to_string(m.cols) + "] strides [" + std::to_string(m.rstride) + ", " +
         std::to_string(m.cstride) + "]";
}

}  // namespace

EagerLaunch lower_gemm(const Node& n, const std::vector<DeviceTensor>& in,
                       const std::vector<DeviceTensor>& out) {
  if (out.size() != 1)
    throw std::invalid_argument("node " + n.id + ": a matmul has one output, got " +
                                std::to_string(out.size()));
  auto plan = std::make_shared<GemmPlan>();
  plan->node = n.id;
  switch (n.op) {
    case Op::kMm:
    case Op::kBmm:
      plan_matmul(*plan, n, nullptr, in.at(0), in.at(1), out[0]);
      break;
    case Op::kAddmm:
    case Op::kBaddbmm:
      plan_matmul(*plan, n, &in.at(0), in.at(1), in.at(2), out[0]);
      break;
    case Op::kScaledMm:
      plan_scaled_mm(*plan, n, in, out[0]);
      break;
    default:
      throw std::invalid_argument("node " + n.id + ": " + std::string(op_name(n.op)) +
                                  " is not a matmul");
  }
  return [plan](cudaStream_t s) { plan->run(s); };
}

EagerLaunch prepare_matmul(const std::string& name, const MatmulOperands& m) {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("matmul " + name + ": " + what);
  };
  if (m.a.ndim != 2 || m.b.ndim != 2 || m.d.ndim != 2) fail("a, b and d must be 2-D");
  const Mat a = as_mat(m.a), b = as_mat(m.b), d = as_mat(m.d);
  const int64_t M = d.rows, N = d.cols, K = a.cols;
  if (a.rows != M || b.rows != K || b.cols != N)
    fail("shapes [" + std::to_string(a.rows) + ", " + std::to_string(K) + "] @ [" +
         std::to_string(b.rows) + ", " + std::to_string(b.cols) + "] -> [" + std::to_string(M) +
         ", " + std::to_string(N) + "] do not fit");
  if (!is_16bit_or_32bit_float(a.dtype) || b.dtype != a.dtype ||
      !(d.dtype == a.dtype || d.dtype == DType::kFloat32))
    fail(std::string("dtypes ") + std::string(dtype_name(a.dtype)) + " @ " +
         std::string(dtype_name(b.dtype)) + " -> " + std::string(dtype_name(d.dtype)) +
         " (needs one 16- or 32-bit float dtype, the output that or float32)");
  if (m.bias && m.bias_dtype != d.dtype) fail("the bias must have the output's dtype");
  const bool bgrad = m.bias_grad_of != BiasGrad::kNone;
  if (bgrad && (m.bias || !m.bias_grad || d.dtype == DType::kFloat32 || !m.tune))
    fail("a bias gradient needs its pointer, no bias, a 16-bit output and tune");
  auto plan = std::make_shared<GemmPlan>();
  plan->node = name;
  DeviceTensor bias_t;
  if (m.bias) {
    bias_t.ptr = const_cast<void*>(m.bias);
    bias_t.dtype = m.bias_dtype;
    bias_t.ndim = 1;
    bias_t.shape[0] = N;
    bias_t.stride[0] = N == 1 ? 1 : m.bias_stride;
  }
  if (bgrad && (M == 0 || N == 0 || K == 0))
    fail("a bias gradient epilogue on an empty problem (M, N or K is 0)");
  if (M == 0 || N == 0) return [](cudaStream_t) {};
  if (K == 0) {  // an empty sum: the bias, or 0
    plan->pre.push_back(
        {as_tensor(d), m.bias ? broadcast_as(bias_t, {1, M, N}) : DeviceTensor{}, 1});
    return [plan](cudaStream_t s) { plan->run(s); };
  }
  Stage st;
  GemmSpec g;
  const auto any = [](const Mat&, Stored) { return true; };
  std::tie(g.a, g.la) = prepare_operand(*plan, a, any, false);
  std::tie(g.b, g.lb) = prepare_operand(*plan, b, any, false);
  g.compute = CUBLAS_COMPUTE_32F;
  g.d = prepare_output(*plan, d, st.post);
  g.ldd = row_stride(g.d);
  g.c_dtype = g.d.dtype;
  if (m.bias) {
    if (N > 1 && m.bias_stride != 1) fail("the bias must have unit stride");
    g.bias = m.bias;
    g.bias_dtype = m.bias_dtype;
  }
  if (bgrad) {
    g.bias_grad = m.bias_grad;
    g.bias_grad_of = m.bias_grad_of;
  }
  st.call = build_call(name, g);
  if (m.tune) {  // chosen now, timed among the heuristic's candidates (a launch then only runs
    // it); with none, the call stays unresolved and its launch fails as an untuned one does
    GemmChoice rec;
    const std::string none = choose_algo(*st.call, true, kTuneCandidates, "no algorithm", rec);
    if (bgrad && !none.empty())
      fail("cuBLASLt has no algorithm without split-K for " + st.call->problem);
  }
  plan->direct = std::move(st);
  return [plan](cudaStream_t s) { plan->run(s); };
}

void launch_scaled_epilogue(const ScaledEpilogue& e, cudaStream_t stream) {
  const int64_t n = e.M * e.N;
  if (n == 0) return;
  constexpr int kThreads = 256;
  scaled_epilogue_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(e);
  REPLAY_CUDA_LAUNCH("scaled_epilogue_kernel");
}

std::string scaled_matmul_unsupported(const ScaledMatmulOperands& m) {
  if (m.a.ndim != 2 || m.b.ndim != 2 || m.d.ndim != 2) return "a, b and d must be 2-D";
  const Mat a = as_mat(m.a), b = as_mat(m.b), d = as_mat(m.d);
  const int64_t M = d.rows, N = d.cols, K = a.cols;
  if (!is_float8(a.dtype) || !is_float8(b.dtype))
    return "operands " + mat_str(a) + " and " + mat_str(b) + " are not both float8";
  if (a.dtype == DType::kFloat8E5M2 && b.dtype == DType::kFloat8E5M2)
    return "float8_e5m2 x float8_e5m2: cuBLASLt has no float8 kernel for two e5m2 operands";
  if (K == 0) return "K = 0 (an empty sum: the bias or zeros, which the eager executor writes)";
  if (K % 16 != 0 || N % 16 != 0)
    return "K = " + std::to_string(K) + ", N = " + std::to_string(N) +
           ": cuBLASLt's float8 kernels need both multiples of 16";
  // Hopper's float8 kernels read only the "TN" layout: a row-major, b column-major.
  if (!(a.cstride == 1 && (M == 1 || a.rstride >= K)))
    return "self " + mat_str(a) +
           " is not row-major: cuBLASLt's float8 kernels take only the TN layout (self "
           "row-major, mat2 column-major), so it would need a copy";
  if (!(b.rstride == 1 && b.cstride >= K))
    return "mat2 " + mat_str(b) +
           " is not column-major (not the transpose of a row-major [N, K]): cuBLASLt's float8 "
           "kernels take only the TN layout, so it would need a copy";
  const int64_t lda = M == 1 ? K : a.rstride, ldb = b.cstride;
  auto misaligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 != 0; };
  if (lda % 16 != 0 || ldb % 16 != 0 || misaligned(a.ptr) || misaligned(b.ptr))
    return "a leading dimension (" + std::to_string(lda) + ", " + std::to_string(ldb) +
           ") or an operand address is not a multiple of 16 bytes (cuBLASLt's float8 kernels)";
  if (!is_16bit_or_32bit_float(d.dtype))
    return std::string("a ") + std::string(dtype_name(d.dtype)) +
           " output (the float8 path here writes bfloat16, float16 or float32)";
  if (!(d.cstride == 1 && (M == 1 || d.rstride >= N)))
    return "the output " + mat_str(d) + " is not row-major";
  if (!m.scale_a || !m.scale_b) return "a scale pointer is null";
  if (m.bias && !((m.bias_dtype == DType::kBFloat16 &&
                   (d.dtype == DType::kBFloat16 || d.dtype == DType::kFloat32)) ||
                  (m.bias_dtype == DType::kFloat16 && d.dtype == DType::kFloat16)))
    return "a " + std::string(dtype_name(m.bias_dtype)) + " bias with a " +
           std::string(dtype_name(d.dtype)) +
           " output (cuBLASLt's float8 bias epilogue: bfloat16 with a bfloat16 or float32 output, "
           "float16 with float16)";
  int dev = 0, major = 0, minor = 0;
  REPLAY_CUDA(cudaGetDevice(&dev));
  REPLAY_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  REPLAY_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  const std::string sm = "sm_" + std::to_string(major) + std::to_string(minor);
  if (major * 10 + minor < 89) return "float8 GEMMs need sm_89 or newer; this device is " + sm;
  if (m.rowwise && (major != 9 || cublasLtGetVersion() < 120900))
    return "rowwise scales (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F) need cuBLASLt 12.9+ on "
           "sm_90; this is cuBLASLt " +
           std::to_string(cublasLtGetVersion()) + " on " + sm;
  return "";
}

PreparedMatmul prepare_scaled_matmul(const std::string& name, const ScaledMatmulOperands& m) {
  PreparedMatmul out;
  out.unsupported = scaled_matmul_unsupported(m);
  if (!out.unsupported.empty()) return out;
  const Mat a = as_mat(m.a), b = as_mat(m.b), d = as_mat(m.d);
  const int64_t M = d.rows, N = d.cols, K = a.cols;
  if (a.rows != M || b.rows != K || b.cols != N)
    throw std::invalid_argument("float8 matmul " + name + ": shapes " + mat_str(a) + " @ " +
                                mat_str(b) + " -> " + mat_str(d) + " do not fit");
  if (M == 0 || N == 0) {
    out.launch = [](cudaStream_t) {};
    return out;
  }
  GemmSpec g;
  g.a = a;
  g.la = Stored{false, M == 1 ? K : a.rstride};
  g.b = b;
  g.lb = Stored{true, b.cstride};
  g.d = d;
  g.ldd = M == 1 ? N : d.rstride;
  g.c_dtype = d.dtype;
  g.compute = CUBLAS_COMPUTE_32F;
  g.set_fast_accum = true;
  g.fast_accum = m.fast_accum;
  g.scale_a = m.scale_a;
  g.scale_b = m.scale_b;
  g.outer_vec = m.rowwise;
  if (m.bias) {
    g.bias = m.bias;
    g.bias_dtype = m.bias_dtype;
  }
  std::shared_ptr<LtCall> call = build_call(name, g);
  GemmChoice rec;
  out.unsupported = choose_algo(
      *call, m.tune, kTuneCandidatesFloat8,
      "cuBLASLt has no algorithm for this float8 matmul (cublasLtMatmulAlgoGetHeuristic returned "
      "none with deterministic split-K reductions)",
      rec);
  out.candidates = rec.candidates;
  if (!out.unsupported.empty()) return out;
  out.algo = rec.algo;
  out.launch = [call](cudaStream_t s) { lt_check(call->node, "cublasLtMatmul", call->matmul(s)); };
  return out;
}

GemmCounters gemm_counters() {
  return g_counters;
}

}  // namespace replay
