// trial_process.h — one trial's command as a child process: its own process
// group (a stop signals the trial's launcher and everything under it), its
// output into a log file, and SIGTERM when the sweep dies (PR_SET_PDEATHSIG),
// so a kill -9 of the sweep leaves no trial running behind it.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "sweep/trial_launcher.h"

namespace lockstep::sweep {

class TrialProcess : public TrialHandle {
 public:
  /// Starts argv[0] (a path) with stdout and stderr appended to `logPath`. Throws lockstep::Error
  /// when it cannot fork or open the log; an exec failure shows as exit code 127.
  TrialProcess(const std::vector<std::string>& argv, const std::string& logPath);
  /// Kills the group (SIGKILL) and reaps it if it is still running.
  ~TrialProcess() override;
  TrialProcess(const TrialProcess&) = delete;
  TrialProcess& operator=(const TrialProcess&) = delete;

  /// Non-blocking: true once the child has exited (then exitCode()).
  bool poll() override;
  /// Its exit code, 128 + signal when a signal ended it.
  int exitCode() const override { return exitCode_; }
  void terminate() override;
  void signalGroup(int sig) const;

 private:
  pid_t pid_ = -1;
  bool running_ = false;
  int exitCode_ = 0;
};

}  // namespace lockstep::sweep
