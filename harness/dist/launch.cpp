#include "harness/dist/launch.hpp"

#include <netdb.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "harness/dist/launch_env.hpp"
#include "harness/dist/rendezvous.hpp"

namespace replay::dist {

namespace {

using Clock = std::chrono::steady_clock;

std::string describe(const RankExit& e) {
  const std::string who = "rank " + std::to_string(e.rank) + " (pid " + std::to_string(e.pid) + ")";
  if (e.signal)
    return who + " was killed by signal " + std::to_string(e.signal) + " (" +
           ::strsignal(e.signal) + ")";
  return who + " exited with code " + std::to_string(e.exit_code);
}

void record(RankExit& e, int status) {
  if (WIFSIGNALED(status)) {
    e.signal = WTERMSIG(status);
    e.exit_code = -1;
  } else {
    e.exit_code = WEXITSTATUS(status);
  }
}

std::string seconds(double s) {
  std::ostringstream o;
  o << s << " s";
  return o.str();
}

bool failed(const RankExit& e) {
  return e.signal != 0 || e.exit_code != 0;
}

}  // namespace

int free_port(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(addr.c_str(), "0", &hints, &res) != 0 || !res)
    throw std::runtime_error("cannot resolve " + addr + " to pick a free port");
  Socket s(::socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol));
  const bool bound = s.valid() && ::bind(s.fd(), res->ai_addr, res->ai_addrlen) == 0;
  ::freeaddrinfo(res);
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  if (!bound || ::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    throw std::runtime_error("cannot bind a port on " + addr + ": " + std::strerror(errno));
  char port[16];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&sa), len, nullptr, 0, port, sizeof port,
                    NI_NUMERICSERV) != 0)
    throw std::runtime_error("cannot read the port bound on " + addr);
  return std::atoi(port);
}

