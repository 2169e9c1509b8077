#include "lockstep/launch/launcher.h"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "launch/child_process.h"
#include "launch/launch_commands.h"
#include "launch/output_relay.h"
#include "launch/signal_pipe.h"
#include "lockstep/common/env.h"
#include "lockstep/common/error.h"
#include "lockstep/common/token.h"
#include "lockstep/rendezvous/world.h"

namespace lockstep {

using Clock = std::chrono::steady_clock;
constexpr Clock::time_point kNever = Clock::time_point::max();
using detail::ChildProcess;
using detail::Fd;

namespace {

using detail::mpirunCommand;
using detail::OutputRelay;
using detail::pickFreePort;
using detail::portIsFree;
using detail::remoteLaunchCommand;
using detail::resolveProgram;
using detail::shellQuote;
using detail::SignalGuard;
using detail::signalName;
using detail::writeAll;  // errors writing our own stdout/stderr are ignored: nothing better to do

std::string selfPath() {
  std::error_code ec;
  auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error("cannot find this program's path (/proc/self/exe) to start it on the other hosts");
  return path.string();
}

/// One child of this launcher (a worker, mpirun, or a launcher on another host) and its output.
struct Worker {
  int rank = 0;
  std::unique_ptr<ChildProcess> process;
  std::unique_ptr<OutputRelay> relay;
  RankResult result;
  Clock::time_point started;
  bool isMpirun = false;  ///< one process, mpirun, whose output carries "[job,rank]<stream>:" tags
};

class Runner {
 public:
  explicit Runner(const LaunchOptions& o) : o_(o) {}

  std::unique_ptr<OutputRelay> makeRelay(int rank, OutputRelay::Source source) const {
    return std::make_unique<OutputRelay>(rank, source, o_.prefixOutput, o_.tailLines,
                                         [](int fd, std::string_view text) { writeAll(fd, text); });
  }

  /// The variables a worker finds its place by, in lockstep's and torchrun's forms.
  std::map<std::string, std::string> workerEnvironment(int rank, int localRank) const {
    WorldInfo w;
    w.rank = rank;
    w.worldSize = o_.nprocPerNode * o_.nnodes;
    w.localRank = localRank;
    w.localWorldSize = o_.nprocPerNode;
    w.nodeRank = o_.nodeRank;
    w.masterAddr = o_.masterAddr;
    w.masterPort = o_.masterPort;
    auto env = environmentFor(w, WorldSource::kLockstep);
    env.merge(environmentFor(w, WorldSource::kTorchrun));
    return env;
  }

  LaunchResult run(const std::map<std::string, std::string>& baseEnv) {
    SignalGuard signals;
    if (!o_.backendReason.empty()) {
      writeAll(STDERR_FILENO, fmt::format("lockstep run: backend {} ({})\n", o_.backend, o_.backendReason));
    }
    if (!o_.hosts.empty()) return runHosts(baseEnv, signals.readFd());
    if (o_.backend == "mpi") {
      auto w = std::make_unique<Worker>();
      w->isMpirun = true;
      w->relay = makeRelay(0, OutputRelay::Source::kMpirun);
      w->started = Clock::now();
      w->process = std::make_unique<ChildProcess>(mpirunCommand(o_, detail::usableCores(), ::geteuid() == 0), baseEnv);
      w->result.pid = w->process->pid();
      workers_.push_back(std::move(w));
      loop(signals.readFd());
      return finish();
    }
    for (int local = 0; local < o_.nprocPerNode; ++local) {
      auto w = std::make_unique<Worker>();
      w->rank = o_.nodeRank * o_.nprocPerNode + local;
      w->relay = makeRelay(w->rank, OutputRelay::Source::kWorker);
      auto env = baseEnv;
      for (auto& [key, value] : workerEnvironment(w->rank, local)) env[key] = value;
      w->started = Clock::now();
      std::vector<int> cpus;
      if (o_.bindCores) cpus = detail::workerCpus(local, *o_.threadsPerWorker);
      w->process = std::make_unique<ChildProcess>(o_.command, env, /*pipeStdin=*/false, cpus);
      w->result.rank = w->rank;
      w->result.pid = w->process->pid();
      workers_.push_back(std::move(w));
    }
    std::string placement;
    for (auto& w : workers_)
      placement += fmt::format("{}rank {} pid {}", placement.empty() ? "" : ", ", w->rank, w->result.pid);
    writeAll(STDERR_FILENO, fmt::format("lockstep run: node {} of {} ({}): {}\n", o_.nodeRank, o_.nnodes,
                                        detail::hostName(), placement));
    loop(signals.readFd());
    return finish();
  }

