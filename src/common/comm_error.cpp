#include "lockstep/common/comm_error.h"

#include <fmt/format.h>

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
