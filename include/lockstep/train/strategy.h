// lockstep/train/strategy.h — how the Trainer keeps the ranks' models in step.
//
// A Strategy owns the optimizer and trains the model it was built over: it runs
// each micro-batch (forward, loss, backward), decides how gradients (and, for
// sharded strategies, optimizer state and parameters) are synchronised between
// the ranks, and steps the optimizer. The Trainer's loop calls, for every
// optimizer step:
//
//   for each micro-batch m:  loss += strategy.trainMicroBatch(batch, 1 / M, m is the last, hooks)
//   strategy.finishGradientSync();     // the step's "comm wait" phase
//   strategy.step(clipGradNorm);       // the "optimizer" phase
//
// and around the loop: saveState/loadState for checkpoints, start() once
// after a resume restored the state, evaluate() for validation, end() once at
// the end. The implementations: data parallelism (ddp), sharded optimizer
// state (zero1), sharded gradients (zero2), sharded parameters (zero3) and
// pipeline stages (with ddp across pipelines). The asynchronous parameter
// server (async_ps) is a schedule of its own, not a Strategy object.
//
// All methods are called from the training thread, on every rank, in the same
// order; start(), trainMicroBatch(), evaluate(), finishGradientSync(), step(),
// saveState() and end() may be collective.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>

#include "lockstep/comm/communicator.h"
#include "lockstep/data/dataset.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/nn/layer.h"
#include "lockstep/nn/precision.h"
#include "lockstep/pipeline/pipeline.h"