 private:
  /// -H: one launcher per host through rsh; the token goes down each one's stdin.
  LaunchResult runHosts(const std::map<std::string, std::string>& baseEnv, int signalFd) {
    std::map<std::string, std::string> forward;
    for (const auto& [k, v] : baseEnv) {
      if (k.rfind("LOCKSTEP_", 0) == 0 && k != kJobTokenVar && k != kJobTokenFileVar) forward[k] = v;
    }
    // The token goes down each rsh's stdin only: not on its command line (ps) nor in its environment
    // (an ssh configured with SendEnv would pass it on).
    auto rshEnv = baseEnv;
    rshEnv.erase(kJobTokenVar);
    rshEnv.erase(kJobTokenFileVar);
    std::string self = selfPath();
    std::string cwd = std::filesystem::current_path().string();
    for (size_t k = 0; k < o_.hosts.size(); ++k) {
      auto w = std::make_unique<Worker>();
      w->rank = static_cast<int>(k);
      w->relay = makeRelay(w->rank, OutputRelay::Source::kNode);
      std::vector<std::string> argv = o_.rsh;
      argv.push_back(o_.hosts[k].host);
      argv.push_back(remoteLaunchCommand(o_, static_cast<int>(k), self, cwd, forward));
      w->started = Clock::now();
      w->process = std::make_unique<ChildProcess>(argv, rshEnv, /*pipeStdin=*/true);
      writeAll(w->process->stdinFd().get(), o_.token + "\n");  // stays open: closing it stops that node
      w->result.rank = w->rank;
      w->result.pid = w->process->pid();
      int first = static_cast<int>(k) * o_.nprocPerNode;
      writeAll(STDERR_FILENO, fmt::format("lockstep run: node {} on {}: ranks {}..{} (started through {})\n", k,
                                          o_.hosts[k].host, first, first + o_.nprocPerNode - 1, o_.rsh.front()));
      workers_.push_back(std::move(w));
    }
    loop(signalFd);
    return finish();
  }

  void loop(int signalFd) {
    std::vector<char> buffer(1 << 16);
    // Workers still running at killAt get SIGKILL; kNever while nobody is being stopped.
    Clock::time_point killAt = kNever;
    std::optional<Clock::time_point> allExitedAt;
    for (;;) {
      std::vector<pollfd> fds;
      std::vector<std::pair<Worker*, bool>> owners;  // (worker, isStderr)
      fds.push_back(pollfd{signalFd, POLLIN, 0});
      owners.emplace_back(nullptr, false);
      if (o_.tokenFromStdin && !parentGone_) {
        fds.push_back(pollfd{STDIN_FILENO, POLLIN, 0});
        owners.emplace_back(nullptr, true);
      }
      for (auto& w : workers_) {
        if (w->process->stdoutFd().valid()) {
          fds.push_back(pollfd{w->process->stdoutFd().get(), POLLIN, 0});
          owners.emplace_back(w.get(), false);
        }
        if (w->process->stderrFd().valid()) {
          fds.push_back(pollfd{w->process->stderrFd().get(), POLLIN, 0});
          owners.emplace_back(w.get(), true);
        }
      }
      bool anyRunning = std::any_of(workers_.begin(), workers_.end(), [](auto& w) { return w->process->running(); });
      if (!anyRunning && fds.size() == 1) break;
      if (!anyRunning) {
        // Every worker exited; give stray holders of the pipes a moment, then stop reading.
        if (!allExitedAt) allExitedAt = Clock::now();
        if (Clock::now() - *allExitedAt > std::chrono::seconds(2)) break;
      }
      int n = ::poll(fds.data(), fds.size(), 100);
      if (n < 0 && errno != EINTR) throw Error(std::string("poll: ") + std::strerror(errno));
      for (size_t i = 1; n > 0 && i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        auto [worker, isErr] = owners[i];
        if (worker == nullptr) {
          watchParent(killAt);
          continue;
        }
        Fd& fd = isErr ? worker->process->stderrFd() : worker->process->stdoutFd();
        ssize_t got = ::read(fd.get(), buffer.data(), buffer.size());
        if (got > 0) {
          worker->relay->feed(isErr, std::string_view(buffer.data(), static_cast<size_t>(got)));
        } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
          worker->relay->flush(isErr);
          fd.reset();
        }
      }
      if (fds[0].revents & POLLIN) drainSignals(signalFd, killAt);
      reap(killAt);
      if (killAt != kNever && Clock::now() >= killAt) {
        for (auto& w : workers_) {
          if (w->process->running()) w->process->signalGroup(SIGKILL);
        }
        killAt = kNever;
      }
    }
    // Anything still running now is killed and reaped by ~ChildProcess; record it.
    for (auto& w : workers_) {
      if (w->process->running()) {
        w->process->signalGroup(SIGKILL);
        while (!w->process->poll()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        record(*w);
      }
      w->relay->flush(false);
      w->relay->flush(true);
    }
  }

