// lockstep/comm/stall_inspector.h — who has not arrived at a collective.
//
// A Communicator that forwards every operation to another one and watches
// them: every rank publishes, about once per check interval and only when it
// changed, how far it got (operations submitted, the oldest one not finished,
// since when, and what it is) to the rendezvous store. Rank 0 reads every
// rank's record; when some ranks have waited in the same operation for longer
// than `warnAfter`, it reports which ranks have not submitted that operation
// yet (and what they last submitted, how long ago), or — when every rank is
// in it but they describe it differently (other op, other sizes) — both
// sides' view. The report comes long before the operation's timeout turns it
// into a CommError, and again every `warnAfter` while the stall lasts.
// Overhead: a lock and a deque push per operation, a store write per
// interval per rank while work is submitted.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "lockstep/comm/communicator.h"
#include "lockstep/comm/store/store.h"

namespace lockstep {

struct StallInspectorOptions {
  /// Report an operation that some rank has waited in for this long.
  std::chrono::milliseconds warnAfter{std::chrono::seconds(60)};
  /// How often ranks publish their progress and rank 0 looks.
  std::chrono::milliseconds checkEvery{std::chrono::seconds(1)};
  /// Where rank 0's reports go; default: a warning in the log.
  std::function<void(const std::string&)> report;
};

/// Wraps `inner`; `store` must be shared by all ranks (init()'s rendezvous store).
/// Every rank must wrap its communicator alike.
std::shared_ptr<Communicator> withStallInspector(std::shared_ptr<Communicator> inner, Store store,
                                                 StallInspectorOptions options);

}  // namespace lockstep
