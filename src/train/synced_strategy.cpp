// synced_strategy.cpp — src/train/synced_strategy.h.
#include "train/synced_strategy.h"

#include <ATen/ATen.h>

#include "lockstep/common/error.h"

namespace lockstep::detail {

void SyncedStrategy::backward(const at::Tensor& loss, bool sync) {
  GradientSync* front = gradientSync();
  LOCKSTEP_ASSERT(front != nullptr, "backward() before start()");
  if (sync) {
    loss.backward();
  } else {
    auto guard = front->noSync();
    loss.backward();
  }
}

void SyncedStrategy::finishGradientSync() {
  if (GradientSync* front = gradientSync()) front->finishGradientSync();
}

const std::vector<BucketTiming>& SyncedStrategy::lastSyncTimings() const {
  static const std::vector<BucketTiming> kNone;
  const GradientSync* front = gradientSync();
  return front ? front->lastSyncTimings() : kNone;
}

}  // namespace lockstep::detail
