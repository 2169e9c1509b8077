// The ZeRO-3 strategy: FullyShardedDataParallel keeps 1/N of the parameters,
// gradients and optimizer state on each rank (ddp/fully_sharded_data_parallel.h),
// and the model runs through it so each unit is gathered around its use.
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <fmt/format.h>

#include "lockstep/ddp/fully_sharded_data_parallel.h"
#include "train/sharded_strategy.h"
#include "train/strategies.h"

namespace lockstep::detail {
namespace {

class Zero3Strategy final : public ShardedStrategy {
 public:
  Zero3Strategy(std::shared_ptr<FullyShardedDataParallel> zero, LayeredModel model, std::shared_ptr<Communicator> comm,
                const StrategyOptions& options)
      : ShardedStrategy(zero, std::move(model), std::move(comm), options), fsdp_(zero.get()) {}

  // Rank 0's model was broadcast at construction and a resume restored the same
  // checkpoint on every rank: the shards already agree.
  std::string start() override {
    return shardSummary(fmt::format("ZeRO-3 {} unit(s) gathered around their forward and backward: parameters, "
                                    "gradients and optimizer state",
                                    fsdp_->numUnits()),
                        "keeps");
  }

  // The one unit of a model without layers is freed by backward, or here after an evaluation.
  Evaluation evaluate(const Batch& batch) override {
    Evaluation e = SyncedStrategy::evaluate(batch);
    if (model_.layers.empty()) fsdp_->release();
    return e;
  }

  void end() override { fsdp_->restoreModule(); }

  // The front writes and restores the model too: only it can assemble the parameters from the shards.
  void saveState(TensorArchive* archive) override { zero_->saveState(archive); }
  void loadState(const TensorArchive& archive, bool report) override { zero_->loadState(archive, report); }

 private:
  /// Each unit gathered just before its layer runs; without layers, the whole module before the loss runs it.
  at::Tensor chainOutput(const Batch& batch) override {
    if (!model_.layers.empty()) return fsdp_->forward(batch.inputs);
    fsdp_->gatherAll();
    return batch.inputs;
  }

  FullyShardedDataParallel* fsdp_;  // zero_, as what it is
};

}  // namespace

std::unique_ptr<Strategy> makeZero3Strategy(LayeredModel model, std::shared_ptr<Communicator> comm,
                                            const StrategyOptions& options,
                                            std::unique_ptr<torch::optim::Optimizer> optimizer) {
  auto zero =
      std::make_shared<FullyShardedDataParallel>(model.model, model.layers, comm, std::move(optimizer), options.sync);
  return std::make_unique<Zero3Strategy>(std::move(zero), std::move(model), std::move(comm), options);
}

}  // namespace lockstep::detail
