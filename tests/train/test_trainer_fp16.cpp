// precision fp16 in the Trainer: float16 autocast (CPU here, CUDA on a GPU), the loss scaled
// by the LossScaler, an overflowing gradient on one rank skipping the step on every rank, and
// the scale carried through checkpoints.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "lockstep/models/char_lstm.h"
#include "lockstep/train/trainer.h"
#include "support/expect.h"
#include "support/subprocess.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

struct Fp16Run {
  std::vector<Mlp> models;
  std::vector<FitResult> results;
};

TrainerOptions fp16Options(int64_t steps) {
  TrainerOptions o;
  o.maxSteps = steps;
  o.batchSize = 10;
  o.optimizer.type = OptimizerType::kSgd;
  o.optimizer.lr = 0.05;
  o.optimizer.momentum = 0.9;
  o.lrScaling.rule = LrScalingRule::kNone;
  o.validate = false;
  o.logEvery = 1000;
  o.seed = 3;
  o.device = DeviceChoice::kCpu;
  o.precision = Precision::kFp16;
  return o;
}

/// Two ranks train the same MLP from the same start; `faults` on both; rank 1's loss of step
/// `infLossStep` (1-based) is infinite.
Fp16Run train(const TrainerOptions& options, FaultInjection faults = {}, int64_t infLossStep = -1) {
  torch::manual_seed(11);
  const at::Tensor x = at::randn({200, 12});
  const at::Tensor y = at::randn({200, 5});
  Fp16Run run;
  run.results.resize(2);
  for (int r = 0; r < 2; ++r) {
    torch::manual_seed(1);
    run.models.emplace_back(MlpOptions{12, {64}, 5});
  }
  test::runRanks(2, [&](int rank, Communicator& comm) {
    TensorDataset data(x, y);
    Trainer trainer(test::borrow(comm), options);
    trainer.injectFaults(faults);
    int64_t calls = 0;
    LossFn mse = [&, rank](torch::nn::Module& m, const Batch& b) {
      at::Tensor loss = at::mse_loss(static_cast<MlpImpl&>(m).forward(b.inputs), b.targets);
      return ++calls == infLossStep && rank == 1 ? loss * std::numeric_limits<double>::infinity() : loss;
    };
    run.results[rank] = trainer.fit(run.models[rank].ptr(), mse, data);
  });
  return run;
}

FaultInjection infAt(int64_t step, int64_t rank) {
  FaultInjection f;
  f.infGradientStep = step;
  f.infGradientRank = rank;
  return f;
}

void expectEqualParameters(Mlp& a, Mlp& b, const std::string& what) {
  auto pa = a->parameters();
  auto pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(at::equal(pa[i], pb[i])) << what << ": parameter " << i;
}

TEST(TrainerFp16, ScalesTheLossAndTrainsEquallyOnEveryRank) {
  Fp16Run fp16 = train(fp16Options(8));
  TrainerOptions plain = fp16Options(8);
  plain.precision = Precision::kFp32;
  Fp16Run fp32 = train(plain);
  expectEqualParameters(fp16.models[0], fp16.models[1], "rank 0 against rank 1");
  bool differs = false;
  auto p = fp16.models[0]->parameters();
  auto reference = fp32.models[0]->parameters();
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(p[i].scalar_type(), at::kFloat);
    EXPECT_TRUE(at::allclose(p[i], reference[i], 0, 0.02)) << "parameter " << i << " strays from fp32";
    differs |= !at::equal(p[i], reference[i]);
  }
  EXPECT_TRUE(differs) << "fp16 computed exactly what fp32 did: autocast was not on";
  for (const auto& r : fp16.results) {
    EXPECT_EQ(r.overflowSteps, 0);
    EXPECT_EQ(r.lossScale, 65536.0);
    EXPECT_NEAR(r.lastTrainLoss, fp32.results[0].lastTrainLoss, 0.02 * fp32.results[0].lastTrainLoss);
  }
  EXPECT_EQ(fp32.results[0].lossScale, 0);
}

TEST(TrainerFp16, AnInfOnOneRankSkipsThatStepOnEveryRank) {
  // Rank 1's gradient of step 3 overflows: after 3 steps both ranks hold what 2 steps made.
  Fp16Run skipped = train(fp16Options(3), infAt(3, 1));
  Fp16Run two = train(fp16Options(2));
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(skipped.results[r].overflowSteps, 1);
    EXPECT_EQ(skipped.results[r].skippedSteps, 0);  // the loss was finite: not nan_policy's skip
    EXPECT_EQ(skipped.results[r].lossScale, 32768.0);
    expectEqualParameters(skipped.models[r], two.models[r], "3 steps with the third skipped against 2 steps");
  }
}

TEST(TrainerFp16, AnInfiniteLossIsAnOverflowTheScalerSkips) {
  // As PyTorch's GradScaler: rank 1's loss of step 3 is infinite, so are its scaled gradients, and
  // the scaler skips the step on both ranks and backs off; trainer.nan_policy (stop) is not asked.
  TrainerOptions options = fp16Options(3);
  ASSERT_EQ(options.nanPolicy, NanPolicy::kStop);
  Fp16Run skipped = train(options, {}, /*infLossStep=*/3);
  Fp16Run two = train(fp16Options(2));
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(skipped.results[r].overflowSteps, 1);
    EXPECT_EQ(skipped.results[r].skippedSteps, 0);
    EXPECT_EQ(skipped.results[r].lossScale, 32768.0);
    expectEqualParameters(skipped.models[r], two.models[r], "3 steps with the third skipped against 2 steps");
  }
}

TEST(TrainerFp16, ResumeKeepsTheLossScale) {
  TrainerOptions options = fp16Options(6);
  options.checkpoint.dir = test::makeTempDir();
  options.checkpoint.every = 1;
  options.checkpoint.keepLast = 6;
  Fp16Run whole = train(options, infAt(2, 0));
  TrainerOptions resumed = options;
  resumed.checkpoint.dir = test::makeTempDir();
  resumed.checkpoint.resume = options.checkpoint.dir + "/step-000000003.ckpt";
  Fp16Run rest = train(resumed);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(rest.results[r].resumedFromStep, 3);
    EXPECT_EQ(rest.results[r].lossScale, 32768.0);
    expectEqualParameters(rest.models[r], whole.models[r], "resumed at step 3 against the whole run");
  }
}

TEST(TrainerFp16, OnlyStrategyDdpScalesTheLoss) {
  TrainerOptions options = fp16Options(2);
  options.strategy = StrategyType::kZero1;
  try {
    train(options);
    ADD_FAILURE() << "fp16 with zero1 trained";
  } catch (const ConfigError& e) {
    EXPECT_HAS(std::string(e.what()), "precision fp16 scales the loss with strategy ddp only, not with zero1");
  }
}

}  // namespace
}  // namespace lockstep
