// The data-parallel strategies: DistributedDataParallel averages the gradients,
// and either every rank steps a whole optimizer (ddp) or each steps its shard
// of it and broadcasts what it updated (zero1, optim/sharded_optimizer.h).
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <fmt/format.h>

#include "lockstep/common/enum_names.h"
#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/optim/grad_clip.h"
#include "lockstep/optim/optimizer.h"
#include "lockstep/optim/sharded_optimizer.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/strategy.h"
#include "train/elements.h"
#include "train/strategies.h"
#include "train/synced_strategy.h"

namespace lockstep {

namespace {

constexpr EnumName<StrategyType> kStrategyNames[] = {{StrategyType::kDdp, "ddp"},
                                                     {StrategyType::kZero1, "zero1"},
                                                     {StrategyType::kZero2, "zero2"},
                                                     {StrategyType::kZero3, "zero3"},
                                                     {StrategyType::kAsyncPs, "async_ps"}};

class DdpStrategy final : public detail::SyncedStrategy {
 public:
  DdpStrategy(std::shared_ptr<torch::nn::Module> model, std::shared_ptr<Communicator> comm, DdpOptions options,
              std::unique_ptr<torch::optim::Optimizer> optimizer, bool shardOptimizer)
      : model_(std::move(model)), comm_(std::move(comm)), options_(std::move(options)),
        optimizer_(std::move(optimizer)) {
    LOCKSTEP_CHECK(model_ != nullptr && comm_ != nullptr && optimizer_ != nullptr,
                   "the DDP strategy needs a model, a communicator and an optimizer");
    if (shardOptimizer) sharded_ = std::make_unique<ShardedOptimizer>(std::move(optimizer_), comm_);
    // The strategy keeps the hook so that a checkpoint can carry its state (PowerSGD's).
    if (!options_.hook) options_.hook = makeCommHook(options_.compression, options_.powerSgd);
  }

  void start() override { ddp_ = std::make_unique<DistributedDataParallel>(model_, comm_, options_); }

  torch::optim::Optimizer& optimizer() override { return sharded_ ? sharded_->optimizer() : *optimizer_; }

  void step(double clipGradNorm) override {
    if (clipGradNorm > 0) lockstep::clipGradNorm(gradientsOf(model_->parameters()), clipGradNorm);
    if (sharded_) {
      sharded_->step();
    } else {
      optimizer_->step();
    }
  }

  std::string describe() const override {
    std::string text =
        fmt::format("DDP {} bucket(s), {} compression", ddp_ ? ddp_->numBuckets() : 0, toString(options_.compression));
    if (options_.compression == GradCompression::kPowerSgd) {
      text += fmt::format(" (rank {} from synchronised step {})", options_.powerSgd.rank, options_.powerSgd.startStep);
    }
    if (sharded_) {
      text += fmt::format(", ZeRO-1: optimizer state sharded over {} rank(s), this one updates {} of {} elements",
                          comm_->size(), sharded_->ownedElements(), detail::elementsOf(model_->parameters()));
    }
    return text;
  }

  void saveState(TensorArchive* archive) override {
    if (archive) saveModelState(*model_, *archive);
    if (sharded_) {
      sharded_->saveState(archive);  // collective: the shards travel to the writer
    } else if (archive) {
      saveOptimizerState(*optimizer_, *archive);
    }
    // After the shards: the hook's per-rank entries sort last in the file, and each rank's sends
    // to the writer complete in the order the writer writes them.
    if (comm_->size() > 1) options_.hook->saveState(comm_, archive);
  }

  void end() override {
    if (!ddp_ || comm_->rank() != 0 || options_.compression == GradCompression::kNone) return;
    const DdpStats& stats = ddp_->stats();
    if (stats.bytesSent <= 0) return;
    log::info(fmt::format("{}: {:.1f} MB of gradients averaged with {:.1f} MB sent ({:.1f}x fewer bytes)",
                          options_.hook->name(), stats.bytesReduced / 1e6, stats.bytesSent / 1e6,
                          static_cast<double>(stats.bytesReduced) / static_cast<double>(stats.bytesSent)));
  }

  RankMemory memory() const override {
    RankMemory m;
    for (const auto& p : model_->parameters()) m.parameterBytes += static_cast<int64_t>(p.nbytes());
    // The .grad are views of DDP's buckets: it counts them once (none before start()).
    m.gradientBytes = ddp_ ? ddp_->gradientBytes() : 0;
    m.optimizerBytes = sharded_ ? sharded_->stateBytes() : optimizerStateBytes(*optimizer_);
    m.commBufferBytes = ddp_ ? ddp_->bufferBytes() : 0;  // with the hook's state
    return m;
  }

  void loadState(const TensorArchive& archive, bool report) override {
    loadModelState(archive, *model_);
    if (sharded_) {
      sharded_->loadState(archive, report);
    } else {
      loadOptimizerState(*optimizer_, archive, report);
    }
    if (comm_->size() > 1) options_.hook->loadState(archive, comm_->rank(), comm_->size(), report);
  }

 private:
  std::shared_ptr<torch::nn::Module> model_;
  std::shared_ptr<Communicator> comm_;
  DdpOptions options_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<ShardedOptimizer> sharded_;  ///< zero1: owns the optimizer instead of optimizer_
  std::unique_ptr<DistributedDataParallel> ddp_;

  GradientSync* gradientSync() const override { return ddp_.get(); }
};

}  // namespace

double Strategy::trainBatch(const Batch& /*batch*/, double /*scale*/, bool /*sync*/) {
  throw Error("this strategy does not run the model itself; call backward() with the loss");
}

at::Tensor Strategy::evaluate(const Batch& /*batch*/) {
  throw Error("this strategy does not run the model itself; validate with the loss function");
}

const char* toString(StrategyType type) { return enumName(kStrategyNames, type); }

StrategyType parseStrategyType(const std::string& text, const std::string& what) {
  return parseEnum(kStrategyNames, text, what);
}

std::unique_ptr<Strategy> makeStrategy(StrategyType type, std::shared_ptr<torch::nn::Module> model,
                                       std::shared_ptr<Communicator> comm, DdpOptions options,
                                       std::unique_ptr<torch::optim::Optimizer> optimizer) {
  if (type == StrategyType::kAsyncPs) {
    throw InternalError("makeStrategy: async_ps has no synchronous strategy (Trainer::fit runs it on its own)");
  }
  if (type == StrategyType::kZero3) {
    throw Error(
        "makeStrategy: zero3 gathers the parameters around every use of the model, so the Trainer builds it with the "
        "model's calls (strategy.type zero3); in a loop of your own use FullyShardedDataParallel");
  }
  if (type == StrategyType::kZero2) {
    return detail::makeZero2Strategy(std::move(model), std::move(comm), std::move(options), std::move(optimizer));
  }
  return std::make_unique<DdpStrategy>(std::move(model), std::move(comm), std::move(options), std::move(optimizer),
                                       type == StrategyType::kZero1);
}

}  // namespace lockstep
