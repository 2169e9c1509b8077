// The Trainer's loop. FitRun holds one fit() call's state; each of its
// methods is one part of the loop (a step, a log window, an epoch), and how
// ranks stay in step is the Strategy's business (fit_run.h).
#include "train/fit_run.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "lockstep/common/env.h"
#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/train/elastic.h"
#include "lockstep/train/strategy.h"
#include "train/test_slowdown.h"

namespace lockstep::detail {

namespace {

/// The loop's marks on a micro-batch a Strategy trains, and fp16's loss scaling.
class LoopHooks final : public MicroBatchHooks {
 public:
  LoopHooks(StepTimer& timer, LossScaler* scaler, const FaultInjection& faults, int rank, bool last,
            Clock::time_point computeStart)
      : timer_(timer), scaler_(scaler), faults_(faults), rank_(rank), last_(last), computeStart_(computeStart) {}

  at::Tensor forwardDone(const at::Tensor& loss) override {
    timer_.endPhase(Phase::kForward);
    return scaler_ ? scaler_->scale(loss) : loss;
  }
  void backwardDone() override {
    if (last_) applyTestSlowdown(faults_, rank_, computeStart_);  // a straggler: counted as backward
    timer_.endPhase(Phase::kBackward);
  }
  void pipelineDone(const PipelineTimings& timings) override { timer_.endPipelineBatch(timings); }

