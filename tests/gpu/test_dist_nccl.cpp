// The multi-process path on one GPU (issue 31): an NCCL communicator of one rank (world size 1),
// the eager collectives through it, the ag_matmul / matmul_rs NCCL baselines, the context without
// a communicator (ranks sharing a GPU), RankSession's own bootstrap at world size 1, and `replay
// launch --nproc 2` with both ranks on the one GPU (shared-device handling: no hang, every row
// says why). Runs on several GPUs too (the ranks then get their own).
#include <gtest/gtest.h>

#include <nccl.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "harness/dist/launch.hpp"
#include "harness/dist/rank_session.hpp"
#include "harness/measure/timing.hpp"
#include "impls/eager/collective.hpp"
#include "workloads/loader/trace_loader.hpp"

namespace replay {
namespace {

std::string ws1_trace(const std::string& name) {
  return std::string(REPLAY_TRACES_DIR) + "/tp/ws1/" + name + ".json";
}

const char* const kWs1Traces[] = {"tp_colwise_ag_mm_bf16_ws1_16x32x24",
                                  "tp_rowwise_mm_rs_bf16_ws1_16x32x24"};

// A DistContext of one rank with a real NCCL communicator; every watched NCCL call is recorded.
struct OneRank {
  DistContext ctx;
  std::vector<std::string> calls;
  OneRank() {
    ctx.comm = dist::init_nccl_comm(dist::new_nccl_unique_id(), 1, 0, 30);
    ctx.watch = [this](cudaStream_t, const std::string& what) { calls.push_back(what); };
    ctx.all_gather = [](const std::string& b) { return std::vector<std::string>{b}; };
    ctx.barrier = [] {};
  }
  ~OneRank() { ncclCommAbort(ctx.comm); }
};

// The registry with ag_matmul and matmul_rs allowed at world size 1 (their specs say 2: a group
// of one has nothing to overlap), so their baselines can run through a one-rank communicator.
struct Ws1Registry {
  std::vector<FusionSpec> specs;
  std::vector<const FusionSpec*> ptrs;
  Ws1Registry() {
    for (const FusionSpec* f : fusion_registry())
      if (f->name == "ag_matmul" || f->name == "matmul_rs") specs.push_back(*f);
    for (auto& s : specs) s.min_world_size = 1;
    for (const auto& s : specs) ptrs.push_back(&s);
  }
};

// Runs `variant` of the plan through `ctx` and checks every output against the reference of
// `ref_seed` (the inputs always come from seed 1): the verdicts, one per output.
std::vector<NumericsResult> run_checked(const Graph& g, const Plan& plan,
                                        const std::string& variant, const DistContext* ctx,
                                        uint64_t ref_seed, std::string* fallback = nullptr) {
  const auto in = run_reference(g, generate_inputs(g, 1));
  const auto ref = run_reference(g, generate_inputs(g, ref_seed));
  GpuProgram prog(g, plan, variant, in, nullptr, ctx);
  if (fallback)
    for (size_t r = 0; r < plan.regions.size(); ++r)
      *fallback += prog.fallback_reason(static_cast<int>(r));
  prog.poison_outputs(nullptr);
  prog.run_all(LaunchContext{});
  REPLAY_CUDA(cudaDeviceSynchronize());
  std::vector<NumericsResult> out;
  const auto bounds = default_value_bounds(g);
  for (int v : g.outputs)
    out.push_back(check_numerics(g.values[v].name, prog.download(v, nullptr), ref.at(v),
                                 output_bounds(g, plan, bounds, v)));
  return out;
}

TEST(NcclOneRank, EagerCollectivesGoThroughNccl) {
  REQUIRE_GPU();
  OneRank one;
  for (const char* name : kWs1Traces) {
    SCOPED_TRACE(name);
    const Graph g = load_trace(ws1_trace(name));
    const Plan plan = make_plan(g, fusion_registry());
    one.calls.clear();
    for (const auto& n : run_checked(g, plan, "eager", &one.ctx, 1))
      EXPECT_TRUE(n.pass()) << n.value << ": " << n.failure();
    ASSERT_EQ(one.calls.size(), 1u);  // the collective ran as one NCCL call, not a copy
    EXPECT_TRUE(one.calls[0].rfind("ncclAllGather of node 'all_gather'", 0) == 0 ||
                one.calls[0].rfind("ncclReduceScatter of node 'reduce_scatter'", 0) == 0)
        << one.calls[0];
    // The check catches a wrong result: the same outputs against another seed's reference.
    bool caught = false;
    for (const auto& n : run_checked(g, plan, "eager", &one.ctx, 2)) caught |= !n.pass();
    EXPECT_TRUE(caught);
  }
}

TEST(NcclOneRank, BaselinesRunFusedThroughNccl) {
  REQUIRE_GPU();
  OneRank one;
  Ws1Registry reg;
  for (const char* name : kWs1Traces) {
    SCOPED_TRACE(name);
    const Graph g = load_trace(ws1_trace(name));
    const Plan plan = make_plan(g, reg.ptrs);
    ASSERT_EQ(plan.regions.size(), 1u);
    one.calls.clear();
    std::string fallback;
    for (const auto& n : run_checked(g, plan, "baseline", &one.ctx, 1, &fallback))
      EXPECT_TRUE(n.pass()) << n.value << ": " << n.failure();
    EXPECT_EQ(fallback, "");  // ran fused, not eagerly
    ASSERT_EQ(one.calls.size(), 1u);
    bool caught = false;
    for (const auto& n : run_checked(g, plan, "baseline", &one.ctx, 2)) caught |= !n.pass();
    EXPECT_TRUE(caught);
  }
}

TEST(NcclOneRank, WithoutACommunicatorEveryPathSaysWhy) {
  REQUIRE_GPU();
  DistContext none;
  none.world_size = 1;
  none.shared_device = true;
  none.no_nccl_why = "NCCL cannot place two ranks on one GPU (test)";
  Ws1Registry reg;
  const Graph g = load_trace(ws1_trace(kWs1Traces[0]));
  const Plan eager_plan = make_plan(g, fusion_registry());
  try {
    GpuProgram prog(g, eager_plan, "eager", run_reference(g, generate_inputs(g, 1)), nullptr,
                    &none);
    FAIL() << "an eager all-gather ran without a communicator";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("needs an NCCL communicator: NCCL cannot place"),
              std::string::npos)
        << e.what();
  }
  // The baseline declines with the reason (its region then falls back to eager, which throws).
  const Plan plan = make_plan(g, reg.ptrs);
  EXPECT_THROW(
      GpuProgram(g, plan, "baseline", run_reference(g, generate_inputs(g, 1)), nullptr, &none),
      std::invalid_argument);
}

TEST(NcclOneRank, RankSessionBootstrapsAtWorldSizeOne) {
  REQUIRE_GPU();
  dist::LaunchEnv env;
  env.master_addr = "127.0.0.1";
  env.master_port = static_cast<uint16_t>(dist::free_port("127.0.0.1"));
  env.launcher = "torchrun";
  dist::RankSession s(env, 30);
  EXPECT_NE(s.context().comm, nullptr);
  EXPECT_FALSE(s.context().shared_device);
  ASSERT_EQ(s.devices().size(), 1u);
  EXPECT_EQ(s.devices()[0].uuid.rfind("GPU-", 0), 0u) << s.devices()[0].uuid;
  EXPECT_TRUE(static_cast<bool>(s.context().watch));
  // The eager path through the session's communicator and watchdog.
  const Graph g = load_trace(ws1_trace(kWs1Traces[1]));
  for (const auto& n : run_checked(g, make_plan(g, fusion_registry()), "eager", &s.context(), 1))
    EXPECT_TRUE(n.pass()) << n.value << ": " << n.failure();
}

// A peer that never joins: the non-blocking init ends after the timeout, naming the rank, instead
// of hanging (the communicator is aborted).
TEST(NcclOneRank, InitWithoutThePeerTimesOut) {
  REQUIRE_GPU();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    ncclComm_t c = dist::init_nccl_comm(dist::new_nccl_unique_id(), 2, 0, 2.0);
    ncclCommAbort(c);
    FAIL() << "a communicator of 2 ranks came up with one";
  } catch (const RuntimeFailure& e) {
    EXPECT_EQ(std::string(e.what()),
              "rank 0: ncclCommInitRank over 2 ranks did not complete within 2 s (a peer rank "
              "hung or died; the communicator was aborted)");
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30);
}

