// The servers after server 0: they apply the updates in server 0's order and hand out the weights
// of the versions server 0 granted, so every server's range moves through the same versions and
// server 0's staleness bound holds on all of them.
//
// Order. A worker's gradient reaches every server at once; server 0 applies it at once and
// acknowledges its place k in the order (the version it applied to) and how many grants it had
// made of version k; the worker relays both. A follower applies update k after update k-1.
// Server 0 never waits on a follower, and acknowledges an update when it applies it (before its
// grant), so a follower only ever waits for updates that server 0 already applied.
//
// Reads. A worker that server 0 granted version v reads v from every follower. A follower serves a
// read of its current version from its range; before it applies update k it keeps a copy of
// version k when server 0 granted version k more times than it served: the reads still to come.
#include <ATen/ATen.h>

#include <fmt/format.h>

#include <algorithm>

#include "lockstep/common/error.h"
#include "ps/ps_server_state.h"

namespace lockstep {

using detail::kPsDone;
using detail::kPsHeaderSize;
using detail::kPsHeaderTag;
using detail::kPsOrder;
using detail::kPsPark;
using detail::kPsPayloadTag;
using detail::kPsPush;
using detail::kPsRead;

void ParameterServer::State::followWorker(size_t w) {
  Communicator& peer = *pairs->peers[w];
  const int other = 1 - peer.rank();
  at::Tensor header = at::zeros({kPsHeaderSize}, at::kLong);
  at::Tensor gradient = at::empty_like(shard);
  bool pushed = false;   // a gradient received and waiting for its place in the order
  bool skipped = false;  // ... and counted without a step (PsWorker::skip)
  bool leaving = false;  // the worker finished: its next read is its last message
  at::Tensor read;       // the weights it computes on (delay compensation)
  while (true) {
    peer.recv(header, other, kPsHeaderTag)->wait();
    const int64_t* h = header.data_ptr<int64_t>();
    const int64_t kind = h[0];
    if (kind == kPsPush) {
      skipped = h[1] == 1;
      peer.recv(gradient, other, kPsPayloadTag)->wait();
      pushed = true;
      continue;
    }
    if (kind == kPsOrder) {
      if (!pushed) throw Error(fmt::format("an order for update {} without its gradient", h[1]));
      pushed = false;
      applyInOrder(gradient, {h[1], h[2], h[3], h[4]}, read, skipped);
      continue;
    }
    std::unique_lock<std::mutex> lock(mutex);
    if (failed) return;
    if (kind == kPsPark) {
      if (!answerPark(peer, h[3], lock)) return;
      continue;
    }
    if (kind == kPsDone) {  // {kind, the ticket it leaves with unpushed (-1: none)}
      if (h[1] >= 0) abandoned = std::min(abandoned, h[1]);
      leaving = true;
      changed.notify_all();
      continue;
    }
    if (kind != kPsRead) throw Error(fmt::format("unexpected message kind {}", kind));
    const int64_t wanted = h[1];
    at::Tensor weights = weightsOf(wanted, lock);
    if (!weights.defined()) return;  // failed elsewhere
    if (options.compensation > 0) read = weights;
    lock.unlock();
    at::Tensor reply = at::zeros({kPsHeaderSize}, at::kLong);
    reply.data_ptr<int64_t>()[0] = wanted;
    auto sentHeader = peer.send(reply, other, kPsHeaderTag);
    auto sentWeights = peer.send(weights, other, kPsPayloadTag);
    sentHeader->wait();
    sentWeights->wait();
    if (leaving) return;
  }
}

void ParameterServer::State::applyInOrder(const at::Tensor& gradient, const Applied& applied, const at::Tensor& read,
                                          bool skip) {
  std::unique_lock<std::mutex> lock(mutex);
  if (applied.place < version) {
    throw Error(fmt::format("update {} arrived after update {} was applied", applied.place, version));
  }
  changed.wait(lock, [&] { return failed || version == applied.place; });
  if (failed) return;
  auto served = readsServed.find(version);
  const int64_t readsLeft = applied.grants - (served == readsServed.end() ? 0 : served->second);
  if (served != readsServed.end()) readsServed.erase(served);
  if (readsLeft > 0) snapshots[version] = {shard.detach().clone(), readsLeft};
  stats.record(applied.staleness, applied.lag);
  if (options.compensation > 0 && read.defined() && !skip) compensate(gradient, read);
  step(gradient, skip);
  checkpointIfDue();
}

// The weights of `wanted` (a version server 0 granted, or the final one): the range itself while
// it is the current version, else its snapshot. Undefined when the run failed.
at::Tensor ParameterServer::State::weightsOf(int64_t wanted, std::unique_lock<std::mutex>& lock) {
  changed.wait(lock, [&] { return failed || version >= wanted; });
  if (failed) return {};
  if (version == wanted) {
    ++readsServed[wanted];
    return shard.detach().clone();
  }
  auto it = snapshots.find(wanted);
  if (it == snapshots.end()) {
    throw Error(
        fmt::format("asked for the weights of version {}, which server 0 did not grant (now at {})", wanted, version));
  }
  at::Tensor weights = it->second.weights;
  if (--it->second.readsLeft == 0) snapshots.erase(it);
  return weights;
}

}  // namespace lockstep