 private:
  StepTimer& timer_;
  LossScaler* scaler_;
  const FaultInjection& faults_;
  const int rank_;
  const bool last_;
  const Clock::time_point computeStart_;
};

}  // namespace

FitRun::FitRun(std::shared_ptr<Communicator> comm, const TrainerOptions& options, const LayeredModel& model,
               const FaultInjection& faults, const Dataset& train, const Dataset* validation)
    : commPtr_(std::move(comm)), o_(options), faults_(faults), events_(options.callbacks), layered_(model),
      model_(model.model), withAccuracy_(model.correct != nullptr), train_(train), validation_(validation),
      rank_(commPtr_->rank()), world_(commPtr_->size()), master_(rank_ == 0),
      dataRank_(rank_ / static_cast<int>(options.pipeline.stages)),
      dataWorld_(world_ / static_cast<int>(options.pipeline.stages)),
      newcomer_(options.elastic && options.elastic->newcomer),
      samples_(train, options, dataRank_, options.elastic ? options.elastic->launchWorld : dataWorld_,
               /*elastic=*/options.elastic != nullptr),
      microPerEpoch_(samples_.microPerEpoch()), globalBatch_(samples_.globalBatch()), loader_(train, options.loader),
      timer_(events_.origin(), events_.listening(), options.loader.device), memory_(options.loader.device) {
  stepsPerEpoch_ = microPerEpoch_ / o_.accumulation;
  if (stepsPerEpoch_ == 0) {
    throw ConfigError(
        fmt::format("the training set has {} samples: too few for one step of {} workers x batch {} x "
                    "accumulation {}; lower trainer.batch_size",
                    train.size(), dataWorld_, o_.batchSize, o_.accumulation));
  }
  totalSteps_ = o_.maxSteps > 0 ? o_.maxSteps : o_.epochs * stepsPerEpoch_;
  scaling_ = o_.lrScaling;
  if (scaling_.baseBatch == 0) scaling_.baseBatch = o_.batchSize * o_.accumulation;

  if (o_.elastic) {
    const ElasticTraining& e = *o_.elastic;
    LOCKSTEP_CHECK(e.newcomer || e.rank == rank_, "TrainerOptions::elastic is of rank ", e.rank,
                   ", the communicator's rank is ", rank_);
    members_ = std::make_unique<Membership>(e.store, e.memberId, e.newcomer ? -1 : e.rank, e.membership);
    leaveOnSigterm_.emplace();
    if (!newcomer_) formFirstGeneration();
  }
  strategy_ = buildStrategy(commPtr_);
  if (o_.precision == Precision::kFp16) scaler_ = std::make_unique<LossScaler>(commPtr_, o_.lossScaler);
  if (!o_.checkpoint.dir.empty())
    checkpoints_ = std::make_unique<CheckpointDir>(o_.checkpoint.dir, o_.checkpoint.keepLast);
  if (!o_.sampleLog.empty() && rank_ % static_cast<int>(o_.pipeline.stages) == 0) {
    const SampleLog::Run run{static_cast<int64_t>(train.size()), globalBatch_, stepsPerEpoch_, totalSteps_,
                             o_.accumulation};
    const int64_t attempt = Environment::fromProcess().getInt(env::kRestartCount, 0).value_or(0);
    sampleLog_ = std::make_unique<SampleLog>(o_.sampleLog, run, attempt);
  }
}

/// A strategy over `comm` with a new optimizer; the first one's learning rates are the run's base.
std::unique_ptr<Strategy> FitRun::buildStrategy(std::shared_ptr<Communicator> comm) {
  auto optimizer = o_.optimizerFactory ? o_.optimizerFactory(model_->parameters())
                                       : makeOptimizer(o_.optimizer, model_->parameters());
  LOCKSTEP_CHECK(optimizer != nullptr, "TrainerOptions::optimizerFactory returned no optimizer");
  if (baseLrs_.empty()) {
    for (auto& group : optimizer->param_groups()) baseLrs_.push_back(group.options().get_lr());
  }
  LOCKSTEP_CHECK(!baseLrs_.empty(), "the optimizer has no parameter groups");
  StrategyOptions strategy{o_.strategy, o_.ddp, o_.pipeline, o_.precision, o_.loader.device};
  return makeStrategy(layered_, std::move(comm), std::move(strategy), std::move(optimizer));
}

FitResult FitRun::run() {
  if (newcomer_) {
    if (!joinAsNewcomer()) return result_;
    announce("");
  } else {
    resume();
    if (sampleLog_) sampleLog_->generation(members_ ? members_->generation() : 1, dataRank_, dataWorld_, at_.step);
    announce(strategy_->start());
  }
  model_->train();
  windowStart_ = Clock::now();
  runStart_ = Clock::now();
  for (;;) {
    try {
      if (at_.step >= totalSteps_) break;
      runEpoch();
      if (leaving()) return leave();
      if (growing_) {
        grow();
        continue;
      }
      if (at_.batchInEpoch + o_.accumulation > microPerEpoch_) endEpoch();  // the epoch is complete
    } catch (const CommError& failure) {
      if (!members_) throw;
      if (leaving()) return leave();
      takeUp(failure);
    }
  }
  endRun();
  return result_;
}

/// Where a run starts: the newest checkpoint's step (or 0), and what that checkpoint reported.
void FitRun::resume() {
  detail::RunMetrics metrics;
  at_ = detail::resumeTraining(
      o_, checkpoints_.get(), comm(),
      [this](const TensorArchive& archive, bool report) {
        strategy_->loadState(archive, report);
        if (scaler_ && archive.contains(kLossScaleKey)) {
          scaler_->setState(archive.getDouble(kLossScaleKey), archive.getInt(kLossScaleGrowthKey));
        }
      },
      metrics, batchWorld());
  result_.resumedFromStep = at_.step;
  // A resumed run reports what its checkpoint reported until it has news, and continues the checkpoint's
  // log window when every rank has its part of it. One with nothing left to do reports how it ended.
  regular_ = metrics.regular;
  const auto& reported = at_.step >= totalSteps_ && metrics.final ? *metrics.final : metrics.regular;
  result_.lastTrainLoss = reported.trainLoss;
  result_.lastValidationLoss = reported.validationLoss;
  result_.lastValidationAccuracy = reported.validationAccuracy;
  if (static_cast<int64_t>(metrics.windowLoss.size()) == world_) {
    windowLoss_ = metrics.windowLoss[rank_];
    windowSteps_ = metrics.windowSteps;
  }
}

/// The end of the run (collective): a run that stops inside an epoch is still measured at its end,
/// and checkpointed. In an elastic run a lost worker or a newcomer here makes the next generation
/// do it again.
void FitRun::endRun() {
  for (;;) {
    try {
      if (o_.validate && validation_ && validatedStep_ != at_.step && at_.step > result_.resumedFromStep) {
        validate(fmt::format("step {}", at_.step), at_.epoch);
      }
      if (checkpoints_ && savedStep_ != at_.step) saveCheckpoint();
      result_.seconds = std::chrono::duration<double>(Clock::now() - runStart_).count();
      finish();
      if (members_) members_->finish();
      return;
    } catch (const CommError& failure) {
      if (!members_) throw;
      takeUp(failure);
    }
  }
}

/// Validation and the checkpoint of the epoch whose last step was the last one trained.
void FitRun::endEpoch() {
  at_.epoch += 1;
  at_.batchInEpoch = 0;
  if (o_.validate && validation_) {
    validate(fmt::format("epoch {}", at_.epoch), at_.epoch - 1);
    regular_.validationLoss = result_.lastValidationLoss;
    regular_.validationAccuracy = result_.lastValidationAccuracy;
  }
  // After the validation, so the checkpoint holds it (runEpoch leaves this step's checkpoint to here).
  if (o_.checkpoint.every == 0 || at_.step % o_.checkpoint.every == 0) saveCheckpoint();
}

void FitRun::announce(const std::string& strategy) {
  if (master_) {
    if (o_.precision == Precision::kBf16) {
      // Measured, not read from the CPU's flags: the flags do not say whether LibTorch's bf16 kernels for
      // this CPU are the fast ones or the generic fallback (docs/activations-and-precision.md).
      const std::string warning = bf16SpeedWarning(measureBf16MatmulSlowdown());
      if (!warning.empty()) log::warn(warning);
    }
    log::info(fmt::format(
        "training on {} worker(s) ({} on rank 0): {} samples, per-worker batch {}{}, global batch {}; lr {} scaled to "
        "{} ({} rule, base batch {}){}; {} optimizer steps ({} per epoch); {}{}{}",
        world_, o_.loader.device.str(), train_.size(), o_.batchSize,
        o_.accumulation > 1 ? fmt::format(" x {} accumulated", o_.accumulation) : "", globalBatch_, baseLrs_[0],
        scaledLearningRate(baseLrs_[0], globalBatch_, scaling_), toString(scaling_.rule), scaling_.baseBatch,
        scaling_.warmupSteps > 0 ? fmt::format(", warmup {} steps", scaling_.warmupSteps) : "", totalSteps_,
        stepsPerEpoch_, strategy,
        o_.precision == Precision::kFp32 ? "" : fmt::format("; {} autocast, float32 weights", toString(o_.precision)),
        o_.elastic ? fmt::format("; elastic: goes on with {} or more worker(s) at this global batch",
                                 o_.elastic->membership.minMembers)
                   : ""));
  }
  FitInfo info;
  info.rank = rank_;
  info.worldSize = world_;
  info.totalSteps = totalSteps_;
  info.startStep = at_.step;
  info.stepsPerEpoch = stepsPerEpoch_;
  info.epochs = o_.maxSteps > 0 ? (totalSteps_ + stepsPerEpoch_ - 1) / stepsPerEpoch_ : o_.epochs;
  info.globalBatch = globalBatch_;
  events_.fitStart(info);
}

/// The rest of the current epoch, up to the last step of the run.
void FitRun::runEpoch() {
  samples_.setEpoch(at_.epoch);
  const int64_t stepsLeft = totalSteps_ - at_.step;
  const int64_t last = std::min(microPerEpoch_ - (microPerEpoch_ - at_.batchInEpoch) % o_.accumulation,
                                at_.batchInEpoch + stepsLeft * o_.accumulation);
  std::vector<std::vector<int64_t>> plan;
  microScales_.clear();
  for (int64_t b = at_.batchInEpoch; b < last; ++b) {
    BatchShare share = samples_.micro(b, dataRank_, dataWorld_);
    plan.push_back(std::move(share.indices));
    microScales_.push_back(share.lossScale);
  }
  planStart_ = at_.batchInEpoch;
  loader_.start(std::move(plan), at_.epoch);
  while (at_.batchInEpoch + o_.accumulation <= microPerEpoch_ && at_.step < totalSteps_ && !stopsHere()) {
    const double lr = applyLearningRate();
    std::vector<BucketTiming> messages;
    const double loss = trainStep(messages);
    at_.batchInEpoch += o_.accumulation;
    ++at_.step;
    timer_.endStep(messages);
    timer_.record().devicePeakBytes = memory_.deviceStepPeak();
    events_.stepEnd(timer_.record(), at_.step, at_.epoch, loss, lr);
    windowLoss_ += loss;
    ++windowSteps_;
    ++stepsSinceLog_;
    if (at_.step % o_.logEvery == 0 || at_.step == totalSteps_) logWindow();
    // A step that ends the epoch or the run is checkpointed by run(), after its validation.
    const bool epochEnds = at_.batchInEpoch + o_.accumulation > microPerEpoch_;
    if (o_.checkpoint.every > 0 && at_.step % o_.checkpoint.every == 0 && !epochEnds && at_.step < totalSteps_) {
      saveCheckpoint();
    }
  }
}

/// Sets this step's learning rate on every parameter group; returns the first group's.
double FitRun::applyLearningRate() {
  auto& groups = strategy_->optimizer().param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].options().set_lr(learningRateAt(at_.step, baseLrs_[g], globalBatch_, scaling_));
  }
  return groups[0].options().get_lr();
}

