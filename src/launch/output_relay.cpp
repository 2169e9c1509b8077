#include "launch/output_relay.h"

#include <unistd.h>

#include <fmt/format.h>

#include <regex>

namespace lockstep::detail {

void OutputRelay::feed(bool isErr, std::string_view chunk) {
  std::string& buf = isErr ? errBuffer_ : outBuffer_;
  buf.append(chunk);
  size_t start = 0;
  size_t nl;
  while ((nl = buf.find('\n', start)) != std::string::npos) {
    emit(isErr, std::string_view(buf).substr(start, nl - start));
    start = nl + 1;
  }
  buf.erase(0, start);
  // A very long line without a newline is written in pieces rather than held forever.
  if (buf.size() > (1 << 20)) {
    emit(isErr, buf);
    buf.clear();
  }
}

void OutputRelay::flush(bool isErr) {
  std::string& buf = isErr ? errBuffer_ : outBuffer_;
  if (!buf.empty()) emit(isErr, buf);
  buf.clear();
}

const std::deque<std::string>* OutputRelay::rankTail(int rank) const {
  auto it = mpiTails_.find(rank);
  return it == mpiTails_.end() ? nullptr : &it->second;
}

void OutputRelay::keep(std::deque<std::string>& tail, std::string line) const {
  if (tailLines_ <= 0) return;
  tail.push_back(std::move(line));
  if (static_cast<int>(tail.size()) > tailLines_) tail.pop_front();
}

void OutputRelay::emit(bool isErr, std::string_view line) {
  if (source_ == Source::kMpirun) return emitMpirun(isErr, line);
  const int fd = isErr ? STDERR_FILENO : STDOUT_FILENO;
  sink_(fd, prefix_ && source_ == Source::kWorker ? fmt::format("[{}] {}\n", rank_, line) : fmt::format("{}\n", line));
  if (isErr) keep(tail_, std::string(line));
}

/// mpirun --tag-output writes "[1,3]<stderr>:text" for rank 3, tagging each chunk the
/// rank wrote: a line written in pieces arrives as several tagged segments on
/// one physical line ("[1,3]<stderr>:a [1,3]<stderr>:b\n"). Untagged lines are mpirun's own.
void OutputRelay::emitMpirun(bool isErr, std::string_view line) {
  static const std::regex tag(R"(\[\d+,(\d+)\]<(stdout|stderr)>:)");
  // "mpirun noticed that process rank 1 with PID ..." (signals) or "Process name: [[27543,1],1]" (exit codes).
  // "... process rank 1 with PID 0 on node vm exited on signal 9 (Killed)." also names the signal.
  static const std::regex failedRank(
      R"(process rank (\d+)(?: with PID \d+(?: on node \S+)? exited on signal (\d+))?|Process name: \[\[\d+,\d+\],(\d+)\])");
  std::string text(line);
  std::smatch m;
  if (!std::regex_search(text, m, tag) || m.position(0) != 0) {
    sink_(isErr ? STDERR_FILENO : STDOUT_FILENO, prefix_ ? "[mpirun] " + text + "\n" : text + "\n");
    if (mpiFailedRank_ < 0 && std::regex_search(text, m, failedRank)) {
      mpiFailedRank_ = std::stoi(m[1].matched ? m[1].str() : m[3].str());
      if (m[2].matched) mpiFailedSignal_ = std::stoi(m[2].str());
    }
    if (isErr) keep(tail_, text);
    return;
  }
  std::pair<int, bool> last{0, false};
  for (auto it = std::sregex_iterator(text.begin(), text.end(), tag); it != std::sregex_iterator(); ++it) {
    const auto& match = *it;
    size_t begin = static_cast<size_t>(match.position(0) + match.length(0));
    auto next = std::next(it);
    size_t end = next == std::sregex_iterator() ? text.size() : static_cast<size_t>(next->position(0));
    last = {std::stoi(match[1].str()), match[2].str() == "stderr"};
    mpiPartial_[last] += text.substr(begin, end - begin);
  }
  // The newline ends the line of the last segment's rank and stream.
  auto [rank, toErr] = last;
  std::string body = std::move(mpiPartial_[last]);
  mpiPartial_.erase(last);
  sink_(toErr ? STDERR_FILENO : STDOUT_FILENO, prefix_ ? fmt::format("[{}] {}\n", rank, body) : body + "\n");
  if (toErr) keep(mpiTails_[rank], body);
}

}  // namespace lockstep::detail
