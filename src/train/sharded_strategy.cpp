// The ZeRO-2 strategy: ShardedDataParallel reduce-scatters the gradients and
// each rank updates its pieces of the parameters (ddp/sharded_data_parallel.h);
// and what it shares with ZeRO-3 (sharded_strategy.h).
#include "train/sharded_strategy.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <fmt/format.h>

#include "lockstep/common/error.h"
#include "lockstep/ddp/sharded_data_parallel.h"
#include "lockstep/train/checkpoint.h"
#include "train/elements.h"
#include "train/strategies.h"

namespace lockstep::detail {

ShardedStrategy::ShardedStrategy(std::shared_ptr<ShardedGradientSync> zero, LayeredModel model,
                                 std::shared_ptr<Communicator> comm, const StrategyOptions& options)
    : SyncedStrategy(zero->optimizer(), std::move(model), options), zero_(std::move(zero)), comm_(std::move(comm)) {}

void ShardedStrategy::step(double clipGradNorm) {
  if (clipGradNorm > 0) zero_->clipGradNorm(clipGradNorm);
  zero_->step();
}

RankMemory ShardedStrategy::memory() const {
  RankMemory m;
  m.parameterBytes = zero_->parameterBytes();
  m.gradientBytes = zero_->gradientBytes();
  m.optimizerBytes = zero_->stateBytes();
  m.commBufferBytes = zero_->bufferBytes();
  return m;
}

std::string ShardedStrategy::shardSummary(const std::string& what, const std::string& verb) const {
  return fmt::format("{} sharded over {} rank(s), this one {} {} of {} elements", what, comm_->size(), verb,
                     zero_->ownedElements(), elementsOf(model_.model->parameters()));
}

namespace {

class Zero2Strategy final : public ShardedStrategy {
 public:
  // Built when the Trainer builds its strategy, on every rank at the same
  // point: the construction is collective (rank 0's model is broadcast), and
  // a resume then restores the pieces' optimizer state.
  Zero2Strategy(LayeredModel model, std::shared_ptr<Communicator> comm, const StrategyOptions& options,
                std::unique_ptr<torch::optim::Optimizer> optimizer)
      : ShardedStrategy(std::make_shared<ShardedDataParallel>(model.model, comm, std::move(optimizer), options.sync),
                        model, comm, options) {}

  // The model was broadcast at construction; a resume restored the same
  // checkpoint on every rank. Broadcast again so a model changed in between
  // (a callback, a user's own loading) still starts equal everywhere.
  std::string start() override {
    broadcastModule(*model_.model, *comm_);
    const int buckets = static_cast<const ShardedDataParallel&>(*zero_).numBuckets();
    return shardSummary(fmt::format("ZeRO-2 {} bucket(s) reduce-scattered: gradients and optimizer state", buckets),
                        "updates");
  }

  // Every rank holds the model whole: the archive takes it from this one.
  void saveState(TensorArchive* archive) override {
    if (archive) saveModelState(*model_.model, *archive);
    zero_->saveState(archive);
  }

  void loadState(const TensorArchive& archive, bool report) override {
    loadModelState(archive, *model_.model);
    zero_->loadState(archive, report);
  }
};

}  // namespace

std::unique_ptr<Strategy> makeZero2Strategy(LayeredModel model, std::shared_ptr<Communicator> comm,
                                            const StrategyOptions& options,
                                            std::unique_ptr<torch::optim::Optimizer> optimizer) {
  return std::make_unique<Zero2Strategy>(std::move(model), std::move(comm), options, std::move(optimizer));
}

}  // namespace lockstep::detail
