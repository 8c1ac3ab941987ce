// The CLI's multi-process subcommands (harness/cli/main.cpp registers them): `replay launch` and
// the hidden `replay rendezvous-check`. They return the process exit code
// (harness/cli/exit_codes.hpp).
#pragma once

#include <string>
#include <vector>

namespace replay::dist {

/// `replay launch --nproc N [--timeout S] -- ARGS...`: runs N ranks of this binary with ARGS on
/// this host (launch_local). Exit 0 when every rank exits 0; else the failed rank's exit code (or
/// kExitRuntime for a rank killed by a signal or the timeout), after an error line naming it.
int cmd_launch(int nproc, double timeout_s, int master_port, const std::vector<std::string>& args);

/// `replay rendezvous-check [--timeout S]`: reads the launcher environment, joins the rendezvous,
/// all-gathers "rank R of W" and checks every entry, then a barrier. Rank 0 prints one line.
/// Exit 2 on a bad launcher environment, 4 on a rendezvous failure (message on stderr).
/// Test hooks: rank `hang_rank` sleeps without joining (others time out); rank `die_rank` kills
/// itself with SIGKILL after the join (the others see it close its connection).
int cmd_rendezvous_check(double timeout_s, int hang_rank, int die_rank);

}  // namespace replay::dist
