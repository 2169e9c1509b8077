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
namespace {

/// The ends of the child's stdout, stderr and (with pipeStdin) stdin pipes; -1 where there is none.
struct Pipes {
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  int in[2] = {-1, -1};

  void closeAll() const {
    for (int fd : {out[0], out[1], err[0], err[1], in[0], in[1]}) {
      if (fd >= 0) ::close(fd);
    }
  }
};

Pipes openPipes(bool pipeStdin) {
  Pipes p;
  if (::pipe2(p.out, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  if (::pipe2(p.err, O_CLOEXEC) != 0 || (pipeStdin && ::pipe2(p.in, O_CLOEXEC) != 0)) {
    int saved = errno;
    p.closeAll();
    throw Error(std::string("pipe: ") + std::strerror(saved));
  }
  return p;
}

/// Everything the child needs, built before fork: only async-signal-safe calls after it.
/// Not copyable or movable: argv and envp point into envStrings and the caller's argv.
struct ExecPlan {
  std::vector<std::string> envStrings;
  std::vector<char*> argv;
  std::vector<char*> envp;
  std::string execError;
  bool bindCpus = false;
  cpu_set_t cpuSet;
  std::string bindError;
  pid_t parent = -1;

  ExecPlan(const std::vector<std::string>& command, const std::map<std::string, std::string>& env,
           const std::vector<int>& cpus) {
    for (const auto& [k, v] : env) envStrings.push_back(k + "=" + v);
    for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (auto& e : envStrings) envp.push_back(e.data());
    envp.push_back(nullptr);
    execError = "lockstep run: cannot execute '" + command[0] + "': ";
    bindCpus = !cpus.empty();
    CPU_ZERO(&cpuSet);
    for (int cpu : cpus) CPU_SET(cpu, &cpuSet);
    bindError = "lockstep run: cannot bind '" + command[0] + "' to its cores: ";
    parent = ::getpid();
  }
  ExecPlan(const ExecPlan&) = delete;
  ExecPlan& operator=(const ExecPlan&) = delete;
};

/// The child's side of fork: sets up its group, signals, stdio and cores, then execs.
[[noreturn]] void runChild(const ExecPlan& plan, const Pipes& pipes, bool pipeStdin) {
  ::setpgid(0, 0);
  // Die with the launcher even if it is SIGKILLed.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != plan.parent) ::_exit(128 + SIGKILL);
  // Workers start with default signal dispositions and an empty mask.
  for (int s = 1; s < NSIG; ++s) {
    if (s != SIGKILL && s != SIGSTOP) ::signal(s, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::dup2(pipes.out[1], STDOUT_FILENO);
  ::dup2(pipes.err[1], STDERR_FILENO);
  if (pipeStdin) {
    ::dup2(pipes.in[0], STDIN_FILENO);
  } else {
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
  }
  if (plan.bindCpus && ::sched_setaffinity(0, sizeof(plan.cpuSet), &plan.cpuSet) != 0) {
    int saved = errno;
    writeAll(STDERR_FILENO, plan.bindError + std::strerror(saved) + "\n");
    ::_exit(127);
  }
  ::execvpe(plan.argv[0], plan.argv.data(), plan.envp.data());
  int saved = errno;
  writeAll(STDERR_FILENO, plan.execError + std::strerror(saved) + "\n");
  ::_exit(127);
}

}  // namespace

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                           bool pipeStdin, const std::vector<int>& cpus) {
  LOCKSTEP_ASSERT(!argv.empty(), "empty command");
  const Pipes pipes = openPipes(pipeStdin);
  const ExecPlan plan(argv, env, cpus);

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
    pipes.closeAll();
    throw Error(std::string("fork: ") + std::strerror(saved));
  }
  if (pid == 0) runChild(plan, pipes, pipeStdin);
  ::setpgid(pid, pid);  // also here, so signalGroup works even before the child ran
  ::close(pipes.out[1]);
  ::close(pipes.err[1]);
  if (pipeStdin) {
    ::close(pipes.in[0]);
    stdin_ = Fd(pipes.in[1]);
  }
  pid_ = pid;
  running_ = true;
  stdout_ = Fd(pipes.out[0]);
  stderr_ = Fd(pipes.err[0]);
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
