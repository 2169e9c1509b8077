// A parameter server at work: one thread per worker receives that worker's gradients and
// applies them to this server's shard under one lock; new weights are granted to the waiting
// workers whenever that keeps every gradient in progress within the staleness bound.
//
// The bound. A worker that received weights at version v is "out" until its next push. The
// staleness of an update is the number of updates applied between its worker's read and its
// own application that were computed on other weights (updates computed on the same version
// are siblings: synchronous SGD sums them). Every out worker c keeps
//     staleness so far (c) + the out workers d that read another version than c  <=  s,
// since each of those will push exactly once more. A push keeps the sum (one more update, one
// fewer out worker), so pushes are applied at once; a grant adds one out worker, so it waits
// until the sum allows it. No deadlock: a grant can only wait on out workers, which are
// computing. With s = 0 a grant waits for every other worker's push of the round, and all
// waiting workers are granted the same version: bulk-synchronous SGD.
//
// Checkpoints: the update that makes the version a multiple of checkpointEvery runs the hook under
// the lock (after its acknowledgement to the followers); a worker's kPsPark for B is answered once
// `checkpointed` reached B.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/optim/optimizer.h>

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <thread>

#include "common/worker_thread.h"
#include "lockstep/common/error.h"
#include "ps/ps_server_state.h"

