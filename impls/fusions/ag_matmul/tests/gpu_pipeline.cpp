// GPU tests of ag_matmul's chunked pipeline over CUDA IPC ("optimized", pipeline.hpp): world sizes
// 2 and 4 as processes sharing GPU 0 — correctness only (ranks share one GPU; no timing here
// means anything). Each rank's output [M, N] is checked against a CPU reference computed from
// every rank's inputs, regenerated from seeds in each process: bit-exact for exact inputs (bf16,
// float8 tensorwise and rowwise), the project's bf16 GEMM bounds for normal ones; three launches
// must give the same bits. Deliberately wrong pipelines (a chunk from the wrong rank, a dropped
// chunk, a stale signal epoch) must fail the same checks, and a peer that leaves must end the
// survivor's wait with the timeout error naming the rank and the chunk, not hang.
#include <gtest/gtest.h>

#include "harness/measure/timing.hpp"
#include "harness/report/numerics.hpp"
#include "impls/fusions/ag_matmul/pipeline.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/gpu/tp_ranks.hpp"
#include "workloads/ir/tolerance.hpp"

namespace replay::ag_matmul {
namespace {

using test::HostMat;
using test::Values;
using tp::PipelineFault;

constexpr const char* kChild = "AgMatmulPipelineRank.DISABLED_Run";

struct Case {
  bool scaled = false, rowwise = false;
  Values values = Values::kExact;
  int64_t m = 64, K = 64, N = 64;  // rows per shard, reduction, columns of the weight shard
  PipelineFault fault = PipelineFault::kNone;
  // The split/cat form: each shard is `lead` blocks of m / lead rows, block l of rank p at
  // gathered rows (l n + p) m / lead; a second weight (Llama's w3 beside w1); the gathered
  // activation written too (bf16 only: the outputs are checked as one bf16 buffer).
  int64_t lead = 1;
  bool extra = false, gathered = false;
  bool b_col_major = false;  // a bf16 weight as nn.Linear's w.t() (float8: always column-major)
  bool col_major() const { return scaled || b_col_major; }
  DType a_dtype() const { return scaled ? DType::kFloat8E4M3 : DType::kBFloat16; }
};

// Every rank's inputs: shards x[q] [m, K] (seed x_seed + q), weight shards b[q] [K, N] (w_seed +
// q), the gathered activation's scales [M] or [1], the weight shards' scales [N] or [1].
struct Inputs {
  std::vector<HostMat> x, b, b2;
  std::vector<double> scale_a;
  std::vector<std::vector<double>> scale_b;
};

Inputs make_inputs(const Case& c, int n, uint64_t x_seed, uint64_t w_seed) {
  Inputs in;
  for (int q = 0; q < n; ++q) {
    in.x.push_back(test::random_mat(x_seed + q, c.m, c.K, c.a_dtype(), c.values));
    in.b.push_back(test::random_mat(w_seed + q, c.K, c.N, c.a_dtype(), c.values));
    if (c.extra) in.b2.push_back(test::random_mat(w_seed + 50 + q, c.K, c.N, c.a_dtype(), c.values));
    in.scale_b.push_back(test::random_scales(w_seed + 100 + q, c.rowwise ? c.N : 1, c.values));
  }
  in.scale_a = test::random_scales(x_seed + 100, c.rowwise ? n * c.m : 1, c.values);
  return in;
}

// Rank r's outputs in float64: the gathered shards times r's weight shard, scaled, [M, N]; then
// times the second weight [M, N]; then the gathered activation [M, K] (each where the case has it).
std::vector<double> reference(const Case& c, const Inputs& in, int r, int n) {
  const int64_t M = n * c.m, rows = c.m / c.lead;
  auto gathered = [&](int64_t i, int64_t k) {  // row i: block l of rank p, row t of the block
    const int64_t l = i / (n * rows), p = (i / rows) % n, t = i % rows;
    return in.x[p].at(l * rows + t, k);
  };
  std::vector<double> out;
  for (const std::vector<HostMat>* w : {&in.b, &in.b2}) {
    if (w->empty()) continue;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < c.N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < c.K; ++k) acc += gathered(i, k) * (*w)[r].at(k, j);
        if (c.scaled) acc *= in.scale_a[c.rowwise ? i : 0] * in.scale_b[r][c.rowwise ? j : 0];
        out.push_back(acc);
      }
  }
  if (c.gathered)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < c.K; ++k) out.push_back(gathered(i, k));
  return out;
}

