// step_samples.h — the samples of the Trainer's micro-batches, and the weight of each one's loss.
// A run of a fixed world takes DistributedSampler's shards (data/sampler.h); an elastic run, whose
// world may change between steps, a GlobalBatchPlan's shares of a fixed global batch
// (data/global_batches.h), so that a step trains the same samples at any world size. Where the
// world divides the global batch the two give the same micro-batches. Private to train/.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "lockstep/data/dataset.h"
#include "lockstep/data/global_batches.h"
#include "lockstep/data/sampler.h"
#include "lockstep/train/trainer.h"

namespace lockstep::detail {

class StepSamples {
 public:
  /// Shards `train` over `dataWorld` ranks (pipelines), this one `dataRank`; `elastic`: by shares
  /// of the global batch the run starts with (batchSize x dataWorld x accumulation).
  StepSamples(const Dataset& train, const TrainerOptions& o, int dataRank, int dataWorld, bool elastic);

  /// Micro-batches per epoch (a whole number of steps' worth per rank).
  int64_t microPerEpoch() const { return microPerEpoch_; }
  /// Samples per optimizer step over all ranks: fixed for the run.
  int64_t globalBatch() const { return globalBatch_; }
  /// Selects the epoch; the same on every rank (O(dataset size)).
  void setEpoch(int64_t epoch);
  /// Micro-batch `micro` of the epoch for rank `dataRank` of `dataWorld` (a fixed world's: the
  /// ones it was built with): its samples and the weight of their mean loss.
  BatchShare micro(int64_t micro, int dataRank, int dataWorld) const;

 private:
  const int64_t accumulation_;
  const int64_t batchSize_;
  const int fixedRank_;
  const int fixedWorld_;
  int64_t globalBatch_ = 0;
  int64_t microPerEpoch_ = 0;
  std::optional<DistributedSampler> sharded_;  // a fixed world
  std::optional<GlobalBatchPlan> shares_;      // an elastic one
};

}  // namespace lockstep::detail
