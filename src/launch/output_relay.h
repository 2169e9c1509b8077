// output_relay.h — a child's output, turned into whole lines for our own
// stdout/stderr: "[rank] " prefixes, the last stderr lines kept for the failure
// summary, and mpirun's tagged output ("[1,3]<stderr>:text") split back into
// ranks. Writes go to a Sink, so the relay is tested without processes.
// Not thread-safe: the launcher's poll loop owns it.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>

namespace lockstep::detail {

class OutputRelay {
 public:
  /// Where a finished line goes: fd is STDOUT_FILENO or STDERR_FILENO, text ends in '\n'.
  using Sink = std::function<void(int fd, std::string_view text)>;
  enum class Source {
    kWorker,  ///< one worker: each line gets "[rank] "
    kNode,    ///< a launcher on another host: its lines already carry "[rank] "
    kMpirun,  ///< mpirun --tag-output: lines are tagged with the rank that wrote them
  };

  OutputRelay(int rank, Source source, bool prefix, int tailLines, Sink sink)
      : rank_(rank), source_(source), prefix_(prefix), tailLines_(tailLines), sink_(std::move(sink)) {}

  /// A chunk read from the child's stdout (isErr false) or stderr.
  void feed(bool isErr, std::string_view chunk);
  /// The stream ended: writes what is left of an unfinished line.
  void flush(bool isErr);

  /// The last stderr lines (of this worker; of mpirun's own messages for kMpirun).
  const std::deque<std::string>& tail() const { return tail_; }
  /// kMpirun: the last stderr lines of `rank`, and the rank mpirun named as failed (-1: none yet).
  const std::deque<std::string>* rankTail(int rank) const;
  int mpiFailedRank() const { return mpiFailedRank_; }
  /// The signal that ended that rank, when mpirun reported one; 0 otherwise.
  int mpiFailedSignal() const { return mpiFailedSignal_; }

 private:
  void emit(bool isErr, std::string_view line);
  void emitMpirun(bool isErr, std::string_view line);
  void keep(std::deque<std::string>& tail, std::string line) const;

  int rank_;
  Source source_;
  bool prefix_;
  int tailLines_;
  Sink sink_;
  std::string outBuffer_;
  std::string errBuffer_;
  std::deque<std::string> tail_;
  int mpiFailedRank_ = -1;
  int mpiFailedSignal_ = 0;
  std::map<int, std::deque<std::string>> mpiTails_;
  std::map<std::pair<int, bool>, std::string> mpiPartial_;  ///< (rank, stderr?) -> text of an unfinished line
};

}  // namespace lockstep::detail