struct DeviceInputs {
  DeviceBuffer x, b, b2, sa, sb, out;  // out: [M, N] (then [M, N] of b2, then the gathered [M, K])
  PipelineOperands op;
};

std::unique_ptr<DeviceInputs> to_device(const Case& c, const Inputs& in, int r, int n) {
  auto d = std::make_unique<DeviceInputs>();
  const int64_t M = n * c.m;
  d->x = test::upload(in.x[r].v, c.a_dtype());
  // float8 operands: the weight column-major (the "TN" layout Hopper's float8 kernels take).
  d->b = test::upload(in.b[r].v, c.a_dtype(), c.K, c.N, c.col_major());
  const int64_t out_elems = M * c.N * (c.extra ? 2 : 1) + (c.gathered ? M * c.K : 0);
  d->out = DeviceBuffer(out_elems * sizeof(uint16_t));
  d->op.x = d->x.get();
  d->op.out = d->out.get();
  d->op.M = M;
  d->op.lead = c.lead;
  char* next = static_cast<char*>(d->out.get()) + M * c.N * sizeof(uint16_t);
  tp::ChunkGemm& g = d->op.gemm;
  g.a_dtype = c.a_dtype();
  g.b = device_tensor(d->b.get(), c.col_major() ? TensorMeta{{c.K, c.N}, {1, c.K}, c.a_dtype()}
                                           : TensorMeta{{c.K, c.N}, {c.N, 1}, c.a_dtype()});
  g.out_dtype = DType::kBFloat16;
  g.K = c.K;
  g.N = c.N;
  if (c.scaled) {
    d->sa = test::upload(in.scale_a, DType::kFloat32);
    d->sb = test::upload(in.scale_b[r], DType::kFloat32);
    g.scaled = true;
    g.rowwise = c.rowwise;
    g.scale_a = static_cast<const float*>(d->sa.get());
    g.scale_b = static_cast<const float*>(d->sb.get());
  }
  if (c.extra) {
    d->b2 = test::upload(in.b2[r].v, c.a_dtype(), c.K, c.N, c.col_major());
    ExtraGemm e{g, next};
    e.gemm.b.ptr = d->b2.get();  // the same layout as b
    d->op.more.push_back(e);
    next += M * c.N * sizeof(uint16_t);
  }
  if (c.gathered) d->op.gathered.push_back(next);
  return d;
}

// Whether `got` (bf16 [M, N]) passes: exact inputs must give the reference's bits; normal ones
// the numerics check with the bounds of a bf16 (or float8) GEMM over K. `why` gets the failure.
bool passes(const Case& c, const std::vector<char>& got, const std::vector<double>& ref, int n,
            std::string& why) {
  if (c.values == Values::kExact) {
    const int64_t bad = test::count_inexact(got, DType::kBFloat16, ref, &why);
    if (bad) why = std::to_string(bad) + " element(s) differ, first " + why;
    return bad == 0;
  }
  const int64_t M = n * c.m;
  HostTensor g = make_host_tensor({M, c.N}, DType::kBFloat16);
  for (int64_t i = 0; i < M * c.N; ++i) g.data[i] = load_as(DType::kBFloat16, got.data() + 2 * i);
  HostTensor t = make_host_tensor({M, c.N}, DType::kFloat64);
  for (int64_t i = 0; i < M * c.N; ++i) t.data[i] = ref[i];
  const NumericsBounds bounds =
      c.scaled ? default_bounds(DType::kBFloat16, 1, c.K, float8_gemm_error(c.K, false))
               : default_bounds(DType::kBFloat16, 1, c.K, {}, c.K);
  const NumericsResult res = check_numerics("out", g, t, bounds);
  why = res.failure();
  return res.pass();
}

