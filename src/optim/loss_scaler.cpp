// Dynamic loss scaling (optim/loss_scaler.h).
#include "lockstep/optim/loss_scaler.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/optim/optimizer.h>

#include <vector>

#include "lockstep/comm/communicator.h"
#include "lockstep/common/error.h"

namespace lockstep {

namespace {

/// Divides gradients by `scale` with ATen's fused unscale-and-check kernel
/// (the one PyTorch's GradScaler uses), one launch and one host sync per
/// device instead of one sync per tensor; returns whether any was not finite.
bool unscaleOnDevices(const std::vector<at::Tensor>& grads, double scale) {
  bool found = false;
  std::vector<at::Tensor> left = grads;
  while (!left.empty()) {
    const at::Device device = left.front().device();
    std::vector<at::Tensor> here, elsewhere;
    for (auto& g : left) (g.device() == device ? here : elsewhere).push_back(g);
    const auto options = at::TensorOptions().dtype(at::kFloat).device(device);
    at::Tensor foundInf = at::zeros({1}, options);
    // The reciprocal in double, then float, as GradScaler computes it.
    at::Tensor inverse = at::full({1}, static_cast<float>(1.0 / scale), options);
    at::_amp_foreach_non_finite_check_and_unscale_(here, foundInf, inverse);
    found = foundInf.item<float>() > 0 || found;
    left = std::move(elsewhere);
  }
  return found;
}

}  // namespace

LossScaler::LossScaler(std::shared_ptr<Communicator> comm, LossScalerOptions options)
    : comm_(std::move(comm)), options_(options), scale_(options.initScale) {
  LOCKSTEP_CHECK(options_.initScale > 0, "LossScalerOptions::initScale must be positive, got ", options_.initScale);
  LOCKSTEP_CHECK(options_.growthFactor > 1, "LossScalerOptions::growthFactor must be above 1, got ",
                 options_.growthFactor);
  LOCKSTEP_CHECK(options_.backoffFactor > 0 && options_.backoffFactor < 1,
                 "LossScalerOptions::backoffFactor must be in (0, 1), got ", options_.backoffFactor);
  LOCKSTEP_CHECK(options_.growthInterval > 0, "LossScalerOptions::growthInterval must be positive, got ",
                 options_.growthInterval);
}

at::Tensor LossScaler::scale(const at::Tensor& loss) const { return loss * scale_; }

void LossScaler::unscale(torch::optim::Optimizer& optimizer) {
  LOCKSTEP_CHECK(!unscaled_, "LossScaler::unscale called twice in one step (call update() after each step)");
  unscaled_ = true;
  std::vector<at::Tensor> grads;
  c10::NoGradGuard noGrad;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (p.grad().defined()) grads.push_back(p.grad());
    }
  }
  bool found = unscaleOnDevices(grads, scale_);
  if (comm_ && comm_->size() > 1) {
    std::vector<at::Tensor> flag{at::full({1}, found ? 1.0f : 0.0f)};
    comm_->allreduce(flag, ReduceOp::kMax)->wait();
    found = flag[0].item<float>() > 0;
  }
  foundInf_ = found;
}

bool LossScaler::step(torch::optim::Optimizer& optimizer) {
  if (!unscaled_) unscale(optimizer);
  if (foundInf_) return false;
  optimizer.step();
  return true;
}

void LossScaler::update() {
  LOCKSTEP_CHECK(unscaled_, "LossScaler::update called without a step (call step() or unscale() first)");
  if (foundInf_) {
    ++skippedSteps_;
    scale_ *= options_.backoffFactor;
    growthTracker_ = 0;
  } else if (++growthTracker_ >= options_.growthInterval) {
    scale_ *= options_.growthFactor;
    growthTracker_ = 0;
  }
  unscaled_ = false;
  foundInf_ = false;
}

void LossScaler::setState(double scale, int64_t growthTracker) {
  LOCKSTEP_CHECK(scale > 0, "loss scale must be positive, got ", scale);
  LOCKSTEP_CHECK(growthTracker >= 0, "loss scaler growth tracker must not be negative, got ", growthTracker);
  scale_ = scale;
  growthTracker_ = growthTracker;
  unscaled_ = false;
  foundInf_ = false;
}

}  // namespace lockstep
