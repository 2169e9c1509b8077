// synced_strategy.h — what the Strategy adapters over a GradientSync share
// (DDP and ZeRO-1, ZeRO-2, ZeRO-3, and the pipeline's DDP across pipelines):
// backward under noSync() for all but a step's last micro-batch, the sync and
// its per-bucket timings.
#pragma once

#include <functional>
#include <vector>

#include "lockstep/ddp/gradient_sync.h"
#include "lockstep/train/strategy.h"

namespace lockstep::detail {

class SyncedStrategy : public Strategy {
 public:
  void backward(const at::Tensor& loss, bool sync) override;
  void finishGradientSync() override;
  const std::vector<BucketTiming>& lastSyncTimings() const override;

 protected:
  /// The front; null while there is none (DDP before start(), a pipeline without replicas).
  virtual GradientSync* gradientSync() const = 0;
  /// Runs `backward` (a loss's, or a pipeline stage's forward and backward) under the front's
  /// noSync() unless `sync`: only a step's last micro-batch communicates.
  void runSynced(bool sync, const std::function<void()>& backward);
};

}  // namespace lockstep::detail
