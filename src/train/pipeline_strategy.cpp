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
#include "train/strategies.h"
#include "train/synced_strategy.h"
#include "train/validation.h"

namespace lockstep {

namespace {

/// A tensor by the address of its TensorImpl, shared by every view of the same parameter.
using TensorIdentity = const void*;

class PipelineStrategy final : public detail::SyncedStrategy {
 public:
  /// The stage moves its layers to `options.device` and runs them under `options.precision`.
  PipelineStrategy(LayeredModel model, std::shared_ptr<Communicator> comm, const StrategyOptions& options,
                   std::unique_ptr<torch::optim::Optimizer> optimizer)
      : SyncedStrategy(*optimizer, std::move(model), options), world_(std::move(comm)), options_(options.sync),
        pipeline_(stageOptions(options)), optimizer_(std::move(optimizer)) {
    const PipelineOptions& pipeline = pipeline_;
    std::vector<Layer> layers = model_.layers;
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

  std::string start() override {
    if (data_) {
      ddp_ = std::make_unique<DistributedDataParallel>(holder_, data_, options_);
      stage_->setDataParallel(ddp_.get());
    }
    return describe();
  }

  /// The stage's schedule over the micro-batch's parts; the loss is the same on every stage.
  double trainMicroBatch(const Batch& batch, double scale, bool sync, MicroBatchHooks& hooks) override {
    double loss = 0;
    runSynced(sync, [&] { loss = stage_->trainBatch(batch, model_.loss, scale); });
    activationPeak_ = std::max(activationPeak_, stage_->lastTimings().peakStoredBytes);
    hooks.pipelineDone(stage_->lastTimings());
    return loss * scale;
  }

  /// Computed on the last stage, which holds the model's output.
  Evaluation evaluate(const Batch& batch) override {
    const at::Tensor out = stage_->forward(batch);
    return out.defined() ? detail::evaluateOutput(model_, out, batch) : Evaluation{};
  }

  /// Clipping by the norm over every stage's gradients (one allreduce over the pipeline).
  void step(double clipGradNorm) override {
    if (clipGradNorm > 0) lockstep::clipGradNorm(gradientsOf(stage_->parameters()), clipGradNorm, pipe_.get());
    optimizer_->step();
  }

  std::string describe() const {
    const int64_t elements = detail::elementsOf(stage_->parameters());
    std::string text = fmt::format(
        "pipeline of {} stages x {} micro-batches ({}), balance [{}]; this rank: stage {} of pipeline {}, layers "
        "{}..{}, {} parameters",
        stage_->stages(), stage_->microbatches(), toString(pipeline_.schedule), fmt::join(stage_->balance(), ", "),
        stage_->stage(), world_->rank() / stage_->stages(), stage_->firstLayer(), stage_->endLayer() - 1, elements);
    if (ddp_) {
      text += fmt::format("; {} pipelines, each stage's gradients averaged by DDP ({} bucket(s), {})", pipelines_,
                          ddp_->numBuckets(), detail::compressionWords(options_.compression));
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

  static PipelineOptions stageOptions(const StrategyOptions& options) {
    PipelineOptions pipeline = options.pipeline;
    pipeline.precision = options.precision;
    pipeline.device = options.device;
    return pipeline;
  }

  std::shared_ptr<Communicator> world_, pipe_, data_;
  SyncOptions options_;
  PipelineOptions pipeline_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<PipelineStage> stage_;
  std::shared_ptr<torch::nn::Module> holder_;  // this stage's modules, for DDP
  std::unique_ptr<DistributedDataParallel> ddp_;
  int pipelines_ = 1;
  int64_t activationPeak_ = -1;
  std::set<TensorIdentity> owned_, ownedBuffers_;

  GradientSync* gradientSync() const override { return ddp_.get(); }
};

/// This stage's model tensors and optimizer state, under the unsplit model's keys.
TensorArchive PipelineStrategy::stagePiece() {
  TensorArchive piece("pipeline stage");
  for (const auto& [key, tensor] : modelEntries(*model_.model)) {
    if (owns(tensor)) piece.putTensor(key, tensor);
  }
  saveOptimizerState(*optimizer_, piece);  // state exists for this stage's parameters only
  return piece;
}

/// Rank 0: a later stage's piece into the checkpoint and into rank 0's copy of the model.
void PipelineStrategy::mergePiece(const TensorArchive& piece, TensorArchive& archive) {
  c10::NoGradGuard noGrad;
  std::map<std::string, at::Tensor> tensors;
  for (auto& [key, tensor] : modelEntries(*model_.model)) tensors.emplace(std::move(key), std::move(tensor));
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
  saveModelState(*model_.model, *archive);
}

void PipelineStrategy::loadState(const TensorArchive& archive, bool report) {
  loadModelState(archive, *model_.model);
  loadOptimizerState(*optimizer_, archive, report);
  for (const auto& group : optimizer_->param_groups()) {
    for (const auto& p : group.params()) {
      if (!owns(p)) optimizer_->state().erase(optimizerStateKey(p));
    }
  }
}

}  // namespace

std::unique_ptr<Strategy> detail::makePipelineStrategy(LayeredModel model, std::shared_ptr<Communicator> comm,
                                                       const StrategyOptions& options,
                                                       std::unique_ptr<torch::optim::Optimizer> optimizer) {
  return std::make_unique<PipelineStrategy>(std::move(model), std::move(comm), options, std::move(optimizer));
}

}  // namespace lockstep
