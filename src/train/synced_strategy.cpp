// synced_strategy.cpp — src/train/synced_strategy.h.
#include "train/synced_strategy.h"

#include <ATen/ATen.h>

#include "lockstep/common/error.h"
#include "train/validation.h"

namespace lockstep::detail {

SyncedStrategy::SyncedStrategy(torch::optim::Optimizer& optimizer, LayeredModel model, const StrategyOptions& options)
    : Strategy(optimizer), model_(std::move(model)), precision_(options.precision), deviceType_(options.device.type()) {
  LOCKSTEP_CHECK(model_.model != nullptr && model_.loss != nullptr, "a strategy needs a model and its loss function");
}

at::Tensor SyncedStrategy::chainOutput(const Batch& batch) { return runChain(model_, batch.inputs); }

double SyncedStrategy::trainMicroBatch(const Batch& batch, double scale, bool sync, MicroBatchHooks& hooks) {
  LOCKSTEP_ASSERT(gradientSync() != nullptr, "trainMicroBatch() before start()");
  at::Tensor loss;
  {
    AutocastGuard amp(precision_, deviceType_);
    loss = model_.loss(chainOutput(batch), batch);
  }
  // 1 / scale is the step's count of micro-batches, a whole number float32 holds exactly.
  loss = loss.to(at::kFloat) / (1.0 / scale);
  const double value = loss.item<double>();
  const at::Tensor start = hooks.forwardDone(loss);
  runSynced(sync, [&] { start.backward(); });
  hooks.backwardDone();
  return value;
}

Evaluation SyncedStrategy::evaluate(const Batch& batch) { return evaluateOutput(model_, chainOutput(batch), batch); }

void SyncedStrategy::runSynced(bool sync, const std::function<void()>& backward) {
  GradientSync* front = gradientSync();
  if (sync || front == nullptr) return backward();
  auto guard = front->noSync();
  backward();
}

std::vector<BucketTiming> SyncedStrategy::finishGradientSync() {
  GradientSync* front = gradientSync();
  if (front == nullptr) return {};
  front->finishGradientSync();
  return front->lastSyncTimings();
}

}  // namespace lockstep::detail
