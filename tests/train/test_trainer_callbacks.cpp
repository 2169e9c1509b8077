// Trainer callbacks and the step breakdown: what an observer of fit() sees on
// one worker and on two (threads over an in-memory store), checked against the
// run's own structure (steps, phases, buckets, log and validation points).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "lockstep/models/char_lstm.h"
#include "lockstep/train/trainer.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

/// Keeps everything it is told, in order.
class Recorder : public TrainerCallback {
 public:
  void onFitStart(const FitInfo& info) override {
    events.push_back("fit_start");
    fitInfo = info;
  }
  void onStepEnd(const StepRecord& record) override {
    events.push_back("step");
    steps.push_back(record);
  }
  void onLog(const LogRecord& record) override {
    events.push_back("log");
    logs.push_back(record);
  }
  void onValidation(const ValidationRecord& record) override {
    events.push_back("validation");
    validations.push_back(record);
  }
  void onFitEnd(const FitResult& result) override {
    events.push_back("fit_end");
    endSteps = result.steps;
  }

  std::vector<std::string> events;
  FitInfo fitInfo;
  std::vector<StepRecord> steps;
  std::vector<LogRecord> logs;
  std::vector<ValidationRecord> validations;
  int64_t endSteps = -1;
};

struct RunSetup {
  at::Tensor x;
  at::Tensor y;
  TrainerOptions options;
};

RunSetup makeSetup() {
  torch::manual_seed(5);
  RunSetup s{at::randn({200, 12}), at::randn({200, 5}), {}};
  s.options.epochs = 1;
  s.options.batchSize = 20;
  s.options.optimizer.type = OptimizerType::kSgd;
  s.options.optimizer.lr = 0.05;
  s.options.lrScaling.rule = LrScalingRule::kNone;
  s.options.logEvery = 4;
  s.options.ddp.bucketCapMb = 0.001;  // a few buckets even for this small MLP
  s.options.seed = 3;
  return s;
}

LossFn mse() {
  return [](torch::nn::Module& m, const Batch& b) {
    return at::mse_loss(static_cast<MlpImpl&>(m).forward(b.inputs), b.targets);
  };
}

/// One worker fits a fresh MLP (seed 1) on the setup's data, with the first 40 rows as validation if asked.
FitResult fitOneWorker(const RunSetup& s, bool validate) {
  torch::manual_seed(1);
  Mlp model(MlpOptions{12, {16}, 5});
  FitResult result;
  test::runRanks(1, [&](int, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    Trainer trainer(shared, s.options);
    TensorDataset train(s.x, s.y);
    TensorDataset validation(s.x.narrow(0, 0, 40), s.y.narrow(0, 0, 40));
    result = trainer.fit(model.ptr(), mse(), train, validate ? &validation : nullptr);
  });
  return result;
}

constexpr double kSlackUs = 1.0;  // rounding of the microsecond conversion

/// The phases of a step: in the order the loop runs them, tiling the step.
void expectPhasesTileTheStep(const StepRecord& step, int64_t accumulation) {
  std::vector<Phase> expected;
  for (int64_t m = 0; m < accumulation; ++m) {
    expected.insert(expected.end(), {Phase::kDataWait, Phase::kForward, Phase::kBackward});
  }
  expected.insert(expected.end(), {Phase::kCommWait, Phase::kOptimizer});
  ASSERT_EQ(step.phases.size(), expected.size()) << "step " << step.step;
  double cursor = step.startUs;
  double sum = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const PhaseSpan& p = step.phases[i];
    EXPECT_EQ(p.phase, expected[i]) << "step " << step.step << " phase #" << i << " is " << toString(p.phase);
    EXPECT_GE(p.durationUs, 0);
    EXPECT_NEAR(p.startUs, cursor, kSlackUs) << "phase #" << i << " does not start where the previous ended";
    EXPECT_LE(p.startUs + p.durationUs, step.startUs + step.durationUs + kSlackUs);
    cursor = p.startUs + p.durationUs;
    sum += p.durationUs;
  }
  EXPECT_NEAR(sum, step.durationUs, kSlackUs * static_cast<double>(expected.size()));
}

void expectBreakdownSumsToTheStep(const StepBreakdown& b) {
  double sum = 0;
  for (double s : b.phaseSeconds) {
    EXPECT_GE(s, 0);
    sum += s;
  }
  EXPECT_GT(b.stepSeconds, 0);
  EXPECT_NEAR(sum, b.stepSeconds, 1e-3 * b.stepSeconds + 1e-5);
}

