// lockstep/train/trainer.h — the training loop, the same in one process and under `lockstep run`.
//
//   lockstep::Context ctx = lockstep::init();
//   lockstep::Trainer trainer(ctx.comm, options);
//   trainer.fit(model, lossFn, trainSet, &valSet);
//
// fit() puts the model on the worker's device and hands it to the configured
// Strategy (strategy.h: DDP, ZeRO 1-3, pipeline stages) under the sync schedule,
// or to parameter servers under the async_ps schedule; it shards every epoch with a
// DistributedSampler (seed + epoch), scales the learning rate for the global
// batch, accumulates micro-batches without communication, clips the averaged
// gradients by global norm, validates with the loss averaged over every
// rank's shard, and on rank 0 alone prints progress and writes checkpoints
// (model, optimizer, step, sampler position, RNG state) atomically, keeping
// the last K. A run resumes from a checkpoint bit-identically on CPU.
// Every rank must call fit() with the same options and a dataset of the same size.
//
// Each step is timed in phases (callbacks.h: data wait, forward, backward,
// communication wait, optimizer) at the cost of a few clock reads; callbacks
// in TrainerOptions::callbacks receive every step, log window, validation and
// the result, and FitResult holds the per-step breakdown.
//
// The Trainer leaves the process's CPU allocator alone. lockstep's counting
// allocator, which also reuses freed blocks instead of taking fresh pages from
// the kernel every step, is a process-wide choice a program makes once, early:
// lockstep::trackTensorMemory() (common/tensor_memory.h; `lockstep train`
// makes it). With it, FitResult::memory has the step peaks (stepPeakBytes,
// otherwise -1) and large models step faster.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/comm/communicator.h"
#include "lockstep/common/device.h"
#include "lockstep/data/dataset.h"
#include "lockstep/data/loader.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/nn/precision.h"
#include "lockstep/optim/loss_scaler.h"
#include "lockstep/optim/lr_scaling.h"
#include "lockstep/optim/optimizer.h"
#include "lockstep/pipeline/pipeline.h"
#include "lockstep/ps/parameter_server.h"
#include "lockstep/train/callbacks.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/fault_injection.h"
#include "lockstep/train/strategy.h"

namespace torch::nn {
class Module;
}

namespace lockstep {

struct ElasticTraining;  // elastic.h

/// Where and how often the Trainer writes checkpoints, and which it resumes from.
struct CheckpointOptions {
  std::string dir;    ///< empty: no checkpoints
  int64_t every = 0;  ///< optimizer steps between checkpoints; 0: at the end of each epoch
  int64_t keepLast = 3;
  std::string resume = "auto";  ///< auto (newest whole one in dir), none, or a checkpoint path
  /// Extra entries stored in every checkpoint (e.g. the vocabulary, the config).
  std::vector<std::pair<std::string, std::string>> extras;
};

/// What the Trainer does when a step's loss is NaN or infinite on any rank
/// (decided together: one tiny allreduce per step, so every rank does the same):
/// stop — fit() throws lockstep::Error naming the step and the rank, before the
///        step's update and before any checkpoint of it;
/// skip — the step's update is skipped on every rank (parameters and optimizer
///        state unchanged; buffers a forward pass updated, such as BatchNorm's
///        running statistics, are not rolled back), counted in FitResult::skippedSteps.
enum class NanPolicy { kStop, kSkip };
const char* toString(NanPolicy policy);
/// "stop" or "skip"; ConfigError naming `what` otherwise.
NanPolicy parseNanPolicy(const std::string& text, const std::string& what);

/// How the workers' updates meet (config schedule.type), whatever keeps the models in step:
/// sync — every optimizer step averages every worker's gradients (the Strategy: DDP, ZeRO, pipeline
///        stages), the same weights on every rank after each step;
/// async_ps — asynchronous: the last ps.servers ranks hold the parameters and the optimizer, the
///        other ranks push gradients and pull weights at their own pace, within a staleness bound
///        (ps/parameter_server.h; docs/parameter-server.md lists what it does not combine with).
enum class Schedule { kSync, kAsyncPs };
const char* toString(Schedule schedule);
/// "sync" or "async_ps" (any case); ConfigError naming `what` otherwise.
Schedule parseSchedule(const std::string& text, const std::string& what);

/// Every setting of a run, each in one place: the embedded structs are the
/// ones the loader, the optimizer, the LR schedule and DDP take themselves.
/// `lockstep train` fills this from YAML (config.h; keys in docs/training.md).
struct TrainerOptions {
  int64_t epochs = 1;
  int64_t maxSteps = 0;                    ///< > 0: stop after this many optimizer steps
  int64_t batchSize = 32;                  ///< per worker and micro-batch
  int64_t accumulation = 1;                ///< micro-batches per optimizer step
  double clipGradNorm = 0;                 ///< 0: no clipping
  NanPolicy nanPolicy = NanPolicy::kStop;  ///< a non-finite loss on any rank: stop, or skip the step
  uint64_t seed = 0;
  int64_t logEvery = 50;  ///< optimizer steps between progress lines
  bool validate = true;   ///< validation at the end of every epoch (and of the run)
  /// Non-empty: a directory where every process writes the ids of the samples it trains, step by
  /// step and generation by generation, for `lockstep samples DIR` to audit (docs/elastic.md).
  std::string sampleLog;
  LoaderOptions loader;  ///< worker threads preparing batches ahead of the step (its device: set from `device`)
  /// Where the model, batches and loss live (common/device.h): auto (CUDA when this process
  /// sees a GPU, else the CPU), cpu or cuda. fit() moves the model there.
  DeviceChoice device = DeviceChoice::kAuto;
  /// The worker's local rank, from which resolvePlacement (rendezvous/placement.h) picks its
  /// GPU; -1: from the environment (the launcher's, torchrun's, mpirun's or Slurm's variables).
  int localRank = -1;

