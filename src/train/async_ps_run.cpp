// Trainer::fit with schedule async_ps: servers serve, workers train by ticket (async_ps_run.h).
#include "train/async_ps_run.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "lockstep/comm/archive_transfer.h"
#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/data/loader.h"
#include "lockstep/optim/grad_clip.h"
#include "lockstep/optim/optimizer.h"
#include "lockstep/train/checkpoint.h"
#include "train/async_ps_checkpoint.h"
#include "train/test_slowdown.h"
#include "train/training_state.h"
#include "train/validation.h"

namespace lockstep::detail {

AsyncPsRun::AsyncPsRun(std::shared_ptr<Communicator> comm, const TrainerOptions& options, const LayeredModel& model,
                       const FaultInjection& faults, const Dataset& train, const Dataset* validation)
    : comm_(std::move(comm)), o_(options), faults_(faults), events_(options.callbacks), chain_(model),
      model_(model.model), train_(train), validation_(validation), rank_(comm_->rank()),
      role_(psRole(comm_->rank(), comm_->size(), options.ps)),
      sampler_(SamplerOptions{std::max<int64_t>(train.size(), 1), 0, 1, /*shuffle=*/true, options.seed,
                              /*dropLast=*/false}),
      timer_(events_.origin(), events_.listening(), options.loader.device) {
  checkOptions();
  batchesPerEpoch_ = sampler_.numBatches(o_.batchSize, /*dropLastBatch=*/true);
  if (batchesPerEpoch_ == 0) {
    throw ConfigError(
        fmt::format("the training set has {} samples: too few for one batch of {}; lower trainer.batch_size",
                    train.size(), o_.batchSize));
  }
  // An update is one worker's `accumulation` batches; trainer.max_steps keeps the samples of a
  // synchronous run of that many steps: W updates each.
  updateBatch_ = o_.batchSize * o_.accumulation;
  totalUpdates_ = o_.maxSteps > 0 ? o_.maxSteps * role_.workers : o_.epochs * batchesPerEpoch_ / o_.accumulation;
  if (totalUpdates_ == 0) {
    throw ConfigError(
        fmt::format("the training set has {} batches of {}: too few for one update of {} accumulated; "
                    "lower trainer.accumulation or raise trainer.epochs",
                    batchesPerEpoch_, o_.batchSize, o_.accumulation));
  }
  scaling_ = o_.lrScaling;
  if (scaling_.baseBatch == 0) scaling_.baseBatch = updateBatch_;
  // Every rank builds the run's optimizer, as a synchronous run does: its first group's rate is
  // the one logged; a server steps its type, groups and options over its pieces.
  whole_ = o_.optimizerFactory ? o_.optimizerFactory(model_->parameters())
                               : makeOptimizer(o_.optimizer, model_->parameters());
  LOCKSTEP_CHECK(whole_ != nullptr, "TrainerOptions::optimizerFactory returned no optimizer");
  LOCKSTEP_CHECK(!whole_->param_groups().empty(), "the optimizer has no parameter groups");
  checkOptimizer();
  baseRate_ = whole_->param_groups()[0].options().get_lr();
  lr_ = scaledLearningRate(baseRate_, updateBatch_, scaling_);
  if (!o_.checkpoint.dir.empty()) {
    checkpoints_ = std::make_unique<CheckpointDir>(o_.checkpoint.dir, o_.checkpoint.keepLast);
  }
}

void AsyncPsRun::checkOptions() const {
  LOCKSTEP_CHECK(train_.size() > 0, "the training set is empty");
  const std::string why = "schedule.type async_ps";
  if (o_.pipeline.stages > 1) {
    throw ConfigError(fmt::format("parallel.pipeline {} cannot be combined with {}", o_.pipeline.stages, why));
  }
  if (o_.precision == Precision::kFp16) {
    throw ConfigError(why + " does not scale the loss: precision fp16 needs strategy ddp (bf16 works here)");
  }
}

/// On every rank, before any server is built: the servers cut the optimizer into pieces.
void AsyncPsRun::checkOptimizer() const {
  try {
    optimizerTypeOf(*whole_);
  } catch (const Error&) {
    throw ConfigError(
        "schedule.type async_ps: the parameter servers step torch::optim::SGD, Adam or AdamW over their pieces of "
        "the parameters; TrainerOptions::optimizerFactory built another optimizer");
  }
}

FitResult AsyncPsRun::run() {
  resume();
  announce();
  if (role_.server) {
    serve();
  } else {
    work();
  }
  result_.seconds = std::chrono::duration<double>(trainEnd_ - trainStart_).count();
  model_->train();
  if (o_.validate && validation_) validate();
  gather();
  finish();
  return result_;
}

/// Restores the model on every rank and keeps the optimizer's entries on a server for when its
/// optimizer exists (it cuts its pieces out); the first ticket is the checkpoint's position in
/// batches of the whole set.
void AsyncPsRun::resume() {
  RunMetrics metrics;
  const Position at = resumeTraining(
      o_, checkpoints_.get(), *comm_,
      [&](const TensorArchive& archive, bool /*report*/) {
        if (role_.server) {
          resumedOptimizer_.emplace(archive.label());
          for (const auto& key : archive.keys("optimizer/")) copyArchiveEntry(archive, key, *resumedOptimizer_);
        }
        loadModelState(archive, *model_);
      },
      metrics, /*dataWorld=*/1);
  firstUpdate_ = (at.epoch * batchesPerEpoch_ + at.batchInEpoch) / o_.accumulation;
  result_.resumedFromStep = firstUpdate_;
}

/// The model's buffers when checkpoints are written (worker 0 then sends its own to server 0 with
/// every update); none otherwise, so that nothing is sent that nobody reads.
std::vector<at::Tensor> AsyncPsRun::checkpointedBuffers() const {
  return checkpoints_ ? model_->buffers() : std::vector<at::Tensor>{};
}

/// What every rank passes to its server or worker: the same everywhere.
PsOptions AsyncPsRun::psOptions() const {
  PsOptions ps = o_.ps;
  ps.firstUpdate = firstUpdate_;
  ps.learningRate = [this](int64_t update, double base) { return learningRateOf(update, base); };
  if (checkpoints_) {
    ps.checkpointEvery = o_.checkpoint.every > 0 ? o_.checkpoint.every * role_.workers : updatesPerEpoch();
  }
  return ps;
}

/// Update u's rate for a group of base rate `base`: the rate for one worker's batch, warmed up over
/// lr_scaling.warmup_steps steps of a synchronous run (W updates each, as trainer.max_steps counts
/// them) by the share of its target rate the synchronous run has at that step (under the linear
/// rule: its rate / W).
double AsyncPsRun::learningRateOf(int64_t update, double base) const {
  const double rate = scaledLearningRate(base, updateBatch_, scaling_);
  const int64_t step = update / role_.workers;
  if (step >= scaling_.warmupSteps) return rate;
  const int64_t stepBatch = updateBatch_ * role_.workers;
  const double target = scaledLearningRate(base, stepBatch, scaling_);
  if (target == 0) return rate;
  return rate * (learningRateAt(step, base, stepBatch, scaling_) / target);
}

int64_t AsyncPsRun::updatesPerEpoch() const { return std::max<int64_t>(1, batchesPerEpoch_ / o_.accumulation); }

/// The epoch of the first batch of update `ticket`.
int64_t AsyncPsRun::epochOf(int64_t ticket) const { return ticket * o_.accumulation / batchesPerEpoch_; }

void AsyncPsRun::announce() {
  if (rank_ == 0) {
    log::info(fmt::format(
        "training asynchronously: {} worker(s) and {} parameter server(s) (ranks {}..{}), staleness bound {}; {} "
        "samples, batch {} per update, lr {} per update{}; {} updates ({} per epoch){}; {}",
        role_.workers, role_.servers, role_.workers, role_.workers + role_.servers - 1, o_.ps.staleness, train_.size(),
        o_.accumulation > 1 ? fmt::format("{} x {} accumulated", o_.batchSize, o_.accumulation)
                            : std::to_string(o_.batchSize),
        lr_,
        scaling_.warmupSteps > 0 ? fmt::format(" (warmup {} x {} updates)", scaling_.warmupSteps, role_.workers) : "",
        totalUpdates_, updatesPerEpoch(), firstUpdate_ > 0 ? fmt::format(", from update {}", firstUpdate_ + 1) : "",
        checkpoints_ ? fmt::format("a checkpoint every {} updates and at the end", psOptions().checkpointEvery)
                     : "no checkpoints"));
  }
  FitInfo info;
  info.rank = rank_;
  info.worldSize = comm_->size();
  info.totalSteps = totalUpdates_;
  info.stepsPerEpoch = updatesPerEpoch();
  info.epochs = (totalUpdates_ + updatesPerEpoch() - 1) / updatesPerEpoch();
  info.globalBatch = updateBatch_;
  events_.fitStart(info);
}

void AsyncPsRun::serve() {
  // Server 0 keeps worker 0's buffers in its model, which its checkpoints save. The optimizer built
  // over the model's parameters is the servers' template (whole_ goes to the server here).
  ParameterServer server(
      comm_, psOptions(), model_->parameters(), [this](const std::vector<at::Tensor>&) { return std::move(whole_); },
      checkpointedBuffers());
  if (resumedOptimizer_) {
    server.loadOptimizerState(*resumedOptimizer_, /*report=*/role_.index == 0);
    resumedOptimizer_.reset();  // the rates are the run's: the servers set them before every update
  }
  const PsCheckpointWriter writer{comm_.get(),      role_,          model_.get(), &o_, checkpoints_.get(),
                                  batchesPerEpoch_, o_.accumulation};
  int64_t saved = firstUpdate_;
  server.setCheckpointHook([&](int64_t updates) {
    writer.write(updates, server);
    saved = updates;
  });
  trainStart_ = Clock::now();
  server.serve();
  trainEnd_ = Clock::now();
  if (checkpoints_ && server.updates() != saved) writer.write(server.updates(), server);
  stats_ = server.stats();
  result_.steps = server.updates();
}

void AsyncPsRun::work() {
  PsWorker worker(comm_, psOptions(), model_->parameters(), checkpointedBuffers());
  model_->train();
  trainStart_ = windowStart_ = Clock::now();
  worker.pull();
  int64_t ticket = worker.ticket();
  while (ticket < totalUpdates_) {
    const double loss = trainBatch(ticket);
    if (std::isfinite(loss)) {
      worker.push();
    } else {
      worker.skip();  // trainer.nan_policy: skip (stop threw)
      ++skippedUpdates_;
    }
    timer_.endPhase(Phase::kCommWait);
    timer_.endPhase(Phase::kOptimizer);
    timer_.endStep({});
    const double lr = learningRateOf(ticket, baseRate_);
    events_.stepEnd(timer_.record(), ticket + 1, epochOf(ticket), loss, lr);
    windowLoss_ += loss;
    ++windowSteps_;
    if (worker.pushes() % o_.logEvery == 0) logWindow(ticket, lr);
    ticket = worker.ticket();
  }
  worker.finish();
  trainEnd_ = Clock::now();
  if (windowSteps_ > 0) logWindow(totalUpdates_ - 1, learningRateOf(totalUpdates_ - 1, baseRate_));
  waitSeconds_ = worker.waitSeconds();
}

/// Forward and backward of update `ticket`'s batches (the gradients are left for the push);
/// returns their mean loss.
double AsyncPsRun::trainBatch(int64_t ticket) {
  timer_.beginStep();
  const auto computeStart = Clock::now();
  for (auto& p : model_->parameters()) p.mutable_grad() = at::Tensor();
  double value = 0;
  for (int64_t m = 0; m < o_.accumulation; ++m) {
    const int64_t k = ticket * o_.accumulation + m;  // the run's batch k: batch k mod B of epoch k / B
    const int64_t epoch = k / batchesPerEpoch_;
    if (epoch != samplerEpoch_) {
      sampler_.setEpoch(epoch);
      samplerEpoch_ = epoch;
    }
    Batch batch = onDevice(train_.batch(sampler_.batch(k % batchesPerEpoch_, o_.batchSize), epoch), o_.loader.device);
    timer_.endPhase(Phase::kDataWait);
    at::Tensor loss;
    {
      AutocastGuard amp(o_.precision, o_.loader.device.type());
      loss = chain_.loss(runChain(chain_, batch.inputs), batch);
    }
    loss = loss.to(at::kFloat) / static_cast<double>(o_.accumulation);
    const double part = loss.item<double>();
    if (!std::isfinite(part)) {
      value = nonFiniteLoss(ticket, k, part * static_cast<double>(o_.accumulation));
      break;
    }
    value += part;
    timer_.endPhase(Phase::kForward);
    loss.backward();
    timer_.endPhase(Phase::kBackward);
  }
  if (o_.clipGradNorm > 0) clipGradNorm(gradientsOf(model_->parameters()), o_.clipGradNorm);
  applyTestSlowdown(faults_, rank_, computeStart);
  timer_.endPhase(Phase::kBackward);
  return value;
}

/// Batch k of update `ticket` has a non-finite loss: throws for trainer.nan_policy stop, else
/// returns it so that the update is skipped (the batches after k are not computed).
double AsyncPsRun::nonFiniteLoss(int64_t ticket, int64_t k, double loss) const {
  const std::string what = fmt::format("the loss of update {} (batch {}) is not finite on rank {} (worker {}): {}",
                                       ticket + 1, k + 1, rank_, role_.index, loss);
  if (o_.nanPolicy == NanPolicy::kStop) {
    throw Error(what + "; stopping (trainer.nan_policy: stop), the update was not applied");
  }
  log::warn(what + ": update skipped, the servers count it without a step (trainer.nan_policy: skip)");
  return loss;
}

/// This worker's loss over its window (no collective: the workers do not wait for each other).
void AsyncPsRun::logWindow(int64_t ticket, double lr) {
  const auto now = Clock::now();
  const double seconds = std::chrono::duration<double>(now - windowStart_).count();
  result_.lastTrainLoss = windowLoss_ / static_cast<double>(windowSteps_);
  const double samplesPerSecond = static_cast<double>(windowSteps_ * updateBatch_) / seconds;
  if (rank_ == 0) {
    log::info(fmt::format("update {}/{} epoch {} loss {:.4f} (worker 0) lr {:.3g} {:.0f} samples/s (worker 0)",
                          ticket + 1, totalUpdates_, epochOf(ticket) + 1, result_.lastTrainLoss, lr, samplesPerSecond));
  }
  const double stepSeconds = seconds / static_cast<double>(windowSteps_);
  const int64_t epoch = epochOf(ticket);
  events_.log({ticket + 1, totalUpdates_, epoch, result_.lastTrainLoss, lr, samplesPerSecond, stepSeconds}, now);
  windowLoss_ = 0;
  windowSteps_ = 0;
  windowStart_ = Clock::now();
}

/// The final weights' loss (and accuracy) over the validation set, shared by the workers (collective;
/// the servers take no part of it).
void AsyncPsRun::validate() {
  ValidationSums sums;
  if (!role_.server) {
    sums = sumValidation(*model_, *validation_, role_.index, role_.workers, o_, [this](const Batch& batch) {
      return evaluateOutput(chain_, runChain(chain_, batch.inputs), batch);
    });
  }
  reduceValidation(*comm_, sums, chain_.correct != nullptr, result_);
  events_.validation(totalUpdates_, epochOf(totalUpdates_ - 1), result_.lastValidationLoss,
                     result_.lastValidationAccuracy);
  if (rank_ == 0) log::info(validationLine("final", result_));
}

/// Collective, one allreduce: server 0's staleness histogram and update count, each worker's wait
/// and last train loss, each rank's training seconds (the run's: the longest), each server's
/// largest staleness and the updates the workers skipped.
void AsyncPsRun::gather() {
  const int64_t bins = o_.ps.staleness + 1, workers = role_.workers, world = comm_->size();
  const int64_t wait = bins + 1, loss = wait + workers, seconds = loss + workers, stalest = seconds + world;
  const int64_t skipped = stalest + world;
  at::Tensor all = at::zeros({skipped + 1}, at::kDouble);
  auto* a = all.data_ptr<double>();
  if (role_.server && role_.index == 0) {
    for (size_t g = 0; g < stats_.staleness.size(); ++g) {
      if (stats_.staleness[g] == 0) continue;
      LOCKSTEP_ASSERT(static_cast<int64_t>(g) < bins, "an update of staleness ", g, " passed the bound ", bins - 1);
      a[g] = static_cast<double>(stats_.staleness[g]);
    }
    a[bins] = static_cast<double>(result_.steps);
  }
  if (!role_.server) {
    a[wait + role_.index] = waitSeconds_;
    a[loss + role_.index] = result_.lastTrainLoss;
    a[skipped] = static_cast<double>(skippedUpdates_);
  }
  a[seconds + rank_] = result_.seconds;
  if (role_.server) a[stalest + rank_] = static_cast<double>(stats_.maxStaleness() + 1);  // 0: none applied
  std::vector<at::Tensor> t{all};
  comm_->allreduce(t, ReduceOp::kSum)->wait();
  result_.ps.staleness.assign(a, a + bins);
  result_.steps = static_cast<int64_t>(a[bins]);
  result_.ps.waitSeconds.assign(a + wait, a + loss);
  result_.lastTrainLoss = std::accumulate(a + loss, a + seconds, 0.0) / static_cast<double>(workers);
  result_.seconds = *std::max_element(a + seconds, a + seconds + world);
  result_.ps.maxStaleness = static_cast<int64_t>(*std::max_element(a + stalest, a + stalest + world)) - 1;
  result_.skippedSteps = static_cast<int64_t>(a[skipped]);
}

void AsyncPsRun::finish() {
  result_.worldSize = comm_->size();
  result_.rank = comm_->rank();
  result_.globalBatch = updateBatch_;
  if (result_.seconds > 0) {
    result_.samplesPerSecond = static_cast<double>((result_.steps - firstUpdate_) * updateBatch_) / result_.seconds;
  }
  result_.breakdown = timer_.breakdown(*comm_);
  if (rank_ == 0) {
    std::string histogram;
    for (size_t g = 0; g < result_.ps.staleness.size(); ++g) {
      histogram += fmt::format("{}{}: {}", g == 0 ? "" : ", ", g, result_.ps.staleness[g]);
    }
    std::string waits;
    for (size_t w = 0; w < result_.ps.waitSeconds.size(); ++w) {
      waits += fmt::format("{}{:.1f}", w == 0 ? "" : " / ", result_.ps.waitSeconds[w]);
    }
    log::info(
        fmt::format("done: {} updates in {:.1f} s, {:.0f} samples/s; staleness of the updates (bound {}, largest "
                    "{}): {}; seconds each worker waited for the servers: {}",
                    result_.steps, result_.seconds, result_.samplesPerSecond, o_.ps.staleness, result_.ps.maxStaleness,
                    histogram, waits));
  }
  events_.fitEnd(result_);
}

}  // namespace lockstep::detail
