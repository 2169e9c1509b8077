// mpirun_job.cpp — MpirunJob (backend "mpi"): the workers of this node, started by one mpirun.
#include <unistd.h>

#include "launch/launch_commands.h"
#include "launch/launch_modes.h"
#include "launch/launch_summary.h"

namespace lockstep::detail {

Children MpirunJob::start(const std::map<std::string, std::string>& baseEnv) {
  auto c = std::make_unique<Child>();
  c->relay = makeRelay(o_, 0, OutputRelay::Source::kMpirun);
  c->spawn(mpirunCommand(o_, usableCores(), ::geteuid() == 0), baseEnv);
  Children children;
  children.push_back(std::move(c));
  return children;
}

LaunchResult MpirunJob::summarize(const Children& children, const GroupEnd& end) const {
  return mpirunSummary(*children.front(), end);
}

}  // namespace lockstep::detail
