#include "lockstep/comm/comm_error.h"

#include <c10/util/Exception.h>
#include <signal.h>

#include <fmt/format.h>

#include "comm/failure.h"

namespace lockstep {

const char* toString(CommErrorKind kind) {
  switch (kind) {
    case CommErrorKind::kTimeout: return "timeout";
    case CommErrorKind::kPeerFailure: return "peer failure";
    case CommErrorKind::kInvalidArgument: return "invalid argument";
    case CommErrorKind::kBackend: return "backend error";
    case CommErrorKind::kAborted: return "aborted";
    case CommErrorKind::kDesync: return "desync";
  }
  return "unknown";
}

namespace {
std::string formatMessage(const CommErrorInfo& i) {
  auto global = [&](int r) {
    return r >= 0 && r < static_cast<int>(i.globalRanks.size()) ? i.globalRanks[static_cast<size_t>(r)] : -1;
  };
  std::string text = fmt::format("{} failed ({}) on rank {} of {}", i.op.empty() ? "collective" : i.op,
                                 toString(i.kind), i.rank, i.worldSize);
  if (!i.group.empty()) text += fmt::format(" in group '{}' (global rank {})", i.group, global(i.rank));
  if (i.sequence > 0) text += fmt::format(", operation #{}", i.sequence);
  if (!i.sizes.empty()) text += fmt::format(", tensors: {}", i.sizes);
  if (i.kind == CommErrorKind::kTimeout && i.timeoutMs >= 0) { text += fmt::format(", timeout {} ms", i.timeoutMs); }
  if (i.peer >= 0 && !i.group.empty()) {
    text += fmt::format(", peer: rank {} of the group (global rank {})", i.peer, global(i.peer));
  } else if (i.peer >= 0) {
    text += fmt::format(", peer: rank {}", i.peer);
  } else if (i.kind == CommErrorKind::kTimeout || i.kind == CommErrorKind::kPeerFailure) {
    text += ", peer: unknown (see the launcher's summary for the rank that stopped)";
  }
  if (!i.detail.empty()) text += ": " + i.detail;
  return text;
}
}  // namespace

CommError::CommError(CommErrorInfo info) : Error(formatMessage(info)), info_(std::move(info)) {}

}  // namespace lockstep

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
