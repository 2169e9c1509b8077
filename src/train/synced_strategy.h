// synced_strategy.h — what the Strategy implementations over a GradientSync share
// (DDP and ZeRO-1, ZeRO-2, ZeRO-3, and the pipeline's DDP across pipelines): the
// model they train, a micro-batch's forward, loss and backward under the front's
// noSync() for all but a step's last one, the evaluation of a validation batch,
// the sync and its per-bucket timings.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "lockstep/ddp/comm_hook.h"
#include "lockstep/ddp/gradient_sync.h"
#include "lockstep/train/strategy.h"

namespace lockstep::detail {

/// "no compression", "fp16 compression", ...: for the line start() returns.
inline std::string compressionWords(GradCompression compression) {
  return compression == GradCompression::kNone ? "no compression" : std::string(toString(compression)) + " compression";
}

class SyncedStrategy : public Strategy {
 public:
  /// Autocast in `options.precision` on `options.device`'s type around forward and loss.
  SyncedStrategy(torch::optim::Optimizer& optimizer, LayeredModel model, const StrategyOptions& options);

  /// Forward and loss under autocast (`scale` x the loss in float32, the count of micro-batches
  /// dividing it as a loop of one's own does), backward synchronised on the last micro-batch.
  double trainMicroBatch(const Batch& batch, double scale, bool sync, MicroBatchHooks& hooks) override;
  /// The chain's output, then its loss and right answers.
  Evaluation evaluate(const Batch& batch) override;
  std::vector<BucketTiming> finishGradientSync() override;

 protected:
  /// The front; null while there is none (DDP before start(), a pipeline without replicas).
  virtual GradientSync* gradientSync() const = 0;
  /// The model's output for `batch` (the chain over its inputs; ZeRO-3 gathers around it).
  virtual at::Tensor chainOutput(const Batch& batch);
  /// Runs `backward` (a loss's, or a pipeline stage's forward and backward) under the front's
  /// noSync() unless `sync`: only a step's last micro-batch communicates.
  void runSynced(bool sync, const std::function<void()>& backward);

  const LayeredModel model_;
  const Precision precision_;
  const c10::DeviceType deviceType_;
};

}  // namespace lockstep::detail
