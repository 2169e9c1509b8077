#include "comm/failure.h"

#include <c10/util/Exception.h>
#include <signal.h>

#include <fmt/format.h>

namespace lockstep::detail {

void ignoreBrokenPipeSignal() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
}

std::string backendMessage(const std::exception& e) {
  if (auto* c10Error = dynamic_cast<const c10::Error*>(&e)) return c10Error->what_without_backtrace();
  std::string text = e.what();
  auto cut = text.find("\nException raised from");
  if (cut != std::string::npos) text.resize(cut);
  return text;
}

void checkMembership(int rank, int worldSize, std::chrono::milliseconds timeout) {
  LOCKSTEP_CHECK(worldSize >= 1, "world size ", worldSize, " must be at least 1");
  LOCKSTEP_CHECK(rank >= 0 && rank < worldSize, "rank ", rank, " must be in 0..", worldSize - 1, " (world size ",
                 worldSize, ")");
  LOCKSTEP_CHECK(timeout.count() > 0, "the communicator timeout must be positive");
}

CommError timeoutError(CommErrorInfo info, const std::string& extra) {
  info.kind = CommErrorKind::kTimeout;
  info.detail =
      "the operation did not complete in time; a peer may have died, hung, or called a different "
      "collective" +
      extra;
  return CommError(info);
}

std::exception_ptr abortedError(CommErrorInfo info, const CommErrorInfo& first) {
  info.kind = CommErrorKind::kAborted;
  info.detail = fmt::format("the communicator is unusable since operation #{} ({}) failed: {}", first.sequence,
                            first.op, toString(first.kind));
  return std::make_exception_ptr(CommError(info));
}

}  // namespace lockstep::detail
