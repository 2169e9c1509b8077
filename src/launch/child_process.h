// child_process.h — one worker process: fork/exec with piped stdout/stderr.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "common/posix_io.h"  // Fd

namespace lockstep::detail {

/// A started child in its own process group. The destructor kills the group
/// (SIGKILL) and reaps it if it is still running, so no worker outlives us.
class ChildProcess {
 public:
  /// Starts `argv` with exactly `env`. Throws lockstep::Error when fork/pipe fail;
  /// an exec failure shows as exit code 127 with the reason on the child's stderr.
  /// With `pipeStdin` the child reads its stdin from stdinFd(); else from /dev/null.
  /// A non-empty `cpus` pins the child (and every thread it starts) to those CPUs.
  ChildProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
               bool pipeStdin = false, const std::vector<int>& cpus = {});
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  Fd& stdoutFd() { return stdout_; }
  Fd& stderrFd() { return stderr_; }
  Fd& stdinFd() { return stdin_; }
  bool running() const { return running_; }
  /// Sends `sig` to the child's whole process group.
  void signalGroup(int sig);
  /// Non-blocking reap; true when it has just exited (status()).
  bool poll();
  int rawStatus() const { return status_; }

 private:
  pid_t pid_ = -1;
  bool running_ = false;
  int status_ = 0;
  Fd stdout_;
  Fd stderr_;
  Fd stdin_;
};

}  // namespace lockstep::detail
