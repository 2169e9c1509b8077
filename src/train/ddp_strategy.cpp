// The data-parallel Strategy: DistributedDataParallel plus a whole optimizer on every rank.
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/optimizer.h>

#include <fmt/format.h>

#include "lockstep/common/error.h"
#include "lockstep/optim/optimizer.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/strategy.h"

namespace lockstep {

namespace {

class DdpStrategy final : public Strategy {
 public:
  DdpStrategy(std::shared_ptr<torch::nn::Module> model, std::shared_ptr<Communicator> comm, DdpOptions options,
              std::unique_ptr<torch::optim::Optimizer> optimizer)
      : model_(std::move(model)), comm_(std::move(comm)), options_(std::move(options)),
        optimizer_(std::move(optimizer)) {
    LOCKSTEP_CHECK(model_ != nullptr && comm_ != nullptr && optimizer_ != nullptr,
                   "the DDP strategy needs a model, a communicator and an optimizer");
  }

  void start() override { ddp_ = std::make_unique<DistributedDataParallel>(model_, comm_, options_); }

  torch::optim::Optimizer& optimizer() override { return *optimizer_; }

  void backward(const at::Tensor& loss, bool sync) override {
    LOCKSTEP_ASSERT(ddp_ != nullptr, "backward() before start()");
    if (sync) {
      loss.backward();
    } else {
      auto guard = ddp_->noSync();
      loss.backward();
    }
  }

  void finishGradientSync() override { ddp_->finishGradientSync(); }

  void step(double clipGradNorm) override {
    if (clipGradNorm > 0) torch::nn::utils::clip_grad_norm_(model_->parameters(), clipGradNorm);
    optimizer_->step();
  }

  const std::vector<BucketTiming>& lastSyncTimings() const override {
    static const std::vector<BucketTiming> kNone;
    return ddp_ && comm_->size() > 1 ? ddp_->lastSyncTimings() : kNone;
  }

  std::string describe() const override {
    return fmt::format("DDP {} bucket(s), {} compression", ddp_ ? ddp_->numBuckets() : 0,
                       toString(options_.compression));
  }

  void saveState(TensorArchive* archive) override {
    if (!archive) return;
    saveModelState(*model_, *archive);
    saveOptimizerState(*optimizer_, *archive);
  }

  void loadState(const TensorArchive& archive, bool report) override {
    loadModelState(archive, *model_);
    loadOptimizerState(*optimizer_, archive, report);
  }

 private:
  std::shared_ptr<torch::nn::Module> model_;
  std::shared_ptr<Communicator> comm_;
  DdpOptions options_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<DistributedDataParallel> ddp_;
};

}  // namespace

std::unique_ptr<Strategy> makeDdpStrategy(std::shared_ptr<torch::nn::Module> model, std::shared_ptr<Communicator> comm,
                                          DdpOptions options, std::unique_ptr<torch::optim::Optimizer> optimizer) {
  return std::make_unique<DdpStrategy>(std::move(model), std::move(comm), std::move(options), std::move(optimizer));
}

}  // namespace lockstep
