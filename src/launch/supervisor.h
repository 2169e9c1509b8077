// supervisor.h — the core every launch mode shares: one poll loop over the
// children's output (through their relays) and the signal pipe, signals
// forwarded to every child, the group stopped on the first failure (SIGTERM,
// then SIGKILL after --stop-grace), and with --token-stdin when the launcher
// that started this one goes away.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "launch/host_discovery.h"
#include "launch/launch_modes.h"

namespace lockstep::detail {

/// How an elastic group's slots are refilled and grown (all empty: never).
struct ElasticSlots {
  /// A new worker in slot `rank` (a newcomer to the job), or null for none.
  std::function<std::unique_ptr<Child>(int rank)> start;
  int respawns = 0;                          ///< lost workers whose slots may be refilled (--max-restarts)
  std::unique_ptr<HostDiscovery> discovery;  ///< --host-discovery: how many workers to hold (up to --max-np)
  /// Whether the worker of this pid said it left the job before its end (a preemption): its exit
  /// with code 0 then refills its slot instead of meaning the job ends.
  std::function<bool(int64_t pid)> leftTheJob;
};

class Supervisor {
 public:
  /// Called with the number of workers still running each time one exits.
  using ExitFn = std::function<void(int running)>;
  using Slots = ElasticSlots;
  /// Watches `children` (started by a LaunchMode) under the options `o`.
  Supervisor(const LaunchOptions& o, Children children, ExitFn onExit = nullptr, Slots slots = {})
      : o_(o), children_(std::move(children)), onExit_(std::move(onExit)), slots_(std::move(slots)) {}

  /// Relays the children's output until every one has exited and its pipes are closed (or 2 s
  /// after the last exit); `signalFd` is SignalGuard's pipe. Anything still running then is killed.
  GroupEnd run(int signalFd);
  const Children& children() const { return children_; }
  /// The lost workers this group replaced with newcomers.
  int respawned() const { return respawned_; }

 private:
  struct PollSet;
  PollSet pollSet(int signalFd);
  bool anyRunning() const;
  void relayReady(PollSet& set, std::vector<char>& buffer);
  void killRunning();
  void finishAll();
  void watchParent();
  /// An interrupt (or the parent gone): records `sig` as the group's end, then stopRunning.
  void stopAll(int sig);
  /// Sends `sig` to every running child, marks it stopped by the launcher, starts the grace period.
  void stopRunning(int sig);
  void drainSignals(int signalFd);
  void reap();
  /// --min-np: whether the group goes on without `lost` (enough others run); says so on stderr.
  /// `how` it went, when not its exit (describeRankEnd).
  bool othersGoOn(const Child& lost, const char* how = nullptr);
  /// --min-np: starts a newcomer in the slot of `lost` when the budget allows; says so on stderr.
  void refill(const Child& lost);
  /// --host-discovery: newcomers in free slots, or SIGTERM to the last workers, towards `slots`.
  void holdWorkers(int slots);
  /// Workers running and not told to leave.
  int runningCount() const;
  static void record(Child& child);

  const LaunchOptions& o_;
  Children children_;
  ExitFn onExit_;
  Slots slots_;
  int respawned_ = 0;
  bool ending_ = false;  // a worker exited with code 0: the job is ending, no slot is refilled
  GroupEnd end_;
  static constexpr LaunchClock::time_point kNever = LaunchClock::time_point::max();
  /// Children still running at killAt_ get SIGKILL; kNever while nobody is being stopped.
  LaunchClock::time_point killAt_ = kNever;
};

}  // namespace lockstep::detail
