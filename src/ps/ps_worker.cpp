// A parameter-server worker: gradients out to every server, their shards of the weights back.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <limits>
#include <string>

#include "lockstep/common/error.h"
#include "ps/ps_pairs.h"

namespace lockstep {

using detail::kPsAckTag;
using detail::kPsDone;
using detail::kPsHeaderSize;
using detail::kPsHeaderTag;
using detail::kPsOrder;
using detail::kPsPark;
using detail::kPsPayloadTag;
using detail::kPsPull;
using detail::kPsPush;
using detail::kPsRead;

struct PsWorker::State {
  std::unique_ptr<detail::PsPairs> pairs;
  std::vector<at::Tensor> parameters;
  std::vector<at::Tensor> buffers;                  // worker 0's, sent to server 0 with every update
  at::Tensor packedBuffers;                         // ... packed into these bytes (exchange waits for the send)
  std::vector<std::pair<int64_t, int64_t>> ranges;  // each server's elements of the flat parameters
  at::Tensor gradients, weights;                    // flat buffers
  std::vector<int64_t> versions;                    // the version of each server's weights last received
  int64_t pushes = 0;
  double waitSeconds = 0;
  int64_t maxStaleness = 0;
  int64_t ticket = -1;
  int64_t checkpointEvery = 0, checkpointed = 0;  // the last checkpoint every server confirmed
  bool pulled = false, finished = false;

  void exchange(int64_t kind, bool skip = false);
  void readFollowers(std::vector<std::vector<WorkHandle>>& works);
  void waitForCheckpoint();
  void flattenGradients();

