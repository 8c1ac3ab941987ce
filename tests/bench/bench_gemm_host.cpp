// Host enqueue of one eager matmul (lower_gemm, impls/eager/gemm.cu) against its problem size
// (Google Benchmark): why the mm nodes of the realistic traces cost 2-20x a bare kernel launch on
// the host (H100 on 2026-11-25: 7-8 us for [16, 64] x [64, 256], 75-121 us for the float32
// [8192, 4096] x [4096, 14336] of the float32 linear; `bash scripts/device.sh OUT gemm`).
// Each iteration is one enqueue timed behind the blocking kernel (time_host_enqueue), as `replay
// run` times a replay's host enqueue; the operands are uninitialized device buffers (what they
// hold does not change the enqueue). Counters: kernels (the kernels CUPTI saw in one launch,
// e.g. a split-K reduction beside the GEMM), gpu_us (median of three cold samples, L2 flushed),
// waited (enqueues during which the blocking kernel timed out: retried, up to 10 times); for scale,
// bare_launch times one launch of the harness's 1 us spin kernel (enqueue_spin) the same way.
//
// algo/<dtype>/<MxNxK>/<i>: the same problem through cuBLASLt directly with the heuristic's i-th
// algorithm (of up to 8): host enqueue, GPU µs, kernels, workspace and the algorithm's tile,
// split-K, stages and cluster ids, to tell whether the host cost follows the problem or the
// algorithm.
//
// Usage: replay_bench_gemm_host [google benchmark flags, e.g. --benchmark_filter=float32]
// Without a CUDA device every benchmark reports "skipped: no CUDA device".
#include <benchmark/benchmark.h>
#include <cublasLt.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/measure/cupti_tracer.hpp"
#include "harness/measure/timing.hpp"
#include "impls/cuda/cuda_check.hpp"
#include "impls/eager/gemm.hpp"

using namespace replay;

namespace {

// [M, K] @ [K, N] -> [M, N], row-major operands, one dtype throughout.
struct Problem {
  int64_t M, N, K;
  DType dtype;
};

DeviceTensor matrix(void* ptr, DType t, int64_t rows, int64_t cols) {
  return device_tensor(ptr, TensorMeta{{rows, cols}, {cols, 1}, t});
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Host µs of one enqueue behind the blocking kernel; an enqueue that outlasted the blocker
// (HostEnqueue::waited) is counted in `waited` and tried again, up to 10 times; nullopt then.
std::optional<double> one_enqueue_us(const std::function<void(cudaStream_t)>& fn, cudaStream_t s,
                                     size_t* waited) {
  for (int attempt = 0; attempt < 10; ++attempt) {
    const HostEnqueue e = time_host_enqueue(fn, s, 1);
    *waited += e.waited;
    if (!e.us.empty()) return e.us[0];
  }
  return std::nullopt;
}

// The timed loop of every benchmark here: one enqueue per iteration, its host time as the
// iteration's (manual) time.
void time_enqueues(benchmark::State& state, const std::function<void(cudaStream_t)>& fn,
                   cudaStream_t s, size_t* waited) {
  for (auto _ : state) {
    const std::optional<double> us = one_enqueue_us(fn, s, waited);
    if (!us) {
      state.SkipWithError("every enqueue outlasted the blocking kernel");
      break;
    }
    state.SetIterationTime(*us * 1e-6);
  }
}

// One warmed-up launch measured: the kernels CUPTI sees in it, the median of three cold GPU
// samples, then the timed enqueues (counters kernels, gpu_us, waited).
void measure(benchmark::State& state, const std::function<void(cudaStream_t)>& launch,
             cudaStream_t s) {
  const CuptiSummary k = trace_kernels(launch, s);
  int kernels = 0;
  for (const auto& r : k.kernels) kernels += r.count;
  L2Flush l2;
  const std::vector<double> gpu = cold_samples(launch, s, l2, 3);
  size_t waited = 0;
  time_enqueues(state, launch, s, &waited);
  state.counters["kernels"] = kernels;
  state.counters["gpu_us"] = median_of(gpu);
  state.counters["waited"] = static_cast<double>(waited);
  if (!k.error.empty()) state.SetLabel("CUPTI: " + k.error);
}

void gemm_host(benchmark::State& state, Problem p) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    state.SkipWithError("skipped: no CUDA device");
    return;
  }
  const size_t es = dtype_size(p.dtype);
  DeviceBuffer a(p.M * p.K * es), b(p.K * p.N * es), c(p.M * p.N * es);
  REPLAY_CUDA(cudaMemset(a.get(), 0, a.bytes()));
  REPLAY_CUDA(cudaMemset(b.get(), 0, b.bytes()));
  Node n;
  n.id = "mm";
  n.op = Op::kMm;
  const EagerLaunch launch =
      lower_gemm(n, {matrix(a.get(), p.dtype, p.M, p.K), matrix(b.get(), p.dtype, p.K, p.N)},
                 {matrix(c.get(), p.dtype, p.M, p.N)});
  cudaStream_t s = nullptr;
  REPLAY_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  launch(s);  // the first launch chooses the algorithm
  REPLAY_CUDA(cudaStreamSynchronize(s));
  measure(state, launch, s);
  REPLAY_CUDA(cudaStreamDestroy(s));
}

