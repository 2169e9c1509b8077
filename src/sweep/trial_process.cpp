// A trial's child process (trial_process.h).
#include "sweep/trial_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "common/posix_io.h"
#include "lockstep/common/error.h"

namespace lockstep::sweep {

TrialProcess::TrialProcess(const std::vector<std::string>& argv, const std::string& logPath) {
  detail::Fd log(::open(logPath.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (!log.valid()) throw Error(fmt::format("cannot open {}: {}", logPath, std::strerror(errno)));
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw Error(fmt::format("cannot start a trial: fork failed: {}", std::strerror(errno)));
  if (pid == 0) {
    // Only async-signal-safe calls until exec.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);  // the sweep died before prctl took effect
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(log.get(), 1);
    ::dup2(log.get(), 2);
    ::execv(cargv[0], cargv.data());
    const char* why = std::strerror(errno);
    detail::writeAll(2, "cannot start ");
    detail::writeAll(2, cargv[0]);
    detail::writeAll(2, ": ");
    detail::writeAll(2, why);
    detail::writeAll(2, "\n");
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: no window in which a signal to the group misses the child
  pid_ = pid;
  running_ = true;
}

TrialProcess::~TrialProcess() {
  if (!running_) return;
  signalGroup(SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {}
}

bool TrialProcess::poll() {
  if (!running_) return true;
  int status = 0;
  pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == 0 || (r < 0 && errno == EINTR)) return false;
  running_ = false;
  if (r < 0) {
    exitCode_ = 127;
  } else {
    exitCode_ = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  }
  return true;
}

void TrialProcess::terminate() { signalGroup(SIGTERM); }

void TrialProcess::signalGroup(int sig) const {
  if (running_) ::kill(-pid_, sig);
}

}  // namespace lockstep::sweep
