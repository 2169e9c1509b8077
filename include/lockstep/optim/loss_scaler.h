// lockstep/optim/loss_scaler.h — dynamic loss scaling for float16 training.
//
//   lockstep::LossScaler scaler(comm);
//   scaler.scale(loss).backward();
//   ddp.finishGradientSync();
//   scaler.unscale(optimizer);            // optional: before clipping the true gradients
//   clipGradNorm(...);
//   scaler.step(optimizer);               // skipped when a gradient is inf/NaN on any rank
//   scaler.update();
//
// float16 gradients underflow where float32 ones do not; scaling the loss by
// S moves them into range, and dividing the gradients by S before the step
// undoes it. S follows PyTorch's documented dynamic algorithm: it starts at
// initScale (2^16); a step whose gradients hold an inf or NaN is skipped
// (parameters and optimizer state stay bit-unchanged) and S is multiplied by
// backoffFactor (0.5); after growthInterval (2000) consecutive clean steps S
// is multiplied by growthFactor (2). The found-inf flag is max-reduced over
// the ranks of `comm`, so every rank skips the same steps and S stays equal
// everywhere. bfloat16 (nn/precision.h) has float32's range and needs none of
// this. PyTorch's GradScaler is Python; this class is its C++ counterpart, on
// the same ATen kernel (_amp_foreach_non_finite_check_and_unscale_).
//
// Per step: unscale() at most once (step() calls it when it was not),
// step() once, update() once. unscale() and step() are collective when
// `comm` is set. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>

namespace at {
class Tensor;
}
namespace torch::optim {
class Optimizer;
}

namespace lockstep {

class Communicator;

struct LossScalerOptions {
  double initScale = 65536.0;
  double growthFactor = 2.0;
  double backoffFactor = 0.5;
  int64_t growthInterval = 2000;
};

class LossScaler {
 public:
  /// `comm` may be null (one process). Non-positive factors or interval -> lockstep::Error.
  explicit LossScaler(std::shared_ptr<Communicator> comm = nullptr, LossScalerOptions options = {});

  /// loss * scale().
  at::Tensor scale(const at::Tensor& loss) const;
  /// Divides the gradients of `optimizer`'s parameters by scale() in place and
  /// records whether any of them, on any rank, is not finite. Collective.
  void unscale(torch::optim::Optimizer& optimizer);
  /// Steps `optimizer` unless the gradients were found not finite; returns whether it stepped.
  bool step(torch::optim::Optimizer& optimizer);
  /// Backs off after a skipped step, grows after growthInterval clean ones; ends the step.
  void update();

  double scale() const { return scale_; }
  int64_t growthTracker() const { return growthTracker_; }  ///< clean steps since the last change
  int64_t skippedSteps() const { return skippedSteps_; }    ///< counted by update()
  /// After unscale(): whether a gradient of this step, on any rank, was not finite.
  bool foundInf() const { return foundInf_; }
  /// Restores a saved scale and tracker (checkpoints); lockstep::Error when not positive/negative.
  void setState(double scale, int64_t growthTracker);

 private:
  std::shared_ptr<Communicator> comm_;
  LossScalerOptions options_;
  double scale_;
  int64_t growthTracker_ = 0;
  int64_t skippedSteps_ = 0;
  bool unscaled_ = false;  // in this step
  bool foundInf_ = false;  // in this step, over all ranks
};

}  // namespace lockstep
