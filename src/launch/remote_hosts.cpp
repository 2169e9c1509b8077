// remote_hosts.cpp — RemoteHosts (-H): a `lockstep run` on every host, started through rsh.
#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "launch/launch_commands.h"
#include "launch/launch_modes.h"
#include "launch/launch_summary.h"
#include "lockstep/common/error.h"
#include "lockstep/common/token.h"

namespace lockstep::detail {
namespace {

/// This lockstep binary, which every host must have at the same path.
std::string launcherExecutablePath() {
  std::error_code ec;
  auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error("cannot find this program's path (/proc/self/exe) to start it on the other hosts");
  return path.string();
}

}  // namespace

Children RemoteHosts::start(const std::map<std::string, std::string>& baseEnv) {
  std::map<std::string, std::string> forward;
  for (const auto& [k, v] : baseEnv) {
    if (k.rfind("LOCKSTEP_", 0) == 0 && k != kJobTokenVar && k != kJobTokenFileVar) forward[k] = v;
  }
  // The token goes down each rsh's stdin only: not on its command line (ps) nor in its environment
  // (an ssh configured with SendEnv would pass it on).
  auto rshEnv = baseEnv;
  rshEnv.erase(kJobTokenVar);
  rshEnv.erase(kJobTokenFileVar);
  std::string self = launcherExecutablePath();
  std::string cwd = std::filesystem::current_path().string();
  Children children;
  for (size_t k = 0; k < o_.hosts.size(); ++k) {
    auto c = std::make_unique<Child>();
    c->rank = static_cast<int>(k);
    c->relay = makeRelay(o_, c->rank, OutputRelay::Source::kNode);
    std::vector<std::string> argv = o_.rsh;
    argv.push_back(o_.hosts[k].host);
    argv.push_back(remoteLaunchCommand(o_, static_cast<int>(k), self, cwd, forward));
    c->spawn(argv, rshEnv, /*pipeStdin=*/true);
    writeAll(c->process->stdinFd().get(), o_.token + "\n");  // stays open: closing it stops that node
    c->result.rank = c->rank;
    int first = static_cast<int>(k) * o_.nprocPerNode;
    writeAll(STDERR_FILENO, fmt::format("lockstep run: node {} on {}: ranks {}..{} (started through {})\n", k,
                                        o_.hosts[k].host, first, first + o_.nprocPerNode - 1, o_.rsh.front()));
    children.push_back(std::move(c));
  }
  return children;
}

LaunchResult RemoteHosts::summarize(const Children& children, const GroupEnd& end) const {
  return groupSummary(
      children, end, [this](int rank) { return fmt::format("node {} ({})", rank, o_.hosts[rank].host); }, "node");
}

}  // namespace lockstep::detail