  OptimizerOptions optimizer;
  /// When set, builds the optimizer instead of `optimizer` (whose fields are
  /// then unused): any torch::optim::Optimizer, any parameter groups. Each
  /// group's own lr is the base the LR schedule scales. Checkpoints hold its
  /// state when it is SGD, Adam or AdamW (optimizer.h).
  OptimizerFactory optimizerFactory;
  LrScalingOptions lrScaling;
  /// How the ranks keep in step: ddp (whole optimizer per rank), zero1 (optimizer
  /// state sharded), zero2 (and gradients) or zero3 (and parameters; strategy.h).
  /// `ddp` sets their gradient buckets (compression: ddp and zero1 only).
  StrategyType strategy = StrategyType::kDdp;
  /// sync (the strategy's steps) or async_ps (parameter servers; `strategy` unused).
  Schedule schedule = Schedule::kSync;
  /// fp32, bf16 or fp16: the loss function (forward and loss) runs under an
  /// AutocastGuard for the run's device, in training and validation; weights, gradients and
  /// optimizer state stay float32 (nn/precision.h). fp16 scales the loss (optim/loss_scaler.h;
  /// strategy ddp).
  Precision precision = Precision::kFp32;
  LossScalerOptions lossScaler;  ///< precision fp16 only
  SyncOptions ddp;
  /// parallel.*: stages > 1 splits a LayeredModel into pipeline stages on consecutive ranks
  /// (the world is pipelines x stages; pipeline/pipeline.h); trainer.batch_size is then per
  /// pipeline, split into micro-batches. Needs fit(LayeredModel) and strategy ddp.
  PipelineOptions pipeline;
  /// ps.*: the servers and staleness bound of schedule async_ps (ps/parameter_server.h).
  PsOptions ps;
  CheckpointOptions checkpoint;

  /// Called in order, on every rank, from the training thread (callbacks.h).
  std::vector<std::shared_ptr<TrainerCallback>> callbacks;
  /// Set: the run goes on when workers are lost (elastic.h, elasticTraining()).
  std::shared_ptr<const ElasticTraining> elastic;
};

/// One gradient bucket of a data-parallel step as this rank released and
/// communicated it, means over the timed steps (what `lockstep bench predict`
/// builds its model from).
struct BucketProfile {
  int64_t bytes = 0;        ///< float32 gradient bytes
  double readySeconds = 0;  ///< from the start of the step's (last) backward to the bucket's launch
  double commSeconds = 0;   ///< its service: from launch, or the previous bucket's completion if later, to completion
};

/// Where an optimizer step's time went, averaged over the run's timed steps
/// (the first step of the run is excluded, like FitResult::samplesPerSecond).
/// Values are this rank's, except the *Max fields (the maximum over ranks).
struct StepBreakdown {
  int64_t steps = 0;  ///< timed steps averaged; 0: nothing was measured
  /// Mean seconds per step in each Phase (indexed by the enum). The phases
  /// tile the step: they sum to stepSeconds.
  std::array<double, kPhaseCount> phaseSeconds{};
  double stepSeconds = 0;     ///< mean span from the first data wait to the end of the optimizer step
  double stepSecondsMax = 0;  ///< max over ranks of stepSeconds
  /// Communication of the gradient buckets: per step, the union of the
  /// intervals from a bucket's launch to the backend completing it.
  double commSeconds = 0;
  double commExposedSeconds = 0;     ///< = phaseSeconds[kCommWait]: what the step waited for after backward
  double commExposedSecondsMax = 0;  ///< max over ranks of commExposedSeconds
  /// 1 - exposed / total, clamped to [0, 1]: the share of communication
  /// overlapped with backward. -1 without communication (one worker).
  double commHiddenFraction = -1;
  /// Pipeline stages: the share of the pipeline's span this rank's stage was idle (the bubble;
  /// theory with equal stages: (P-1)/(M+P-1)), over the timed steps; -1 without a pipeline.
  double pipelineIdleFraction = -1;
  double pipelineIdleFractionMax = -1;  ///< max over ranks
  /// Min over ranks: the busiest stage's idle share, the bubble that limits the pipeline's throughput
  /// (less loaded stages idle more, waiting for it).
  double pipelineBubble = -1;
  int buckets = 0;                           ///< gradient buckets per step (0 with one worker)
  int64_t bucketBytes = 0;                   ///< float32 gradient bytes allreduced per step
  std::vector<BucketProfile> bucketProfile;  ///< per bucket, in launch order (empty with one worker)

