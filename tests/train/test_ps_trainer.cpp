// The Trainer with schedule async_ps: with staleness bound 0 it trains exactly like DDP on the same
// samples; with a straggler (the test knob) no update passes the bound (the Trainer asserts it
// while gathering the histogram) and every update is counted; the errors name the keys; checkpoints
// resume, exactly with one worker, and load into DDP runs and back; a user's optimizer with its own
// parameter groups trains on the servers as it does in DDP, its state in and out of the same checkpoints. That each
// batch goes to one worker (tickets) is tested in tests/ps. Threads as ranks over Gloo.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <mutex>
#include <numeric>

#include "lockstep/common/error.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/trainer.h"
#include "support/expect.h"
#include "support/regression_data.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

torch::nn::Sequential makeNet() {
  at::manual_seed(1);  // the same initial model on every rank, as a Task builds it
  return torch::nn::Sequential(torch::nn::Linear(12, 24), torch::nn::Tanh(), torch::nn::Linear(24, 5));
}

/// The same with BatchNorm: a model with buffers, each worker's its own.
torch::nn::Sequential makeNormNet() {
  at::manual_seed(1);
  return torch::nn::Sequential(torch::nn::Linear(12, 24), torch::nn::BatchNorm1d(24), torch::nn::Tanh(),
                               torch::nn::Linear(24, 5));
}

using Data = test::RegressionData;
using test::makeRegressionData;

TrainerOptions baseOptions() {
  TrainerOptions o;
  o.maxSteps = 6;
  o.batchSize = 8;
  o.optimizer.type = OptimizerType::kSgd;
  o.optimizer.lr = 0.05;
  o.logEvery = 3;
  o.seed = 3;
  return o;
}

struct Outcome {
  FitResult result;                              // rank 0's
  std::vector<at::Tensor> weights;               // rank 0's model after fit
  std::vector<std::vector<at::Tensor>> buffers;  // every rank's after fit
};

at::Tensor mseLoss(torch::nn::Module& m, const Batch& b) {
  return at::mse_loss(dynamic_cast<torch::nn::SequentialImpl&>(m).forward(b.inputs), b.targets);
}

Outcome train(int world, const TrainerOptions& options, const FaultInjection& faults = {}, const LossFn& loss = mseLoss,
              torch::nn::Sequential (*make)() = makeNet) {
  Data data = makeRegressionData();
  std::vector<torch::nn::Sequential> nets;
  for (int r = 0; r < world; ++r) nets.push_back(make());
  Outcome out;
  test::runRanks(world, [&](int rank, Communicator& comm) {
    Trainer trainer(test::borrow(comm), options);
    trainer.injectFaults(faults);
    FitResult r = trainer.fit(std::static_pointer_cast<torch::nn::Module>(nets[rank].ptr()), loss, *data.train,
                              data.validation.get());
    if (rank == 0) out.result = r;
  });
  for (const auto& p : nets[0]->parameters()) out.weights.push_back(p.detach().clone());
  for (const auto& net : nets) out.buffers.push_back(net->buffers());
  return out;
}

double maxRelativeDiff(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item<double>();
}

/// Every parameter of `got`'s rank 0 within 1e-6 (relative to its largest element) of `want`'s.
void expectWeightsNear(const Outcome& got, const Outcome& want) {
  ASSERT_EQ(got.weights.size(), want.weights.size());
  for (size_t i = 0; i < want.weights.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_LE(maxRelativeDiff(got.weights[i], want.weights[i]), 1e-6);
  }
}

