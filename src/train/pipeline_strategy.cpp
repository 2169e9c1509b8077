// Pipeline stages as a Trainer strategy: rank r is stage r % P of pipeline r / P; the stage runs
// its micro-batches (pipeline/pipeline.h), DDP averages its gradients over the pipelines (2-D), and
// the checkpoint is the unsplit model's: the first pipeline's stages send their pieces to rank 0.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "lockstep/comm/archive_transfer.h"
#include "lockstep/common/error.h"
#include "lockstep/common/tensor_archive.h"
#include "lockstep/nn/model_state.h"
#include "lockstep/optim/grad_clip.h"
#include "lockstep/optim/optimizer.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/strategy.h"
#include "train/elements.h"
#include "train/synced_strategy.h"

namespace lockstep {

namespace {

using Impl = const void*;

class PipelineStrategy final : public detail::SyncedStrategy {
 public:
  PipelineStrategy(std::shared_ptr<torch::nn::Module> model, std::vector<PipelineLayer> layers,
                   std::shared_ptr<Communicator> comm, PipelineOptions pipeline, OutputLossFn loss, DdpOptions options,
                   std::unique_ptr<torch::optim::Optimizer> optimizer)
      : model_(std::move(model)), world_(std::move(comm)), options_(std::move(options)), pipeline_(pipeline),
        optimizer_(std::move(optimizer)), loss_(std::move(loss)) {
    LOCKSTEP_CHECK(model_ != nullptr && world_ != nullptr && optimizer_ != nullptr,
                   "the pipeline strategy needs a model, a communicator and an optimizer");
    checkPipelineOptions(pipeline, static_cast<int64_t>(layers.size()), world_->size());
    const int p = static_cast<int>(pipeline.stages);
    const int rank = world_->rank();
    pipelines_ = world_->size() / p;
    pipe_ = world_->split(rank / p, rank % p, fmt::format("pipeline{}", rank / p));
    if (pipelines_ > 1) data_ = world_->split(rank % p, rank / p, fmt::format("stage{}", rank % p));
    stage_ = std::make_unique<PipelineStage>(std::move(layers), pipe_, pipeline);
    holder_ = std::make_shared<torch::nn::Module>("PipelineStage");
    for (size_t i = 0; i < stage_->modules().size(); ++i) {
      holder_->register_module(fmt::format("layer{}", i), stage_->modules()[i]);
    }
    for (const auto& p : stage_->parameters()) owned_.insert(p.unsafeGetTensorImpl());
    for (const auto& m : stage_->modules()) {
      for (const auto& b : m->buffers()) ownedBuffers_.insert(b.unsafeGetTensorImpl());
    }
  }

  void start() override {
    if (!data_) return;
    ddp_ = std::make_unique<DistributedDataParallel>(holder_, data_, options_);
    stage_->setDataParallel(ddp_.get());
  }

  torch::optim::Optimizer& optimizer() override { return *optimizer_; }

  void backward(const at::Tensor& /*loss*/, bool /*sync*/) override {
    throw Error("pipeline stages run forward and backward themselves (trainBatch)");
  }

  bool runsTheModel() const override { return true; }

  double trainBatch(const Batch& batch, double scale, bool sync) override {
    double loss = 0;
    runSynced(sync, [&] { loss = stage_->trainBatch(batch, loss_, scale); });
    activationPeak_ = std::max(activationPeak_, stage_->lastTimings().peakStoredBytes);
    return loss;
  }

  at::Tensor evaluate(const Batch& batch) override { return stage_->forward(batch); }

  const PipelineTimings* pipelineTimings() const override { return &stage_->lastTimings(); }

  /// Clipping by the norm over every stage's gradients (one allreduce over the pipeline).
  void step(double clipGradNorm) override {
    if (clipGradNorm > 0) lockstep::clipGradNorm(gradientsOf(stage_->parameters()), clipGradNorm, pipe_.get());
    optimizer_->step();
  }

  std::string describe() const override {
    const int64_t elements = detail::elementsOf(stage_->parameters());
    std::string text = fmt::format(
        "pipeline of {} stages x {} micro-batches ({}), balance [{}]; this rank: stage {} of pipeline {}, layers "
        "{}..{}, {} parameters",
        stage_->stages(), stage_->microbatches(), toString(pipeline_.schedule), fmt::join(stage_->balance(), ", "),
        stage_->stage(), world_->rank() / stage_->stages(), stage_->firstLayer(), stage_->endLayer() - 1, elements);
    if (ddp_) {
      text += fmt::format("; {} pipelines, each stage's gradients averaged by DDP ({} bucket(s), {} compression)",
                          pipelines_, ddp_->numBuckets(), toString(options_.compression));
    }
    return text;
  }

  void saveState(TensorArchive* archive) override;
  void loadState(const TensorArchive& archive, bool report) override;