namespace at {
class Tensor;
}
namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace lockstep {

class TensorArchive;

/// What one rank holds for training, in bytes (FitResult::memory, `lockstep bench memory`).
struct RankMemory {
  int rank = 0;
  int64_t parameterBytes = 0;   ///< the model's parameters held by this rank
  int64_t gradientBytes = 0;    ///< .grad tensors of those parameters, after the last step
  int64_t optimizerBytes = 0;   ///< optimizer state tensors
  int64_t commBufferBytes = 0;  ///< the strategy's own communication buffers (DDP's gradient buckets)
  /// Max over the run's steps of the tensor bytes allocated above the step's
  /// start during forward and backward (activations, temporaries, the new
  /// gradients); -1 unless common/tensor_memory.h tracking is on.
  int64_t stepPeakBytes = -1;
  int64_t peakRssBytes = 0;  ///< the process's peak resident set (VmHWM) at the end; 0 unknown
  /// Pipeline stages: the most activation bytes stored for backward at once over the run's steps
  /// (PipelineTimings::peakStoredBytes); -1 otherwise or untracked.
  int64_t activationPeakBytes = -1;
  int64_t modelStateBytes() const { return parameterBytes + gradientBytes + optimizerBytes; }
};

/// Returns the mean loss of the batch (the Trainer backpropagates it).
using LossFn = std::function<at::Tensor(torch::nn::Module& model, const Batch& batch)>;
/// Returns how many samples of the batch the model gets right (validation accuracy).
using CorrectFn = std::function<int64_t(torch::nn::Module& model, const Batch& batch)>;
/// Returns how many samples of the batch a model's `output` gets right (LayeredModel).
using OutputCorrectFn = std::function<int64_t(const at::Tensor& output, const Batch& batch)>;

/// The model a Strategy trains: a chain of layers, y = ln(...l1(l0(x))) on the batch's inputs, with
/// the loss (and accuracy) on the chain's output. Pipeline stages split the chain, ZeRO-3 gathers
/// one layer's parameters at a time. A module given whole with its own loss function is the chain
/// of one link (wholeModel()): `layers` is empty, the chain's output is the batch's inputs and the
/// loss runs the module; ZeRO-3 gathers it as one unit and pipeline stages refuse it.
struct LayeredModel {
  std::shared_ptr<torch::nn::Module> model;  ///< owns every layer's modules; names the checkpoint's tensors
  std::vector<Layer> layers;
  OutputLossFn loss;
  OutputCorrectFn correct;  ///< null: no accuracy
};
/// `module` with its loss (and accuracy) functions as a LayeredModel of one link.
LayeredModel wholeModel(std::shared_ptr<torch::nn::Module> module, LossFn loss, CorrectFn correct = nullptr);
/// The chain's output for `inputs` (the inputs themselves when `model` has no layers).
at::Tensor runChain(const LayeredModel& model, const at::Tensor& inputs);

/// What the loop sees of a micro-batch while a Strategy trains it: the step breakdown's marks and
/// precision fp16's loss scaling. The defaults do nothing and leave the loss as it is.
class MicroBatchHooks {
 public:
  virtual ~MicroBatchHooks() = default;
  /// Forward and loss are done; returns the loss backward starts from (fp16: scaled).
  virtual at::Tensor forwardDone(const at::Tensor& loss);
  /// Backward is done.
  virtual void backwardDone() {}
  /// A pipeline stage ran its schedule over the micro-batch (forward and backward together).
  virtual void pipelineDone(const PipelineTimings& /*timings*/) {}
};

/// A validation batch as one rank's model answered it (Strategy::evaluate).
struct Evaluation {
  bool computed = false;  ///< false on ranks without the model's output (a pipeline's earlier stages)
  double meanLoss = 0;    ///< the batch's mean loss
  int64_t correct = 0;    ///< right answers (0 when the model has no accuracy function)
};

class Strategy {
 public:
  virtual ~Strategy() = default;

  /// Collective, once, after loadState (if any) and before the first step: brings every rank to
  /// the same state (DDP: checks and broadcasts rank 0's model). Returns one line for the
  /// start-of-training log ("DDP 2 bucket(s), no compression").
  virtual std::string start() = 0;
  /// Forward, loss and backward of one micro-batch, gradients as for `scale` x its mean loss;
  /// `sync` is false for all but the last micro-batch of an optimizer step (gradients then only
  /// accumulate locally). Returns `scale` x the mean loss, the same on the ranks of a pipeline.
  /// `hooks` hears of each phase as it ends (the step breakdown) and may scale the loss (fp16).
  virtual double trainMicroBatch(const Batch& batch, double scale, bool sync, MicroBatchHooks& hooks) = 0;
  /// The model's loss and right answers for `batch`; the caller has turned autograd off.
  virtual Evaluation evaluate(const Batch& batch) = 0;
  /// Returns when every gradient of the step is synchronised, with the step's communication, one
  /// entry per message in launch order (the step breakdown and timeline); empty when none.
  virtual std::vector<BucketTiming> finishGradientSync() = 0;
  /// Clips the gradients by global norm (when clipGradNorm > 0) and steps the optimizer.
  virtual void step(double clipGradNorm) = 0;
  /// Writes the model and optimizer entries of a checkpoint. Collective: every
  /// rank calls it; `archive` is null on ranks that do not write the file.
  virtual void saveState(TensorArchive* archive) = 0;
  /// Restores what saveState wrote, checking it all before changing anything.
  /// `report`: log warnings (rank 0). Throws CheckpointError.
  virtual void loadState(const TensorArchive& archive, bool report) = 0;
  /// This rank's parameter, gradient, optimizer and buffer bytes now, counted
  /// from the tensors (the other RankMemory fields are the Trainer's).
  virtual RankMemory memory() const = 0;
  /// Collective, once after the last step and the memory report: leaves the trained model whole
  /// in the module on every rank (zero3 puts its gathered parameters back). Default: nothing.
  virtual void end() {}

  /// The optimizer the strategy steps (the loop sets its learning rates; fp16 unscales its gradients).
  torch::optim::Optimizer& optimizer() const { return *optimizer_; }

 protected:
  /// `optimizer`: the one the strategy steps, owned by the implementation, alive as long as it.
  explicit Strategy(torch::optim::Optimizer& optimizer) : optimizer_(&optimizer) {}

 private:
  torch::optim::Optimizer* optimizer_;
};

/// The strategies the Trainer builds by name (config `strategy.type`):
/// ddp — every rank holds the whole model and optimizer;
/// zero1 — as ddp, but each rank keeps optimizer state only for its shard of
///         the parameters and sends the other ranks what it updated (ZeRO
///         stage 1, optim/sharded_optimizer.h): parameters equal ddp's bit for bit;
/// zero2 — also the gradients: buckets are reduce-scattered and each rank
///         keeps and updates only its part of them, then the parameters are
///         all-gathered (ZeRO stage 2, ddp/sharded_data_parallel.h);
/// zero3 — also the parameters: each rank keeps 1/N of them and a unit (a layer of the
///         LayeredModel, or the whole module when it has no layers) is gathered around its forward
///         and its backward (ZeRO stage 3, ddp/fully_sharded_data_parallel.h).
/// The asynchronous parameter server is a schedule, not a strategy (TrainerOptions::schedule).
enum class StrategyType { kDdp, kZero1, kZero2, kZero3 };
const char* toString(StrategyType type);
/// "ddp", "zero1", "zero2" or "zero3" (any case); ConfigError naming `what` and them otherwise.
StrategyType parseStrategyType(const std::string& text, const std::string& what);

/// How the Trainer builds a Strategy (TrainerOptions holds each field under its own name).
struct StrategyOptions {
  /// ddp, zero1, zero2 or zero3. With pipeline stages: ddp, across pipelines.
  StrategyType type = StrategyType::kDdp;
  SyncOptions sync;  ///< how gradients are averaged: buckets, compression, overlap
  /// stages > 1: pipeline stages on consecutive ranks; the world is pipelines x stages, rank r is
  /// stage r % P of pipeline r / P, each stage's gradients averaged over the pipelines (2-D).
  PipelineOptions pipeline;
  Precision precision = Precision::kFp32;  ///< autocast around forward and loss
  c10::Device device = c10::kCPU;          ///< where the model's parameters and the batches are
};

/// The strategy `options` describe over `model`; `optimizer` is over all of `model.model`'s
/// parameters. Collective: every rank builds it at the same point (zero2 and zero3 broadcast
/// rank 0's model, pipeline stages split `comm` into groups). ConfigError for a combination it
/// cannot run (a sharded strategy with pipeline stages, fp16 with anything but ddp without
/// pipeline stages).
std::unique_ptr<Strategy> makeStrategy(LayeredModel model, std::shared_ptr<Communicator> comm, StrategyOptions options,
                                       std::unique_ptr<torch::optim::Optimizer> optimizer);

/// Collective: `strategy`'s state (its model and optimizer entries, as a checkpoint holds them) in
/// memory on every rank of `comm`, the communicator it was built over. A strategy built anew from
/// the same model and options, over another communicator of the same size, continues bit for bit:
///
///   TensorArchive state = strategyState(*strategy, *comm);
///   strategy->end();    // ZeRO-3 puts the model back together first
///   strategy = makeStrategy(model, newComm, options, newOptimizer);
///   strategy->loadState(state, false);
///   strategy->start();
TensorArchive strategyState(Strategy& strategy, Communicator& comm);

}  // namespace lockstep