std::string label(const Case& c, int r, int n) {
  return "rank " + std::to_string(r) + " of " + std::to_string(n) + ", " +
         (c.scaled ? (c.rowwise ? "float8 rowwise" : "float8 tensorwise") : "bf16") +
         (c.lead > 1 ? " " + std::to_string(c.lead) + " blocks per shard" : "") +
         (c.extra ? " two weights" : "") + (c.gathered ? " gathered written" : "") +
         (c.values == Values::kExact ? " exact" : " normal") + " m " + std::to_string(c.m) + " K " +
         std::to_string(c.K) + " N " + std::to_string(c.N);
}

// One pipeline over inputs of `seed`: three launches (outputs poisoned before each), the first
// checked, the others the same bits. With a fault, the check must fail instead.
void run_case(test::RankSession& s, const Case& c, uint64_t seed) {
  const int r = s.dist.rank, n = s.dist.world_size;
  const Inputs in = make_inputs(c, n, seed, seed + 1000);
  const auto d = to_device(c, in, r, n);
  const std::vector<double> ref = reference(c, in, r, n);
  Pipeline pipe(s.dist, tp::Transport::kIpc, d->op, c.fault);
  test::launch_three_times(
      pipe, d->out, c.fault != PipelineFault::kNone, label(c, r, n),
      [&](const std::vector<char>& got, std::string& why) { return passes(c, got, ref, n, why); });
}

// Two launches on different shards; before the second, every rank but 0 holds its stream for
// 300 ms, so rank 0 reaches its waits while its peers still hold the first launch's shards. The
// epochs must make it wait; with kStaleEpoch it copies the old shards and its output is wrong.
void run_stale(test::RankSession& s, PipelineFault fault) {
  const int r = s.dist.rank, n = s.dist.world_size;
  Case c;
  const Inputs a = make_inputs(c, n, 7, 1007), b = make_inputs(c, n, 8, 1007);
  const auto d = to_device(c, a, r, n);
  cudaStream_t st;
  REPLAY_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  {
    Pipeline pipe(s.dist, tp::Transport::kIpc, d->op, fault);
    pipe.launch(st);
    pipe.synchronize(st);
    std::string why;
    EXPECT_TRUE(passes(c, test::download_bytes(d->out.get(), d->out.bytes()), reference(c, a, r, n),
                       n, why))
        << "first launch, " << label(c, r, n) << ": " << why;
    s.rendezvous->barrier();
    test::upload_into(d->x, b.x[r].v, c.a_dtype());
    s.rendezvous->barrier();
    if (r != 0) enqueue_spin(st, 300000);
    pipe.launch(st);
    pipe.synchronize(st);
    if (r == 0) {
      const bool ok = passes(c, test::download_bytes(d->out.get(), d->out.bytes()),
                             reference(c, b, r, n), n, why);
      if (fault == PipelineFault::kNone)
        EXPECT_TRUE(ok) << "second launch behind delayed peers, " << label(c, r, n) << ": " << why;
      else
        EXPECT_FALSE(ok) << "the stale-epoch pipeline passed behind delayed peers";
    }
  }
  REPLAY_CUDA(cudaStreamDestroy(st));
}