  /// The launcher that started this one over rsh holds our stdin open; EOF means it went away.
  void watchParent(Clock::time_point& killAt) {
    char buffer[256];
    ssize_t got = ::read(STDIN_FILENO, buffer, sizeof(buffer));
    if (got > 0 || (got < 0 && (errno == EINTR || errno == EAGAIN))) return;
    parentGone_ = true;
    writeAll(STDERR_FILENO, fmt::format("lockstep run: node {}: the launcher that started this node closed its "
                                        "connection; stopping the workers\n",
                                        o_.nodeRank));
    stopAll(SIGTERM, killAt);
  }

  void stopAll(int sig, Clock::time_point& killAt) {
    if (interruptSignal_ == 0) interruptSignal_ = sig;
    for (auto& w : workers_) {
      if (w->process->running()) {
        w->process->signalGroup(sig);
        w->result.stoppedByLauncher = true;
      }
    }
    if (killAt == kNever) killAt = Clock::now() + o_.stopGrace;
  }

  void drainSignals(int signalFd, Clock::time_point& killAt) {
    unsigned char sigs[64];
    ssize_t got;
    while ((got = ::read(signalFd, sigs, sizeof(sigs))) > 0) {
      for (ssize_t i = 0; i < got; ++i) {
        int sig = sigs[i];
        if (sig == SIGCHLD) continue;  // reap() runs every iteration
        if (interruptSignal_ == 0) {
          stopAll(sig, killAt);
        } else {
          // A second interrupt: stop waiting.
          for (auto& w : workers_) {
            if (w->process->running()) w->process->signalGroup(SIGKILL);
          }
        }
      }
    }
  }

  void reap(Clock::time_point& killAt) {
    for (auto& w : workers_) {
      if (!w->process->poll()) continue;
      record(*w);
      if (w->result.failed() && firstFailed_ < 0 && interruptSignal_ == 0 && !w->result.stoppedByLauncher) {
        firstFailed_ = w->rank;
        for (auto& other : workers_) {
          if (other->process->running()) {
            other->process->signalGroup(SIGTERM);
            other->result.stoppedByLauncher = true;
          }
        }
        if (killAt == kNever) killAt = Clock::now() + o_.stopGrace;
      }
    }
  }

  void record(Worker& w) {
    int status = w.process->rawStatus();
    w.result.seconds = std::chrono::duration<double>(Clock::now() - w.started).count();
    if (WIFEXITED(status)) {
      w.result.exitCode = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      w.result.signal = WTERMSIG(status);
      w.result.exitCode = 128 + w.result.signal;
    }
  }

