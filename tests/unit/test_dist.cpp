// The multi-process path's CPU foundation (harness/dist/): the launcher environment of torchrun,
// Open MPI and Slurm and its errors; the TCP rendezvous at world sizes 2, 4 and 8 (ranks as
// threads and as forked processes), a rank that never joins or dies mid-run naming it; the
// one-host launcher stopping every rank when one dies, and naming it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "harness/dist/launch.hpp"
#include "harness/dist/launch_env.hpp"
#include "harness/dist/rendezvous.hpp"

using namespace replay::dist;
using Clock = std::chrono::steady_clock;

namespace {

EnvMap with_master(EnvMap e) {
  e["MASTER_ADDR"] = "10.0.0.1";
  e["MASTER_PORT"] = "29500";
  return e;
}

// The LaunchEnvError message of parse_launch_env(env); empty when it does not throw.
std::string env_error(const EnvMap& env) {
  try {
    parse_launch_env(env);
  } catch (const LaunchEnvError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(LaunchEnv, Torchrun) {
  const LaunchEnv e =
      parse_launch_env(with_master({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}}));
  EXPECT_EQ(e.launcher, "torchrun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.master_addr, "10.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
}

TEST(LaunchEnv, OpenMpi) {
  const LaunchEnv e = parse_launch_env(with_master({{"OMPI_COMM_WORLD_RANK", "3"},
                                                    {"OMPI_COMM_WORLD_SIZE", "4"},
                                                    {"OMPI_COMM_WORLD_LOCAL_RANK", "3"}}));
  EXPECT_EQ(e.launcher, "openmpi");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 3);
}

TEST(LaunchEnv, Slurm) {
  const LaunchEnv e = parse_launch_env(
      with_master({{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "2"}}));
  EXPECT_EQ(e.launcher, "slurm");
  EXPECT_EQ(e.rank, 6);
  EXPECT_EQ(e.world_size, 16);
  EXPECT_EQ(e.local_rank, 2);
}

// torchrun under srun: RANK describes the worker, SLURM_PROCID the srun task; torchrun wins, and
// Open MPI wins over Slurm (mpirun inside an allocation).
TEST(LaunchEnv, Precedence) {
  EnvMap slurm = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}};
  EnvMap both = slurm;
  both.insert({{"RANK", "7"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "3"}});
  LaunchEnv e = parse_launch_env(with_master(both));
  EXPECT_EQ(e.launcher, "torchrun");
  EXPECT_EQ(e.rank, 7);
  EnvMap mpi = slurm;
  mpi.insert({{"OMPI_COMM_WORLD_RANK", "1"},
              {"OMPI_COMM_WORLD_SIZE", "2"},
              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  e = parse_launch_env(with_master(mpi));
  EXPECT_EQ(e.launcher, "openmpi");
  EXPECT_EQ(e.rank, 1);
}

TEST(LaunchEnv, BadInputsNameTheVariable) {
  const EnvMap ok = {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}};
  auto edit = [&](const std::string& k, const char* v) {
    EnvMap e = with_master(ok);
    if (v)
      e[k] = v;
    else
      e.erase(k);
    return env_error(e);
  };
  EXPECT_EQ(env_error(with_master(ok)), "");  // the base case parses
  EXPECT_NE(edit("RANK", "2").find("RANK=2 is not below WORLD_SIZE=2"), std::string::npos);
  EXPECT_NE(edit("WORLD_SIZE", nullptr).find("WORLD_SIZE is not set"), std::string::npos);
  EXPECT_NE(edit("RANK", nullptr).find("RANK is not set"), std::string::npos);
  EXPECT_NE(edit("LOCAL_RANK", nullptr).find("LOCAL_RANK is not set"), std::string::npos);
  EXPECT_NE(edit("LOCAL_RANK", "2").find("LOCAL_RANK=2 is not below WORLD_SIZE=2"),
            std::string::npos);
  EXPECT_NE(edit("RANK", "one").find("RANK='one': expected a decimal integer"), std::string::npos);
  EXPECT_NE(edit("RANK", "-1").find("RANK=-1: expected 0.."), std::string::npos);
  EXPECT_NE(edit("WORLD_SIZE", "0").find("WORLD_SIZE=0: expected 1.."), std::string::npos);
  EXPECT_NE(edit("WORLD_SIZE", "").find("WORLD_SIZE='': expected a decimal integer"),
            std::string::npos);
  EXPECT_NE(edit("MASTER_PORT", nullptr).find("MASTER_PORT is not set"), std::string::npos);
  EXPECT_NE(edit("MASTER_PORT", "70000").find("MASTER_PORT=70000: expected 1..65535"),
            std::string::npos);
  EXPECT_NE(edit("MASTER_PORT", "29500x").find("MASTER_PORT='29500x'"), std::string::npos);
  EXPECT_NE(edit("MASTER_ADDR", nullptr).find("MASTER_ADDR is not set"), std::string::npos);
  EXPECT_NE(edit("MASTER_ADDR", "").find("MASTER_ADDR is empty"), std::string::npos);
  // Open MPI and Slurm name their own variables; mpirun does not set MASTER_ADDR.
  EXPECT_NE(env_error(with_master({{"OMPI_COMM_WORLD_RANK", "4"},
                                   {"OMPI_COMM_WORLD_SIZE", "4"},
                                   {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}}))
                .find("OMPI_COMM_WORLD_RANK=4 is not below OMPI_COMM_WORLD_SIZE=4"),
            std::string::npos);
  EXPECT_NE(env_error({{"OMPI_COMM_WORLD_RANK", "0"},
                       {"OMPI_COMM_WORLD_SIZE", "4"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}})
                .find("MASTER_ADDR is not set"),
            std::string::npos);
  EXPECT_NE(env_error(with_master({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}))
                .find("SLURM_LOCALID is not set"),
            std::string::npos);
  EXPECT_NE(env_error({{"HOME", "/root"}}).find("no launcher environment"), std::string::npos);
}

namespace {

RendezvousOptions options(int port, int rank, int world, int timeout_ms) {
  RendezvousOptions o;
  o.addr = "127.0.0.1";
  o.port = static_cast<uint16_t>(port);
  o.rank = rank;
  o.world_size = world;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  return o;
}

// One rank of a rendezvous-check: join, all-gather the rank blob, check it, barrier, and a second
// all-gather of blobs of different sizes (r + 1 copies of 'a' + r). Returns "" or the error.
std::string check_rank(int port, int rank, int world, int timeout_ms, bool skip_gather = false) {
  try {
    Rendezvous rdzv(options(port, rank, world, timeout_ms));
    if (skip_gather) return "";  // joins, then closes its connection
    check_rank_blobs(rdzv.all_gather(rank_blob(rank, world)), world);
    rdzv.barrier();
    const auto sized = rdzv.all_gather(std::string(rank + 1, static_cast<char>('a' + rank)));
    for (int r = 0; r < world; ++r)
      if (sized[r] != std::string(r + 1, static_cast<char>('a' + r)))
        return "sized all_gather entry " + std::to_string(r) + " is '" + sized[r] + "'";
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace

TEST(Rendezvous, ThreadsAllGatherAtWorldSizes2_4_8) {
  for (int world : {2, 4, 8}) {
    const int port = free_port("127.0.0.1");
    std::vector<std::future<std::string>> ranks;
    for (int r = world - 1; r >= 0; --r)  // rank 0 last: the others retry until it listens
      ranks.push_back(std::async(std::launch::async, check_rank, port, r, world, 5000, false));
    for (auto& f : ranks) EXPECT_EQ(f.get(), "") << "world size " << world;
  }
}

// The rank blobs' check catches a wrong all-gather (the deliberately wrong variants).
TEST(Rendezvous, RankBlobCheckCatchesWrongGather) {
  std::vector<std::string> good = {rank_blob(0, 3), rank_blob(1, 3), rank_blob(2, 3)};
  EXPECT_NO_THROW(check_rank_blobs(good, 3));
  auto swapped = good;
  std::swap(swapped[1], swapped[2]);
  EXPECT_THROW(check_rank_blobs(swapped, 3), RendezvousError);
  EXPECT_THROW(check_rank_blobs({good[0], good[1]}, 3), RendezvousError);
  EXPECT_THROW(check_rank_blobs({good[0], good[0], good[2]}, 3), RendezvousError);
}

TEST(Rendezvous, ProcessesAllGatherAtWorldSize4) {
  const int world = 4, port = free_port("127.0.0.1");
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const std::string err = check_rank(port, r, world, 5000);
      if (!err.empty()) std::fprintf(stderr, "rank %d: %s\n", r, err.c_str());
      ::_exit(err.empty() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  for (int r = 0; r < world; ++r) {
    int status = 0;
    ASSERT_EQ(::waitpid(pids[r], &status, 0), pids[r]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << r;
  }
}

// Rank 2 of 3 never joins: ranks 0 and 1 fail within the timeout (plus the grace), naming it.
TEST(Rendezvous, RankThatNeverJoinsIsNamed) {
  const int port = free_port("127.0.0.1");
  const auto start = Clock::now();
  auto r1 = std::async(std::launch::async, check_rank, port, 1, 3, 1000, false);
  auto r0 = std::async(std::launch::async, check_rank, port, 0, 3, 1000, false);
  const std::string want =
      "rank 2 did not join the rendezvous at 127.0.0.1:" + std::to_string(port) + " within 1 s";
  EXPECT_EQ(r0.get(), want);
  EXPECT_EQ(r1.get(), want);  // rank 0's verdict, passed on
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(4));
}

// Rank 0 never starts: the others give up, naming rank 0 and the address.
TEST(Rendezvous, MissingRank0IsNamed) {
  const int port = free_port("127.0.0.1");
  const std::string err = check_rank(port, 1, 2, 300);
  EXPECT_NE(err.find("rank 1 could not reach rank 0 at the rendezvous at 127.0.0.1:" +
                     std::to_string(port) + " within 0.3 s"),
            std::string::npos)
      << err;
}

// Rank 3 of 4 joins, then goes away before the all-gather: every other rank is told so.
TEST(Rendezvous, RankGoneMidRunIsNamed) {
  const int port = free_port("127.0.0.1");
  std::vector<std::future<std::string>> ranks;
  for (int r = 0; r < 4; ++r)
    ranks.push_back(std::async(std::launch::async, check_rank, port, r, 4, 2000, r == 3));
  EXPECT_EQ(ranks[3].get(), "");
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(ranks[r].get().find("rank 3 closed its connection to the rendezvous at 127.0.0.1:" +
                                  std::to_string(port) + " during all_gather"),
              std::string::npos)
        << "rank " << r;
}

// Rank 2 of 3 joins, then hangs (its connection open) instead of entering the all-gather: the
// others fail within the timeout, naming it and the step.
TEST(Rendezvous, HungRankIsNamedWithTheStep) {
  const int port = free_port("127.0.0.1");
  auto hung = std::async(std::launch::async, [port] {
    Rendezvous rdzv(options(port, 2, 3, 1000));
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  });
  const auto start = Clock::now();
  auto r1 = std::async(std::launch::async, check_rank, port, 1, 3, 1000, false);
  auto r0 = std::async(std::launch::async, check_rank, port, 0, 3, 1000, false);
  const std::string want =
      "rank 2 did not reach all_gather at the rendezvous at 127.0.0.1:" + std::to_string(port) +
      " within 1 s";
  EXPECT_EQ(r0.get(), want);
  EXPECT_EQ(r1.get(), want);
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(2400));
  hung.get();
}

// Two processes claiming the same rank, and a world-size mismatch, are refused by rank 0.
TEST(Rendezvous, DuplicateRankAndWorldSizeMismatch) {
  {
    const int port = free_port("127.0.0.1");
    auto a = std::async(std::launch::async, check_rank, port, 1, 3, 1000, false);
    auto b = std::async(std::launch::async, check_rank, port, 1, 3, 1000, false);
    auto r0 = std::async(std::launch::async, check_rank, port, 0, 3, 1000, false);
    EXPECT_NE(r0.get().find("rank 1 joined the rendezvous"), std::string::npos);
    a.get();
    b.get();
  }
  {
    const int port = free_port("127.0.0.1");
    auto r1 = std::async(std::launch::async, check_rank, port, 1, 4, 1000, false);
    auto r0 = std::async(std::launch::async, check_rank, port, 0, 2, 1000, false);
    EXPECT_NE(r0.get().find("rank 1 joined the rendezvous at 127.0.0.1:" + std::to_string(port) +
                            " with world size 4, rank 0 has 2"),
              std::string::npos);
    EXPECT_NE(r1.get().find("with world size 4, rank 0 has 2"), std::string::npos);
  }
}

namespace {

bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");  // a zombie of init counts as gone
  std::string s;
  std::getline(stat, s);
  const auto close = s.rfind(')');
  return close != std::string::npos && close + 2 < s.size() && s[close + 2] == 'Z';
}

}  // namespace

// One rank of four is killed mid-run: launch_local stops the others, names the rank, and leaves
// no process behind (the ranks, nor a child each started in its process group).
TEST(Launch, KilledRankIsNamedAndNothingIsLeft) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("replay_launch_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  LaunchOptions opt;
  opt.nproc = 4;
  opt.timeout_s = 20;
  opt.program = "/bin/sh";
  opt.args = {"-c", "sleep 30 & echo $! > " + dir.string() +
                        "/child$RANK; test \"$WORLD_SIZE\" = 4 || exit 9; "
                        "if [ \"$RANK\" = 2 ]; then sleep 0.5; kill -9 $$; fi; wait"};
  const auto start = Clock::now();
  const LaunchResult res = launch_local(opt);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(8));
  EXPECT_EQ(res.failed_rank, 2);
  EXPECT_EQ(res.exit_code, 128 + SIGKILL);
  EXPECT_NE(res.message.find("rank 2 (pid " + std::to_string(res.ranks[2].pid) +
                             ") was killed by signal 9"),
            std::string::npos)
      << res.message;
  EXPECT_NE(res.message.find("stopped ranks 0, 1, 3"), std::string::npos) << res.message;
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(process_gone(res.ranks[r].pid)) << "rank " << r;
    EXPECT_EQ(res.ranks[r].stopped, r != 2);
    std::ifstream f(dir / ("child" + std::to_string(r)));
    pid_t child = 0;
    ASSERT_TRUE(f >> child) << "rank " << r << " did not start its child";
    EXPECT_TRUE(process_gone(child)) << "rank " << r << "'s child " << child;
  }
  std::filesystem::remove_all(dir);
}

TEST(Launch, ExitCodeTimeoutAndSuccess) {
  LaunchOptions opt;
  opt.nproc = 3;
  opt.program = "/bin/sh";
  opt.args = {"-c", "test \"$MASTER_ADDR\" = 127.0.0.1 && test \"$LOCAL_RANK\" = \"$RANK\""};
  LaunchResult res = launch_local(opt);
  EXPECT_EQ(res.exit_code, 0) << res.message;
  EXPECT_EQ(res.failed_rank, -1);

  opt.args = {"-c", "if [ \"$RANK\" = 1 ]; then exit 5; fi; sleep 30"};
  res = launch_local(opt);
  EXPECT_EQ(res.exit_code, 5);
  EXPECT_EQ(res.failed_rank, 1);
  EXPECT_NE(res.message.find("exited with code 5; stopped ranks 0, 2"), std::string::npos)
      << res.message;

  opt.args = {"-c", "sleep 30"};
  opt.timeout_s = 0.3;
  const auto start = Clock::now();
  res = launch_local(opt);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(res.exit_code, 124);
  EXPECT_EQ(res.message, "ranks 0, 1, 2 still running after the timeout of 0.3 s") << res.message;
  for (const RankExit& e : res.ranks) EXPECT_TRUE(process_gone(e.pid));
}