// A watched call that does not complete (here: a 10 s spin standing for a collective whose peer
// hung) ends the process with exit code 4 and the line naming the rank and the call.
TEST(NcclOneRankDeathTest, WatchdogEndsAHungCall) {
  REQUIRE_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // re-executes the binary: a fresh CUDA context
  EXPECT_EXIT(
      {
        dist::CollectiveWatchdog w(3, 0, 0.5);
        cudaStream_t s = nullptr;
        cudaStreamCreate(&s);
        enqueue_spin(s, 10e6);
        w.watch(s, "ncclAllGather of node 'all_gather'");
        cudaStreamSynchronize(s);
        std::exit(0);  // not reached: the watchdog ends the process first
      },
      ::testing::ExitedWithCode(4),
      "error: rank 3: ncclAllGather of node 'all_gather' did not complete within 0.5 s");
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// `replay launch --nproc 1 -- run` on the world-size-1 traces: the whole CLI path (launcher env,
// rendezvous, NCCL communicator of one rank, merge, rank 0's results.json).
TEST(NcclOneRank, ReplayLaunchOneRank) {
  REQUIRE_GPU();
  const auto out = std::filesystem::temp_directory_path() / "replay_launch_ws1";
  std::filesystem::remove_all(out);
  const std::string cmd = std::string(REPLAY_BIN) + " launch --nproc 1 --timeout 300 -- run " +
                          ws1_trace(kWs1Traces[0]) + " " + ws1_trace(kWs1Traces[1]) +
                          " --modes cold --no-matmul-ceilings --out " + out.string() + " > " +
                          (out.string() + ".log") + " 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << read_text(out.string() + ".log");
  const std::string results = read_text(out / "results.json");
  EXPECT_NE(results.find("communicator of 1 rank(s)"), std::string::npos);
  EXPECT_NE(results.find("\"verdict\": \"PASS\""), std::string::npos);
  EXPECT_EQ(results.find("\"verdict\": \"FAIL\""), std::string::npos);
}

// `replay launch --nproc N` (N = 2, 4) with every rank on one GPU, on the ws-N traces of
// traces/tp: no communicator, every row that needs NCCL says why, the timings are labelled, the
// run ends (no hang) with exit 0, and the `optimized` pipeline of every region PASSes with every
// rank's outputs checked (rank N-1's among them) and no row FAILs.
TEST(SharedGpu, RanksOnOneGpuRunThePipelinesAndSayWhyNot) {
  REQUIRE_GPU();
  if (cuda_device_count() != 1)
    GTEST_SKIP() << "needs exactly 1 GPU (found " << cuda_device_count()
                 << "): the ranks would get their own";
  for (int n : {2, 4}) {
    SCOPED_TRACE("world size " + std::to_string(n));
    const auto out =
        std::filesystem::temp_directory_path() / ("replay_launch_shared_ws" + std::to_string(n));
    std::filesystem::remove_all(out);
    std::string traces;
    for (const auto& e :
         std::filesystem::directory_iterator(std::string(REPLAY_TRACES_DIR) + "/tp"))
      if (e.path().filename().string().find("_ws" + std::to_string(n) + "_") != std::string::npos)
        traces += " " + e.path().string();
    ASSERT_FALSE(traces.empty());
    const std::string cmd = std::string(REPLAY_BIN) + " launch --nproc " + std::to_string(n) +
                            " --timeout 300 -- run" + traces +
                            " --modes cold --no-matmul-ceilings --rank-timeout 60 --out " +
                            out.string() + " > " + (out.string() + ".log") + " 2>&1";
    const int rc = std::system(cmd.c_str());
    const std::string log = read_text(out.string() + ".log");
    EXPECT_EQ(rc, 0) << log;
    const std::string text = read_text(out / "results.json");
    EXPECT_NE(text.find("NCCL cannot place two ranks on one GPU (ranks 0 and 1 share device"),
              std::string::npos)
        << text.substr(0, 2000);
    EXPECT_NE(text.find("ranks share one GPU: timings mean nothing"), std::string::npos);
    const nlohmann::json j = nlohmann::json::parse(text);
    int pipelines = 0;
    for (const auto& t : j.at("traces"))
      for (const auto& r : t.at("regions"))
        for (const auto& v : r.at("variants")) {
          EXPECT_NE(v.at("verdict"), "FAIL") << t.at("name") << " " << v.at("variant");
          if (r.at("fusion") == "" || v.at("variant") != "optimized") continue;
          ++pipelines;
          EXPECT_EQ(v.at("verdict"), "PASS") << t.at("name") << ": " << v.dump().substr(0, 800);
          bool last_rank = false;
          for (const auto& c : v.at("numerics"))
            last_rank = last_rank || c.at("value").get<std::string>().rfind(
                                         "rank " + std::to_string(n - 1) + ": ", 0) == 0;
          EXPECT_TRUE(last_rank) << t.at("name") << ": rank " << n - 1 << " checked nothing";
        }
    EXPECT_GE(pipelines, 3) << "every ws-" << n << " trace has one tp region";
  }
}

}  // namespace
}  // namespace replay