/// One optimizer step over `accumulation` micro-batches; returns this rank's loss and sets
/// `messages` to the step's communication.
double FitRun::trainStep(std::vector<BucketTiming>& messages) {
  // Undefined rather than zeroed (zero_grad(false) fills zeros): autograd then
  // hands its gradient over without a copy, and DDP has no zeros to add into its
  // buckets (80 MB of them per step on a 20M-parameter model).
  for (auto& p : model_->parameters()) p.mutable_grad() = at::Tensor();
  double stepLoss = 0;
  memory_.beginCompute();
  timer_.beginStep();
  const auto computeStart = Clock::now();
  for (int64_t m = 0; m < o_.accumulation; ++m) {
    Batch batch = loader_.next();
    timer_.endPhase(Phase::kDataWait);
    const bool last = m + 1 == o_.accumulation;
    LoopHooks hooks(timer_, scaler_.get(), faults_, rank_, last, computeStart);
    // Before the forward: a step this rank dies in is one of the generation's uncommitted steps.
    if (sampleLog_) {
      sampleLog_->micro(at_.epoch, at_.step + 1, m,
                        samples_.micro(at_.batchInEpoch + m, dataRank_, dataWorld_).indices);
    }
    // The weight of this micro-batch's mean loss (1 / accumulation where every rank's share is equal).
    const double scale = microScales_[static_cast<size_t>(at_.batchInEpoch + m - planStart_)];
    stepLoss += strategy_->trainMicroBatch(batch, scale, /*sync=*/last, hooks);
  }
  memory_.endCompute();
  messages = strategy_->finishGradientSync();
  timer_.endPhase(Phase::kCommWait);
  injectInfGradient();
  // The scaler first, as PyTorch's GradScaler: an infinite fp16 loss makes infinite gradients,
  // an overflow it skips on every rank; nan_policy judges the losses of steps it let through.
  if (unscaleGradients() && agreeLossIsFinite(stepLoss)) strategy_->step(o_.clipGradNorm);
  timer_.endPhase(Phase::kOptimizer);
  if (sampleLog_) sampleLog_->stepDone(at_.step + 1);
  return stepLoss;
}