  /// Runs fn(peer, the server's rank in the pair) for server j; a failure names the server
  /// (`what`: what the worker was doing).
  template <typename Fn>
  void onServer(size_t j, const Fn& fn, const std::string& what = "") {
    try {
      fn(*pairs->peers[j], 1 - pairs->peers[j]->rank());
    } catch (const std::exception& e) {
      throw Error(fmt::format("worker {} (rank {}): {}{} failed: {}", pairs->role.index, pairs->rank, what,
                              detail::psPeerName(*pairs, j), e.what()));
    }
  }
  void waitAll(std::vector<std::vector<WorkHandle>>& works, size_t j, const std::string& what = "") {
    onServer(
        j,
        [&](Communicator&, int) {
          for (auto& w : works[j]) w->wait();
          works[j].clear();
        },
        what);
  }
  /// Server j's elements of a flat buffer.
  at::Tensor slice(const at::Tensor& flat, size_t j) const {
    return flat.narrow(0, ranges[j].first, ranges[j].second - ranges[j].first);
  }
};

namespace {

at::Tensor psHeader(std::initializer_list<int64_t> values) {
  at::Tensor h = at::zeros({kPsHeaderSize}, at::kLong);
  std::copy(values.begin(), values.end(), h.data_ptr<int64_t>());
  return h;
}

}  // namespace

PsWorker::PsWorker(std::shared_ptr<Communicator> comm, PsOptions options, std::vector<at::Tensor> parameters,
                   std::vector<at::Tensor> buffers)
    : state_(std::make_unique<State>()) {
  auto& s = *state_;
  s.pairs = detail::connectPsPairs(comm, options);
  if (s.pairs->role.server) {
    throw Error(fmt::format("PsWorker on rank {}: that rank is a parameter server", comm->rank()));
  }
  s.parameters = std::move(parameters);
  if (s.pairs->role.index == 0 && !buffers.empty()) {
    s.packedBuffers = at::empty({detail::packedBufferBytes(buffers)}, at::kByte);
    s.buffers = std::move(buffers);
  }
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

void PsWorker::skip() {
  auto& s = *state_;
  if (!s.pulled || s.finished) throw Error("PsWorker::skip: call pull() first, and no skip after finish()");
  // Sent as a push's gradient is, and never applied: NaN, so that a server stepping on it would show.
  s.gradients.fill_(std::numeric_limits<float>::quiet_NaN());
  s.waitForCheckpoint();
  s.exchange(kPsPush, /*skip=*/true);
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
  const std::string what = fmt::format("waiting for the checkpoint at {} updates, ", boundary);
  std::vector<at::Tensor> replies;
  std::vector<std::vector<WorkHandle>> works(servers);
  for (size_t j = 0; j < servers; ++j) {
    replies.push_back(psHeader({}));
    onServer(
        j,
        [&](Communicator& peer, int other) {
          works[j].push_back(peer.send(psHeader({kPsPark, pushes, versions[j], boundary}), other, kPsHeaderTag));
          works[j].push_back(peer.recv(replies[j], other, kPsHeaderTag));
        },
        what);
  }
  for (size_t j = 0; j < servers; ++j) waitAll(works, j, what);
  checkpointed = boundary;
  waitSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Sends `kind` (and for a push the gradient's slices) to the servers and receives every server's
// slice of the weights server 0 grants into the parameters. With several servers the others
// follow server 0 (ps_follower.cpp): a push's gradient goes to all at once, its place in server 0's
// order is relayed to them, and they send the weights of the version server 0 granted.
void PsWorker::State::exchange(int64_t kind, bool skip) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t servers = pairs->peers.size();
  const bool push = kind == kPsPush;
  std::vector<std::vector<WorkHandle>> works(servers);
  // Server 0: the message, then (a push, with followers) its place in the order, then the grant.
  at::Tensor ack = psHeader({}), grant = psHeader({}), mine = slice(weights, 0);
  WorkHandle acked;
  onServer(0, [&](Communicator& peer, int other) {
    works[0].push_back(
        peer.send(psHeader({kind, pushes + (push ? 1 : 0), versions[0], skip ? 1 : 0}), other, kPsHeaderTag));
    if (push) works[0].push_back(peer.send(slice(gradients, 0), other, kPsPayloadTag));
    if (push && !buffers.empty()) {
      detail::packBuffers(buffers, packedBuffers);
      works[0].push_back(peer.send(packedBuffers, other, detail::kPsBufferTag));
    }
    if (push && servers > 1) acked = peer.recv(ack, other, kPsAckTag);
    works[0].push_back(peer.recv(grant, other, kPsHeaderTag));
    works[0].push_back(peer.recv(mine, other, kPsPayloadTag));
  });
  for (size_t j = 1; j < servers; ++j) {
    onServer(j, [&](Communicator& peer, int other) {
      if (push) {
        works[j].push_back(peer.send(psHeader({kPsPush, skip ? 1 : 0}), other, kPsHeaderTag));
        works[j].push_back(peer.send(slice(gradients, j), other, kPsPayloadTag));
      } else if (kind == kPsDone) {
        works[j].push_back(peer.send(psHeader({kPsDone, ticket}), other, kPsHeaderTag));
      }
    });
  }
  if (acked) {
    onServer(0, [&](Communicator&, int) { acked->wait(); });
    const int64_t* a = ack.data_ptr<int64_t>();
    for (size_t j = 1; j < servers; ++j) {
      onServer(j, [&](Communicator& peer, int other) {
        works[j].push_back(peer.send(psHeader({kPsOrder, a[0], a[1], a[2], a[3]}), other, kPsHeaderTag));
      });
    }
  }
  waitAll(works, 0);
  const int64_t* g = grant.data_ptr<int64_t>();
  versions[0] = g[0];
  maxStaleness = std::max(maxStaleness, g[1]);
  ticket = g[2];
  readFollowers(works);
  c10::NoGradGuard noGrad;
  int64_t offset = 0;
  for (auto& p : parameters) {
    p.copy_(weights.narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
  waitSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The other servers' slices of the version server 0 granted (versions[0]), after the messages
// still pending to them.
void PsWorker::State::readFollowers(std::vector<std::vector<WorkHandle>>& works) {
  const size_t servers = pairs->peers.size();
  std::vector<at::Tensor> replies(servers);
  for (size_t j = 1; j < servers; ++j) {
    replies[j] = psHeader({});
    onServer(j, [&](Communicator& peer, int other) {
      works[j].push_back(peer.send(psHeader({kPsRead, versions[0]}), other, kPsHeaderTag));
      works[j].push_back(peer.recv(replies[j], other, kPsHeaderTag));
      at::Tensor mine = slice(weights, j);
      works[j].push_back(peer.recv(mine, other, kPsPayloadTag));
    });
  }
  for (size_t j = 1; j < servers; ++j) {
    waitAll(works, j);
    versions[j] = replies[j].data_ptr<int64_t>()[0];
  }
}

}  // namespace lockstep
