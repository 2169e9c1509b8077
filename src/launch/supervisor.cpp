// supervisor.cpp — the poll loop every launch mode shares: output relay,
// signal forwarding, first-failure detection and the stop (SIGTERM, then SIGKILL).
#include "launch/supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "launch/launch_summary.h"
#include "lockstep/common/error.h"

namespace lockstep::detail {

/// What one poll() waits on: the signal pipe first, then our stdin (--token-stdin), then the children's pipes.
struct Supervisor::PollSet {
  std::vector<pollfd> fds;
  std::vector<std::pair<Child*, bool>> owners;  ///< (child, isStderr); no child: the signal pipe or stdin

  void add(int fd, Child* child, bool isErr) {
    fds.push_back(pollfd{fd, POLLIN, 0});
    owners.emplace_back(child, isErr);
  }
};

GroupEnd Supervisor::run(int signalFd) {
  std::vector<char> buffer(1 << 16);
  std::optional<LaunchClock::time_point> allExitedAt;
  for (;;) {
    PollSet set = pollSet(signalFd);
    const bool running = anyRunning();
    if (!running && set.fds.size() == 1) break;
    if (!running) {
      // Every child exited; give stray holders of the pipes a moment, then stop reading.
      if (!allExitedAt) allExitedAt = LaunchClock::now();
      if (LaunchClock::now() - *allExitedAt > std::chrono::seconds(2)) break;
    }
    int n = ::poll(set.fds.data(), set.fds.size(), 100);
    if (n < 0 && errno != EINTR) throw Error(std::string("poll: ") + std::strerror(errno));
    if (n > 0) relayReady(set, buffer);
    if (set.fds[0].revents & POLLIN) drainSignals(signalFd);
    reap();
    if (slots_.discovery && killAt_ == kNever && !ending_) {
      if (auto slots = slots_.discovery->poll()) holdWorkers(*slots);
    }
    if (killAt_ != kNever && LaunchClock::now() >= killAt_) {
      killRunning();
      killAt_ = kNever;
    }
  }
  finishAll();
  return end_;
}

Supervisor::PollSet Supervisor::pollSet(int signalFd) {
  PollSet set;
  set.add(signalFd, nullptr, false);
  if (o_.tokenFromStdin && !end_.parentGone) set.add(STDIN_FILENO, nullptr, true);
  for (auto& c : children_) {
    if (c->process->stdoutFd().valid()) set.add(c->process->stdoutFd().get(), c.get(), false);
    if (c->process->stderrFd().valid()) set.add(c->process->stderrFd().get(), c.get(), true);
  }
  return set;
}

bool Supervisor::anyRunning() const {
  return std::any_of(children_.begin(), children_.end(), [](auto& c) { return c->process->running(); });
}

/// Feeds what the ready pipes hold to their relays; a closed pipe flushes its relay's last line.
void Supervisor::relayReady(PollSet& set, std::vector<char>& buffer) {
  for (size_t i = 1; i < set.fds.size(); ++i) {
    if (!(set.fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    auto [child, isErr] = set.owners[i];
    if (child == nullptr) {
      watchParent();
      continue;
    }
    Fd& fd = isErr ? child->process->stderrFd() : child->process->stdoutFd();
    ssize_t got = ::read(fd.get(), buffer.data(), buffer.size());
    if (got > 0) {
      child->relay->feed(isErr, std::string_view(buffer.data(), static_cast<size_t>(got)));
    } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
      child->relay->flush(isErr);
      fd.reset();
    }
  }
}

void Supervisor::killRunning() {
  for (auto& c : children_) {
    if (c->process->running()) c->process->signalGroup(SIGKILL);
  }
}

/// Anything still running now would be killed and reaped by ~ChildProcess; do it here to record it.
void Supervisor::finishAll() {
  for (auto& c : children_) {
    if (c->process->running()) {
      c->process->signalGroup(SIGKILL);
      while (!c->process->poll()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      record(*c);
    }
    c->relay->flush(false);
    c->relay->flush(true);
  }
}

/// The launcher that started this one over rsh holds our stdin open; EOF means it went away.
void Supervisor::watchParent() {
  char buffer[256];
  ssize_t got = ::read(STDIN_FILENO, buffer, sizeof(buffer));
  if (got > 0 || (got < 0 && (errno == EINTR || errno == EAGAIN))) return;
  end_.parentGone = true;
  writeAll(STDERR_FILENO, fmt::format("lockstep run: node {}: the launcher that started this node closed its "
                                      "connection; stopping the workers\n",
                                      o_.nodeRank));
  stopAll(SIGTERM);
}

void Supervisor::stopAll(int sig) {
  if (end_.interruptSignal == 0) end_.interruptSignal = sig;
  stopRunning(sig);
}

void Supervisor::stopRunning(int sig) {
  for (auto& c : children_) {
    if (c->process->running()) {
      c->process->signalGroup(sig);
      c->result.stoppedByLauncher = true;
    }
  }
  if (killAt_ == kNever) killAt_ = LaunchClock::now() + o_.stopGrace;
}

void Supervisor::drainSignals(int signalFd) {
  unsigned char sigs[64];
  ssize_t got;
  while ((got = ::read(signalFd, sigs, sizeof(sigs))) > 0) {
    for (ssize_t i = 0; i < got; ++i) {
      int sig = sigs[i];
      if (sig == SIGCHLD) continue;  // reap() runs every iteration
      if (end_.interruptSignal == 0) {
        stopAll(sig);
      } else {
        killRunning();  // a second interrupt: stop waiting
      }
    }
  }
}

/// Records the children that exited; the first to fail on its own stops the others, unless
/// --min-np lets them go on (and a newcomer may take its slot).
void Supervisor::reap() {
  // By index and pointer: refill() appends to children_.
  for (size_t i = 0; i < children_.size(); ++i) {
    Child* c = children_[i].get();
    if (!c->process->poll()) continue;
    record(*c);
    // A worker that said it leaves before the job's end (a preemption) goes as a lost one does.
    const bool left = !c->result.failed() && !c->leaving && end_.interruptSignal == 0 && !c->result.stoppedByLauncher &&
                      slots_.leftTheJob && slots_.leftTheJob(c->result.pid);
    if (!c->result.failed() && !c->leaving && !left) ending_ = true;
    if (left && othersGoOn(*c, "left the job")) refill(*c);
    if (c->result.failed() && end_.firstFailed < 0 && end_.interruptSignal == 0 && !c->result.stoppedByLauncher) {
      if (othersGoOn(*c)) {
        refill(*c);
      } else {
        end_.firstFailed = c->rank;
        stopRunning(SIGTERM);
      }
    }
    if (onExit_) onExit_(runningCount());
  }
}

int Supervisor::runningCount() const {
  return static_cast<int>(
      std::count_if(children_.begin(), children_.end(), [](auto& c) { return c->process->running() && !c->leaving; }));
}

bool Supervisor::othersGoOn(const Child& lost, const char* how) {
  if (o_.minNp == 0) return false;
  const int running = runningCount();
  if (running < o_.minNp) return false;
  end_.lost.push_back(lost.rank);
  writeAll(STDERR_FILENO,
           fmt::format("lockstep run: rank {} (pid {}) {} after {:.1f} s; {} worker(s) go on (--min-np {})\n",
                       lost.rank, lost.result.pid, how ? std::string(how) : describeRankEnd(lost.result),
                       lost.result.seconds, running, o_.minNp));
  return true;
}

void Supervisor::refill(const Child& lost) {
  if (!slots_.start || slots_.respawns == 0 || ending_) return;
  std::unique_ptr<Child> newcomer = slots_.start(lost.rank);
  if (!newcomer) return;
  --slots_.respawns;
  ++respawned_;
  writeAll(STDERR_FILENO,
           fmt::format("lockstep run: a new worker (pid {}) takes the slot of rank {}; it joins the others at their "
                       "next step (--max-restarts: {} more)\n",
                       newcomer->result.pid, lost.rank, slots_.respawns));
  children_.push_back(std::move(newcomer));
}

void Supervisor::holdWorkers(int slots) {
  const int maxWorkers = o_.maxNp > 0 ? o_.maxNp : o_.nprocPerNode;
  const int target = std::clamp(slots, o_.minNp, maxWorkers);
  int running = runningCount();
  if (running == target || !slots_.start) return;
  std::vector<bool> taken(static_cast<size_t>(maxWorkers), false);
  for (auto& c : children_) {
    if (c->process->running() && c->rank < maxWorkers) taken[static_cast<size_t>(c->rank)] = true;
  }
  for (int rank = 0; running < target && rank < maxWorkers; ++rank) {
    if (taken[static_cast<size_t>(rank)]) continue;
    std::unique_ptr<Child> newcomer = slots_.start(rank);
    if (!newcomer) return;
    writeAll(STDERR_FILENO, fmt::format("lockstep run: --host-discovery has {} slot(s): a new worker (pid {}) in "
                                        "slot {}; it joins the others at their next step\n",
                                        slots, newcomer->result.pid, rank));
    children_.push_back(std::move(newcomer));
    ++running;
  }
  // The newest workers leave after their step (SIGTERM: a preemption, nothing lost).
  for (auto c = children_.rbegin(); running > target && c != children_.rend(); ++c) {
    if (!(*c)->process->running() || (*c)->leaving) continue;
    (*c)->leaving = true;
    (*c)->process->signalGroup(SIGTERM);
    writeAll(STDERR_FILENO, fmt::format("lockstep run: --host-discovery has {} slot(s): rank {} (pid {}) is told to "
                                        "leave after its step (SIGTERM)\n",
                                        slots, (*c)->rank, (*c)->result.pid));
    --running;
  }
  if (onExit_) onExit_(running);
}

void Supervisor::record(Child& child) {
  int status = child.process->rawStatus();
  child.result.seconds = std::chrono::duration<double>(LaunchClock::now() - child.started).count();
  if (WIFEXITED(status)) {
    child.result.exitCode = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    child.result.signal = WTERMSIG(status);
    child.result.exitCode = 128 + child.result.signal;
  }
}

}  // namespace lockstep::detail
