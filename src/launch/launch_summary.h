// launch_summary.h — what `lockstep run` prints on stderr when a group ended
// badly, and the result it exits with, written once for every launch mode.
#pragma once

#include <functional>
#include <string>

#include "launch/launch_modes.h"

namespace lockstep::detail {

/// "was killed by SIGKILL" or "exited with code 3".
std::string describeRankEnd(const RankResult& r);

/// A group whose children are ranks (LocalWorkers) or nodes (RemoteHosts): after an interrupt,
/// which signal went to every worker; after a failure, the first child to fail, how it ended and
/// its stderr tail; then how every other child ended. `label` names a child by its rank ("rank 3",
/// "node 1 (host)"), `noun` says what a child is ("worker", "node").
LaunchResult groupSummary(const Children& children, const GroupEnd& end, const std::function<std::string(int)>& label,
                          const std::string& noun);

/// MpirunJob's one child: how mpirun ended, the rank mpirun reported as the first to fail
/// and that rank's stderr tail (from the relay, which splits mpirun's tagged output by rank).
LaunchResult mpirunSummary(const Child& mpirun, const GroupEnd& end);

}  // namespace lockstep::detail