  LaunchResult finishMpirun() {
    const Worker& w = *workers_.front();
    LaunchResult result;
    result.interruptSignal = interruptSignal_;
    result.firstFailedRank = w.result.failed() ? w.relay->mpiFailedRank() : -1;
    RankResult r = w.result;
    r.stderrTail.assign(w.relay->tail().begin(), w.relay->tail().end());
    const int failedRank = w.relay->mpiFailedRank();
    result.ranks.push_back(r);
    std::string s;
    if (interruptSignal_ != 0) {
      result.exitCode = 128 + interruptSignal_;
      s += fmt::format("lockstep run: received {}, forwarded it to mpirun\n", signalName(interruptSignal_));
    } else if (r.failed()) {
      result.exitCode = r.exitCode > 0 ? std::min(r.exitCode, 255) : 1;
      s += fmt::format(
          "lockstep run: mpirun (pid {}) {} after {:.1f} s\n", r.pid,
          r.signal ? "was killed by " + signalName(r.signal) : fmt::format("exited with code {}", r.exitCode),
          r.seconds);
      if (failedRank >= 0) {
        const int signal = w.relay->mpiFailedSignal();
        s += fmt::format("lockstep run: mpirun reports rank {} as the first worker to fail{}\n", failedRank,
                         signal ? "; it was killed by " + signalName(signal) : std::string());
        const auto* tail = w.relay->rankTail(failedRank);
        if (!tail || tail->empty()) {
          s += fmt::format("lockstep run: rank {} wrote nothing on stderr\n", failedRank);
        } else {
          s += fmt::format("lockstep run: last {} line(s) of rank {}'s stderr:\n", tail->size(), failedRank);
          for (const auto& line : *tail) s += "    " + line + "\n";
        }
      }
    }
    result.summary = s;
    return result;
  }

  std::string label(int rank) const {
    return o_.hosts.empty() ? fmt::format("rank {}", rank) : fmt::format("node {} ({})", rank, o_.hosts[rank].host);
  }

  LaunchResult finish() {
    if (!workers_.empty() && workers_.front()->isMpirun) return finishMpirun();
    LaunchResult result;
    result.firstFailedRank = firstFailed_;
    result.interruptSignal = interruptSignal_;
    for (auto& w : workers_) {
      w->result.stderrTail.assign(w->relay->tail().begin(), w->relay->tail().end());
      result.ranks.push_back(w->result);
    }
    std::string s;
    auto describe = [](const RankResult& r) {
      return r.signal ? fmt::format("was killed by {}", signalName(r.signal))
                      : fmt::format("exited with code {}", r.exitCode);
    };
    if (interruptSignal_ != 0) {
      result.exitCode = 128 + interruptSignal_;
      s += parentGone_
               ? "lockstep run: the launcher that started this node went away; stopped every worker\n"
               : fmt::format("lockstep run: received {}, forwarded it to every worker\n", signalName(interruptSignal_));
    } else if (firstFailed_ >= 0) {
      const RankResult* failed = nullptr;
      for (const auto& r : result.ranks)
        if (r.rank == firstFailed_) failed = &r;
      result.exitCode = failed->exitCode > 0 ? std::min(failed->exitCode, 255) : 1;
      std::string who = label(failed->rank);
      s += fmt::format("lockstep run: {} (pid {}) {} after {:.1f} s; it was the first {} to fail\n", who, failed->pid,
                       describe(*failed), failed->seconds, o_.hosts.empty() ? "worker" : "node");
      if (failed->stderrTail.empty()) {
        s += fmt::format("lockstep run: {} wrote nothing on stderr\n", who);
      } else {
        s += fmt::format("lockstep run: last {} line(s) of {}'s stderr:\n", failed->stderrTail.size(), who);
        for (const auto& line : failed->stderrTail) s += "    " + line + "\n";
      }
    }
    if (!s.empty()) {
      std::vector<std::string> others;
      for (const auto& r : result.ranks) {
        if (r.rank == firstFailed_) continue;
        std::string what = r.failed() ? describe(r) : "exited with code 0";
        if (r.stoppedByLauncher) what += " (stopped by the launcher)";
        others.push_back(fmt::format("{} {}", label(r.rank), what));
      }
      for (const auto& line : others) s += "lockstep run: " + line + "\n";
    }
    result.summary = s;
    return result;
  }

