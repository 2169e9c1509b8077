// signal_pipe.h — the launcher's signal handling: a self-pipe, so its poll loop sees signals.
#pragma once

#include <signal.h>

#include <string>

namespace lockstep::detail {

/// Installs the handlers for the launcher's lifetime and restores the old ones.
/// SIGINT, SIGTERM, SIGHUP and SIGCHLD each write their number as one byte to
/// readFd(); SIGPIPE is ignored. One at a time: the pipe is process-wide.
class SignalGuard {
 public:
  SignalGuard();
  ~SignalGuard();
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;
  int readFd() const;

 private:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};
  static int index(int s) {
    for (int i = 0; i < 4; ++i)
      if (kSignals[i] == s) return i;
    return 0;
  }
  struct sigaction old_[4]{};
  struct sigaction oldPipe_ {};
};

/// "SIGTERM" for SIGTERM; "signal N" for a number without a name.
std::string signalName(int sig);

}  // namespace lockstep::detail