void lt_ok(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": cuBLASLt status " + std::to_string(st));
}

// The same row-major [M, K] @ [K, N] through cuBLASLt directly (float32 compute, no TF32), with
// the heuristic's i-th algorithm (of up to 8, default preferences but a 32 MiB workspace), to see
// whether the host cost belongs to the problem or to the algorithm the heuristic picked.
struct LtProblem {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> algos;
  static constexpr size_t kWorkspace = size_t{32} << 20;

  explicit LtProblem(const Problem& p) {
    try {
      init(p);
    } catch (...) {  // what was created before the failure
      release();
      throw;
    }
  }
  ~LtProblem() { release(); }
  LtProblem(const LtProblem&) = delete;
  LtProblem& operator=(const LtProblem&) = delete;

 private:
  void init(const Problem& p) {
    const cudaDataType_t t = p.dtype == DType::kBFloat16 ? CUDA_R_16BF : CUDA_R_32F;
    lt_ok(cublasLtCreate(&handle), "cublasLtCreate");
    lt_ok(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "DescCreate");
    // Row-major C[M, N] = A[M, K] B[K, N] is column-major C^T[N, M] = B^T[N, K] A^T[K, M].
    lt_ok(cublasLtMatrixLayoutCreate(&la, t, p.N, p.K, p.N), "LayoutCreate");
    lt_ok(cublasLtMatrixLayoutCreate(&lb, t, p.K, p.M, p.K), "LayoutCreate");
    lt_ok(cublasLtMatrixLayoutCreate(&lc, t, p.N, p.M, p.N), "LayoutCreate");
    cublasLtMatmulPreference_t raw = nullptr;
    lt_ok(cublasLtMatmulPreferenceCreate(&raw), "PreferenceCreate");
    const std::unique_ptr<cublasLtMatmulPreferenceOpaque_t,
                          decltype(&cublasLtMatmulPreferenceDestroy)>
        pref(raw, &cublasLtMatmulPreferenceDestroy);
    const uint64_t ws = kWorkspace;
    lt_ok(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &ws, sizeof(ws)),
          "PreferenceSetAttribute");
    algos.resize(8);
    int returned = 0;
    lt_ok(cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, lc, lc, pref.get(), 8, algos.data(),
                                         &returned),
          "AlgoGetHeuristic");
    algos.resize(static_cast<size_t>(returned));
  }
  void release() {  // destroys what was created, in reverse order
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (handle) cublasLtDestroy(handle);
    lc = lb = la = nullptr;
    desc = nullptr;
    handle = nullptr;
  }
};

// An attribute of an algorithm's configuration whatever its width (cublasLt.h: the cluster shape
// is a uint16, the split-K number an int32 that may be -1, the others int32 or uint32); a 4-byte
// value is read as signed. -2 where cuBLASLt does not give it.
int64_t algo_attr(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  size_t size = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&a, attr, nullptr, 0, &size) != CUBLAS_STATUS_SUCCESS ||
      size == 0 || size > sizeof(uint64_t))
    return -2;
  uint64_t v = 0;  // little-endian: the low `size` bytes
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, size, &written) != CUBLAS_STATUS_SUCCESS)
    return -2;
  if (size == sizeof(int32_t)) return static_cast<int32_t>(static_cast<uint32_t>(v));
  return static_cast<int64_t>(v);
}

