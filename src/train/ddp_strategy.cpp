// The data-parallel strategies: DistributedDataParallel averages the gradients,
// and either every rank steps a whole optimizer (ddp) or each steps its shard
// of it and sends what it updated to the other ranks (zero1, optim/sharded_optimizer.h).
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <fmt/format.h>

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

class DdpStrategy final : public detail::SyncedStrategy {
 public:
  /// `sharded` (zero1) steps the optimizer when given; `optimizer` otherwise.
  DdpStrategy(LayeredModel model, std::shared_ptr<Communicator> comm, const StrategyOptions& options,
              std::unique_ptr<torch::optim::Optimizer> optimizer, std::unique_ptr<ShardedOptimizer> sharded)
      : SyncedStrategy(sharded ? sharded->optimizer() : *optimizer, std::move(model), options), comm_(std::move(comm)),
        options_(options.sync), optimizer_(std::move(optimizer)), sharded_(std::move(sharded)) {
    // The strategy keeps the hook so that a checkpoint can carry its state (PowerSGD's).
    if (!options_.hook) options_.hook = makeCommHook(options_.compression, options_.powerSgd);
  }

  std::string start() override {
    ddp_ = std::make_unique<DistributedDataParallel>(model_.model, comm_, options_);
    return describe();
  }

  void step(double clipGradNorm) override {
    if (clipGradNorm > 0) lockstep::clipGradNorm(gradientsOf(model_.model->parameters()), clipGradNorm);
    if (sharded_) {
      sharded_->step();
    } else {
      optimizer_->step();
    }
  }

  std::string describe() const {
    std::string text = fmt::format("DDP {} bucket(s), {}", ddp_ ? ddp_->numBuckets() : 0,
                                   detail::compressionWords(options_.compression));
    if (options_.compression == GradCompression::kPowerSgd) {
      text += fmt::format(" (rank {} from synchronised step {})", options_.powerSgd.rank, options_.powerSgd.startStep);
    }
    if (sharded_) {
      text += fmt::format(", ZeRO-1: optimizer state sharded over {} rank(s), this one updates {} of {} elements",
                          comm_->size(), sharded_->ownedElements(), detail::elementsOf(model_.model->parameters()));
    }
    return text;
  }

  void saveState(TensorArchive* archive) override {
    if (archive) saveModelState(*model_.model, *archive);
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
    const SyncStats& stats = ddp_->stats();
    if (stats.bytesSent <= 0) return;
    log::info(fmt::format("{}: {:.1f} MB of gradients averaged with {:.1f} MB sent ({:.1f}x fewer bytes)",
                          options_.hook->name(), stats.bytesReduced / 1e6, stats.bytesSent / 1e6,
                          static_cast<double>(stats.bytesReduced) / static_cast<double>(stats.bytesSent)));
  }

  RankMemory memory() const override {
    RankMemory m;
    for (const auto& p : model_.model->parameters()) m.parameterBytes += static_cast<int64_t>(p.nbytes());
    // The .grad are views of DDP's buckets: it counts them once (none before start()).
    m.gradientBytes = ddp_ ? ddp_->gradientBytes() : 0;
    m.optimizerBytes = sharded_ ? sharded_->stateBytes() : optimizerStateBytes(*optimizer_);
    m.commBufferBytes = ddp_ ? ddp_->bufferBytes() : 0;  // with the hook's state
    return m;
  }

  void loadState(const TensorArchive& archive, bool report) override {
    loadModelState(archive, *model_.model);
    if (sharded_) {
      sharded_->loadState(archive, report);
    } else {
      loadOptimizerState(*optimizer_, archive, report);
    }
    if (comm_->size() > 1) options_.hook->loadState(archive, comm_->rank(), comm_->size(), report);
  }

 private:
  std::shared_ptr<Communicator> comm_;
  SyncOptions options_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<ShardedOptimizer> sharded_;  ///< zero1: owns the optimizer instead of optimizer_
  std::unique_ptr<DistributedDataParallel> ddp_;

  GradientSync* gradientSync() const override { return ddp_.get(); }
};

}  // namespace

std::unique_ptr<Strategy> detail::makeDdpStrategy(LayeredModel model, std::shared_ptr<Communicator> comm,
                                                  const StrategyOptions& options,
                                                  std::unique_ptr<torch::optim::Optimizer> optimizer,
                                                  bool shardOptimizer) {
  std::unique_ptr<ShardedOptimizer> sharded;
  if (shardOptimizer) sharded = std::make_unique<ShardedOptimizer>(std::move(optimizer), comm);
  return std::make_unique<DdpStrategy>(std::move(model), std::move(comm), options, std::move(optimizer),
                                       std::move(sharded));
}

}  // namespace lockstep
