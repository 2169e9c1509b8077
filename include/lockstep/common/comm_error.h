// lockstep/common/comm_error.h — the typed failure of a collective or of the rendezvous store.
//
// Every failed or timed-out collective throws CommError from Work::wait() (or
// at submission for invalid arguments). The message names the operation, this
// rank, the peer when it is known, the tensors' sizes and the backend's words.
// After any failure other than kInvalidArgument the communicator is unusable:
// every later operation fails at once with kAborted, naming the first failure,
// because the ranks can no longer be sure they call collectives in step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/common/error.h"

namespace lockstep {

enum class CommErrorKind {
  kTimeout,          ///< the operation did not finish within its timeout
  kPeerFailure,      ///< a peer closed its connection or died
  kInvalidArgument,  ///< the call itself was wrong (dtype, sizes, rank); nothing was sent
  kBackend,          ///< the backend reported another error
  kAborted,          ///< an earlier failure made the communicator unusable
  kDesync,           ///< ranks called different collectives at the same point (desync_check.h); nothing was sent
};

const char* toString(CommErrorKind kind);

struct CommErrorInfo {
  CommErrorKind kind = CommErrorKind::kBackend;
  std::string op;  ///< e.g. "allreduce(sum)"
  int rank = -1;   ///< this rank
  int worldSize = -1;
  int peer = -1;          ///< the peer held responsible, -1 when unknown
  std::string sizes;      ///< e.g. "2 tensors, 4096 B, float32 [1024]"
  uint64_t sequence = 0;  ///< the operation's number on this communicator (1-based)
  int64_t timeoutMs = -1;
  std::string detail;  ///< the backend's own message
  /// In a group (Communicator::split): its name and every member's global
  /// rank, in group rank order, so `rank` and `peer` can be named globally too.
  std::string group;
  std::vector<int> globalRanks;
};

class CommError : public Error {
 public:
  explicit CommError(CommErrorInfo info);
  CommErrorKind kind() const { return info_.kind; }
  const CommErrorInfo& info() const { return info_; }

 private:
  CommErrorInfo info_;
};

}  // namespace lockstep
