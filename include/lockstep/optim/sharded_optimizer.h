// lockstep/optim/sharded_optimizer.h — ZeRO stage 1: the optimizer state split
// across the ranks instead of held whole by each.
//
// Every rank keeps the whole model and receives the whole averaged gradients
// (DistributedDataParallel does that). Each parameter is owned by one rank —
// a greedy split by element count over the parameters in optimizer order, the
// same on every rank — and only its owner keeps optimizer state for it and
// updates it. After the owners stepped, every rank broadcasts the parameters
// it owns, so each rank ends the step with the parameters a DDP run with the
// whole optimizer would have: bit for bit, since each parameter is updated by
// the same arithmetic from the same gradient.
//
// The wrapped optimizer is built over ALL parameters, as for DDP (any
// torch::optim optimizer whose step() skips a parameter without a gradient,
// as SGD, Adam and AdamW do; parameter groups as the user built them). The
// sharding is which parameters it sees a gradient for during step(): it
// creates state only for the owned ones, so a rank holds about 1/N of the
// optimizer state (Adam: 8 bytes per owned float32 parameter element).
//
// Checkpoints: saveState() writes exactly the entries saveOptimizerState()
// writes for the whole optimizer (optim/optimizer.h), the writing rank
// gathering each other rank's shard over send/recv, so a sharded run's
// checkpoint loads into a DDP run and the other way round; loadState()
// restores the whole state and keeps this rank's shard.
//
// Collective: step(), saveState() and loadState() are called by every rank in
// the same order. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "lockstep/comm/communicator.h"

namespace at {
class Tensor;
}
namespace torch::optim {
class Optimizer;
}

namespace lockstep {

class TensorArchive;

/// Which rank owns each of `numels` parameters: in order, each goes to the
/// rank holding the fewest elements so far (the lowest such rank on a tie).
std::vector<int> shardParameters(const std::vector<int64_t>& numels, int worldSize);

class ShardedOptimizer {
 public:
  /// `optimizer` is over every parameter of the model; `comm` the data-parallel group.
  ShardedOptimizer(std::unique_ptr<torch::optim::Optimizer> optimizer, std::shared_ptr<Communicator> comm);
  ~ShardedOptimizer();
  ShardedOptimizer(const ShardedOptimizer&) = delete;
  ShardedOptimizer& operator=(const ShardedOptimizer&) = delete;

  /// Updates the owned parameters from their gradients (every gradient must
  /// already be averaged), then broadcasts each rank's updated parameters.
  /// Gradients are left as they were.
  void step();
  /// The wrapped optimizer (learning rates, zero_grad).
  torch::optim::Optimizer& optimizer() { return *optimizer_; }

  /// The owner of parameter `index` (over every group's parameters, in order).
  int ownerOf(size_t index) const { return owners_.at(index); }
  size_t numParameters() const { return owners_.size(); }
  /// Parameter elements this rank owns.
  int64_t ownedElements() const;
  /// Bytes of optimizer state this rank holds now.
  int64_t stateBytes() const;

  /// Collective. `archive` is non-null on rank 0 only (the rank that writes
  /// checkpoints, as in the Trainer), which receives the whole optimizer's
  /// entries; the others pass null and send it their shard: each state tensor
  /// only when rank 0 writes the archive (its entry is a tensor source), so
  /// they return once it has and rank 0 must write it (once).
  void saveState(TensorArchive* archive);
  /// Restores the whole optimizer's state from `archive` (as loadOptimizerState)
  /// and keeps only this rank's shard of it. Every rank passes the same archive.
  void loadState(const TensorArchive& archive, bool report);

 private:
  void sendShard(int writer);
  void receiveShard(int from, TensorArchive& archive);

  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::shared_ptr<Communicator> comm_;
  std::vector<at::Tensor> params_;                ///< every group's parameters, in order
  std::vector<int> owners_;                       ///< owner rank of each
  std::vector<std::vector<at::Tensor>> ownedBy_;  ///< detached aliases of each rank's parameters
};

}  // namespace lockstep
