// Helpers of the multi-process GPU tests of the chunked tensor-parallel pipelines (ag_matmul and
// matmul_rs, impls/fusions/*/tests/gpu_pipeline.cpp): the parent test starts world_size processes
// of this test binary (harness/dist's launch_local: fork + exec, so no child inherits a CUDA
// context) that run one DISABLED_ child test, told which case by REPLAY_TP_CASE; each child joins
// the rendezvous, builds a DistContext (no NCCL communicator: the ranks share GPU 0, correctness
// only), generates every rank's inputs from per-rank seeds and checks its own outputs against a
// CPU reference.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "harness/dist/launch.hpp"
#include "harness/dist/launch_env.hpp"
#include "harness/dist/rendezvous.hpp"
#include "impls/cuda/cuda_check.hpp"
#include "impls/cuda/dist_context.hpp"
#include "workloads/ir/dtype.hpp"

namespace replay::test {

inline constexpr const char* kTpCaseEnv = "REPLAY_TP_CASE";

/// The case a child process runs ("" in the parent).
inline std::string tp_case() {
  const char* c = std::getenv(kTpCaseEnv);
  return c ? c : "";
}

/// Runs `world_size` ranks of this binary, each running the gtest `child_test` (a DISABLED_ test)
/// with REPLAY_TP_CASE=`case_name`, and waits (at most timeout_s). Their output goes to this
/// process's stdout/stderr.
inline dist::LaunchResult run_ranks(const std::string& child_test, const std::string& case_name,
                                    int world_size, double timeout_s = 60) {
  char exe[4096];
  const ssize_t len = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) throw std::runtime_error("cannot read /proc/self/exe");
  exe[len] = 0;
  ::setenv(kTpCaseEnv, case_name.c_str(), 1);
  dist::LaunchOptions o;
  o.nproc = world_size;
  o.timeout_s = timeout_s;
  o.program = exe;
  o.args = {"--gtest_filter=" + child_test, "--gtest_also_run_disabled_tests"};
  dist::LaunchResult r = dist::launch_local(o);
  ::unsetenv(kTpCaseEnv);
  return r;
}

/// Runs the ranks and expects every one to exit 0 (each child's failures are in the output).
#define EXPECT_RANKS_PASS(child_test, case_name, world_size)                                      \
  do {                                                                                            \
    const ::replay::dist::LaunchResult r_ =                                                       \
        ::replay::test::run_ranks(child_test, case_name, world_size);                             \
    EXPECT_EQ(r_.exit_code, 0) << "case " << case_name << " at world size " << world_size << ": " \
                               << r_.message;                                                     \
  } while (0)

/// One child's place in the run: the rendezvous and the DistContext built on it (device 0, no
/// communicator, shared_device).
struct RankSession {
  dist::LaunchEnv env;
  std::unique_ptr<dist::Rendezvous> rendezvous;
  DistContext dist;
};

inline std::unique_ptr<RankSession> join_ranks(double timeout_s) {
  auto s = std::make_unique<RankSession>();
  s->env = dist::parse_launch_env(dist::process_env());
  dist::RendezvousOptions o;
  o.addr = s->env.master_addr;
  o.port = s->env.master_port;
  o.rank = s->env.rank;
  o.world_size = s->env.world_size;
  o.timeout = std::chrono::milliseconds(120000);
  s->rendezvous = std::make_unique<dist::Rendezvous>(o);
  REPLAY_CUDA(cudaSetDevice(0));
  DistContext& d = s->dist;
  d.rank = s->env.rank;
  d.world_size = s->env.world_size;
  d.local_rank = s->env.local_rank;
  d.device = 0;
  d.shared_device = true;
  d.no_nccl_why = "the ranks share GPU 0 (NCCL refuses two ranks on one device)";
  d.timeout_s = timeout_s;
  dist::Rendezvous* r = s->rendezvous.get();
  d.all_gather = [r](const std::string& b) { return r->all_gather(b); };
  d.barrier = [r] { r->barrier(); };
  return s;
}

/// What the inputs hold. kExact: values in {-1, 0, 1} and power-of-two scales, so every GEMM and
/// sum is exact in float32 and the result must be the reference's bits; kNormal: N(0, 1) values
/// rounded to the dtype, scales in [0.5, 2), checked with the project's numerics bounds.
enum class Values { kExact, kNormal };

/// A host matrix of doubles (already rounded to `dtype`), [rows, cols] row-major in `v`.
struct HostMat {
  int64_t rows = 0, cols = 0;
  DType dtype = DType::kBFloat16;
  std::vector<double> v;
  double at(int64_t r, int64_t c) const { return v[r * cols + c]; }
};

