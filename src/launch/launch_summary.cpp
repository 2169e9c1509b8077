// launch_summary.cpp — the summary and exit code of an ended group.
#include "launch/launch_summary.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "launch/signal_pipe.h"

namespace lockstep::detail {
std::string describeRankEnd(const RankResult& r) {
  return r.signal ? fmt::format("was killed by {}", signalName(r.signal))
                  : fmt::format("exited with code {}", r.exitCode);
}

namespace {

/// What the launcher exits with when `r` failed: its exit code (at most 255), else 1.
int exitCodeOfFailed(const RankResult& r) { return r.exitCode > 0 ? std::min(r.exitCode, 255) : 1; }

/// The lines that show `who`'s last stderr lines, or say it wrote none.
std::string stderrTailLines(const std::string& who, const std::vector<std::string>& tail) {
  if (tail.empty()) return fmt::format("lockstep run: {} wrote nothing on stderr\n", who);
  std::string s = fmt::format("lockstep run: last {} line(s) of {}'s stderr:\n", tail.size(), who);
  for (const auto& line : tail) s += "    " + line + "\n";
  return s;
}

}  // namespace

LaunchResult groupSummary(const Children& children, const GroupEnd& end, const std::function<std::string(int)>& label,
                          const std::string& noun) {
  LaunchResult result;
  result.firstFailedRank = end.firstFailed;
  result.interruptSignal = end.interruptSignal;
  result.lostRanks = end.lost;
  for (const auto& c : children) {
    RankResult r = c->result;
    r.stderrTail.assign(c->relay->tail().begin(), c->relay->tail().end());
    result.ranks.push_back(r);
  }
  std::string s;
  if (end.interruptSignal != 0) {
    result.exitCode = 128 + end.interruptSignal;
    s += end.parentGone ? "lockstep run: the launcher that started this node went away; stopped every worker\n"
                        : fmt::format("lockstep run: received {}, forwarded it to every worker\n",
                                      signalName(end.interruptSignal));
  } else if (end.firstFailed >= 0) {
    const RankResult* failed = nullptr;
    for (const auto& r : result.ranks)
      if (r.rank == end.firstFailed) failed = &r;
    result.exitCode = exitCodeOfFailed(*failed);
    std::string who = label(failed->rank);
    s += fmt::format("lockstep run: {} (pid {}) {} after {:.1f} s; it was the first {} to fail\n", who, failed->pid,
                     describeRankEnd(*failed), failed->seconds, noun);
    s += stderrTailLines(who, failed->stderrTail);
  } else {
    for (int rank : end.lost) {
      s += fmt::format("lockstep run: {} was lost; the others went on (--min-np)\n", label(rank));
      for (const auto& r : result.ranks)
        if (r.rank == rank && r.failed()) s += stderrTailLines(label(rank), r.stderrTail);
    }
  }
  if (!s.empty()) {
    for (const auto& r : result.ranks) {
      if (r.rank == end.firstFailed) continue;
      std::string what = r.failed() ? describeRankEnd(r) : "exited with code 0";
      if (r.stoppedByLauncher) what += " (stopped by the launcher)";
      s += fmt::format("lockstep run: {} {}\n", label(r.rank), what);
    }
  }
  result.summary = s;
  return result;
}

LaunchResult mpirunSummary(const Child& mpirun, const GroupEnd& end) {
  const OutputRelay& relay = *mpirun.relay;
  LaunchResult result;
  result.interruptSignal = end.interruptSignal;
  result.firstFailedRank = mpirun.result.failed() ? relay.mpiFailedRank() : -1;
  RankResult r = mpirun.result;
  r.stderrTail.assign(relay.tail().begin(), relay.tail().end());
  const int failedRank = relay.mpiFailedRank();
  result.ranks.push_back(r);
  std::string s;
  if (end.interruptSignal != 0) {
    result.exitCode = 128 + end.interruptSignal;
    s += fmt::format("lockstep run: received {}, forwarded it to mpirun\n", signalName(end.interruptSignal));
  } else if (r.failed()) {
    result.exitCode = exitCodeOfFailed(r);
    s += fmt::format("lockstep run: mpirun (pid {}) {} after {:.1f} s\n", r.pid, describeRankEnd(r), r.seconds);
    if (failedRank >= 0) {
      const int signal = relay.mpiFailedSignal();
      s += fmt::format("lockstep run: mpirun reports rank {} as the first worker to fail{}\n", failedRank,
                       signal ? "; it was killed by " + signalName(signal) : std::string());
      const auto* tail = relay.rankTail(failedRank);
      const std::string who = fmt::format("rank {}", failedRank);
      s += stderrTailLines(who,
                           tail ? std::vector<std::string>(tail->begin(), tail->end()) : std::vector<std::string>());
    }
  }
  result.summary = s;
  return result;
}

}  // namespace lockstep::detail