TEST(PsTrainer, ZeroStalenessTrainsLikeDdpOnTheSameSamples) {
  // DDP: 3 workers, 6 steps of 3 x 8 samples at lr 0.05 x 3 (linear scaling). async_ps: 3 workers and
  // a server, 18 updates of 8 samples at lr 0.05 each; each round of 3 covers one DDP step's samples.
  Outcome ddp = train(3, baseOptions());
  TrainerOptions o = baseOptions();
  o.schedule = Schedule::kAsyncPs;
  o.ps = {2, 0};  // two servers: the parameters in two slices
  Outcome ps = train(5, o);
  expectWeightsNear(ps, ddp);
  EXPECT_EQ(ps.result.steps, 18);
  EXPECT_EQ(ps.result.ps.staleness, (std::vector<int64_t>{18}));
  EXPECT_NEAR(ps.result.lastValidationLoss, ddp.result.lastValidationLoss, 1e-5);
  EXPECT_EQ(ps.result.ps.waitSeconds.size(), 3u);
}

TEST(PsTrainer, StragglerStaysWithinTheBoundAndEveryUpdateIsCounted) {
  TrainerOptions o = baseOptions();
  o.schedule = Schedule::kAsyncPs;
  o.ps = {2, 2};
  o.maxSteps = 10;
  Outcome ps = train(5, o, {.slowRank = 2, .slowFactor = 4});  // 3 workers, 2 servers
  EXPECT_EQ(ps.result.steps, 30);
  // Every server's largest staleness, not the histogram's bins (0..2 by construction).
  EXPECT_LE(ps.result.ps.maxStaleness, 2) << "an update passed the bound";
  EXPECT_GE(ps.result.ps.maxStaleness, 1) << "a 4x straggler made no update stale: the bound was not exercised";
  ASSERT_EQ(ps.result.ps.staleness.size(), 3u);
  EXPECT_EQ(std::accumulate(ps.result.ps.staleness.begin(), ps.result.ps.staleness.end(), int64_t(0)), 30);
  EXPECT_GT(ps.result.lastValidationLoss, 0);
}

TEST(PsTrainer, ErrorsNameTheKeys) {
  TrainerOptions o = baseOptions();
  o.schedule = Schedule::kAsyncPs;
  o.ps = {2, 0};
  EXPECT_HAS(test::errorOf([&] { train(2, o); }), "ps.servers 2");
  o.ps = {1, 0};
  o.precision = Precision::kFp16;
  EXPECT_HAS(test::errorOf([&] { train(2, o); }), "schedule.type async_ps does not scale the loss");
}

// An update of `accumulation` batches is one worker's share of a synchronous step with accumulation.
TEST(PsTrainer, AccumulatedUpdatesTrainLikeDdpWithAccumulation) {
  TrainerOptions o = baseOptions();
  o.batchSize = 4;
  o.accumulation = 2;
  Outcome ddp = train(3, o);
  o.schedule = Schedule::kAsyncPs;
  o.ps = {1, 0};
  Outcome ps = train(4, o);
  expectWeightsNear(ps, ddp);
  EXPECT_EQ(ps.result.steps, 18);
  EXPECT_EQ(ps.result.globalBatch, 8);
}

// Warmup counts synchronous steps: update u has the rate of step u / W.
TEST(PsTrainer, WarmupOnTheServersFollowsTheSynchronousSteps) {
  TrainerOptions o = baseOptions();
  o.lrScaling.warmupSteps = 4;
  Outcome ddp = train(3, o);
  o.schedule = Schedule::kAsyncPs;
  o.ps = {2, 0};
  Outcome ps = train(5, o);
  Outcome cold = train(5, [&] {
    TrainerOptions c = o;
    c.lrScaling.warmupSteps = 0;
    return c;
  }());
  for (size_t i = 0; i < ddp.weights.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_LE(maxRelativeDiff(ps.weights[i], ddp.weights[i]), 1e-6);
    EXPECT_GT(maxRelativeDiff(cold.weights[i], ps.weights[i]), 1e-3) << "the warmup changed nothing";
  }
}

