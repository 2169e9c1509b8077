// synced_strategy.cpp — src/train/synced_strategy.h.
#include "train/synced_strategy.h"

#include <ATen/ATen.h>

#include "lockstep/common/error.h"

namespace lockstep::detail {

void SyncedStrategy::backward(const at::Tensor& loss, bool sync) {
  LOCKSTEP_ASSERT(gradientSync() != nullptr, "backward() before start()");
  runSynced(sync, [&] { loss.backward(); });
}

void SyncedStrategy::runSynced(bool sync, const std::function<void()>& backward) {
  GradientSync* front = gradientSync();
  if (sync || front == nullptr) return backward();
  auto guard = front->noSync();
  backward();
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
