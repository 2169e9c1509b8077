// lockstep/data/global_batches.h — the samples of each optimizer step, whatever the world size.
//
// An elastic job changes its world between steps; its math must not change with it. A
// GlobalBatchPlan fixes what every step trains independently of the world: the epoch's order is
// globalOrder() (sampler.h: the same permutation DistributedSampler shards), and step k of the
// epoch trains positions [k·B, (k+1)·B) of it, B the global batch. A step is M micro-batches
// (accumulation): micro-batch m holds the next B/M positions (the first B mod M hold one more).
// A world of N ranks shares a micro-batch by stride, as DistributedSampler does: rank r takes its
// positions r, r+N, r+2N, ..., so where N divides every micro-batch each rank's share is exactly
// DistributedSampler's batch of that step (B/(M·N) samples), and elsewhere the shares differ by
// at most one sample. Each share comes with the weight of its mean loss, c·N/B for c samples
// (1/M where the shares are equal): data parallelism averages the N ranks' gradients, so the
// step's gradient is that of the mean loss over its B samples for every N and M. Steps per epoch are
// floor(datasetSize / B): no sample is padded in or trained twice in an epoch, and a job that
// changes its world at a step boundary trains every sample of the epoch exactly once.
//
// Invalid options, steps, micro-batches, ranks or worlds throw lockstep::Error naming the field.
// The const methods keep no caches; setEpoch must not overlap them.
#pragma once

#include <cstdint>
#include <vector>

namespace lockstep {

struct GlobalBatchOptions {
  int64_t datasetSize = 0;   ///< samples in the whole dataset, >= globalBatch
  bool shuffle = true;       ///< permute the whole index every epoch (globalOrder)
  uint64_t seed = 0;         ///< the permutation of epoch e uses seed + e
  int64_t globalBatch = 1;   ///< samples per optimizer step over all ranks, >= 1
  int64_t microBatches = 1;  ///< micro-batches per step (accumulation), in [1, globalBatch]
};

/// One rank's part of a micro-batch.
struct BatchShare {
  std::vector<int64_t> indices;  ///< the samples, in training order; empty when the world outnumbers them
  double lossScale = 0;          ///< the weight of their mean loss (0 for an empty share)
};

class GlobalBatchPlan {
 public:
  /// Validates `options` and prepares epoch 0.
  explicit GlobalBatchPlan(GlobalBatchOptions options);

  /// Selects the epoch whose order the steps take (O(datasetSize)); the same on every rank.
  void setEpoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }
  /// Optimizer steps per epoch: floor(datasetSize / globalBatch).
  int64_t stepsPerEpoch() const { return options_.datasetSize / options_.globalBatch; }
  /// Samples of micro-batch `micro` over all ranks.
  int64_t microBatchSize(int64_t micro) const;
  /// The samples step `step` of this epoch trains over all ranks, in order.
  std::vector<int64_t> stepSamples(int64_t step) const;
  /// Rank `rank` of a world of `world`'s share of micro-batch `micro` of step `step`.
  BatchShare share(int64_t step, int64_t micro, int rank, int world) const;

  const GlobalBatchOptions& options() const { return options_; }

 private:
  /// The first position of micro-batch `micro` within its step.
  int64_t microBatchStart(int64_t micro) const;
  void checkStep(int64_t step) const;

  GlobalBatchOptions options_;
  int64_t epoch_ = 0;
  std::vector<int64_t> order_;
};

}  // namespace lockstep
