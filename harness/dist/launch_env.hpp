// Where this process sits in a multi-process run: rank, world size, local rank and the rendezvous
// address, read from the environment the launcher set (torchrun, Open MPI's mpirun, Slurm's srun,
// or `replay launch`). harness/dist/README.md documents the variables and their precedence.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>

namespace replay::dist {

/// An incomplete or inconsistent launcher environment; the message names the variable(s).
class LaunchEnvError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using EnvMap = std::map<std::string, std::string>;

/// One process's place in the run.
struct LaunchEnv {
  int rank = 0;              ///< global rank, 0 <= rank < world_size
  int world_size = 1;        ///< number of processes in the run
  int local_rank = 0;        ///< rank among the processes of this host (picks the GPU)
  std::string master_addr;   ///< host of the rendezvous (rank 0 listens there)
  uint16_t master_port = 0;  ///< TCP port of the rendezvous, 1..65535
  std::string launcher;      ///< "torchrun", "openmpi" or "slurm": whose variables were read
};

/// Reads the launch environment from `env` (a pure function: `process_env()` gives the real one).
/// Precedence: torchrun's RANK / WORLD_SIZE / LOCAL_RANK when RANK or WORLD_SIZE is set (torchrun
/// and `replay launch` set them, also when started under mpirun or srun, whose variables then
/// describe the launcher, not the workers); else Open MPI's OMPI_COMM_WORLD_RANK / _SIZE /
/// _LOCAL_RANK; else Slurm's SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID. MASTER_ADDR and
/// MASTER_PORT are required with every launcher. Throws LaunchEnvError naming the variable when
/// one of a launcher's variables is missing, not an integer, out of range (rank >= world size,
/// local rank >= world size, port outside 1..65535), or when no launcher's variables are present.
LaunchEnv parse_launch_env(const EnvMap& env);

/// Whether `env` says this process is one rank of a multi-process run, so `replay run` joins the
/// rendezvous: torchrun's (and `replay launch`'s) RANK or WORLD_SIZE is set, or Open MPI's
/// OMPI_COMM_WORLD_SIZE / Slurm's SLURM_NTASKS is set and not 1 (a single task of mpirun or srun,
/// e.g. a batch script's plain `replay run`, stays a single process).
bool launched(const EnvMap& env);

/// The process's environment (`environ`) as an EnvMap.
EnvMap process_env();

}  // namespace replay::dist
