// What a fit() run reports and keeps: validation, the log window, checkpoints,
// each rank's memory, the closing summary (the loop is trainer.cpp).
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <signal.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <fmt/format.h>

#include <iterator>
#include <optional>

#include "lockstep/common/logging.h"
#include "lockstep/common/tensor_memory.h"
#include "train/fit_run.h"
#include "train/validation.h"

namespace lockstep::detail {

std::vector<std::vector<int64_t>> validationPlan(int64_t size, int rank, int world, int64_t batchSize) {
  std::vector<std::vector<int64_t>> plan;
  for (int64_t i = rank; i < size; i += world) {
    if (plan.empty() || static_cast<int64_t>(plan.back().size()) == batchSize) plan.emplace_back();
    plan.back().push_back(i);
  }
  return plan;
}

ValidationSums sumValidation(torch::nn::Module& model, const Dataset& data, int rank, int world,
                             const TrainerOptions& o, const std::function<Evaluation(const Batch&)>& evaluate) {
  c10::NoGradGuard noGrad;
  model.eval();
  auto plan = validationPlan(data.size(), rank, world, o.batchSize);
  DataLoader loader(data, o.loader);
  const size_t batches = plan.size();
  loader.start(std::move(plan), 0);
  ValidationSums sums;
  AutocastGuard amp(o.precision,
                    o.loader.device.type());  // one scope: the weights' bf16 copies are cast once for every batch
  for (size_t k = 0; k < batches; ++k) {
    const Batch batch = loader.next();
    sums.add(evaluate(batch), batch);
  }
  model.train();
  return sums;
}

Evaluation evaluateOutput(const LayeredModel& model, const at::Tensor& output, const Batch& batch) {
  Evaluation e;
  e.computed = true;
  e.meanLoss = model.loss(output, batch).item<double>();  // before `correct`: the model runs in a fixed order
  e.correct = model.correct ? model.correct(output, batch) : 0;
  return e;
}

void reduceValidation(Communicator& comm, const ValidationSums& sums, bool withAccuracy, FitResult& result) {
  std::vector<at::Tensor> totals{at::tensor({sums.loss, sums.rows, sums.right}, at::kDouble)};
  comm.allreduce(totals, ReduceOp::kSum)->wait();
  const double total = totals[0][1].item<double>();
  result.lastValidationLoss = total > 0 ? totals[0][0].item<double>() / total : -1;
  if (withAccuracy && total > 0) result.lastValidationAccuracy = totals[0][2].item<double>() / total;
}

std::string validationLine(const std::string& when, const FitResult& result) {
  std::string accuracy =
      result.lastValidationAccuracy >= 0 ? fmt::format(", accuracy {:.2f}%", 100 * result.lastValidationAccuracy) : "";
  return fmt::format("{} validation loss {:.4f}{}", when, result.lastValidationLoss, accuracy);
}

void FitRun::validate(const std::string& when, int64_t ofEpoch) {
  const ValidationSums sums = sumValidation(*model_, *validation_, dataRank_, dataWorld_, o_,
                                            [this](const Batch& batch) { return strategy_->evaluate(batch); });
  reduceValidation(comm(), sums, withAccuracy_, result_);
  validatedStep_ = at_.step;
  events_.validation(at_.step, ofEpoch, result_.lastValidationLoss, result_.lastValidationAccuracy);
  if (master_) log::info(validationLine(when, result_));
}

void FitRun::saveCheckpoint() {
  if (!checkpoints_) return;
  savedStep_ = at_.step;
  detail::RunMetrics metrics{regular_, std::nullopt, windowSteps_, gatherLogWindow()};
  if (at_.step == totalSteps_) {
    metrics.final = {result_.lastTrainLoss, result_.lastValidationLoss, result_.lastValidationAccuracy};
  }
  const std::string rss = memory_.whileSaving([&] {
    std::optional<TensorArchive> archive;
    if (master_) archive.emplace();
    strategy_->saveState(archive ? &*archive : nullptr);
    if (master_) {
      detail::putTrainingMeta(*archive, at_, batchWorld(), o_, metrics);
      if (scaler_) {
        archive->putDouble(kLossScaleKey, scaler_->scale());
        archive->putInt(kLossScaleGrowthKey, scaler_->growthTracker());
      }
      result_.lastCheckpoint = checkpoints_->save(at_.step, *archive);
    }
  });
  if (master_) log::info(fmt::format("checkpoint {} written (step {}){}", result_.lastCheckpoint, at_.step, rss));
  if (faults_.crashAfterStep > 0 && at_.step == faults_.crashAfterStep) {
    // Every rank gets here; the barrier keeps the others alive until rank 0
    // wrote the file (a rank killed first would make the launcher stop rank 0 mid-write).
    comm().barrier()->wait();
    log::warn(fmt::format("fault injection: killing this worker after step {}", at_.step));
    ::raise(SIGKILL);
  }
}

/// Every rank's loss summed over the current log window, in rank order (collective; exact: a sum of zeros and one
/// value).
std::vector<double> FitRun::gatherLogWindow() {
  at::Tensor all = at::zeros({world_}, at::kDouble);
  all[rank_] = windowLoss_;
  if (world_ > 1) {
    std::vector<at::Tensor> t{all};
    comm().allreduce(t, ReduceOp::kSum)->wait();
  }
  return std::vector<double>(all.data_ptr<double>(), all.data_ptr<double>() + world_);
}

void FitRun::finish() {
  result_.steps = at_.step;
  result_.worldSize = world_;
  result_.rank = rank_;
  result_.globalBatch = globalBatch_;
  result_.dataWaitSeconds = loader_.waitSeconds();
  if (timer_.timedSteps() > 0) {
    // From the end of the first step to the end of the last: the final
    // validation and checkpoint are not training throughput.
    result_.samplesPerSecond = static_cast<double>(timer_.timedSteps() * globalBatch_) / timer_.timedSeconds();
  }
  result_.breakdown = timer_.breakdown(comm());
  result_.memory = memory_.gather(comm(), strategy_->memory(), master_);
  strategy_->end();
  const StepBreakdown& b = result_.breakdown;
  if (master_) {
    log::info(
        fmt::format("done: {} steps in {:.1f} s, {:.0f} samples/s (global, after the first step), {:.1f} s "
                    "waiting for data",
                    at_.step, result_.seconds, result_.samplesPerSecond, result_.dataWaitSeconds));
    if (b.steps > 0) {
      std::string commText = b.commHiddenFraction >= 0
                                 ? fmt::format("; allreduce {:.1f} ms per step, {:.0f}% hidden behind backward",
                                               1e3 * b.commSeconds, 100 * b.commHiddenFraction)
                                 : "";
      log::info(
          fmt::format("per step (rank 0, mean of {}): {:.1f} ms = data wait {:.1f} + forward {:.1f} + backward "
                      "{:.1f} + comm wait {:.1f} + optimizer {:.1f}{}",
                      b.steps, 1e3 * b.stepSeconds, 1e3 * b.phase(Phase::kDataWait), 1e3 * b.phase(Phase::kForward),
                      1e3 * b.phase(Phase::kBackward), 1e3 * b.phase(Phase::kCommWait),
                      1e3 * b.phase(Phase::kOptimizer), commText));
    }
    if (b.pipelineIdleFraction >= 0) {
      const double p = static_cast<double>(o_.pipeline.stages);
      const double m = static_cast<double>(o_.pipeline.microbatchesOrDefault());
      log::info(
          fmt::format("pipeline bubble: the busiest stage idle {:.1f}% of its pipeline time (equal stages in theory: "
                      "(P-1)/(M+P-1) = {:.1f}%); rank 0's stage {:.1f}%, the most idle rank's {:.1f}%",
                      100 * b.pipelineBubble, 100 * (p - 1) / (m + p - 1), 100 * b.pipelineIdleFraction,
                      100 * b.pipelineIdleFractionMax));
    }
  }
  events_.fitEnd(result_);
}

}  // namespace lockstep::detail
