// lockstep/ps/parameter_server.h — asynchronous data parallelism through
// parameter servers, with a bound on the staleness of every update.
//
// The world's last S ranks are servers, the others workers. The model's
// parameters, flattened and concatenated, are cut into S ranges of ceil(n / S)
// elements (the last shorter; ZeRO's cut of one group); server
// j holds range j and steps the optimizer the factory builds over the whole
// parameters (SGD, Adam or AdamW, any parameter groups and options) over its
// pieces of them, one per parameter the range meets: since these optimizers
// are elementwise, the servers together take exactly the whole optimizer's
// step. Each worker, at its own pace:
//
//   worker.pull();                        // once: the servers' weights (rank 0's model at start)
//   for each batch: forward, backward; worker.push();   // gradients out, fresh weights back
//   worker.finish();                      // waits for the others; leaves the final weights
//
// A push is one optimizer step on every server, applied when it arrives and
// not averaged with the others: the optimizer's learning rate is that of one
// worker's batch.
//
// Staleness. The staleness of an update is the number of updates applied
// between the moment its worker read the weights and its own application
// that were computed on other weights (updates computed on the same weights
// are siblings: synchronous SGD sums exactly those). The servers never apply
// an update staler than s: a worker gets new weights only when every gradient
// still being computed stays within s counting the pushes still to come, and
// otherwise waits. With s = 0 a worker waits for the round's other pushes and
// all start the next round from the same weights: with plain SGD the run
// equals synchronous SGD with the summed gradients. With s >= the number of
// updates the fast workers make while a slow one computes one, nobody waits:
// a straggler slows only itself. Unlike a bound on the workers' step counts
// (stale-synchronous parallel), a worker that is slow for the whole run does
// not pull the others down to its pace.
//
// The servers record every applied update's staleness (at most s) and lag
// (all updates applied between its read and its application, siblings
// included) — PsStats.
//
// Checkpoints. With checkpointEvery = E the servers stop at every multiple B of E updates in a
// consistent state: exactly the updates of tickets 0..B-1 applied on every server, no other. A worker
// whose ticket is B or more waits, in its push (after computing the gradient, before sending it),
// until every server has reached B and run its checkpoint hook (ParameterServer::setCheckpointHook),
// which sees the shard and optimizer after exactly B updates. Nothing deadlocks: every ticket below
// B was granted before any ticket from B on, and its worker pushes it without waiting for B —
// provided workers stop by ticket (a worker whose ticket is beyond the work calls finish()): a ticket
// that a worker takes into finish() unpushed ends the checkpoints beyond it (no hook runs for them,
// and nobody waits for them).
//
// Delay compensation (DC-ASGD, Zheng et al. 2017, its adaptive form). A stale gradient g was
// computed at the weights w_read the worker read, not at the current w; its first-order correction
// uses g (x) g as a cheap approximation of the Hessian's diagonal:
//     g' = g + lambda (x) g (x) g (x) (w - w_read),   lambda = lambda0 / sqrt(v),
//     v = 0.95 v + 0.05 g (x) g  (per element, over the updates applied; (x): elementwise).
// Every server applies it to its range (the followers to the same updates, from the weights they
// served), so it costs a copy of the weights per worker computing and one more range of state.
//
// Several servers: server 0 orders the updates and decides the grants under the bound; the
// others apply the updates in its order (the worker relays each update's place) and serve the
// versions it granted, so every read is one version on every server and the bound holds on all.
//
// Messages go over one two-rank group per (worker, server) pair, each with its
// own connection and queue, so the servers serve every worker at once; a
// server or worker that fails is named in the error of its peers.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/comm/communicator.h"
#include "lockstep/optim/optimizer.h"

