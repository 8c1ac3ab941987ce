#include "harness/dist/commands.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <thread>

#include "harness/cli/exit_codes.hpp"
#include "harness/dist/launch.hpp"
#include "harness/dist/launch_env.hpp"
#include "harness/dist/rendezvous.hpp"

namespace replay::dist {

int cmd_launch(int nproc, double timeout_s, int master_port, const std::vector<std::string>& args) {
  LaunchOptions opt;
  opt.nproc = nproc;
  opt.timeout_s = timeout_s;
  opt.master_port = master_port;
  opt.program = std::filesystem::read_symlink("/proc/self/exe").string();
  opt.args = args;
  const LaunchResult res = launch_local(opt);
  if (res.exit_code == 0) return kExitOk;
  std::cerr << ("error: replay launch: " + res.message + "\n") << std::flush;
  if (res.failed_rank >= 0 && res.ranks[res.failed_rank].signal == 0) return res.exit_code;
  return kExitRuntime;
}

int cmd_rendezvous_check(double timeout_s, int hang_rank, int die_rank) {
  LaunchEnv env;
  try {
    env = parse_launch_env(process_env());
  } catch (const LaunchEnvError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitBadInput;
  }
  if (env.rank == hang_rank) {  // test hook: never join
    std::this_thread::sleep_for(std::chrono::duration<double>(timeout_s * 4 + 5));
    return kExitOk;
  }
  try {
    RendezvousOptions o;
    o.addr = env.master_addr;
    o.port = env.master_port;
    o.rank = env.rank;
    o.world_size = env.world_size;
    o.timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
    Rendezvous rdzv(o);
    if (env.rank == die_rank) ::raise(SIGKILL);  // test hook: die after the join
    const auto all = rdzv.all_gather(rank_blob(env.rank, env.world_size));
    check_rank_blobs(all, env.world_size);
    rdzv.barrier();
    if (env.rank == 0)
      std::cout << "rendezvous-check: " << env.world_size << " rank(s) joined at " << rdzv.address()
                << " (" << env.launcher << " environment); all_gather and barrier passed\n";
    return kExitOk;
  } catch (const RendezvousError& e) {
    // one write, so the lines of ranks failing together do not interleave
    std::cerr << ("error: rank " + std::to_string(env.rank) + ": " + e.what() + "\n") << std::flush;
    return kExitRuntime;
  }
}

}  // namespace replay::dist