  const LaunchOptions& o_;
  std::vector<std::unique_ptr<Worker>> workers_;
  int firstFailed_ = -1;
  int interruptSignal_ = 0;
  bool parentGone_ = false;
};

/// The job token: from stdin (-H's remote launchers), the options, the
/// environment, or a fresh random one on a single node.
std::string jobToken(const LaunchOptions& o, const std::map<std::string, std::string>& env) {
  if (o.tokenFromStdin) {
    std::string line;
    char c;
    while (::read(STDIN_FILENO, &c, 1) == 1 && c != '\n') line += c;
    if (line.empty()) throw ConfigError("--token-stdin: no job token arrived on stdin");
    return line;
  }
  if (!o.token.empty()) return o.token;
  if (auto token = tokenFromEnvironment(Environment(env))) return *token;
  if (o.nnodes > 1) {
    throw ConfigError(
        fmt::format("--nnodes {}: every node must hold the same job token; put it in a file that "
                    "every node can read and pass --token-file FILE (or export {}), or start all "
                    "nodes from one host with -H",
                    o.nnodes, kJobTokenVar));
  }
  return randomToken();
}

/// An explicit --threads wins; else a count the user exported is kept and
/// followed by the variables they left unset; else cores / workers.
void setThreadVariables(const LaunchOptions& o, std::map<std::string, std::string>& env) {
  const std::string threadText = std::to_string(detail::threadsPerWorker(o, env));
  for (const char* var : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", env::kNumThreads}) {
    if (o.threadsPerWorker || !env.count(var)) env[var] = threadText;
  }
}

}  // namespace

LaunchResult launch(const LaunchOptions& input) {
  LaunchOptions o = input;
  if (!o.hosts.empty()) {
    o.nprocPerNode = o.hosts.front().slots;
    if (o.masterAddr.empty() || o.masterAddr == "127.0.0.1") o.masterAddr = o.hosts.front().host;
    if (o.masterPort == 0) o.masterPort = 29500;
  }
  detail::validateLaunchOptions(o);
  auto env = Environment::fromProcess().vars();
  o.token = jobToken(o, env);
  env.erase(kJobTokenFileVar);
  env[kJobTokenVar] = o.token;
  if (!o.iface.empty()) env[env::kIface] = o.iface;
  if (!o.hosts.empty()) return Runner(o).run(env);
  bool pickPort = o.masterPort == 0;
  setThreadVariables(o, env);
  if (o.bindCores) o.threadsPerWorker = detail::threadsPerWorker(o, env);  // the cores each worker is bound to
  if (o.commTimeoutSeconds) env[env::kCommTimeout] = fmt::format("{}", *o.commTimeoutSeconds);
  for (int attempt = 0;; ++attempt) {
    if (o.nodeRank == 0) {
      if (pickPort) {
        o.masterPort = pickFreePort(o.masterAddr);
      } else if (attempt == 0 && !portIsFree(o.masterAddr, o.masterPort)) {
        throw ConfigError(
            fmt::format("--master-port {}: {}:{} is already in use; choose another port or leave "
                        "--master-port out to pick a free one",
                        o.masterPort, o.masterAddr, o.masterPort));
      }
    }
    env[env::kRestartCount] = env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(attempt);
    if (o.backend == "mpi") {
      // The workers learn rank and world from mpirun (OMPI_COMM_WORLD_*); the
      // store still meets at the master variables OpenMPI workers read.
      const WorldVariables& mpi = worldVariables(WorldSource::kOpenMpi);
      env[mpi.masterAddr] = o.masterAddr;
      env[mpi.masterPort] = std::to_string(o.masterPort);
    }
    env[env::kBackend] = o.backend;  // the workers use the backend chosen here, not one of their own
    LaunchResult result = Runner(o).run(env);
    result.restarts = attempt;
    bool workerFailed = result.exitCode != 0 && result.interruptSignal == 0;
    if (!workerFailed || attempt >= o.maxRestarts) {
      if (workerFailed && o.maxRestarts > 0) {
        result.summary += fmt::format("lockstep run: giving up: the group failed {} time(s) and --max-restarts is {}\n",
                                      attempt + 1, o.maxRestarts);
      }
      return result;
    }
    std::string failed = result.firstFailedRank >= 0 ? fmt::format("rank {}", result.firstFailedRank) : "a worker";
    writeAll(STDERR_FILENO, result.summary);
    writeAll(STDERR_FILENO,
             fmt::format("lockstep run: {} failed; restarting all {} worker(s) of node {} (restart {} of "
                         "{}); they resume from the last complete checkpoint\n",
                         failed, o.nprocPerNode, o.nodeRank, attempt + 1, o.maxRestarts));
  }
}

}  // namespace lockstep
