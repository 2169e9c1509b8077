// A parameter-server worker: gradients out to every server, their shards of the weights back.
#include <ATen/ATen.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "lockstep/common/error.h"
#include "ps/ps_pairs.h"

namespace lockstep {

using detail::kPsDone;
using detail::kPsHeaderSize;
using detail::kPsHeaderTag;
using detail::kPsPark;
using detail::kPsPayloadTag;
using detail::kPsPull;
using detail::kPsPush;

struct PsWorker::State {
  std::unique_ptr<detail::PsPairs> pairs;
  std::vector<at::Tensor> parameters;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // each server's elements of the flat parameters
  at::Tensor gradients, weights;                    // flat buffers
  std::vector<int64_t> versions;                    // the version of each server's weights last received
  int64_t pushes = 0;
  double waitSeconds = 0;
  int64_t maxStaleness = 0;
  int64_t ticket = -1;
  int64_t checkpointEvery = 0, checkpointed = 0;  // the last checkpoint every server confirmed
  bool pulled = false, finished = false;

  void exchange(int64_t kind);
  void waitForCheckpoint();
  void flattenGradients();
};

PsWorker::PsWorker(std::shared_ptr<Communicator> comm, PsOptions options, std::vector<at::Tensor> parameters)
    : state_(std::make_unique<State>()) {
  auto& s = *state_;
  s.pairs = detail::connectPsPairs(comm, options);
  if (s.pairs->role.server) {
    throw Error(fmt::format("PsWorker on rank {}: that rank is a parameter server", comm->rank()));
  }
  s.parameters = std::move(parameters);
  detail::broadcastFlatParameters(*comm, s.parameters);
  const int64_t numel = detail::totalElements(s.parameters);
  if (numel < options.servers) {
    throw Error(fmt::format("parameter server: {} parameter elements cannot be spread over {} servers", numel,
                            options.servers));
  }
  const int servers = s.pairs->role.servers;
  for (int j = 0; j < servers; ++j) s.ranges.push_back(psShardRange(numel, servers, j));
  s.gradients = at::zeros({numel}, at::kFloat);
  s.weights = at::zeros({numel}, at::kFloat);
  s.versions.assign(static_cast<size_t>(options.servers), 0);
  s.checkpointEvery = options.checkpointEvery;
  s.checkpointed = options.firstUpdate;
}

PsWorker::~PsWorker() = default;

int64_t PsWorker::pushes() const { return state_->pushes; }
double PsWorker::waitSeconds() const { return state_->waitSeconds; }
int64_t PsWorker::maxStaleness() const { return state_->maxStaleness; }
int64_t PsWorker::ticket() const { return state_->ticket; }

void PsWorker::pull() {
  if (state_->pulled) throw Error("PsWorker::pull: already pulled (push() brings the weights from then on)");
  state_->exchange(kPsPull);
  state_->pulled = true;
}

void PsWorker::push() {
  auto& s = *state_;
  if (!s.pulled || s.finished) throw Error("PsWorker::push: call pull() first, and no push after finish()");
  s.flattenGradients();
  s.waitForCheckpoint();
  s.exchange(kPsPush);
  ++s.pushes;
}

void PsWorker::finish() {
  auto& s = *state_;
  if (s.finished) return;
  s.finished = true;
  s.exchange(kPsDone);
}

void PsWorker::State::flattenGradients() {
  int64_t offset = 0;
  for (const auto& p : parameters) {
    auto slot = gradients.narrow(0, offset, p.numel());
    if (p.grad().defined()) {
      slot.copy_(p.grad().detach().reshape({-1}));
    } else {
      slot.zero_();
    }
    offset += p.numel();
  }
}

// Before pushing the gradient of ticket t: when a checkpoint falls at or before t that the servers
// have not confirmed (the last multiple B of checkpointEvery), waits until every server took it, so
// that the update lands after it (parameter_server.h, "Checkpoints").
void PsWorker::State::waitForCheckpoint() {
  if (checkpointEvery <= 0 || ticket < 0) return;
  const int64_t boundary = ticket / checkpointEvery * checkpointEvery;
  if (boundary <= checkpointed) return;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t servers = pairs->peers.size();
  std::vector<at::Tensor> headers, replies;
  std::vector<std::vector<WorkHandle>> works(servers);
  for (size_t k = 0; k < servers; ++k) {
    headers.push_back(at::zeros({kPsHeaderSize}, at::kLong));
    auto* h = headers.back().data_ptr<int64_t>();
    h[0] = kPsPark;
    h[1] = pushes;
    h[2] = versions[k];
    h[3] = boundary;
    replies.push_back(at::zeros({kPsHeaderSize}, at::kLong));
  }
  size_t j = 0;
  try {
    for (j = 0; j < servers; ++j) {
      Communicator& peer = *pairs->peers[j];
      works[j].push_back(peer.send(headers[j], 1 - peer.rank(), kPsHeaderTag));
      works[j].push_back(peer.recv(replies[j], 1 - peer.rank(), kPsHeaderTag));
    }
    for (j = 0; j < servers; ++j) {
      for (auto& w : works[j]) w->wait();
    }
  } catch (const std::exception& e) {
    throw Error(fmt::format("worker {} (rank {}): waiting for the checkpoint at {} updates, {} failed: {}",
                            pairs->role.index, pairs->rank, boundary, detail::psPeerName(*pairs, j), e.what()));
  }
  checkpointed = boundary;
  waitSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Sends `kind` (and for a push the gradients' slices) to every server, then receives each
// server's weights into the parameters.
void PsWorker::State::exchange(int64_t kind) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t servers = pairs->peers.size();
  std::vector<at::Tensor> headers, replies;
  std::vector<std::vector<WorkHandle>> works(servers);
  for (size_t j = 0; j < servers; ++j) {
    Communicator& peer = *pairs->peers[j];
    const int other = 1 - peer.rank();
    headers.push_back(at::zeros({kPsHeaderSize}, at::kLong));
    auto* h = headers.back().data_ptr<int64_t>();
    h[0] = kind;
    h[1] = pushes + (kind == kPsPush ? 1 : 0);
    h[2] = versions[j];
    replies.push_back(at::zeros({kPsHeaderSize}, at::kLong));
    const auto [first, last] = ranges[j];
    try {
      works[j].push_back(peer.send(headers.back(), other, kPsHeaderTag));
      if (kind == kPsPush)
        works[j].push_back(peer.send(gradients.narrow(0, first, last - first), other, kPsPayloadTag));
      works[j].push_back(peer.recv(replies.back(), other, kPsHeaderTag));
      at::Tensor slot = weights.narrow(0, first, last - first);
      works[j].push_back(peer.recv(slot, other, kPsPayloadTag));
    } catch (const std::exception& e) {
      throw Error(fmt::format("worker {} (rank {}): {} failed: {}", pairs->role.index, pairs->rank,
                              detail::psPeerName(*pairs, j), e.what()));
    }
  }
  for (size_t j = 0; j < servers; ++j) {
    try {
      for (auto& w : works[j]) w->wait();
    } catch (const std::exception& e) {
      throw Error(fmt::format("worker {} (rank {}): {} failed: {}", pairs->role.index, pairs->rank,
                              detail::psPeerName(*pairs, j), e.what()));
    }
    versions[j] = replies[j].data_ptr<int64_t>()[0];
    maxStaleness = std::max(maxStaleness, replies[j].data_ptr<int64_t>()[1]);
  }
  ticket = replies[0].data_ptr<int64_t>()[2];
  at::NoGradGuard noGrad;
  int64_t offset = 0;
  for (auto& p : parameters) {
    p.copy_(weights.narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
  waitSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace lockstep
