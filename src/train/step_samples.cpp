// The Trainer's micro-batches from a DistributedSampler or a GlobalBatchPlan (step_samples.h).
#include "train/step_samples.h"

#include "lockstep/common/error.h"

namespace lockstep::detail {

StepSamples::StepSamples(const Dataset& train, const TrainerOptions& o, int dataRank, int dataWorld, bool elastic)
    : accumulation_(o.accumulation), batchSize_(o.batchSize), fixedRank_(dataRank), fixedWorld_(dataWorld) {
  LOCKSTEP_CHECK(train.size() > 0, "the training set is empty");
  globalBatch_ = o.batchSize * dataWorld * o.accumulation;
  if (elastic) {
    GlobalBatchOptions plan;
    plan.datasetSize = train.size();
    plan.shuffle = true;
    plan.seed = o.seed;
    plan.globalBatch = globalBatch_;
    plan.microBatches = o.accumulation;
    // Fewer samples than one step: no step per epoch, which the Trainer names (not the plan's error).
    if (plan.datasetSize < plan.globalBatch) return;
    shares_.emplace(plan);
    microPerEpoch_ = shares_->stepsPerEpoch() * o.accumulation;
  } else {
    // Data is sharded over the pipelines: every stage of one gets the same batches.
    sharded_.emplace(SamplerOptions{train.size(), dataRank, dataWorld, /*shuffle=*/true, o.seed, /*dropLast=*/false});
    microPerEpoch_ = sharded_->numBatches(o.batchSize, /*dropLastBatch=*/true);
  }
}

void StepSamples::setEpoch(int64_t epoch) {
  if (shares_) shares_->setEpoch(epoch);
  if (sharded_) sharded_->setEpoch(epoch);
}

BatchShare StepSamples::micro(int64_t micro, int dataRank, int dataWorld) const {
  LOCKSTEP_CHECK(micro >= 0 && micro < microPerEpoch_, "micro-batch ", micro, " of an epoch of ", microPerEpoch_);
  if (shares_) return shares_->share(micro / accumulation_, micro % accumulation_, dataRank, dataWorld);
  LOCKSTEP_CHECK(dataRank == fixedRank_ && dataWorld == fixedWorld_, "rank ", dataRank, " of ", dataWorld,
                 ": this run's samples are sharded for rank ", fixedRank_, " of ", fixedWorld_);
  return BatchShare{sharded_->batch(micro, batchSize_), 1.0 / static_cast<double>(accumulation_)};
}

}  // namespace lockstep::detail