// trainer.nan_policy skip: a worker whose batch has a non-finite loss makes an empty update, counted
// by the servers without a step. One worker trains the batches one process would, so it skips what
// one process skips; with three workers and two servers every server leaves that update out, as if
// its gradient were zero.
TEST(PsTrainer, SkippedUpdatesAreLeftOutOnEveryServer) {
  const at::Tensor poisoned = makeRegressionData().train->batch({0, 1, 2, 3}, 0).inputs;  // 4 samples' inputs
  std::mutex mutex;
  int64_t hits = 0;
  auto poisonedLoss = [&](double factor) {
    return LossFn([&, factor](torch::nn::Module& m, const Batch& b) {
      at::Tensor loss = mseLoss(m, b);
      const bool hit = (b.inputs.unsqueeze(1) - poisoned.unsqueeze(0)).abs().sum(2).eq(0).any().item<bool>();
      if (!hit) return loss;
      std::lock_guard<std::mutex> lock(mutex);
      ++hits;
      return loss * factor;
    });
  };
  const double nan = std::nan("");
  TrainerOptions o = baseOptions();
  o.maxSteps = 18;
  o.nanPolicy = NanPolicy::kSkip;
  const Outcome one = train(1, o, {}, poisonedLoss(nan));
  ASSERT_GE(one.result.skippedSteps, 1) << "no poisoned sample was trained: the test tests nothing";
  o.schedule = Schedule::kAsyncPs;
  o.ps = {1, 0};
  const Outcome single = train(2, o, {}, poisonedLoss(nan));
  EXPECT_EQ(single.result.skippedSteps, one.result.skippedSteps);
  o.maxSteps = 6;
  o.ps = {2, 0};
  hits = 0;
  const Outcome zero = train(5, o, {}, poisonedLoss(0.0));  // each poisoned batch's gradient zero
  const int64_t poisonedBatches = hits;
  const Outcome skipped = train(5, o, {}, poisonedLoss(nan));
  const Outcome clean = train(5, o);
  for (size_t i = 0; i < one.weights.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_LE(maxRelativeDiff(single.weights[i], one.weights[i]), 1e-6);
    EXPECT_LE(maxRelativeDiff(skipped.weights[i], zero.weights[i]), 1e-6);
    EXPECT_GT(maxRelativeDiff(clean.weights[i], skipped.weights[i]), 1e-4) << "the skipped updates changed nothing";
  }
  EXPECT_EQ(skipped.result.steps, 18) << "a skipped update is counted";
  EXPECT_EQ(skipped.result.skippedSteps, poisonedBatches);
  o.nanPolicy = NanPolicy::kStop;
  EXPECT_HAS(test::errorOf([&] { train(5, o, {}, poisonedLoss(nan)); }), "trainer.nan_policy: stop");
}

std::string freshDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / fmt::format("lockstep-ps-{}-{}", ::getpid(), name);
  std::filesystem::remove_all(dir);
  return dir.string();
}

/// Two groups, not in the model's order: the weights, then the biases, each with its own rate.
template <typename Optim, typename Options>
OptimizerFactory weightsThenBiases(Options weights, Options biases) {
  return [=](const std::vector<at::Tensor>& params) {
    std::vector<at::Tensor> w, b;
    for (const auto& p : params) (p.dim() > 1 ? w : b).push_back(p);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(w, std::make_unique<Options>(weights));
    groups.emplace_back(b, std::make_unique<Options>(biases));
    return std::unique_ptr<torch::optim::Optimizer>(std::make_unique<Optim>(std::move(groups), weights));
  };
}

// A user's optimizer factory with two groups of their own rates, warmed up and scaled per group: with
// bound 0 and plain SGD, 3 workers and 2 servers (a cut inside the first weight) train as DDP does.
TEST(PsTrainer, FactoryGroupsKeepTheirRatesAsInDdp) {
  TrainerOptions o = baseOptions();
  o.optimizerFactory =
      weightsThenBiases<torch::optim::SGD>(torch::optim::SGDOptions(0.05), torch::optim::SGDOptions(0.2));
  o.lrScaling.warmupSteps = 3;
  const Outcome ddp = train(3, o);
  o.schedule = Schedule::kAsyncPs;
  o.ps = {2, 0};
  const Outcome ps = train(5, o);
  expectWeightsNear(ps, ddp);
  o.optimizerFactory = {};
  o.optimizer.lr = 0.05;
  const Outcome oneRate = train(5, o);
  EXPECT_GT(maxRelativeDiff(oneRate.weights[1], ps.weights[1]), 1e-3) << "the biases' own rate changed nothing";
}