/// Collective: whether every rank's loss of this step is finite; if not, stops
/// (throws) or skips the update per trainer.nan_policy, naming the rank.
bool FitRun::agreeLossIsFinite(double stepLoss) {
  const bool finite = std::isfinite(stepLoss);
  int culprit = finite ? -1 : rank_;
  if (world_ > 1) {
    std::vector<at::Tensor> flag{at::tensor({static_cast<double>(culprit)}, at::kDouble)};
    comm().allreduce(flag, ReduceOp::kMax)->wait();
    culprit = static_cast<int>(flag[0].item<double>());
  }
  if (culprit < 0) return true;
  const std::string what = fmt::format("the loss of step {} is not finite on rank {}{}", at_.step + 1, culprit,
                                       finite ? std::string() : fmt::format(" ({})", stepLoss));
  if (o_.nanPolicy == NanPolicy::kStop) {
    throw Error(
        fmt::format("{}: stopping (trainer.nan_policy: stop); the step was not applied and no checkpoint "
                    "of it was written{}",
                    what, result_.lastCheckpoint.empty() ? "" : "; the last one is " + result_.lastCheckpoint));
  }
  ++result_.skippedSteps;
  if (master_) log::warn(what + ": step skipped, parameters unchanged (trainer.nan_policy: skip)");
  return false;
}