void gemm_algo_host(benchmark::State& state, Problem p, size_t i) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    state.SkipWithError("skipped: no CUDA device");
    return;
  }
  static std::map<std::string, std::unique_ptr<LtProblem>> problems;  // one heuristic query each
  const std::string key = std::to_string(p.M) + "x" + std::to_string(p.N) + "x" +
                          std::to_string(p.K) + std::string(dtype_name(p.dtype));
  auto& lt = problems[key];
  try {
    if (!lt) lt = std::make_unique<LtProblem>(p);
  } catch (const std::exception& e) {  // a refused problem skips its rows, not the whole run
    state.SkipWithError(e.what());
    return;
  }
  if (i >= lt->algos.size()) {
    const std::string why =
        "the heuristic returned " + std::to_string(lt->algos.size()) + " algorithm(s)";
    state.SkipWithError(why.c_str());
    return;
  }
  const cublasLtMatmulHeuristicResult_t& h = lt->algos[i];
  if (h.state != CUBLAS_STATUS_SUCCESS) {
    state.SkipWithError("the heuristic's result has a failed state");
    return;
  }
  const size_t es = dtype_size(p.dtype);
  DeviceBuffer a(p.M * p.K * es), b(p.K * p.N * es), c(p.M * p.N * es), ws(LtProblem::kWorkspace);
  REPLAY_CUDA(cudaMemset(a.get(), 0, a.bytes()));
  REPLAY_CUDA(cudaMemset(b.get(), 0, b.bytes()));
  const float alpha = 1, beta = 0;
  cublasStatus_t last = CUBLAS_STATUS_SUCCESS;  // launches record their status, checked below
  auto launch = [&](cudaStream_t s) {
    const cublasStatus_t st =
        cublasLtMatmul(lt->handle, lt->desc, &alpha, b.get(), lt->la, a.get(), lt->lb, &beta,
                       c.get(), lt->lc, c.get(), lt->lc, &h.algo, ws.get(), h.workspaceSize, s);
    if (st != CUBLAS_STATUS_SUCCESS) last = st;
  };
  cudaStream_t s = nullptr;
  REPLAY_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  launch(s);
  REPLAY_CUDA(cudaStreamSynchronize(s));
  if (last != CUBLAS_STATUS_SUCCESS) {
    REPLAY_CUDA(cudaStreamDestroy(s));
    state.SkipWithError(("cublasLtMatmul: status " + std::to_string(last)).c_str());
    return;
  }
  measure(state, launch, s);
  REPLAY_CUDA(cudaStreamDestroy(s));
  if (last != CUBLAS_STATUS_SUCCESS)
    state.SkipWithError(("cublasLtMatmul: status " + std::to_string(last)).c_str());
  state.counters["ws_MiB"] = static_cast<double>(h.workspaceSize) / (1 << 20);
  state.counters["tile"] = algo_attr(h.algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
  state.counters["splitk"] = algo_attr(h.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
  state.counters["stages"] = algo_attr(h.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID);
  state.counters["cluster"] = algo_attr(h.algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
  state.counters["algo_id"] = algo_attr(h.algo, CUBLASLT_ALGO_CONFIG_ID);
}

void bare_launch(benchmark::State& state) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    state.SkipWithError("skipped: no CUDA device");
    return;
  }
  cudaStream_t s = nullptr;
  REPLAY_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto launch = [](cudaStream_t st) { enqueue_spin(st, 1); };
  launch(s);
  REPLAY_CUDA(cudaStreamSynchronize(s));
  size_t waited = 0;
  time_enqueues(state, launch, s, &waited);
  state.counters["waited"] = static_cast<double>(waited);
  REPLAY_CUDA(cudaStreamDestroy(s));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::RegisterBenchmark("bare_launch", bare_launch)
      ->UseManualTime()
      ->Iterations(30)
      ->Unit(benchmark::kMicrosecond);
  // Shapes of the bundled traces' mm nodes (M = batch x tokens), small to large.
  const Problem problems[] = {
      {16, 256, 64, DType::kBFloat16},       {1024, 1024, 1024, DType::kBFloat16},
      {8192, 6400, 1600, DType::kBFloat16},  {8192, 14336, 4096, DType::kBFloat16},
      {8192, 4096, 14336, DType::kBFloat16}, {16, 256, 64, DType::kFloat32},
      {1024, 1024, 1024, DType::kFloat32},   {8192, 14336, 4096, DType::kFloat32},
      {4096, 14336, 8192, DType::kFloat32}};
  for (const Problem& p : problems) {
    const std::string name = "mm/" + std::string(dtype_name(p.dtype)) + "/" + std::to_string(p.M) +
                             "x" + std::to_string(p.N) + "x" + std::to_string(p.K);
    benchmark::RegisterBenchmark(name.c_str(), gemm_host, p)
        ->UseManualTime()
        ->Iterations(30)
        ->Unit(benchmark::kMicrosecond);
    for (size_t i = 0; i < 8; ++i)
      benchmark::RegisterBenchmark(("algo/" + name.substr(3) + "/" + std::to_string(i)).c_str(),
                                   gemm_algo_host, p, i)
          ->UseManualTime()
          ->Iterations(30)
          ->Unit(benchmark::kMicrosecond);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