// AdamW in two groups (weight decay on the weights only) on one worker and two servers steps as one
// DDP worker; its state goes in and out of the checkpoints in the whole optimizer's format: DDP's
// 3 steps continued by async_ps to 6, then by DDP to 8, end where DDP's 8 end.
TEST(PsTrainer, FactoryOptimizerStateCrossesCheckpointsWithDdp) {
  TrainerOptions o = baseOptions();
  o.optimizerFactory = weightsThenBiases<torch::optim::AdamW>(torch::optim::AdamWOptions(0.01).weight_decay(0.1),
                                                              torch::optim::AdamWOptions(0.03).weight_decay(0));
  o.maxSteps = 8;
  const Outcome reference = train(1, o);
  o.checkpoint.dir = freshDir("factory");
  o.maxSteps = 3;
  ASSERT_EQ(train(1, o).result.steps, 3);
  TrainerOptions ps = o;
  ps.schedule = Schedule::kAsyncPs;
  ps.ps = {2, 0};
  ps.maxSteps = 6;
  const Outcome middle = train(3, ps);
  EXPECT_EQ(middle.result.resumedFromStep, 3);
  EXPECT_EQ(middle.result.steps, 6);
  o.maxSteps = 8;
  const Outcome back = train(1, o);
  EXPECT_EQ(back.result.resumedFromStep, 6);
  expectWeightsNear(back, reference);
  std::filesystem::remove_all(o.checkpoint.dir);
}

// The servers step an optimizer they can cut into pieces: another one is named.
TEST(PsTrainer, FactoryOfAnotherOptimizerIsRefused) {
  TrainerOptions o = baseOptions();
  o.schedule = Schedule::kAsyncPs;
  o.ps = {1, 0};
  o.optimizerFactory = [](const std::vector<at::Tensor>& params) {
    return std::unique_ptr<torch::optim::Optimizer>(
        std::make_unique<torch::optim::RMSprop>(params, torch::optim::RMSpropOptions(0.01)));
  };
  EXPECT_HAS(test::errorOf([&] { train(2, o); }), "SGD, Adam or AdamW");
}

// An async_ps checkpoint is a Trainer checkpoint: with bound 0 and plain SGD, DDP's 4 steps
// continued by async_ps to 18 updates (3 workers, 2 servers) equal DDP's 6 steps, and a DDP run
// continues from the servers' checkpoint.
TEST(PsTrainer, CheckpointsCrossLoadWithDdp) {
  const Outcome reference = train(3, baseOptions());
  TrainerOptions ddp = baseOptions();
  ddp.maxSteps = 4;
  ddp.checkpoint.dir = freshDir("cross");
  ASSERT_EQ(train(3, ddp).result.steps, 4);
  TrainerOptions o = baseOptions();
  o.schedule = Schedule::kAsyncPs;
  o.ps = {2, 0};
  o.checkpoint.dir = ddp.checkpoint.dir;
  o.checkpoint.every = 5;  // 15 updates; the end (18) is written after serving
  const Outcome ps = train(5, o);
  EXPECT_EQ(ps.result.resumedFromStep, 12);  // 4 steps of 3 workers: the 13th batch of the set comes next
  EXPECT_EQ(ps.result.steps, 18);
  expectWeightsNear(ps, reference);
  for (int updates : {15, 18})
    EXPECT_TRUE(std::filesystem::exists(fmt::format("{}/step-{:09d}.ckpt", o.checkpoint.dir, updates)));
  ddp.maxSteps = 20;
  const Outcome back = train(1, ddp);
  EXPECT_EQ(back.result.resumedFromStep, 18);
  EXPECT_EQ(back.result.steps, 20);
  std::filesystem::remove_all(o.checkpoint.dir);
}