namespace lockstep {

class TensorArchive;

struct PsOptions {
  int64_t servers = 1;    ///< S: the last S ranks hold the parameters (config ps.servers)
  int64_t staleness = 0;  ///< s: the most staleness an applied update may have (config ps.staleness)
  /// E > 0: every server pauses at each multiple of E updates (see "Checkpoints" above); 0: never.
  int64_t checkpointEvery = 0;
  /// Updates applied before this run (a resumed run's start): the first grant's ticket and the
  /// servers' first version. The same on every rank.
  int64_t firstUpdate = 0;
  /// lambda0 > 0: delay compensation (config ps.compensation; see "Delay compensation" above); 0: off.
  double compensation = 0;
  /// When set, every server sets each parameter group's learning rate to learningRate(u, base)
  /// before it applies update u (counted from 0 over the whole run, resumed updates included),
  /// `base` being that group's rate as the factory built it: warmup and schedules, per group.
  /// Null: the optimizer's own rates. The same function on every server.
  std::function<double(int64_t update, double base)> learningRate;
};

/// ConfigError naming ps.servers, ps.staleness or ps.compensation unless 1 <= servers < worldSize,
/// staleness >= 0 and compensation >= 0; Error unless checkpointEvery and firstUpdate are >= 0.
void checkPsOptions(const PsOptions& options, int worldSize);

/// What a rank does: workers are ranks 0..workers-1, servers the ranks after them.
struct PsRole {
  bool server = false;
  int index = 0;  ///< the worker's or server's number
  int workers = 0;
  int servers = 0;
};
PsRole psRole(int rank, int worldSize, const PsOptions& options);

/// The elements [first, second) of the flattened parameters that server `server` of `servers` holds:
/// ranges of ceil(numel / servers), the last ones shorter or, for a small numel, empty (5 elements
/// over 4 servers: 2, 2, 1, 0).
std::pair<int64_t, int64_t> psShardRange(int64_t numel, int servers, int server);

/// What a server applied: histograms indexed by staleness and by lag (counts of updates).
struct PsStats {
  int64_t updates = 0;
  std::vector<int64_t> staleness;  ///< staleness[g]: updates applied with staleness g
  std::vector<int64_t> lag;        ///< lag[l]: updates applied after l others since their weights were read
  int64_t skipped = 0;             ///< updates counted without a step (PsWorker::skip), among `updates`
  int64_t maxStaleness() const;    ///< -1 when no update was applied
  void record(int64_t stalenessValue, int64_t lagValue);
};

/// A server rank. Collective with every rank's PsWorker/ParameterServer construction: it
/// connects to each worker and takes rank 0's `parameters` (float32; every rank passes the
/// same shapes in the same order). `factory` is called once with `parameters` (which it may
/// group as it likes); the server steps that optimizer's type, groups and options over its
/// pieces. Throws Error for an optimizer other than SGD, Adam or AdamW, or one holding a
/// tensor that is not among `parameters`.
class ParameterServer {
 public:
  /// `buffers` (the model's, e.g. BatchNorm's statistics; the same shapes on every rank): server
  /// 0 copies worker 0's into them with each of worker 0's updates, before that update's
  /// checkpoint, so a checkpoint hook sees worker 0's buffers as of its last update in it.
  ParameterServer(std::shared_ptr<Communicator> comm, PsOptions options, const std::vector<at::Tensor>& parameters,
                  const OptimizerFactory& factory, std::vector<at::Tensor> buffers = {});
  ~ParameterServer();
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  /// Serves every worker, one thread each, until all of them finished. Throws
  /// Error naming the worker whose connection failed.
  void serve();
  const PsStats& stats() const;
  /// This server's flat shard of the parameters (the final weights after serve()).
  const at::Tensor& shard() const;
  /// The optimizer over this server's pieces (its groups: the factory's, each holding the pieces
  /// of its parameters that this server's range meets).
  torch::optim::Optimizer& optimizer();
  /// Collective over the servers (every server calls it at the same version, e.g. in the
  /// checkpoint hook): server 0, given an archive, receives the whole optimizer's entries
  /// (optim/optimizer.h: groups and per-parameter state as the factory's optimizer would save
  /// them), assembled from every server's pieces; the others pass null.
  void saveOptimizerState(TensorArchive* archive);
  /// Keeps this server's pieces of a whole optimizer's entries (as saveOptimizerState writes and
  /// any Trainer checkpoint holds), checking every entry first; CheckpointError naming the
  /// archive and the entry when they do not fit the factory's optimizer. Before serve().
  void loadOptimizerState(const TensorArchive& archive, bool report);
  int64_t updates() const;  ///< optimizer steps applied (from PsOptions::firstUpdate on)
  /// Called by serve() on every server, with its state locked, when it has applied a multiple of
  /// PsOptions::checkpointEvery updates (the argument); shard() and optimizer() are then exactly
  /// that many updates along. Workers that would push beyond it wait until it returned on every
  /// server. An exception from it ends serve() with the error. Set it before serve().
  void setCheckpointHook(std::function<void(int64_t updates)> hook);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// A worker rank; see the file comment. Collective construction (with the servers').
class PsWorker {
 public:
  /// `parameters`: this rank's model parameters (float32), written by pull(), push() and finish().
  /// `buffers`: the model's buffers; worker 0 sends them to server 0 with every update.
  PsWorker(std::shared_ptr<Communicator> comm, PsOptions options, std::vector<at::Tensor> parameters,
           std::vector<at::Tensor> buffers = {});
  ~PsWorker();
  PsWorker(const PsWorker&) = delete;
  PsWorker& operator=(const PsWorker&) = delete;

  /// Fetches the servers' weights into the parameters (once, before the first push).
  void pull();
  /// Sends the parameters' gradients (undefined ones as zeros) to the servers and copies the
  /// weights they send back into the parameters; blocks while new weights would let a gradient
  /// in progress exceed the staleness bound. Throws Error naming the server whose connection failed.
  void push();
  /// An empty push: the servers count this worker's update (its ticket) without stepping, so the
  /// parameters and the optimizer state stay as they are (a non-finite loss skipped); then as push().
  void skip();
  /// Tells the servers this worker is done and waits for every other worker; leaves the
  /// servers' final weights in the parameters.
  void finish();
  int64_t pushes() const;
  /// Seconds spent in pull/push/finish waiting for the servers (messages and the bound).
  double waitSeconds() const;
  /// The largest staleness of this worker's updates, as the servers applied them.
  int64_t maxStaleness() const;
  /// Server 0 numbers its grants of weights 0, 1, 2, ... over all workers: the number of the weights
  /// this worker received last (-1 after finish()). Hand out work by it: each number goes to exactly
  /// one worker, in the order the workers got their weights (with s = 0, round k gets k*W .. k*W+W-1).
  int64_t ticket() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace lockstep