  double phase(Phase p) const { return phaseSeconds[static_cast<size_t>(p)]; }
};

/// What a run of schedule async_ps adds to its FitResult (empty for the sync schedule).
struct PsResult {
  /// The updates applied by staleness (index: staleness; PsStats).
  std::vector<int64_t> staleness;
  /// Each worker's seconds waiting for the servers (its pushes and the bound), in worker order.
  std::vector<double> waitSeconds;
  /// The largest staleness any server applied an update with (every server's, not only the
  /// histogram's bins); -1 when no update was applied.
  int64_t maxStaleness = -1;
};

struct FitResult {
  int64_t steps = 0;            ///< optimizer steps taken in total (resumed ones included)
  int64_t resumedFromStep = 0;  ///< 0 when not resumed
  int64_t skippedSteps = 0;     ///< steps not applied for a non-finite loss (NanPolicy::kSkip), this run
  /// Precision fp16: steps the loss scaler skipped (a gradient not finite on some rank), this
  /// run, and the loss scale at the end; 0 otherwise.
  int64_t overflowSteps = 0;
  double lossScale = 0;
  /// Averaged over ranks, last logging window. A resumed run reports its
  /// checkpoint's last figures until it has newer ones, so a run resumed
  /// after it finished reports what it ended with (-1: never measured).
  double lastTrainLoss = 0;
  double lastValidationLoss = -1;
  double lastValidationAccuracy = -1;  ///< when a CorrectFn was given
  double dataWaitSeconds = 0;          ///< time the loop waited for the loader (rank 0)
  double samplesPerSecond = 0;         ///< global, over this run's steps after the first, to the end of the last one
  double seconds = 0;
  std::string lastCheckpoint;
  int worldSize = 1;
  int rank = 0;             ///< this worker's rank at the end (an elastic run's may differ from its start's)
  int64_t globalBatch = 0;  ///< samples per optimizer step over all ranks
  StepBreakdown breakdown;
  /// Every rank's memory at the end of the run, in rank order (gathered: the
  /// same on every rank). stepPeakBytes needs common/tensor_memory.h tracking.
  std::vector<RankMemory> memory;
  PsResult ps;  ///< schedule async_ps only
  /// An elastic run (TrainerOptions::elastic) of a worker told SIGTERM: the step after which it
  /// left the others (they go on without it), and fit() returned without a final validation,
  /// checkpoint or collective; -1 when it trained to the end.
  int64_t leftAfterStep = -1;
};

class Trainer {
 public:
  Trainer(std::shared_ptr<Communicator> comm, TrainerOptions options);
  /// `train` and `validation` must outlive the call; `correct` (optional) adds accuracy to validation.
  FitResult fit(std::shared_ptr<torch::nn::Module> model, const LossFn& loss, const Dataset& train,
                const Dataset* validation = nullptr, const CorrectFn& correct = nullptr);
  /// The same for a model given as layers; the only form pipeline stages (options().pipeline) take.
  /// Throws ConfigError (naming parallel.*) when the layers cannot be split as asked.
  FitResult fit(const LayeredModel& model, const Dataset& train, const Dataset* validation = nullptr);
  const TrainerOptions& options() const { return options_; }
  /// Tests and benchmarks only: the faults the next fit() calls make (fault_injection.h).
  void injectFaults(const FaultInjection& faults) { faults_ = faults; }

 private:
  std::shared_ptr<Communicator> comm_;
  TrainerOptions options_;
  FaultInjection faults_;
};

}  // namespace lockstep