// One worker and one server compute what one DDP worker computes, update for update: a run stopped
// and resumed from the servers' checkpoint (Adam's moments cut to the server's range and back) ends
// where the uninterrupted run ends, and where DDP ends.
TEST(PsTrainer, ResumedRunEndsAsTheUninterruptedOne) {
  TrainerOptions o = baseOptions();
  o.optimizer.type = OptimizerType::kAdam;
  o.optimizer.lr = 0.01;
  const Outcome ddp = train(1, o);
  o.schedule = Schedule::kAsyncPs;
  o.ps = {1, 0};
  o.checkpoint.dir = freshDir("straight");
  const Outcome straight = train(2, o);
  o.checkpoint.dir = freshDir("resumed");
  o.maxSteps = 3;
  ASSERT_EQ(train(2, o).result.steps, 3);
  o.maxSteps = 6;
  const Outcome resumed = train(2, o);
  EXPECT_EQ(resumed.result.resumedFromStep, 3);
  for (size_t i = 0; i < ddp.weights.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(at::equal(resumed.weights[i], straight.weights[i]));
    EXPECT_LE(maxRelativeDiff(straight.weights[i], ddp.weights[i]), 1e-6);
  }
  std::filesystem::remove_all(o.checkpoint.dir);
}

// A model with buffers checkpoints too: the file holds worker 0's buffers as of its last update in
// it (each worker's own differ), and a run resumed with one worker ends bit for bit as the
// uninterrupted one, buffers included.
TEST(PsTrainer, CheckpointsHoldWorkerZerosBuffers) {
  TrainerOptions o = baseOptions();
  o.schedule = Schedule::kAsyncPs;
  o.ps = {1, 0};
  o.checkpoint.dir = freshDir("buffers-three");
  const Outcome three = train(4, o, {}, mseLoss, makeNormNet);  // 3 workers: 18 updates
  torch::nn::Sequential saved = makeNormNet();
  loadModelFromCheckpoint(fmt::format("{}/step-{:09d}.ckpt", o.checkpoint.dir, 18), *saved);
  const auto savedBuffers = saved->buffers();
  ASSERT_EQ(savedBuffers.size(), three.buffers[0].size());
  bool otherWorkersDiffer = false;
  for (size_t i = 0; i < savedBuffers.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(at::equal(savedBuffers[i], three.buffers[0][i])) << "not worker 0's buffers";
    otherWorkersDiffer = otherWorkersDiffer || !at::equal(three.buffers[1][i], three.buffers[0][i]);
  }
  EXPECT_TRUE(otherWorkersDiffer) << "every worker has the same buffers: the test cannot tell whose were saved";
  std::filesystem::remove_all(o.checkpoint.dir);

  o.checkpoint.dir = freshDir("buffers-straight");
  const Outcome straight = train(2, o, {}, mseLoss, makeNormNet);
  o.checkpoint.dir = freshDir("buffers-resumed");
  o.maxSteps = 3;
  ASSERT_EQ(train(2, o, {}, mseLoss, makeNormNet).result.steps, 3);
  o.maxSteps = 6;
  const Outcome resumed = train(2, o, {}, mseLoss, makeNormNet);
  EXPECT_EQ(resumed.result.resumedFromStep, 3);
  for (size_t i = 0; i < straight.weights.size(); ++i) EXPECT_TRUE(at::equal(resumed.weights[i], straight.weights[i]));
  for (size_t i = 0; i < straight.buffers[0].size(); ++i) {
    EXPECT_TRUE(at::equal(resumed.buffers[0][i], straight.buffers[0][i]));
  }
  std::filesystem::remove_all(o.checkpoint.dir);
  std::filesystem::remove_all(freshDir("buffers-straight"));
}

}  // namespace
}  // namespace lockstep