// Rank 1 builds its pipeline and leaves without launching; rank 0's wait for chunk 1 must end
// with the watchdog's error within the timeout (3 s), and every later launch is refused.
void run_killed_peer(test::RankSession& s) {
  const int r = s.dist.rank, n = s.dist.world_size;
  Case c;
  const Inputs in = make_inputs(c, n, 11, 1011);
  const auto d = to_device(c, in, r, n);
  cudaStream_t st;
  REPLAY_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  Pipeline pipe(s.dist, tp::Transport::kIpc, d->op);
  s.rendezvous->barrier();  // every rank has opened its peers' buffers
  if (r == 1) {
    std::fflush(nullptr);
    ::_exit(0);  // gone without a signal (a launcher would stop the others on a kill)
  }
  const auto t0 = std::chrono::steady_clock::now();
  pipe.launch(st);
  try {
    pipe.synchronize(st);
    ADD_FAILURE() << "rank 0 finished although rank 1 never sent its shard";
  } catch (const RuntimeFailure& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 0: ag_matmul: chunk 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("from rank 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("did not arrive within 3 s"), std::string::npos) << msg;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 20) << "the timeout took " << secs << " s";
  EXPECT_THROW(pipe.launch(st), RuntimeFailure);
}

// The child: one rank of a case the parent names.
TEST(AgMatmulPipelineRank, DISABLED_Run) {
  const std::string tc = test::tp_case();
  ASSERT_FALSE(tc.empty()) << "runs as a rank started by the AgMatmulPipeline tests";
  auto s = test::join_ranks(tc == "kill" ? 3 : 20);
  if (tc == "exact") {
    for (const auto& [scaled, rowwise] : {std::pair{false, false}, {true, false}, {true, true}}) {
      Case c;
      c.scaled = scaled;
      c.rowwise = rowwise;
      run_case(*s, c, 1);
    }
    Case tall;  // more rows than columns, K of a few MMA tiles
    tall.m = 256;
    tall.N = 32;
    run_case(*s, tall, 2);
    // the split/cat form of a sequence-parallel gather, Llama's w1 and w3, the saved activation
    Case sp;
    sp.lead = 2;
    sp.extra = sp.gathered = true;
    run_case(*s, sp, 6);
    Case tiny = sp;  // blocks of 4 rows, N = 44 (the captured sequence-parallel graph at ws 4)
    tiny.m = 8;
    tiny.N = 44;
    run_case(*s, tiny, 9);
    tiny.b_col_major = true;
    run_case(*s, tiny, 10);
    Case sp8 = sp;  // float8 rowwise over row blocks: each block reads its own rows' scales
    sp8.extra = sp8.gathered = false;
    sp8.scaled = sp8.rowwise = true;
    run_case(*s, sp8, 7);
    run_stale(*s, PipelineFault::kNone);
  } else if (tc == "normal") {
    Case c;
    c.values = Values::kNormal;
    c.m = 128;
    c.K = 512;
    c.N = 256;
    run_case(*s, c, 3);
    c.scaled = c.rowwise = true;
    run_case(*s, c, 4);
  } else if (tc == "wrong") {
    for (PipelineFault f : {PipelineFault::kWrongPeer, PipelineFault::kDropChunk}) {
      Case c;
      c.fault = f;
      run_case(*s, c, 5);
      c.lead = 2;  // the same faults in the split/cat form, with the gathered activation written
      c.extra = c.gathered = true;
      run_case(*s, c, 8);
    }
    run_stale(*s, PipelineFault::kStaleEpoch);
  } else if (tc == "kill") {
    run_killed_peer(*s);
  } else {
    FAIL() << "unknown case " << tc;
  }
}

class AgMatmulPipeline : public ::testing::TestWithParam<int> {};

// correctness only (ranks share one GPU)
TEST_P(AgMatmulPipeline, ExactInputsBitIdenticalSharedGpu) {
  REQUIRE_GPU();
  EXPECT_RANKS_PASS(kChild, "exact", GetParam());
}

// correctness only (ranks share one GPU)
TEST_P(AgMatmulPipeline, NormalInputsWithinBf16BoundsSharedGpu) {
  REQUIRE_GPU();
  EXPECT_RANKS_PASS(kChild, "normal", GetParam());
}

TEST_P(AgMatmulPipeline, WrongPipelinesFailSharedGpu) {
  REQUIRE_GPU();
  EXPECT_RANKS_PASS(kChild, "wrong", GetParam());
}

INSTANTIATE_TEST_SUITE_P(WorldSize, AgMatmulPipeline, ::testing::Values(2, 4));

TEST(AgMatmulPipelineTimeout, KilledPeerEndsTheWaitWithTheError) {
  REQUIRE_GPU();
  EXPECT_RANKS_PASS(kChild, "kill", 2);
}

}  // namespace
}  // namespace replay::ag_matmul