TEST(TrainerCallbacks, OneWorkerSeesEveryStepLogValidationAndTheEnd) {
  RunSetup s = makeSetup();
  auto recorder = std::make_shared<Recorder>();
  s.options.callbacks = {recorder};
  FitResult result = fitOneWorker(s, /*validate=*/true);
  const Recorder& r = *recorder;
  // 200 samples / batch 20 = 10 steps; logs at 4, 8 and the last step; one epoch-end validation.
  std::vector<std::string> expected{"fit_start"};
  for (int step = 1; step <= 10; ++step) {
    expected.push_back("step");
    if (step == 4 || step == 8 || step == 10) expected.push_back("log");
  }
  expected.push_back("validation");
  expected.push_back("fit_end");
  EXPECT_EQ(r.events, expected);

  EXPECT_EQ(r.fitInfo.rank, 0);
  EXPECT_EQ(r.fitInfo.worldSize, 1);
  EXPECT_EQ(r.fitInfo.totalSteps, 10);
  EXPECT_EQ(r.fitInfo.startStep, 0);
  EXPECT_EQ(r.fitInfo.stepsPerEpoch, 10);
  EXPECT_EQ(r.fitInfo.epochs, 1);
  EXPECT_EQ(r.fitInfo.globalBatch, 20);
  EXPECT_GT(r.fitInfo.unixTimeAtOrigin, 1.6e9);

  ASSERT_EQ(r.steps.size(), 10u);
  double previousEnd = 0;
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const StepRecord& step = r.steps[i];
    EXPECT_EQ(step.step, static_cast<int64_t>(i) + 1);
    EXPECT_EQ(step.epoch, 0);
    EXPECT_GE(step.startUs, previousEnd);
    EXPECT_GT(step.durationUs, 0);
    EXPECT_TRUE(std::isfinite(step.loss) && step.loss > 0) << step.loss;
    EXPECT_DOUBLE_EQ(step.lr, 0.05);
    EXPECT_TRUE(step.buckets.empty()) << "one worker communicates nothing";
    expectPhasesTileTheStep(step, 1);
    previousEnd = step.startUs + step.durationUs;
  }

  ASSERT_EQ(r.logs.size(), 3u);
  EXPECT_EQ(r.logs[0].step, 4);
  EXPECT_EQ(r.logs[1].step, 8);
  EXPECT_EQ(r.logs[2].step, 10);
  // One worker: the mean over ranks is this worker's mean over the window.
  EXPECT_NEAR(r.logs[0].loss, (r.steps[0].loss + r.steps[1].loss + r.steps[2].loss + r.steps[3].loss) / 4, 1e-9);
  for (const auto& log : r.logs) {
    EXPECT_EQ(log.totalSteps, 10);
    EXPECT_GT(log.samplesPerSecond, 0);
    EXPECT_GT(log.stepSeconds, 0);
    EXPECT_GE(log.timeUs, r.steps[static_cast<size_t>(log.step - 1)].startUs);
  }

  ASSERT_EQ(r.validations.size(), 1u);
  EXPECT_EQ(r.validations[0].step, 10);
  EXPECT_EQ(r.validations[0].epoch, 0);
  EXPECT_DOUBLE_EQ(r.validations[0].loss, result.lastValidationLoss);
  EXPECT_GT(r.validations[0].loss, 0);
  EXPECT_EQ(r.validations[0].accuracy, -1) << "no CorrectFn, no accuracy";

  EXPECT_EQ(r.endSteps, 10);
  EXPECT_EQ(result.worldSize, 1);
  EXPECT_EQ(result.globalBatch, 20);
  const StepBreakdown& b = result.breakdown;
  EXPECT_EQ(b.steps, 9) << "the first step is not timed";
  expectBreakdownSumsToTheStep(b);
  EXPECT_DOUBLE_EQ(b.commExposedSeconds, b.phase(Phase::kCommWait));
  EXPECT_EQ(b.commSeconds, 0);
  EXPECT_EQ(b.commHiddenFraction, -1);
  EXPECT_EQ(b.buckets, 0);
  // The breakdown is the mean of the recorded steps 2..10.
  double meanUs = 0;
  for (size_t i = 1; i < r.steps.size(); ++i) meanUs += r.steps[i].durationUs / 9;
  EXPECT_NEAR(b.stepSeconds, meanUs * 1e-6, 1e-7);
}

