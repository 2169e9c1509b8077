// ps_server_state.h — a parameter server's state (internal), shared by server 0, which decides
// the order of the updates and the grants (ps_server.cpp), and the other servers, which follow that
// order (ps_follower.cpp).
#pragma once

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "optim/piece_optimizer.h"
#include "ps/ps_pairs.h"

namespace lockstep {

namespace detail {

struct WorkerSlot {
  bool pulled = false, out = false, waiting = false, done = false;
  int64_t readVersion = 0;    // the version of the weights it computes on (while out)
  int64_t staleness = 0;      // updates on other weights applied since its read (while out)
  int64_t lastStaleness = 0;  // of its last applied update
  at::Tensor granted;         // weights granted (of version readVersion) and not yet sent
  at::Tensor read;            // the weights it computes on (while out)
  int64_t ticket = 0;
};

/// A follower's weights of one version kept for the reads of it still to come.
struct VersionSnapshot {
  at::Tensor weights;
  int64_t readsLeft = 0;
};

}  // namespace detail

struct ParameterServer::State {
  std::unique_ptr<detail::PsPairs> pairs;
  PsOptions options;
  at::Tensor shard;  // this server's elements of the flattened parameters
  // The whole optimizer's type, groups and options over views of the shard, one per parameter it
  // meets (pieces.pieceViews); each view's .grad is a view of the pushed gradient.
  detail::PieceOptimizer pieces;
  std::vector<double> baseRates;  // each group's rate as the factory built it (PsOptions::learningRate)
  PsStats stats;
  std::vector<at::Tensor> buffers;  // server 0: worker 0's, as of its last update applied
  at::Tensor packedBuffers;         // server 0, with buffers: what worker 0 sends with each update

  std::mutex mutex;
  std::condition_variable changed;
  int64_t version = 0;       // updates applied
  int64_t checkpointed = 0;  // the last multiple of checkpointEvery whose hook returned
  // The smallest ticket a worker finished without pushing: no checkpoint beyond it can hold every
  // update before it, so none is taken and parks beyond it are answered at once.
  int64_t abandoned = std::numeric_limits<int64_t>::max();
  std::function<void(int64_t)> checkpointHook;
  bool failed = false;

  void buildOptimizer(const std::vector<at::Tensor>& parameters, const OptimizerFactory& factory);
  /// One optimizer step on `gradient` (none when `skip`): the next version.
  void step(const at::Tensor& gradient, bool skip);
  /// Runs the checkpoint hook when the version is a checkpoint's not yet taken.
  void checkpointIfDue();
  bool answerPark(Communicator& peer, int64_t boundary, std::unique_lock<std::mutex>& lock);
  bool leader() const { return pairs->role.index == 0; }

  // Server 0 (ps_server.cpp): the grants, the tickets, the staleness.
  int64_t tickets = 0;          // grants made: a global sequence for handing out work (PsWorker::ticket)
  int64_t grantsAtVersion = 0;  // grants made of the current version
  std::vector<detail::WorkerSlot> slots;
  int64_t outOnOtherWeights(int64_t readVersion, size_t except) const {
    int64_t n = 0;
    for (size_t d = 0; d < slots.size(); ++d) n += d != except && slots[d].out && slots[d].readVersion != readVersion;
    return n;
  }
  at::Tensor meanSquare;  // delay compensation's running mean of the squared gradient
  /// Delay compensation (parameter_server.h): corrects `gradient` in place for the weights having
  /// moved from `read` to the current ones.
  void compensate(const at::Tensor& gradient, const at::Tensor& read);
  bool mayGrant(size_t w) const;
  void grantWaiting();
  /// What server 0 tells the followers about an applied update: its place in the order (the version
  /// it applied to), the grants made of that version, its staleness and lag.
  struct Applied {
    int64_t place, grants, staleness, lag;
  };
  Applied apply(size_t w, const at::Tensor& gradient, int64_t workerReadVersion, bool skip);
  void serveWorker(size_t w);
  bool reply(size_t w, Communicator& peer, std::unique_lock<std::mutex>& lock);

  // The other servers (ps_follower.cpp): server 0's order of updates, its grants' versions.
  std::map<int64_t, int64_t> readsServed;  // version -> reads served while it was the current one
  std::map<int64_t, detail::VersionSnapshot> snapshots;
  void followWorker(size_t w);
  void applyInOrder(const at::Tensor& gradient, const Applied& applied, const at::Tensor& read, bool skip);
  at::Tensor weightsOf(int64_t version, std::unique_lock<std::mutex>& lock);
};

}  // namespace lockstep
