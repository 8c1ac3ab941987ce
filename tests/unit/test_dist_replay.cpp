// The pure logic of the multi-process replay (harness/dist/rank_results.hpp, launch_env.hpp's
// launched): which ranks share a GPU, how the ranks' results merge (time = max over ranks of the
// median, numerics pass only if every rank passes), the ranks' agreement on when a timing loop
// stops, and the messages a hung collective or a world-size mismatch ends with.
#include <gtest/gtest.h>

#include <set>

#include "harness/dist/launch_env.hpp"
#include "harness/dist/rank_results.hpp"
#include "harness/report/perfetto.hpp"
#include "harness/report/results_io.hpp"
#include "impls/eager/collective.hpp"
#include "workloads/ir/tolerance.hpp"

namespace replay::dist {
namespace {

bool has(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

RankDevice dev(int rank, const std::string& uuid, const std::string& host = "h0") {
  return {rank, host, uuid, rank};
}

TEST(SharedDevice, EveryRankOnItsOwnGpuIsNotShared) {
  EXPECT_EQ(shared_device_why({dev(0, "GPU-a"), dev(1, "GPU-b"), dev(2, "GPU-c")}), "");
  EXPECT_EQ(shared_device_why({dev(0, "GPU-a")}), "");
  // Two hosts with the same CUDA ordinal are two GPUs: only the UUID decides.
  EXPECT_EQ(shared_device_why({{0, "h0", "GPU-a", 0}, {1, "h1", "GPU-b", 0}}), "");
}

TEST(SharedDevice, RanksOnOneGpuAreNamed) {
  const std::string why =
      shared_device_why({dev(0, "GPU-a"), dev(1, "GPU-b"), dev(2, "GPU-c"), dev(3, "GPU-b")});
  EXPECT_EQ(why,
            "NCCL cannot place two ranks on one GPU (ranks 1 and 3 share device GPU-b on host h0)");
  EXPECT_TRUE(has(shared_device_why({dev(0, "GPU-x"), dev(1, "GPU-x")}), "ranks 0 and 1"));
}

TEST(SharedDevice, BlobRoundTripsAndAMalformedOneNamesTheRank) {
  const RankDevice d{2, "node7", "GPU-12345678-aaaa-bbbb-cccc-0123456789ab", 1};
  const RankDevice back = parse_rank_device(rank_device_blob(d), 2);
  EXPECT_EQ(back.rank, 2);
  EXPECT_EQ(back.host, "node7");
  EXPECT_EQ(back.uuid, d.uuid);
  EXPECT_EQ(back.device, 1);
  try {
    parse_rank_device("{\"rank\": 2}", 2);
    FAIL() << "accepted a blob without uuid";
  } catch (const std::invalid_argument& e) {
    EXPECT_TRUE(has(e.what(), "rank 2: malformed device description")) << e.what();
  }
  EXPECT_THROW(parse_rank_device(rank_device_blob(d), 1), std::invalid_argument);  // says rank 2
}

NumericsResult check(const std::string& value, bool pass) {
  NumericsResult n;
  n.value = value;
  n.numel = 10;
  n.bounds = default_bounds(DType::kBFloat16, 8, 1600);
  n.rel_l2 = pass ? 2e-5 : 1.3e-3;
  return n;
}

VariantResult timed(std::vector<double> us, bool pass = true) {
  VariantResult v;
  v.variant = {VariantInfo::kFusion, "baseline", Role::kBaseline};
  v.samples_us = std::move(us);
  v.stats = summarize(v.samples_us);
  v.host_stats = summarize({3.0, 3.5, 4.0});
  v.numerics.push_back(check("y", pass));
  return v;
}

TraceResult trace_with(VariantResult v) {
  TraceResult t;
  t.name = "tp";
  t.file = "traces/tp/tp.json";
  RegionResult r;
  r.label = "trace = region 0: ag_matmul";
  r.fusion = "ag_matmul";
  r.region = 0;
  VariantResult ref;
  ref.variant = {VariantInfo::kReference, "reference"};
  ref.skipped = "CPU float64 oracle: not timed";
  r.variants = {ref, std::move(v)};
  t.regions.push_back(r);
  return t;
}

TEST(MergeRanks, TimeIsTheSlowestRanksMedian) {
  const TraceResult m =
      merge_rank_results({trace_with(timed({10, 10, 11})), trace_with(timed({12, 13, 12})),
                          trace_with(timed({9, 9, 9}))},
                         false);
  const VariantResult& v = m.regions[0].variants[1];
  EXPECT_DOUBLE_EQ(v.stats.median, 12);  // not rank 0's 10, nor the mean or the min
  EXPECT_EQ(v.samples_us, (std::vector<double>{12, 13, 12}));
  EXPECT_EQ(v.timing_note, "max over 3 ranks of the median (slowest: rank 1)");
  EXPECT_EQ(v.verdict(), Verdict::kPass);
  ASSERT_EQ(v.numerics.size(), 3u);  // every rank's check, named by rank
  EXPECT_EQ(v.numerics[2].value, "rank 2: y");
}

TEST(MergeRanks, OneFailingRankFailsTheRow) {
  const TraceResult m = merge_rank_results(
      {trace_with(timed({10, 10, 10})), trace_with(timed({10, 10, 10}, false))}, false);
  const VariantResult& v = m.regions[0].variants[1];
  EXPECT_EQ(v.verdict(), Verdict::kFail);
  EXPECT_EQ(m.verdict(), Verdict::kFail);
  bool named = false;
  for (const auto& n : v.numerics) named = named || (!n.pass() && n.value == "rank 1: y");
  EXPECT_TRUE(named);
}

TEST(MergeRanks, OneRankIsItsOwnResult) {
  const TraceResult m = merge_rank_results({trace_with(timed({10, 11, 12}))}, false);
  const VariantResult& v = m.regions[0].variants[1];
  EXPECT_EQ(v.numerics.at(0).value, "y");
  EXPECT_EQ(v.timing_note, "");
  EXPECT_DOUBLE_EQ(v.stats.median, 11);
}

TEST(MergeRanks, SharedGpuTimingsAreLabelled) {
  const TraceResult m =
      merge_rank_results({trace_with(timed({10, 10, 10})), trace_with(timed({20, 20, 20}))}, true);
  EXPECT_EQ(m.regions[0].variants[1].timing_note, kSharedDeviceTimingNote);
}

TEST(MergeRanks, ARankThatSkippedOrFailedIsNamed) {
  VariantResult skipped = timed({});
  skipped.samples_us.clear();
  skipped.skipped = "not run: no communicator";
  TraceResult m = merge_rank_results({trace_with(timed({10, 10, 10})), trace_with(skipped)}, false);
  EXPECT_EQ(m.regions[0].variants[1].skipped, "rank 1: not run: no communicator");
  EXPECT_FALSE(m.regions[0].variants[1].timed());

  TraceResult bad = trace_with(timed({10, 10, 10}));
  bad.error_kind = TraceResult::Error::kRuntime;
  bad.error = "ncclAllGather failed";
  TraceResult input = trace_with(timed({10, 10, 10}));
  input.error_kind = TraceResult::Error::kBadInput;
  input.error = "bad";
  m = merge_rank_results({input, bad}, false);
  EXPECT_EQ(m.error_kind, TraceResult::Error::kRuntime);  // the worse kind wins
  EXPECT_EQ(m.error, "rank 1: ncclAllGather failed");

  TraceResult fewer = trace_with(timed({10, 10, 10}));
  fewer.regions[0].variants.pop_back();
  m = merge_rank_results({trace_with(timed({10, 10, 10})), fewer}, false);
  EXPECT_EQ(m.error_kind, TraceResult::Error::kRuntime);
  EXPECT_TRUE(has(m.error, "rank 1 has other result rows than rank 0")) << m.error;
}

// A rank that checked nothing while another passed: the merged row fails, naming the rank (found
// by the review of issue 31: it passed before, with only a skip note).
TEST(MergeRanks, ARankThatCheckedNothingFailsTheRow) {
  VariantResult unchecked = timed({10, 10, 10});
  unchecked.numerics.clear();
  unchecked.skipped = "not run: no communicator";
  const TraceResult m =
      merge_rank_results({trace_with(timed({10, 10, 10})), trace_with(unchecked)}, false);
  const VariantResult& v = m.regions[0].variants[1];
  EXPECT_EQ(v.verdict(), Verdict::kFail);
  bool named = false;
  for (const auto& n : v.numerics)
    named = named || (n.value == "rank 1: y" && has(n.failure(), "not checked"));
  EXPECT_TRUE(named);
  // It survives results.json.
  RunResult run;
  run.environment = nlohmann::json::object();
  run.traces.push_back(m);
  EXPECT_EQ(results_from_json(to_json(run), "merged").traces[0].regions[0].variants[1].verdict(),
            Verdict::kFail);
  // Every rank checked: a pass, as before.
  EXPECT_EQ(merge_rank_results({trace_with(timed({10})), trace_with(timed({11}))}, false)
                .regions[0]
                .variants[1]
                .verdict(),
            Verdict::kPass);
}

// Every rank's CUPTI timeline is kept (rank 0's stays `cupti`), and Perfetto shows one process
// per rank.
TEST(MergeRanks, EveryRanksTimelineIsKept) {
  std::vector<TraceResult> ranks;
  for (int r = 0; r < 3; ++r) {
    VariantResult v = timed({10, 10, 10});
    CuptiSummary c;
    KernelEvent k;
    k.name = "gemm_rank" + std::to_string(r);
    k.dur_us = 5;
    c.timeline = {k};
    v.cupti = c;
    ranks.push_back(trace_with(v));
  }
  const TraceResult m = merge_rank_results(ranks, false);
  const VariantResult& v = m.regions[0].variants[1];
  ASSERT_EQ(v.rank_cupti.size(), 3u);
  EXPECT_EQ(v.rank_cupti[2].timeline.at(0).name, "gemm_rank2");
  EXPECT_EQ(v.cupti->timeline.at(0).name, "gemm_rank0");
  RunResult run;
  run.environment = nlohmann::json::object();
  run.traces.push_back(m);
  const RunResult back = results_from_json(to_json(run), "merged");
  EXPECT_EQ(back.traces[0].regions[0].variants[1].rank_cupti.size(), 3u);
  const nlohmann::json pf = perfetto_trace(run);
  std::set<std::string> procs;
  for (const auto& e : pf["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name") procs.insert(e["args"]["name"]);
  EXPECT_EQ(procs, (std::set<std::string>{"tp · rank 0", "tp · rank 1", "tp · rank 2"}));
}

// What `replay run` does under a launcher: each rank's result travels as results.json text.
TEST(MergeRanks, ThroughResultsJson) {
  std::vector<TraceResult> ranks;
  for (bool pass : {true, false})
    ranks.push_back(parse_trace_blob(trace_blob(trace_with(timed({10, 20, 30}, pass))), 0));
  EXPECT_THROW(parse_trace_blob("{}", 1), std::runtime_error);
  const TraceResult m = merge_rank_results(ranks, false);
  EXPECT_EQ(m.regions[0].variants[1].verdict(), Verdict::kFail);
  EXPECT_DOUBLE_EQ(m.regions[0].variants[1].stats.median, 20);
  RunResult run;
  run.environment = nlohmann::json::object();
  run.traces.push_back(m);
  EXPECT_EQ(results_from_json(to_json(run), "merged").traces[0].regions[0].variants[1].timing_note,
            "max over 2 ranks of the median (slowest: rank 0)");
}

// All-gathers carry their step: ranks out of step fail with both steps and the rank named
// instead of pairing one step's blobs with another's (found by the review of issue 31).
TEST(StepBlobs, RanksOutOfStepAreNamed) {
  const std::string a = "results of traces/tp/a.json", b = "whether to replay traces/tp/b.json";
  const std::vector<std::string> same = {step_blob(a, "x"), step_blob(a, ""), step_blob(a, "z\nw")};
  EXPECT_EQ(step_blobs(same, a, 0), (std::vector<std::string>{"x", "", "z\nw"}));
  try {
    step_blobs({step_blob(b, "x"), step_blob(a, "y")}, b, 0);
    ADD_FAILURE() << "ranks out of step passed";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(has(e.what(),
                    "rank 1 is at step 'results of traces/tp/a.json' while rank 0 is at "
                    "'whether to replay traces/tp/b.json'"))
        << e.what();
  }
  EXPECT_THROW(step_blobs({"untagged"}, a, 0), std::runtime_error);
  // A newline in a step (a file name) does not break the tag.
  EXPECT_EQ(step_blobs({step_blob("odd\nname", "v")}, "odd\nname", 0).at(0), "v");
}

TEST(AgreedStop, AllRanksMustBeDoneUnlessOneHitAHardLimit) {
  using S = StopReason;
  EXPECT_EQ(agreed_stop({S::kConverged, S::kNone}), S::kNone);
  EXPECT_EQ(agreed_stop({S::kConverged, S::kConverged}), S::kConverged);
  EXPECT_EQ(agreed_stop({S::kNone, S::kTimeout}), S::kTimeout);
  EXPECT_EQ(agreed_stop({S::kMaxSamples, S::kNone}), S::kMaxSamples);
  EXPECT_EQ(agreed_stop({S::kNone}), S::kNone);
}

TEST(DistMessages, TimeoutNamesTheRankAndTheOp) {
  EXPECT_EQ(collective_timeout_message(1, "ncclAllGather of node 'all_gather_into_tensor'", 30),
            "rank 1: ncclAllGather of node 'all_gather_into_tensor' did not complete within 30 s "
            "(a peer rank hung or died; the communicator was aborted)");
  EXPECT_TRUE(has(collective_timeout_message(0, "x", 2.5), "within 2.5 s"));
}

TEST(DistMessages, WorldSizeMismatch) {
  EXPECT_EQ(world_size_mismatch(1, 1, false), "");
  EXPECT_EQ(world_size_mismatch(4, 4, true), "");
  const std::string no_launcher = world_size_mismatch(2, 1, false);
  EXPECT_TRUE(has(no_launcher, "torchrun")) << no_launcher;
  EXPECT_TRUE(has(no_launcher, "mpirun -n 2")) << no_launcher;
  EXPECT_TRUE(has(no_launcher, "srun -n 2")) << no_launcher;
  EXPECT_TRUE(has(no_launcher, "replay launch --nproc 2")) << no_launcher;
  const std::string wrong = world_size_mismatch(4, 2, true);
  EXPECT_TRUE(has(wrong, "world_size is 4 but the run has WORLD_SIZE=2")) << wrong;
}

TEST(DistMessages, NcclReducesFloatTypesOnly) {
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    EXPECT_EQ(nccl_reduce_unsupported(t, "sum"), "");
    EXPECT_EQ(nccl_reduce_unsupported(t, "avg"), "");
    EXPECT_EQ(nccl_reduce_unsupported(t, "max"), "");
    EXPECT_EQ(nccl_reduce_unsupported(t, "min"), "");
  }
  EXPECT_TRUE(has(nccl_reduce_unsupported(DType::kFloat8E4M3, "sum"),
                  "NCCL reduction of float8_e4m3fn is not supported"));
  EXPECT_TRUE(has(nccl_reduce_unsupported(DType::kFloat32, "product"), "reduce op 'product'"));
}

TEST(Launched, LauncherVariablesMakeARank) {
  EXPECT_FALSE(launched({}));
  EXPECT_FALSE(launched({{"PATH", "/bin"}}));
  EXPECT_TRUE(launched({{"RANK", "0"}}));
  EXPECT_TRUE(launched({{"WORLD_SIZE", "1"}}));  // torchrun / replay launch --nproc 1
  EXPECT_FALSE(launched({{"OMPI_COMM_WORLD_SIZE", "1"}, {"OMPI_COMM_WORLD_RANK", "0"}}));
  EXPECT_TRUE(launched({{"OMPI_COMM_WORLD_SIZE", "4"}}));
  EXPECT_FALSE(launched({{"SLURM_NTASKS", "1"}, {"SLURM_PROCID", "0"}}));
  EXPECT_TRUE(launched({{"SLURM_NTASKS", "2"}}));
}

// Ranks sharing a GPU have no NCCL communicator; their eager collectives go over CUDA IPC when a
// rendezvous can exchange the handles (collective_ipc.cu), else the node says it needs NCCL.
TEST(DistMessages, EagerCollectivesOverIpcOnlyForRanksSharingAGpu) {
  DistContext d;
  d.world_size = 2;
  d.shared_device = true;
  d.all_gather = [](const std::string& s) { return std::vector<std::string>{s, s}; };
  EXPECT_TRUE(ipc_collectives(d));
  DistContext apart = d;
  apart.shared_device = false;  // one GPU per rank: NCCL's job (no communicator is an error)
  EXPECT_FALSE(ipc_collectives(apart));
  DistContext lone = d;
  lone.all_gather = nullptr;  // no rendezvous to exchange IPC handles
  EXPECT_FALSE(ipc_collectives(lone));
  DistContext one = d;
  one.world_size = 1;
  EXPECT_FALSE(ipc_collectives(one));
  Node n;
  n.id = "ag";
  n.op = Op::kAllGatherIntoTensor;
  n.group_size = 2;
  lone.no_nccl_why = "NCCL cannot place two ranks on one GPU";
  try {
    (void)lower_collective(n, {DeviceTensor{}}, {DeviceTensor{}}, lone);
    ADD_FAILURE() << "no communicator and no IPC: the lowering must refuse";
  } catch (const NoCommunicator& e) {
    EXPECT_TRUE(has(e.what(), "node ag: ")) << e.what();
    EXPECT_TRUE(has(e.what(), "NCCL cannot place two ranks on one GPU")) << e.what();
  }
}

}  // namespace
}  // namespace replay::dist