inline HostMat random_mat(uint64_t seed, int64_t rows, int64_t cols, DType dtype, Values kind) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> tri(-1, 1);
  HostMat m{rows, cols, dtype, std::vector<double>(rows * cols)};
  for (double& x : m.v) x = round_to(dtype, kind == Values::kExact ? tri(gen) : normal(gen));
  return m;
}

/// `n` float32 scales: powers of two in {0.5, 1, 2} (kExact) or uniform in [0.5, 2).
inline std::vector<double> random_scales(uint64_t seed, int64_t n, Values kind) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> e(-1, 1);
  std::uniform_real_distribution<double> u(0.5, 2.0);
  std::vector<double> s(n);
  for (double& x : s)
    x = kind == Values::kExact ? std::ldexp(1.0, e(gen)) : round_to(DType::kFloat32, u(gen));
  return s;
}

/// An owning device copy of host values in `dtype`; `col_major` stores a [rows, cols] matrix as
/// column-major (element (r, c) at r + c rows).
inline DeviceBuffer upload(const std::vector<double>& v, DType dtype, int64_t rows = 0,
                           int64_t cols = 0, bool col_major = false) {
  const size_t es = dtype_size(dtype);
  std::vector<char> bytes(v.size() * es);
  for (size_t i = 0; i < v.size(); ++i) {
    size_t dst = i;
    if (col_major) dst = (i % cols) * rows + i / cols;
    store_as(dtype, v[i], bytes.data() + dst * es);
  }
  DeviceBuffer b(bytes.size());
  REPLAY_CUDA(cudaMemcpy(b.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  return b;
}

/// Replaces the contents of `b` (same size) with `v` in `dtype`.
inline void upload_into(DeviceBuffer& b, const std::vector<double>& v, DType dtype,
                        int64_t rows = 0, int64_t cols = 0, bool col_major = false) {
  DeviceBuffer fresh = upload(v, dtype, rows, cols, col_major);
  REPLAY_CUDA(cudaMemcpy(b.get(), fresh.get(), b.bytes(), cudaMemcpyDeviceToDevice));
  REPLAY_CUDA(cudaDeviceSynchronize());  // a device-to-device cudaMemcpy may return early
}

/// The raw bytes of a device buffer.
inline std::vector<char> download_bytes(const void* p, size_t bytes) {
  std::vector<char> h(bytes);
  REPLAY_CUDA(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost));
  return h;
}

/// Elements of `got` (bytes of `dtype`) that are not exactly round_to(dtype, ref[i]); `first`
/// describes the first.
inline int64_t count_inexact(const std::vector<char>& got, DType dtype,
                             const std::vector<double>& ref, std::string* first = nullptr) {
  const size_t es = dtype_size(dtype);
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = load_as(dtype, got.data() + i * es), t = round_to(dtype, ref[i]);
    if (g != t && !(std::isnan(g) && std::isnan(t))) {
      if (bad == 0 && first)
        *first =
            "element " + std::to_string(i) + ": " + std::to_string(g) + " vs " + std::to_string(t);
      ++bad;
    }
  }
  return bad;
}

/// Three launches of `pipe` into `out` on a stream of their own, `out` poisoned with 0xFF bytes
/// (NaN) before each: the first must pass `check(got, why)` (a deliberately wrong pipeline,
/// `faulty`, must fail it instead), the others must give the first's bits. `what` names the case
/// and rank in failures.
template <typename Pipe, typename Check>
void launch_three_times(Pipe& pipe, const DeviceBuffer& out, bool faulty, const std::string& what,
                        Check check) {
  cudaStream_t st;
  REPLAY_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  std::vector<char> first;
  for (int it = 0; it < 3; ++it) {
    REPLAY_CUDA(cudaMemsetAsync(out.get(), 0xFF, out.bytes(), st));
    pipe.launch(st);
    pipe.synchronize(st);
    const std::vector<char> got = download_bytes(out.get(), out.bytes());
    if (it == 0) {
      std::string why;
      const bool ok = check(got, why);
      if (!faulty)
        EXPECT_TRUE(ok) << what << ": " << why;
      else
        EXPECT_FALSE(ok) << what << ": the deliberately wrong pipeline passed";
      first = got;
    } else if (!faulty) {
      EXPECT_TRUE(got == first) << what << ": launch " << it
                                << " is not bit-identical to the first";
    }
  }
  REPLAY_CUDA(cudaStreamDestroy(st));
}

}  // namespace replay::test
