// lockstep/comm/nccl_order.h — a communicator that orders its operations as NCCL does, over any backend, so
// that the CPU suite finds the orders that would deadlock on GPUs (a test aid; tests switch it on
// with LOCKSTEP_NCCL_ORDER=1, docs/gpus.md).
//
// NCCL's rules that a tag-matching backend such as Gloo hides:
//   - the point-to-point operations of a pair of ranks run one at a time, in the order each rank
//     issued them, whatever their tags: the k-th send from i to j meets the k-th receive at j
//     from i, and a send completes only once that receive is posted (no buffering);
//   - collectives run in the order they were issued on the communicator (the backend's own);
//   - nothing is complete until a wait: Work::test() says "not yet" until someone waited.
// Here each pair's operations run on a thread of their own, in issue order; a receive at the
// head of its pair announces itself in the store, and the send waits for that announcement. An
// operation that waits longer than the stall limit for its peer fails with a message naming
// both ranks' operations ("would deadlock on NCCL"); a send whose receive has another tag, size
// or dtype fails too (NCCL would pair them silently). The data moves over a copy of the group
// (Communicator::split), its tags the pair's operation numbers.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "lockstep/comm/communicator.h"
#include "lockstep/comm/store/store.h"
#include "lockstep/common/env.h"

namespace lockstep::detail {

struct NcclOrderOptions {
  /// How long an operation may wait for its peer's matching one before it fails as a deadlock.
  std::chrono::milliseconds stallLimit{std::chrono::seconds(10)};
};

/// The options LOCKSTEP_NCCL_ORDER=1 asks for (LOCKSTEP_NCCL_ORDER_STALL_SECONDS: the stall
/// limit); nullopt when it is unset or 0. ConfigError naming the variable for another value.
std::optional<NcclOrderOptions> ncclOrderFromEnv(const Environment& env);

/// `inner` with NCCL's order. Collective: every rank of `inner` calls it at the same point, with
/// views of one store (keys under "ncclorder/").
std::shared_ptr<Communicator> withNcclOrder(std::shared_ptr<Communicator> inner, Store store,
                                            NcclOrderOptions options = {});

}  // namespace lockstep::detail