namespace lockstep {

using detail::kPsAckTag;
using detail::kPsDone;
using detail::kPsHeaderSize;
using detail::kPsHeaderTag;
using detail::kPsPark;
using detail::kPsPayloadTag;
using detail::kPsPull;
using detail::kPsPush;
using detail::WorkerSlot;

ParameterServer::ParameterServer(std::shared_ptr<Communicator> comm, PsOptions options,
                                 const std::vector<at::Tensor>& parameters, const OptimizerFactory& factory,
                                 std::vector<at::Tensor> buffers)
    : state_(std::make_unique<State>()) {
  auto& s = *state_;
  s.options = options;
  s.version = s.tickets = s.checkpointed = options.firstUpdate;
  s.pairs = detail::connectPsPairs(comm, options);
  if (!s.pairs->role.server)
    throw Error(fmt::format("ParameterServer on rank {}: that rank is a worker", comm->rank()));
  at::Tensor flat = detail::broadcastFlatParameters(*comm, parameters);
  const auto range = psShardRange(flat.numel(), s.pairs->role.servers, s.pairs->role.index);
  s.shard = flat.narrow(0, range.first, range.second - range.first).clone();
  s.buildOptimizer(parameters, factory);
  s.slots.resize(static_cast<size_t>(s.pairs->role.workers));
  if (s.leader() && !buffers.empty()) {
    s.packedBuffers = at::empty({detail::packedBufferBytes(buffers)}, at::kByte);
    s.buffers = std::move(buffers);
  }
}

ParameterServer::~ParameterServer() = default;

// The factory's optimizer over the whole parameters is the template: the same type, groups and
// options over this server's pieces of them (each a view of the shard).
void ParameterServer::State::buildOptimizer(const std::vector<at::Tensor>& parameters,
                                            const OptimizerFactory& factory) {
  pieces.comm = pairs->servers;
  pieces.params = parameters;
  for (const auto& p : parameters) pieces.numels.push_back(p.numel());
  // One group of every parameter over the servers' group: psShardRange is gradientPieces' cut of it.
  pieces.plan.emplace_back(parameters.size());
  for (size_t i = 0; i < parameters.size(); ++i) pieces.plan[0][i] = i;
  pieces.pieces = gradientPieces(pieces.plan, pieces.numels, pieces.world(), pieces.rank());
  for (const auto& piece : pieces.pieces) pieces.pieceViews.push_back(shard.narrow(0, piece.chunkOffset, piece.length));
  std::unique_ptr<torch::optim::Optimizer> whole = factory(parameters);
  LOCKSTEP_CHECK(whole != nullptr, "parameter server ", pairs->role.index, ": the optimizer factory returned none");
  pieces.buildOptimizer(*whole);
  for (const auto& group : whole->param_groups()) baseRates.push_back(group.options().get_lr());
}

void ParameterServer::saveOptimizerState(TensorArchive* archive) { state_->pieces.save(archive); }

void ParameterServer::loadOptimizerState(const TensorArchive& archive, bool report) {
  state_->pieces.load(archive, report);
}

const PsStats& ParameterServer::stats() const { return state_->stats; }
const at::Tensor& ParameterServer::shard() const { return state_->shard; }
torch::optim::Optimizer& ParameterServer::optimizer() { return *state_->pieces.optimizer; }
int64_t ParameterServer::updates() const { return state_->version; }
void ParameterServer::setCheckpointHook(std::function<void(int64_t)> hook) { state_->checkpointHook = std::move(hook); }

void ParameterServer::serve() {
  auto& s = *state_;
  std::vector<std::exception_ptr> errors(s.pairs->peers.size());
  std::vector<std::thread> threads;
  for (size_t w = 0; w < s.pairs->peers.size(); ++w) {
    threads.push_back(detail::startThread([&, w] {
      try {
        if (s.leader()) {
          s.serveWorker(w);
        } else {
          s.followWorker(w);
        }
      } catch (const std::exception& e) {
        errors[w] = std::make_exception_ptr(
            Error(fmt::format("parameter server {} (rank {}): {} failed: {}", s.pairs->role.index, s.pairs->rank,
                              detail::psPeerName(*s.pairs, w), e.what())));
        std::lock_guard<std::mutex> lock(s.mutex);
        s.failed = true;
        s.changed.notify_all();
      }
    }));
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// Whether worker w may read the current version now (see the file comment).
bool ParameterServer::State::mayGrant(size_t w) const {
  const int64_t bound = options.staleness;
  if (outOnOtherWeights(version, w) > bound) return false;
  for (size_t c = 0; c < slots.size(); ++c) {
    const auto& slot = slots[c];
    if (c == w || !slot.out || slot.readVersion == version) continue;
    if (slot.staleness + outOnOtherWeights(slot.readVersion, c) + 1 > bound) return false;
  }
  return true;
}

// Grants the current weights to every waiting worker the bound allows, all from one copy.
// Nobody starts before every worker pulled (the first round computes on the same weights).
void ParameterServer::State::grantWaiting() {
  if (!std::all_of(slots.begin(), slots.end(), [](const WorkerSlot& s) { return s.pulled; })) return;
  at::Tensor snapshot;
  for (size_t w = 0; w < slots.size(); ++w) {
    auto& slot = slots[w];
    if (!slot.waiting || !mayGrant(w)) continue;
    if (!snapshot.defined()) snapshot = shard.detach().clone();
    slot.waiting = false;
    slot.out = true;
    slot.readVersion = version;
    slot.staleness = 0;
    slot.granted = snapshot;
    if (options.compensation > 0) slot.read = snapshot;
    slot.ticket = tickets++;
    ++grantsAtVersion;
  }
  changed.notify_all();
}

ParameterServer::State::Applied ParameterServer::State::apply(size_t w, const at::Tensor& gradient,
                                                              int64_t workerReadVersion, bool skip) {
  auto& slot = slots[w];
  if (!slot.out || workerReadVersion != slot.readVersion) {
    throw Error(fmt::format("pushed a gradient on version {} while it holds version {}", workerReadVersion,
                            slot.out ? slot.readVersion : -1));
  }
  const Applied applied{version, grantsAtVersion, slot.staleness, version - slot.readVersion};
  stats.record(applied.staleness, applied.lag);
  slot.lastStaleness = slot.staleness;
  slot.out = false;
  for (size_t c = 0; c < slots.size(); ++c) {
    if (slots[c].out && slots[c].readVersion != slot.readVersion) ++slots[c].staleness;
  }
  grantsAtVersion = 0;
  if (options.compensation > 0 && slot.read.defined() && !skip) compensate(gradient, slot.read);
  slot.read = at::Tensor();
  step(gradient, skip);
  return applied;
}

// g' = g + lambda g g (w - read), lambda = lambda0 / sqrt(v), v the running mean of g g.
void ParameterServer::State::compensate(const at::Tensor& g, const at::Tensor& read) {
  c10::NoGradGuard noGrad;
  at::Tensor squared = g * g;
  if (!meanSquare.defined()) {
    meanSquare = squared.clone();
  } else {
    meanSquare.mul_(0.95).add_(squared, 0.05);
  }
  squared.mul_(shard.detach() - read).div_(meanSquare.sqrt().add_(1e-7));
  g.add_(squared, options.compensation);
}

void ParameterServer::State::step(const at::Tensor& gradient, bool skip) {
  if (skip) {
    ++stats.skipped;
  } else {
    auto& groups = pieces.optimizer->param_groups();
    if (options.learningRate) {
      for (size_t g = 0; g < groups.size(); ++g)
        groups[g].options().set_lr(options.learningRate(version, baseRates[g]));
    }
    // The step reads the gradient under the lock: views, no copy.
    for (size_t k = 0; k < pieces.pieces.size(); ++k) {
      pieces.pieceViews[k].mutable_grad() = gradient.narrow(0, pieces.pieces[k].chunkOffset, pieces.pieces[k].length);
    }
    pieces.optimizer->step();
  }
  ++version;
  changed.notify_all();
}

// Nothing else is applied before the checkpoint is taken: every update below it is, and the
// workers beyond it wait for it.
void ParameterServer::State::checkpointIfDue() {
  if (options.checkpointEvery <= 0 || version % options.checkpointEvery != 0 || version > abandoned ||
      checkpointed >= version) {
    return;
  }
  try {
    if (checkpointHook) checkpointHook(version);
  } catch (const std::exception& e) { throw Error(fmt::format("the checkpoint at {} updates: {}", version, e.what())); }
  checkpointed = version;
  changed.notify_all();
}

void ParameterServer::State::serveWorker(size_t w) {
  Communicator& peer = *pairs->peers[w];
  const int other = 1 - peer.rank();
  at::Tensor header = at::zeros({kPsHeaderSize}, at::kLong);
  at::Tensor gradient = at::empty_like(shard);
  while (true) {
    peer.recv(header, other, kPsHeaderTag)->wait();
    const int64_t kind = header.data_ptr<int64_t>()[0], readVersion = header.data_ptr<int64_t>()[2];
    if (kind == kPsPush) peer.recv(gradient, other, kPsPayloadTag)->wait();
    const bool withBuffers = kind == kPsPush && w == 0 && packedBuffers.defined();
    if (withBuffers) peer.recv(packedBuffers, other, detail::kPsBufferTag)->wait();
    std::unique_lock<std::mutex> lock(mutex);
    if (failed) return;
    if (kind == kPsPark) {
      if (!answerPark(peer, header.data_ptr<int64_t>()[3], lock)) return;
      continue;
    }
    auto& slot = slots[w];
    if (kind == kPsPush) {
      const Applied applied = apply(w, gradient, readVersion, header.data_ptr<int64_t>()[3] == 1);
      if (withBuffers) detail::unpackBuffers(packedBuffers, buffers);
      slot.waiting = true;
      grantWaiting();
      if (pairs->role.servers > 1) {
        // The followers apply this update at the same place in the order (the worker relays it).
        at::Tensor ack = at::zeros({kPsHeaderSize}, at::kLong);
        auto* a = ack.data_ptr<int64_t>();
        a[0] = applied.place;
        a[1] = applied.grants;
        a[2] = applied.staleness;
        a[3] = applied.lag;
        lock.unlock();
        peer.send(ack, other, kPsAckTag)->wait();
        lock.lock();
        if (failed) return;
      }
      // After the acknowledgement: the followers reach the checkpoint only with it.
      checkpointIfDue();
    } else if (kind == kPsPull) {
      slot.pulled = slot.waiting = true;
    } else if (kind == kPsDone) {
      if (slot.out) abandoned = std::min(abandoned, slot.ticket);
      slot.out = false;
      slot.done = true;
      grantWaiting();  // one fewer worker out may let others go on
      changed.wait(lock, [&] {
        return failed || std::all_of(slots.begin(), slots.end(), [](const WorkerSlot& s) { return s.done; });
      });
      if (failed) return;
      slot.granted = shard.detach().clone();  // the final weights
      slot.readVersion = version;
      slot.ticket = -1;
    } else {
      throw Error(fmt::format("unexpected message kind {}", kind));
    }
    grantWaiting();
    if (!reply(w, peer, lock) || kind == kPsDone) return;
  }
}

// Waits for worker w's grant and sends it (the lock is released while the weights travel).
// False when another worker's connection failed (serve() reports that one).
bool ParameterServer::State::reply(size_t w, Communicator& peer, std::unique_lock<std::mutex>& lock) {
  auto& slot = slots[w];
  changed.wait(lock, [&] { return failed || slot.granted.defined(); });
  if (failed) return false;
  at::Tensor weights = std::move(slot.granted);
  slot.granted = at::Tensor();
  at::Tensor header = at::zeros({kPsHeaderSize}, at::kLong);
  header.data_ptr<int64_t>()[0] = slot.readVersion;
  header.data_ptr<int64_t>()[1] = slot.lastStaleness;
  header.data_ptr<int64_t>()[2] = slot.ticket;
  lock.unlock();
  const int other = 1 - peer.rank();
  auto sentHeader = peer.send(header, other, kPsHeaderTag);
  auto sentWeights = peer.send(weights, other, kPsPayloadTag);
  sentHeader->wait();
  sentWeights->wait();
  return true;
}

// Answers a worker waiting to push beyond `boundary` updates once this server checkpointed them.
bool ParameterServer::State::answerPark(Communicator& peer, int64_t boundary, std::unique_lock<std::mutex>& lock) {
  if (options.checkpointEvery <= 0 || boundary % options.checkpointEvery != 0) {
    throw Error(fmt::format("asked to wait for a checkpoint at {} updates, which is not a multiple of {}", boundary,
                            options.checkpointEvery));
  }
  changed.wait(lock, [&] { return failed || checkpointed >= boundary || abandoned < boundary; });
  if (failed) return false;
  at::Tensor header = at::zeros({kPsHeaderSize}, at::kLong);
  header.data_ptr<int64_t>()[0] = checkpointed;
  lock.unlock();
  peer.send(header, 1 - peer.rank(), kPsHeaderTag)->wait();
  return true;
}

}  // namespace lockstep