/// Precision fp16 (collective): divides the gradients by the loss scale and returns whether every
/// rank's are finite; if not, the step is skipped and the scale backs off. Without a scaler: true.
bool FitRun::unscaleGradients() {
  if (!scaler_) return true;
  scaler_->unscale(strategy_->optimizer());
  const bool finite = !scaler_->foundInf();
  const double scale = scaler_->scale();
  scaler_->update();
  result_.lossScale = scaler_->scale();
  if (finite) return true;
  ++result_.overflowSteps;
  if (master_) {
    log::warn(fmt::format("step {}: a gradient is not finite at loss scale {:g}: step skipped, scale now {:g}",
                          at_.step + 1, scale, scaler_->scale()));
  }
  return false;
}

/// FaultInjection::infGradientStep: an inf in this rank's first gradient, once.
void FitRun::injectInfGradient() {
  if (faults_.infGradientStep != at_.step + 1 || faults_.infGradientRank != rank_) return;
  for (auto& p : model_->parameters()) {
    if (!p.grad().defined()) continue;
    c10::NoGradGuard noGrad;
    p.mutable_grad().view(-1)[0] = std::numeric_limits<float>::infinity();
    log::warn(fmt::format("fault injection: an inf in a gradient of step {}", at_.step + 1));
    return;
  }
}

/// The loss of the window averaged over ranks (collective), a progress line, onLog.
void FitRun::logWindow() {
  std::vector<at::Tensor> l{at::tensor({windowLoss_ / static_cast<double>(windowSteps_)}, at::kDouble)};
  comm().allreduce(l, ReduceOp::kAvg)->wait();
  result_.lastTrainLoss = l[0].item<double>();
  // A line cut short by the end of the run is not regular: the window goes on in the checkpoint.
  const bool regular = at_.step % o_.logEvery == 0;
  if (regular) regular_.trainLoss = result_.lastTrainLoss;
  const auto now = Clock::now();
  const double seconds = std::chrono::duration<double>(now - windowStart_).count();
  const double samplesPerSecond = static_cast<double>(stepsSinceLog_ * globalBatch_) / seconds;
  const double lr = strategy_->optimizer().param_groups()[0].options().get_lr();
  if (master_) {
    log::info(fmt::format("step {}/{} epoch {} loss {:.4f} lr {:.3g} {:.0f} samples/s", at_.step, totalSteps_,
                          at_.epoch + 1, result_.lastTrainLoss, lr, samplesPerSecond));
  }
  const double stepSeconds = seconds / static_cast<double>(stepsSinceLog_);
  events_.log({at_.step, totalSteps_, at_.epoch, result_.lastTrainLoss, lr, samplesPerSecond, stepSeconds}, now);
  if (regular) {
    windowLoss_ = 0;
    windowSteps_ = 0;
  }
  stepsSinceLog_ = 0;
  windowStart_ = Clock::now();
}

}  // namespace lockstep::detail
