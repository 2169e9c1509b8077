// lockstep/train/strategy.h — how the Trainer keeps the ranks' models in step.
//
// A Strategy owns the optimizer and decides how gradients (and, for sharded
// strategies, optimizer state and parameters) are synchronised between the
// ranks. The Trainer's loop calls, for every optimizer step:
//
//   for each micro-batch m:  loss = lossFn(model, batch); strategy.backward(loss, m is the last)
//   strategy.finishGradientSync();     // the step's "comm wait" phase
//   strategy.step(clipGradNorm);       // the "optimizer" phase
//
// and around the loop: saveState/loadState for checkpoints, start() once
// after a resume restored the state. The implementations: data parallelism
// (ddp), sharded optimizer state (zero1), sharded gradients (zero2), sharded
// parameters (zero3) and pipeline stages (with ddp across pipelines); the
// asynchronous parameter server (async_ps) runs a loop of its own and is not
// a Strategy object.
//
// All methods are called from the training thread, on every rank, in the same
// order; start(), finishGradientSync(), step() and saveState() may be collective.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lockstep/comm/communicator.h"
#include "lockstep/ddp/distributed_data_parallel.h"
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

class Strategy {
 public:
  virtual ~Strategy() = default;

  /// Collective, once, after loadState (if any) and before the first step:
  /// brings every rank to the same state (DDP: checks and broadcasts rank 0's model).
  virtual void start() = 0;
  virtual torch::optim::Optimizer& optimizer() = 0;
  /// Backpropagates one micro-batch's loss. `sync` is false for all but the
  /// last micro-batch of an optimizer step (gradients only accumulate locally).
  virtual void backward(const at::Tensor& loss, bool sync) = 0;
  /// Returns when every gradient of the step is synchronised.
  virtual void finishGradientSync() = 0;
  /// Clips the gradients by global norm (when clipGradNorm > 0) and steps the optimizer.
  virtual void step(double clipGradNorm) = 0;
  /// The communication of the last synchronised step, one entry per message
  /// in launch order (the Trainer's step breakdown and timeline); empty when none.
  virtual const std::vector<BucketTiming>& lastSyncTimings() const = 0;
  /// One line for the start-of-training log ("DDP 2 bucket(s), no compression").
  virtual std::string describe() const = 0;
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

  /// Strategies that run the model themselves (pipeline stages) return true:
  /// the Trainer then hands each micro-batch to trainBatch() instead of calling
  /// its loss function and backward(), and validates through evaluate().
  virtual bool runsTheModel() const { return false; }
  /// Forward and backward of `batch`; gradients as for `scale` x its mean loss;
  /// `sync` as for backward(). Returns the batch's loss, the same on the ranks of a pipeline.
  virtual double trainBatch(const Batch& batch, double scale, bool sync);
  /// The model's output for `batch` without autograd on the ranks that hold it
  /// (a pipeline's last stage), an undefined tensor on the others.
  virtual at::Tensor evaluate(const Batch& batch);
  /// The pipeline's timings of the last trainBatch(); null for strategies without stages.
  virtual const PipelineTimings* pipelineTimings() const { return nullptr; }
};

/// The strategies the Trainer builds by name (config `strategy.type`):
/// ddp — every rank holds the whole model and optimizer;
/// zero1 — as ddp, but each rank keeps optimizer state only for its shard of
///         the parameters and broadcasts what it updated (ZeRO stage 1,
///         optim/sharded_optimizer.h): parameters equal ddp's bit for bit;
/// zero2 — also the gradients: buckets are reduce-scattered and each rank
///         keeps and updates only its part of them, then the parameters are
///         all-gathered (ZeRO stage 2, ddp/sharded_data_parallel.h);
/// zero3 — also the parameters: each rank keeps 1/N of them and a unit (a layer of a
///         LayeredModel, else the whole model) is gathered around its forward and its
///         backward (ZeRO stage 3, ddp/fully_sharded_data_parallel.h); built by the Trainer only;
/// async_ps — asynchronous: the last ps.servers ranks hold the parameters and the optimizer, the
///         other ranks push gradients and get weights back at their own pace, within a staleness
///         bound (ps/parameter_server.h). Not a Strategy object: Trainer::fit runs its own loop.
enum class StrategyType { kDdp, kZero1, kZero2, kZero3, kAsyncPs };
const char* toString(StrategyType type);
/// "ddp", "zero1", "zero2", "zero3" or "async_ps" (any case); ConfigError naming `what` and them otherwise.
StrategyType parseStrategyType(const std::string& text, const std::string& what);

/// Pipeline stages (config parallel.pipeline > 1): the world is pipelines x
/// stages, rank r is stage r % P of pipeline r / P; each stage's gradients are
/// averaged over the pipelines with DistributedDataParallel (2-D parallelism).
/// `optimizer` is over all of `model`'s parameters and steps those of this
/// rank's stage; `loss` is computed on the last stage. Collective (it splits `comm` into groups).
std::unique_ptr<Strategy> makePipelineStrategy(std::shared_ptr<torch::nn::Module> model,
                                               std::vector<PipelineLayer> layers, std::shared_ptr<Communicator> comm,
                                               PipelineOptions pipeline, OutputLossFn loss, DdpOptions options,
                                               std::unique_ptr<torch::optim::Optimizer> optimizer);

/// The strategy `type` over `model`; `optimizer` is over all of `model`'s
/// parameters. All average gradients in buckets overlapped with backward
/// (ddp/distributed_data_parallel.h). Collective for zero2 (its construction
/// broadcasts rank 0's model).
std::unique_ptr<Strategy> makeStrategy(StrategyType type, std::shared_ptr<torch::nn::Module> model,
                                       std::shared_ptr<Communicator> comm, DdpOptions options,
                                       std::unique_ptr<torch::optim::Optimizer> optimizer);

}  // namespace lockstep