LaunchResult launch_local(const LaunchOptions& opt) {
  if (opt.nproc < 1) throw std::invalid_argument("--nproc " + std::to_string(opt.nproc) + " < 1");
  if (opt.program.empty()) throw std::invalid_argument("launch: no program");
  if (opt.timeout_s < 0) throw std::invalid_argument("launch: negative timeout");
  const int port = opt.master_port ? opt.master_port : free_port(opt.master_addr);

  // Everything the children need is built before fork (no allocation between fork and exec).
  static const std::set<std::string> kSet = {
      "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
  std::vector<std::string> base;
  for (const auto& [k, v] : process_env())
    if (!kSet.count(k)) base.push_back(k + "=" + v);
  std::vector<std::vector<std::string>> envs(opt.nproc, base);
  for (int r = 0; r < opt.nproc; ++r) {
    auto& e = envs[r];
    e.push_back("RANK=" + std::to_string(r));
    e.push_back("LOCAL_RANK=" + std::to_string(r));
    e.push_back("WORLD_SIZE=" + std::to_string(opt.nproc));
    e.push_back("LOCAL_WORLD_SIZE=" + std::to_string(opt.nproc));
    e.push_back("MASTER_ADDR=" + opt.master_addr);
    e.push_back("MASTER_PORT=" + std::to_string(port));
  }
  std::vector<std::vector<char*>> envps(opt.nproc);
  for (int r = 0; r < opt.nproc; ++r) {
    for (auto& s : envs[r]) envps[r].push_back(s.data());
    envps[r].push_back(nullptr);
  }
  std::vector<std::string> argv_s = {opt.program};
  argv_s.insert(argv_s.end(), opt.args.begin(), opt.args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);

  LaunchResult res;
  res.ranks.resize(opt.nproc);
  std::vector<bool> alive(opt.nproc, false);
  const pid_t parent = ::getpid();

  auto stop_all = [&](const std::vector<bool>& skip) {
    for (int r = 0; r < opt.nproc; ++r)
      if (alive[r] && !skip[r]) {
        res.ranks[r].stopped = true;
        ::kill(-res.ranks[r].pid, SIGTERM);
      }
    const auto until = Clock::now() + std::chrono::duration<double>(opt.grace_s);
    for (;;) {
      bool any = false;
      for (int r = 0; r < opt.nproc; ++r) {
        if (!alive[r]) continue;
        int status = 0;
        if (::waitpid(res.ranks[r].pid, &status, WNOHANG) == res.ranks[r].pid) {
          record(res.ranks[r], status);
          alive[r] = false;
        } else {
          any = true;
        }
      }
      if (!any || Clock::now() >= until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (int r = 0; r < opt.nproc; ++r)
      if (alive[r]) {
        ::kill(-res.ranks[r].pid, SIGKILL);
        int status = 0;
        while (::waitpid(res.ranks[r].pid, &status, 0) < 0 && errno == EINTR) {
        }
        record(res.ranks[r], status);
        alive[r] = false;
      }
  };

  for (int r = 0; r < opt.nproc; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      const std::string why = std::strerror(errno);
      stop_all(std::vector<bool>(opt.nproc, false));
      throw std::runtime_error("cannot fork rank " + std::to_string(r) + ": " + why);
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the launcher died: so do the ranks
      if (::getppid() != parent) ::_exit(127);
      ::execve(argv[0], argv.data(), envps[r].data());
      const char* msg = "replay launch: cannot execute the rank's program\n";
      (void)!::write(2, msg, std::strlen(msg));
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also here, so a kill(-pid) right after fork reaches it
    res.ranks[r].rank = r;
    res.ranks[r].pid = pid;
    alive[r] = true;
  }

  const auto start = Clock::now();
  int running = opt.nproc;
  std::vector<int> failures;
  auto reap = [&] {  // one pass over the running ranks
    for (int r = 0; r < opt.nproc; ++r) {
      if (!alive[r]) continue;
      int status = 0;
      if (::waitpid(res.ranks[r].pid, &status, WNOHANG) != res.ranks[r].pid) continue;
      record(res.ranks[r], status);
      alive[r] = false;
      --running;
      ::kill(-res.ranks[r].pid, SIGKILL);  // what the rank left behind in its group
      if (failed(res.ranks[r])) failures.push_back(r);
    }
  };
  while (running > 0) {
    reap();
    if (!failures.empty() && res.failed_rank < 0) {
      // Ranks that fail within 50 ms of each other: one killed by a signal is the likelier cause
      // (the others exit with an error naming it; a killed process's sockets close, and its peers
      // may exit, before its own exit status can be reaped), so it is named first.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      reap();
      std::stable_partition(failures.begin(), failures.end(),
                            [&](int r) { return res.ranks[r].signal != 0; });
      const RankExit& first = res.ranks[failures[0]];
      res.failed_rank = first.rank;
      res.exit_code = first.signal ? 128 + first.signal : first.exit_code;
      res.message = describe(first);
      for (size_t i = 1; i < failures.size(); ++i)
        res.message += (i == 1 ? "; also " : ", ") + describe(res.ranks[failures[i]]);
    }
    if (res.failed_rank >= 0 && running > 0) break;
    if (running > 0 && opt.timeout_s > 0 &&
        Clock::now() - start >= std::chrono::duration<double>(opt.timeout_s)) {
      res.exit_code = 124;
      std::vector<int> late;
      for (int r = 0; r < opt.nproc; ++r)
        if (alive[r]) late.push_back(r);
      res.message = std::string(late.size() == 1 ? "rank " : "ranks ");
      for (size_t i = 0; i < late.size(); ++i)
        res.message += (i ? ", " : "") + std::to_string(late[i]);
      res.message += " still running after the timeout of " + seconds(opt.timeout_s);
      break;
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::vector<int> stopped;
  for (int r = 0; r < opt.nproc; ++r)
    if (alive[r]) stopped.push_back(r);
  stop_all(std::vector<bool>(opt.nproc, false));
  for (int r = 0; r < opt.nproc; ++r)
    if (res.ranks[r].pid > 0) ::kill(-res.ranks[r].pid, SIGKILL);  // never kill(0): our own group
  if (!stopped.empty() && res.failed_rank >= 0) {
    res.message += stopped.size() == 1 ? "; stopped rank " : "; stopped ranks ";
    for (size_t i = 0; i < stopped.size(); ++i)
      res.message += (i ? ", " : "") + std::to_string(stopped[i]);
  }
  return res;
}

}  // namespace replay::dist
