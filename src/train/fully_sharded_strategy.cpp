// The ZeRO-3 strategy: FullyShardedDataParallel keeps 1/N of the parameters,
// gradients and optimizer state on each rank (ddp/fully_sharded_data_parallel.h),
// and the Trainer's calls of the model go through it so each unit is gathered
// around its use.
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <fmt/format.h>

#include "lockstep/common/error.h"
#include "lockstep/ddp/fully_sharded_data_parallel.h"
#include "train/sharded_strategy.h"
#include "train/strategies.h"

namespace lockstep::detail {
namespace {

class Zero3Strategy final : public ShardedStrategy {
 public:
  Zero3Strategy(std::shared_ptr<FullyShardedDataParallel> zero, std::shared_ptr<torch::nn::Module> model,
                std::shared_ptr<Communicator> comm)
      : ShardedStrategy(std::move(zero), std::move(model), std::move(comm)) {}

  // Rank 0's model was broadcast at construction and a resume restored the same
  // checkpoint on every rank: the shards already agree.
  void start() override {}

  std::string describe() const override {
    return shardSummary(fmt::format("ZeRO-3 {} unit(s) gathered around their forward and backward: parameters, "
                                    "gradients and optimizer state",
                                    fsdp().numUnits()),
                        "keeps");
  }

  void end() override { fsdp().restoreModule(); }

  // The front writes and restores the model too: only it can assemble the parameters from the shards.
  void saveState(TensorArchive* archive) override { zero_->saveState(archive); }
  void loadState(const TensorArchive& archive, bool report) override { zero_->loadState(archive, report); }

 private:
  FullyShardedDataParallel& fsdp() const { return static_cast<FullyShardedDataParallel&>(*zero_); }
};

}  // namespace

Zero3Parts makeZero3Strategy(std::shared_ptr<torch::nn::Module> model, const LayeredModel* layered, LossFn loss,
                             CorrectFn correct, std::shared_ptr<Communicator> comm, DdpOptions options,
                             std::unique_ptr<torch::optim::Optimizer> optimizer) {
  auto zero = std::make_shared<FullyShardedDataParallel>(
      model, layered ? layered->layers : std::vector<PipelineLayer>{}, comm, std::move(optimizer), options);
  Zero3Parts parts;
  FullyShardedDataParallel* z = zero.get();  // the strategy owns it and outlives the Trainer's calls
  if (layered != nullptr) {
    parts.loss = [z, fn = layered->loss](torch::nn::Module&, const Batch& b) { return fn(z->forward(b.inputs), b); };
    if (layered->correct) {
      parts.correct = [z, fn = layered->correct](torch::nn::Module&, const Batch& b) {
        return fn(z->forward(b.inputs), b);
      };
    }
  } else {
    // One unit: gathered before the model runs; backward frees it, an evaluation right after.
    parts.loss = [z, fn = std::move(loss)](torch::nn::Module& m, const Batch& b) {
      z->gatherAll();
      at::Tensor out = fn(m, b);
      if (!at::GradMode::is_enabled()) z->release();
      return out;
    };
    if (correct) {
      parts.correct = [z, fn = std::move(correct)](torch::nn::Module& m, const Batch& b) {
        z->gatherAll();
        int64_t right = fn(m, b);
        z->release();
        return right;
      };
    }
  }
  parts.strategy = std::make_unique<Zero3Strategy>(std::move(zero), std::move(model), std::move(comm));
  return parts;
}

}  // namespace lockstep::detail
