// The world-independent plan of an epoch's steps (lockstep/data/global_batches.h).
#include "lockstep/data/global_batches.h"

#include "lockstep/common/error.h"
#include "lockstep/data/sampler.h"

namespace lockstep {

GlobalBatchPlan::GlobalBatchPlan(GlobalBatchOptions options) : options_(options) {
  LOCKSTEP_CHECK(options_.globalBatch >= 1, "GlobalBatchOptions.globalBatch = ", options_.globalBatch,
                 ", expected >= 1");
  LOCKSTEP_CHECK(options_.microBatches >= 1 && options_.microBatches <= options_.globalBatch,
                 "GlobalBatchOptions.microBatches = ", options_.microBatches,
                 ", expected in [1, globalBatch = ", options_.globalBatch, "]");
  LOCKSTEP_CHECK(options_.datasetSize >= options_.globalBatch,
                 "GlobalBatchOptions.datasetSize = ", options_.datasetSize,
                 ": fewer samples than one step's globalBatch = ", options_.globalBatch);
  setEpoch(0);
}

void GlobalBatchPlan::setEpoch(int64_t epoch) {
  epoch_ = epoch;
  order_ = globalOrder(options_.datasetSize, options_.shuffle, options_.seed, epoch);
}

int64_t GlobalBatchPlan::microBatchSize(int64_t micro) const {
  LOCKSTEP_CHECK(micro >= 0 && micro < options_.microBatches, "micro-batch ", micro, ", expected in [0, ",
                 options_.microBatches, ")");
  const int64_t base = options_.globalBatch / options_.microBatches;
  return base + (micro < options_.globalBatch % options_.microBatches ? 1 : 0);
}

int64_t GlobalBatchPlan::microBatchStart(int64_t micro) const {
  const int64_t base = options_.globalBatch / options_.microBatches;
  const int64_t longer = options_.globalBatch % options_.microBatches;  // the first `longer` hold base + 1
  return micro * base + (micro < longer ? micro : longer);
}

void GlobalBatchPlan::checkStep(int64_t step) const {
  LOCKSTEP_CHECK(step >= 0 && step < stepsPerEpoch(), "step ", step, ", expected in [0, ", stepsPerEpoch(), ") (",
                 options_.datasetSize, " samples, global batch ", options_.globalBatch, ")");
}

std::vector<int64_t> GlobalBatchPlan::stepSamples(int64_t step) const {
  checkStep(step);
  const auto begin = order_.begin() + step * options_.globalBatch;
  return {begin, begin + options_.globalBatch};
}

BatchShare GlobalBatchPlan::share(int64_t step, int64_t micro, int rank, int world) const {
  checkStep(step);
  const int64_t size = microBatchSize(micro);
  LOCKSTEP_CHECK(world >= 1, "world = ", world, ", expected >= 1");
  LOCKSTEP_CHECK(rank >= 0 && rank < world, "rank = ", rank, ", expected in [0, world = ", world, ")");
  const int64_t start = step * options_.globalBatch + microBatchStart(micro);
  BatchShare share;
  for (int64_t p = rank; p < size; p += world) share.indices.push_back(order_[static_cast<size_t>(start + p)]);
  const auto count = static_cast<double>(share.indices.size());
  share.lossScale = count * world / static_cast<double>(options_.globalBatch);
  return share;
}

}  // namespace lockstep