TEST(TrainerCallbacks, AccumulatedMicroBatchesEachGetTheirPhases) {
  RunSetup s = makeSetup();
  s.options.batchSize = 10;
  s.options.accumulation = 2;
  auto recorder = std::make_shared<Recorder>();
  s.options.callbacks = {recorder};
  FitResult result = fitOneWorker(s, /*validate=*/false);
  ASSERT_EQ(recorder->steps.size(), 10u);
  for (const auto& step : recorder->steps) expectPhasesTileTheStep(step, 2);
  EXPECT_TRUE(recorder->validations.empty());
  expectBreakdownSumsToTheStep(result.breakdown);
}

TEST(TrainerCallbacks, TwoWorkersReportBucketSpansAndHiddenCommunication) {
  RunSetup s = makeSetup();
  s.options.batchSize = 10;
  std::vector<std::shared_ptr<Recorder>> recorders{std::make_shared<Recorder>(), std::make_shared<Recorder>()};
  std::vector<Mlp> models;
  for (int r = 0; r < 2; ++r) {
    torch::manual_seed(1);
    models.emplace_back(MlpOptions{12, {16}, 5});
  }
  int64_t parameterBytes = 0;
  for (const auto& p : models[0]->parameters()) parameterBytes += p.numel() * 4;
  std::vector<FitResult> results(2);
  test::runRanks(2, [&](int rank, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    TrainerOptions options = s.options;
    options.callbacks = {recorders[static_cast<size_t>(rank)]};
    Trainer trainer(shared, options);
    TensorDataset train(s.x, s.y);
    results[static_cast<size_t>(rank)] = trainer.fit(models[static_cast<size_t>(rank)].ptr(), mse(), train);
  });
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const Recorder& r = *recorders[static_cast<size_t>(rank)];
    EXPECT_EQ(r.fitInfo.rank, rank);
    EXPECT_EQ(r.fitInfo.worldSize, 2);
    EXPECT_EQ(r.fitInfo.globalBatch, 20);
    ASSERT_EQ(r.steps.size(), 10u);
    ASSERT_EQ(r.logs.size(), 3u);
    // Averaged over ranks: both see the same loss.
    EXPECT_DOUBLE_EQ(r.logs[2].loss, recorders[0]->logs[2].loss);
    const FitResult& result = results[static_cast<size_t>(rank)];
    const StepBreakdown& b = result.breakdown;
    ASSERT_GE(b.buckets, 2) << "bucketCapMb 0.001 splits the MLP's " << parameterBytes << " bytes";
    EXPECT_EQ(b.bucketBytes, parameterBytes);
    for (const auto& step : r.steps) {
      expectPhasesTileTheStep(step, 1);
      ASSERT_EQ(step.buckets.size(), static_cast<size_t>(b.buckets));
      const PhaseSpan& backward = step.phases[2];
      int64_t bytes = 0;
      for (size_t i = 0; i < step.buckets.size(); ++i) {
        const BucketSpan& bucket = step.buckets[i];
        EXPECT_EQ(bucket.bucket, static_cast<int>(i));
        EXPECT_GT(bucket.bytes, 0);
        bytes += bucket.bytes;
        // Launched from the autograd hooks, i.e. inside backward; done before the step ended.
        EXPECT_GE(bucket.launchUs, backward.startUs - kSlackUs);
        EXPECT_LE(bucket.launchUs, backward.startUs + backward.durationUs + kSlackUs);
        EXPECT_GE(bucket.doneUs, bucket.launchUs);
        EXPECT_LE(bucket.doneUs, step.startUs + step.durationUs + kSlackUs);
        if (i > 0) EXPECT_GE(bucket.launchUs, step.buckets[i - 1].launchUs);
      }
      EXPECT_EQ(bytes, parameterBytes);
    }
    EXPECT_EQ(b.steps, 9);
    expectBreakdownSumsToTheStep(b);
    EXPECT_GT(b.commSeconds, 0);
    EXPECT_GE(b.commHiddenFraction, 0);
    EXPECT_LE(b.commHiddenFraction, 1);
    EXPECT_GE(b.commExposedSecondsMax, b.commExposedSeconds);
    EXPECT_GE(b.stepSecondsMax, b.stepSeconds);
    EXPECT_DOUBLE_EQ(b.commExposedSecondsMax, results[0].breakdown.commExposedSecondsMax);
  }
}

TEST(TrainerCallbacks, NullCallbackIsRejected) {
  RunSetup s = makeSetup();
  s.options.callbacks = {std::make_shared<Recorder>(), nullptr};
  test::runRanks(1, [&](int, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    try {
      Trainer trainer(shared, s.options);
      ADD_FAILURE() << "a null callback was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("callbacks[1] is null"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace lockstep
