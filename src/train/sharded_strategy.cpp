// The ZeRO-2 strategy: ShardedDataParallel reduce-scatters the gradients and
// each rank updates its pieces of the parameters (ddp/sharded_data_parallel.h).
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <fmt/format.h>

#include "lockstep/common/error.h"
#include "lockstep/ddp/sharded_data_parallel.h"
#include "lockstep/train/checkpoint.h"
#include "train/strategies.h"
#include "train/synced_strategy.h"

namespace lockstep::detail {
namespace {

class Zero2Strategy final : public SyncedStrategy {
 public:
  // Built when the Trainer builds its strategy, on every rank at the same
  // point: the construction is collective (rank 0's model is broadcast), and
  // a resume then restores the pieces' optimizer state.
  Zero2Strategy(std::shared_ptr<torch::nn::Module> model, std::shared_ptr<Communicator> comm, DdpOptions options,
                std::unique_ptr<torch::optim::Optimizer> optimizer)
      : model_(model), comm_(comm),
        zero_(std::make_unique<ShardedDataParallel>(std::move(model), std::move(comm), std::move(optimizer), options)) {
  }

  // The model was broadcast at construction; a resume restored the same
  // checkpoint on every rank. Broadcast again so a model changed in between
  // (a callback, a user's own loading) still starts equal everywhere.
  void start() override { broadcastModule(*model_, *comm_); }

  torch::optim::Optimizer& optimizer() override { return zero_->optimizer(); }

  void step(double clipGradNorm) override {
    if (clipGradNorm > 0) zero_->clipGradNorm(clipGradNorm);
    zero_->step();
  }

  std::string describe() const override {
    int64_t total = 0;
    for (const auto& p : model_->parameters()) total += p.numel();
    return fmt::format(
        "ZeRO-2 {} bucket(s) reduce-scattered: gradients and optimizer state sharded over {} rank(s), this one "
        "updates {} of {} elements",
        zero_->numBuckets(), comm_->size(), zero_->ownedElements(), total);
  }

  void saveState(TensorArchive* archive) override {
    if (archive) saveModelState(*model_, *archive);
    zero_->saveState(archive);
  }

  void loadState(const TensorArchive& archive, bool report) override {
    loadModelState(archive, *model_);
    zero_->loadState(archive, report);
  }

  RankMemory memory() const override {
    RankMemory m;
    for (const auto& p : model_->parameters()) m.parameterBytes += static_cast<int64_t>(p.nbytes());
    m.gradientBytes = zero_->gradientBytes();
    m.optimizerBytes = zero_->stateBytes();
    m.commBufferBytes = zero_->bufferBytes();
    return m;
  }

 private:
  std::shared_ptr<torch::nn::Module> model_;
  std::shared_ptr<Communicator> comm_;
  std::unique_ptr<ShardedDataParallel> zero_;

  GradientSync* gradientSync() const override { return zero_.get(); }
};

}  // namespace

std::unique_ptr<Strategy> makeZero2Strategy(std::shared_ptr<torch::nn::Module> model,
                                            std::shared_ptr<Communicator> comm, DdpOptions options,
                                            std::unique_ptr<torch::optim::Optimizer> optimizer) {
  return std::make_unique<Zero2Strategy>(std::move(model), std::move(comm), std::move(options), std::move(optimizer));
}

}  // namespace lockstep::detail
