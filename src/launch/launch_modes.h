// launch_modes.h — `lockstep run`'s three ways of starting a job, each a LaunchMode:
// LocalWorkers (fork/exec the workers on this host), RemoteHosts (-H: a launcher on
// each host, started through rsh) and MpirunJob (backend "mpi": one mpirun child).
// A mode decides which children to start and how the summary names them; the
// Supervisor (supervisor.h) watches every mode's children alike.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/posix_io.h"  // writeAll
#include "launch/child_process.h"
#include "launch/output_relay.h"
#include "lockstep/launch/launcher.h"

namespace lockstep::detail {

using LaunchClock = std::chrono::steady_clock;

/// One child of this launcher (a worker, mpirun, or a launcher on another host) and its output.
struct Child {
  int rank = 0;
  std::unique_ptr<ChildProcess> process;
  std::unique_ptr<OutputRelay> relay;
  RankResult result;
  LaunchClock::time_point started;
  bool leaving = false;  ///< told to leave the elastic job (--host-discovery shrank it): its exit is no failure

  /// Starts `argv` as this child (see ChildProcess) and notes its start time and pid.
  void spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
             bool pipeStdin = false, const std::vector<int>& cpus = {}) {
    started = LaunchClock::now();
    process = std::make_unique<ChildProcess>(argv, env, pipeStdin, cpus);
    result.pid = process->pid();
  }
};
using Children = std::vector<std::unique_ptr<Child>>;

/// A child's relay: its lines go to our own stdout/stderr (write errors ignored: nothing better to do).
inline std::unique_ptr<OutputRelay> makeRelay(const LaunchOptions& o, int rank, OutputRelay::Source source) {
  return std::make_unique<OutputRelay>(rank, source, o.prefixOutput, o.tailLines,
                                       [](int fd, std::string_view text) { writeAll(fd, text); });
}

/// How a group of children ended, as the Supervisor saw it.
struct GroupEnd {
  int firstFailed = -1;     ///< rank of the first child that failed before the launcher stopped it; -1: none
  int interruptSignal = 0;  ///< the first signal forwarded to the group (SIGTERM when the parent went away)
  bool parentGone = false;  ///< --token-stdin: the launcher that started this one closed our stdin
  std::vector<int> lost;    ///< --min-np: ranks that failed while enough others ran on, in order
};

/// What children a launch starts, and how its result names them.
class LaunchMode {
 public:
  virtual ~LaunchMode() = default;
  /// Starts every child, each with its relay, and says on stderr where they went.
  virtual Children start(const std::map<std::string, std::string>& baseEnv) = 0;
  /// The ended group's result: exit code, first failed rank, and the summary for stderr.
  virtual LaunchResult summarize(const Children& children, const GroupEnd& end) const = 0;
  /// An elastic job's newcomer in slot `rank` (with kNewcomerVar set); null where this mode starts
  /// no single worker.
  virtual std::unique_ptr<Child> newcomer(int /*rank*/, const std::map<std::string, std::string>& /*baseEnv*/) {
    return nullptr;
  }
};

/// nprocPerNode workers of the command on this host, ranks nodeRank·N ..., each with the
/// lockstep and torchrun variables of its place (and its cores with --bind core).
class LocalWorkers final : public LaunchMode {
 public:
  explicit LocalWorkers(const LaunchOptions& o) : o_(o) {}
  Children start(const std::map<std::string, std::string>& baseEnv) override;
  LaunchResult summarize(const Children& children, const GroupEnd& end) const override;
  std::unique_ptr<Child> newcomer(int rank, const std::map<std::string, std::string>& baseEnv) override;
  /// The variables a worker finds its place by, in lockstep's and torchrun's forms; `worldSize`
  /// workers (0: the launch's).
  std::map<std::string, std::string> workerEnvironment(int rank, int localRank, int worldSize = 0) const;

 private:
  std::unique_ptr<Child> startWorker(int local, std::map<std::string, std::string> env, int worldSize = 0) const;
  const LaunchOptions& o_;
};

/// -H: one launcher per host through rsh (node rank = position); the token goes down each one's stdin.
class RemoteHosts final : public LaunchMode {
 public:
  explicit RemoteHosts(const LaunchOptions& o) : o_(o) {}
  Children start(const std::map<std::string, std::string>& baseEnv) override;
  LaunchResult summarize(const Children& children, const GroupEnd& end) const override;

 private:
  const LaunchOptions& o_;
};

/// Backend "mpi": one child, mpirun, whose output carries "[job,rank]<stream>:" tags.
class MpirunJob final : public LaunchMode {
 public:
  explicit MpirunJob(const LaunchOptions& o) : o_(o) {}
  Children start(const std::map<std::string, std::string>& baseEnv) override;
  LaunchResult summarize(const Children& children, const GroupEnd& end) const override;

 private:
  const LaunchOptions& o_;
};

}  // namespace lockstep::detail