  RankMemory memory() const override {
    RankMemory m;
    for (const auto& p : stage_->parameters()) {
      m.parameterBytes += static_cast<int64_t>(p.nbytes());
      if (!ddp_ && p.grad().defined()) m.gradientBytes += static_cast<int64_t>(p.grad().nbytes());
    }
    if (ddp_) m.gradientBytes = ddp_->gradientBytes();  // .grad are views of its buckets
    m.optimizerBytes = optimizerStateBytes(*optimizer_);
    m.commBufferBytes = ddp_ ? ddp_->bufferBytes() : 0;
    m.activationPeakBytes = activationPeak_;
    return m;
  }

 private:
  bool owns(const at::Tensor& t) const {
    return owned_.count(t.unsafeGetTensorImpl()) > 0 || ownedBuffers_.count(t.unsafeGetTensorImpl()) > 0;
  }
  TensorArchive stagePiece();
  void mergePiece(const TensorArchive& piece, TensorArchive& archive);

  std::shared_ptr<torch::nn::Module> model_;
  std::shared_ptr<Communicator> world_, pipe_, data_;
  DdpOptions options_;
  PipelineOptions pipeline_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<PipelineStage> stage_;
  std::shared_ptr<torch::nn::Module> holder_;  // this stage's modules, for DDP
  OutputLossFn loss_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  int pipelines_ = 1;
  int64_t activationPeak_ = -1;
  std::set<Impl> owned_, ownedBuffers_;

  GradientSync* gradientSync() const override { return ddp_.get(); }
};

/// This stage's model tensors and optimizer state, under the unsplit model's keys.
TensorArchive PipelineStrategy::stagePiece() {
  TensorArchive piece("pipeline stage");
  for (const auto& [key, tensor] : modelEntries(*model_)) {
    if (owns(tensor)) piece.putTensor(key, tensor);
  }
  saveOptimizerState(*optimizer_, piece);  // state exists for this stage's parameters only
  return piece;
}

/// Rank 0: a later stage's piece into the checkpoint and into rank 0's copy of the model.
void PipelineStrategy::mergePiece(const TensorArchive& piece, TensorArchive& archive) {
  c10::NoGradGuard noGrad;
  std::map<std::string, at::Tensor> tensors;
  for (auto& [key, tensor] : modelEntries(*model_)) tensors.emplace(std::move(key), std::move(tensor));
  for (const auto& key : piece.keys(kModelEntryPrefix)) {
    auto it = tensors.find(key);
    LOCKSTEP_CHECK(it != tensors.end(), "a pipeline stage sent '", key, "', which rank 0's model lacks");
    it->second.copy_(piece.getTensor(key));
  }
  int64_t index = 0;
  for (const auto& group : optimizer_->param_groups()) {
    for (size_t i = 0; i < group.params().size(); ++i, ++index) {
      const std::string prefix = fmt::format("optimizer/param{}/", index);
      if (piece.getBool(prefix + "present")) {
        for (const auto& key : piece.keys(prefix)) copyArchiveEntry(piece, key, archive);
      }
    }
  }
}

void PipelineStrategy::saveState(TensorArchive* archive) {
  if (world_->rank() >= stage_->stages()) return;  // later pipelines hold the same as the first
  if (stage_->stage() != 0) {
    sendArchive(*pipe_, stagePiece(), 0);
    return;
  }
  LOCKSTEP_CHECK(archive != nullptr, "the pipeline strategy: rank 0 writes the checkpoint and needs an archive");
  std::vector<TensorArchive> pieces;
  for (int s = 1; s < stage_->stages(); ++s) {
    pieces.push_back(receiveArchive(*pipe_, s, fmt::format("pipeline stage {}'s checkpoint piece", s)));
  }
  saveOptimizerState(*optimizer_, *archive);
  for (const auto& piece : pieces) mergePiece(piece, *archive);
  saveModelState(*model_, *archive);
}

void PipelineStrategy::loadState(const TensorArchive& archive, bool report) {
  loadModelState(archive, *model_);
  loadOptimizerState(*optimizer_, archive, report);
  for (const auto& group : optimizer_->param_groups()) {
    for (const auto& p : group.params()) {
      if (!owns(p)) optimizer_->state().erase(optimizerStateKey(p));
    }
  }
}

}  // namespace

std::unique_ptr<Strategy> makePipelineStrategy(std::shared_ptr<torch::nn::Module> model,
                                               std::vector<PipelineLayer> layers, std::shared_ptr<Communicator> comm,
                                               PipelineOptions pipeline, OutputLossFn loss, DdpOptions options,
                                               std::unique_ptr<torch::optim::Optimizer> optimizer) {
  return std::make_unique<PipelineStrategy>(std::move(model), std::move(layers), std::move(comm), std::move(pipeline),
                                            std::move(loss), std::move(options), std::move(optimizer));
}

}  // namespace lockstep
