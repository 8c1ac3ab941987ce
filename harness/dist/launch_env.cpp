#include "harness/dist/launch_env.hpp"

#include <cerrno>
#include <cstdlib>

extern char** environ;

namespace replay::dist {

namespace {

const std::string* find(const EnvMap& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

// A decimal integer in [lo, hi]; `what` says what the variable holds, for the error.
long parse_int(const EnvMap& env, const std::string& name, long lo, long hi,
               const std::string& launcher) {
  const std::string* v = find(env, name);
  if (!v)
    throw LaunchEnvError(name + " is not set (the " + launcher +
                         " environment needs it beside the variables that are set)");
  errno = 0;
  char* end = nullptr;
  const long x = std::strtol(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || errno == ERANGE)
    throw LaunchEnvError(name + "='" + *v + "': expected a decimal integer");
  if (x < lo || x > hi)
    throw LaunchEnvError(name + "=" + *v + ": expected " + std::to_string(lo) + ".." +
                         std::to_string(hi));
  return x;
}

}  // namespace

bool launched(const EnvMap& env) {
  if (find(env, "RANK") || find(env, "WORLD_SIZE")) return true;
  for (const char* size : {"OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"})
    if (const std::string* v = find(env, size); v && *v != "1") return true;
  return false;
}

LaunchEnv parse_launch_env(const EnvMap& env) {
  struct Names {
    const char *launcher, *rank, *size, *local;
  };
  static constexpr Names kLaunchers[] = {
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
  };
  const Names* l = nullptr;
  for (const Names& n : kLaunchers)
    if (find(env, n.rank) || find(env, n.size)) {
      l = &n;
      break;
    }
  if (!l)
    throw LaunchEnvError(
        "no launcher environment: none of RANK / WORLD_SIZE (torchrun), OMPI_COMM_WORLD_RANK / "
        "OMPI_COMM_WORLD_SIZE (mpirun), SLURM_PROCID / SLURM_NTASKS (srun) is set; start the "
        "ranks with torchrun, mpirun, srun or `replay launch --nproc N`");
  LaunchEnv e;
  e.launcher = l->launcher;
  constexpr long kMaxWorld = 1 << 20;
  e.world_size = static_cast<int>(parse_int(env, l->size, 1, kMaxWorld, e.launcher));
  e.rank = static_cast<int>(parse_int(env, l->rank, 0, kMaxWorld, e.launcher));
  if (e.rank >= e.world_size)
    throw LaunchEnvError(std::string(l->rank) + "=" + std::to_string(e.rank) + " is not below " +
                         l->size + "=" + std::to_string(e.world_size));
  e.local_rank = static_cast<int>(parse_int(env, l->local, 0, kMaxWorld, e.launcher));
  if (e.local_rank >= e.world_size)
    throw LaunchEnvError(std::string(l->local) + "=" + std::to_string(e.local_rank) +
                         " is not below " + l->size + "=" + std::to_string(e.world_size));
  const std::string* addr = find(env, "MASTER_ADDR");
  if (!addr || addr->empty())
    throw LaunchEnvError(std::string("MASTER_ADDR is ") + (addr ? "empty" : "not set") +
                         ": the host of rank 0, where the rendezvous listens (" + e.launcher +
                         " environment; mpirun and srun do not set it)");
  e.master_addr = *addr;
  if (!find(env, "MASTER_PORT"))
    throw LaunchEnvError(
        "MASTER_PORT is not set: the TCP port of the rendezvous on MASTER_ADDR=" + e.master_addr +
        " (" + e.launcher + " environment; mpirun and srun do not set it)");
  e.master_port = static_cast<uint16_t>(parse_int(env, "MASTER_PORT", 1, 65535, e.launcher));
  return e;
}

EnvMap process_env() {
  EnvMap env;
  for (char** p = environ; p && *p; ++p) {
    const std::string kv = *p;
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

}  // namespace replay::dist
