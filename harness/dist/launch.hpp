// `replay launch --nproc N`: the one-host convenience launcher. Forks N processes of a program
// with the environment torchrun would give them (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR=127.0.0.1, MASTER_PORT=a free port), waits for them, and stops the others when one
// fails or the timeout passes. On a cluster use torchrun, mpirun or srun (harness/dist/README.md).
#pragma once

#include <string>
#include <vector>

namespace replay::dist {

struct LaunchOptions {
  int nproc = 1;                          ///< number of ranks, >= 1
  double timeout_s = 0;                   ///< seconds for the whole run; 0: no limit
  std::string program;                    ///< executable to start (a path)
  std::vector<std::string> args;          ///< its arguments (argv[1..])
  std::string master_addr = "127.0.0.1";  ///< MASTER_ADDR given to the ranks
  int master_port = 0;                    ///< MASTER_PORT given to the ranks; 0: a free port
  double grace_s = 2;  ///< seconds between SIGTERM and SIGKILL when stopping the ranks
};

/// How one rank ended.
struct RankExit {
  int rank = 0;
  int pid = 0;
  int exit_code = -1;    ///< exit status, or -1 when killed by a signal
  int signal = 0;        ///< the signal that ended it, 0 when it exited
  bool stopped = false;  ///< stopped by the launcher (another rank failed, or the timeout)
};

struct LaunchResult {
  int exit_code = 0;     ///< 0 when every rank exited 0; else the first failed rank's exit code, or
                         ///< 128 + signal when it was killed; 124 on the timeout
  int failed_rank = -1;  ///< the rank whose failure ended the run, -1 when none or timeout
  std::string message;   ///< what happened, naming the rank(s), e.g. "rank 2 (pid 123) was
                         ///< killed by signal 9 (Killed); stopped ranks 0, 1, 3"
  std::vector<RankExit> ranks;  ///< by rank
};

/// A TCP port on `addr` that is free now (bound to port 0 and released; another process may take
/// it before the ranks do). Throws std::runtime_error when `addr` cannot be bound.
int free_port(const std::string& addr);

/// Runs `opt.nproc` ranks of `opt.program` and waits for them (see the file comment). Each rank is
/// the leader of a process group of its own, which is killed whole when the rank is stopped, and
/// dies with the launcher (PR_SET_PDEATHSIG); no rank process is left when this returns. Throws
/// std::invalid_argument on bad options, std::runtime_error when fork fails.
LaunchResult launch_local(const LaunchOptions& opt);

}  // namespace replay::dist
