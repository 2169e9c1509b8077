#include "launch/child_process.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lockstep/common/error.h"

namespace lockstep::detail {

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                           bool pipeStdin, const std::vector<int>& cpus) {
  LOCKSTEP_ASSERT(!argv.empty(), "empty command");
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  int in[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  if (::pipe2(err, O_CLOEXEC) != 0 || (pipeStdin && ::pipe2(in, O_CLOEXEC) != 0)) {
    int saved = errno;
    for (int fd : {out[0], out[1], err[0], err[1], in[0], in[1]}) {
      if (fd >= 0) ::close(fd);
    }
    throw Error(std::string("pipe: ") + std::strerror(saved));
  }
  // Build everything the child needs before fork: only async-signal-safe calls after it.
  std::vector<std::string> envStrings;
  for (const auto& [k, v] : env) envStrings.push_back(k + "=" + v);
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  std::vector<char*> cenv;
  for (auto& e : envStrings) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  std::string execError = "lockstep run: cannot execute '" + argv[0] + "': ";
  cpu_set_t cpuSet;
  CPU_ZERO(&cpuSet);
  for (int cpu : cpus) CPU_SET(cpu, &cpuSet);
  std::string bindError = "lockstep run: cannot bind '" + argv[0] + "' to its cores: ";
  pid_t parent = ::getpid();

  // Block every signal across fork: until the child has reset its handlers,
  // a signal (say the SIGTERM that stops a sibling's group) would run the
  // parent's handler inside the child and look as if the parent received it.
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  pid_t pid = ::fork();
  if (pid != 0) ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) {
    int saved = errno;
    for (int fd : {out[0], out[1], err[0], err[1], in[0], in[1]}) {
      if (fd >= 0) ::close(fd);
    }
    throw Error(std::string("fork: ") + std::strerror(saved));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    // Die with the launcher even if it is SIGKILLed.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(128 + SIGKILL);
    // Workers start with default signal dispositions and an empty mask.
    for (int s = 1; s < NSIG; ++s) {
      if (s != SIGKILL && s != SIGSTOP) ::signal(s, SIG_DFL);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    if (pipeStdin) {
      ::dup2(in[0], STDIN_FILENO);
    } else {
      int devnull = ::open("/dev/null", O_RDONLY);
      if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    }
    if (!cpus.empty() && ::sched_setaffinity(0, sizeof(cpuSet), &cpuSet) != 0) {
      int saved = errno;
      writeAll(STDERR_FILENO, bindError + std::strerror(saved) + "\n");
      ::_exit(127);
    }
    ::execvpe(cargv[0], cargv.data(), cenv.data());
    int saved = errno;
    writeAll(STDERR_FILENO, execError + std::strerror(saved) + "\n");
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so signalGroup works even before the child ran
  ::close(out[1]);
  ::close(err[1]);
  if (pipeStdin) {
    ::close(in[0]);
    stdin_ = Fd(in[1]);
  }
  pid_ = pid;
  running_ = true;
  stdout_ = Fd(out[0]);
  stderr_ = Fd(err[0]);
}

ChildProcess::~ChildProcess() {
  if (running_) {
    signalGroup(SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {}
  }
}

void ChildProcess::signalGroup(int sig) {
  if (pid_ <= 0) return;
  if (::kill(-pid_, sig) != 0 && running_) ::kill(pid_, sig);
}

bool ChildProcess::poll() {
  if (!running_) return false;
  int status = 0;
  pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    running_ = false;
    status_ = status;
    // Whatever the worker left running in its group goes with it.
    ::kill(-pid_, SIGKILL);
    return true;
  }
  return false;
}

}  // namespace lockstep::detail
