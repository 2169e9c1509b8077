// supervisor.h — the core every launch mode shares: one poll loop over the
// children's output (through their relays) and the signal pipe, signals
// forwarded to every child, the group stopped on the first failure (SIGTERM,
// then SIGKILL after --stop-grace), and with --token-stdin when the launcher
// that started this one goes away.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "launch/launch_modes.h"

namespace lockstep::detail {

class Supervisor {
 public:
  /// Called with the number of workers still running each time one exits.
  using ExitFn = std::function<void(int running)>;
  /// Watches `children` (started by a LaunchMode) under the options `o`.
  Supervisor(const LaunchOptions& o, Children children, ExitFn onExit = nullptr)
      : o_(o), children_(std::move(children)), onExit_(std::move(onExit)) {}

  /// Relays the children's output until every one has exited and its pipes are closed (or 2 s
  /// after the last exit); `signalFd` is SignalGuard's pipe. Anything still running then is killed.
  GroupEnd run(int signalFd);
  const Children& children() const { return children_; }

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
  bool othersGoOn(const Child& lost);
  static void record(Child& child);

  const LaunchOptions& o_;
  Children children_;
  ExitFn onExit_;
  GroupEnd end_;
  static constexpr LaunchClock::time_point kNever = LaunchClock::time_point::max();
  /// Children still running at killAt_ get SIGKILL; kNever while nobody is being stopped.
  LaunchClock::time_point killAt_ = kNever;
};

}  // namespace lockstep::detail
