// The whole Trainer (sampler + DDP + optimizer) against a plain loop written
// here (no Trainer, no DDP, no loader) over the same global batches in the
// same order: 2 workers x batch b, 1 worker x batch 2b and b x 2 accumulated
// all equal it on every rank, because the sampler shards one global order.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <filesystem>
#include <limits>

#include "lockstep/common/tensor_memory.h"
#include "lockstep/data/sampler.h"
#include "lockstep/models/char_lstm.h"
#include "lockstep/train/trainer.h"
#include "support/expect.h"
#include "support/subprocess.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

struct TrainSetup {
  at::Tensor x;
  at::Tensor y;
  TrainerOptions options;
};

TrainSetup makeSetup() {
  torch::manual_seed(11);
  TrainSetup s{at::randn({200, 12}), at::randn({200, 5}), {}};
  s.options.epochs = 2;
  s.options.optimizer.type = OptimizerType::kSgd;
  s.options.optimizer.lr = 0.05;
  s.options.optimizer.momentum = 0.9;
  s.options.lrScaling.rule = LrScalingRule::kNone;
  s.options.validate = false;
  s.options.logEvery = 1000;
  s.options.ddp.bucketCapMb = 0.001;
  s.options.seed = 3;
  return s;
}

LossFn mse() {
  return [](torch::nn::Module& m, const Batch& b) {
    return at::mse_loss(static_cast<MlpImpl&>(m).forward(b.inputs), b.targets);
  };
}

/// SGD with momentum over one global batch at a time, as makeSetup() configures the Trainer.
Mlp plainLoop(int64_t globalBatch) {
  TrainSetup s = makeSetup();
  torch::manual_seed(1);  // rank 0's initialisation in trainOn, which DDP broadcasts
  Mlp model(MlpOptions{12, {16}, 5});
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int64_t epoch = 0; epoch < s.options.epochs; ++epoch) {
    auto order = globalOrder(s.x.size(0), /*shuffle=*/true, s.options.seed, epoch);
    for (int64_t start = 0; start + globalBatch <= static_cast<int64_t>(order.size()); start += globalBatch) {
      auto index = at::tensor(std::vector<int64_t>(order.begin() + start, order.begin() + start + globalBatch));
      optimizer.zero_grad();
      at::mse_loss(model->forward(s.x.index_select(0, index)), s.y.index_select(0, index)).backward();
      optimizer.step();
    }
  }
  return model;
}

/// Every rank's model after training.
std::vector<Mlp> trainOn(int world, int64_t batch, int64_t accumulation) {
  TrainSetup s = makeSetup();
  s.options.batchSize = batch;
  s.options.accumulation = accumulation;
  std::vector<Mlp> models;
  for (int r = 0; r < world; ++r) {
    torch::manual_seed(r == 0 ? 1 : 50 + r);
    models.emplace_back(MlpOptions{12, {16}, 5});
  }
  std::vector<FitResult> results(world);
  test::runRanks(world, [&](int rank, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    Trainer trainer(shared, s.options);
    TensorDataset data(s.x, s.y);
    results[rank] = trainer.fit(models[rank].ptr(), mse(), data);
  });
  for (const auto& r : results) EXPECT_EQ(r.steps, 2 * 200 / (world * batch * accumulation));
  return models;
}

void expectSame(Mlp& a, Mlp& b) {
  auto pa = a->parameters();
  auto pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(at::allclose(pa[i], pb[i], 1e-5, 1e-6))
        << "parameter " << i << " differs by " << (pa[i] - pb[i]).abs().max().item<double>();
  }
}

void expectEveryRankSame(Mlp& reference, std::vector<Mlp> ranks, const std::string& what) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    SCOPED_TRACE(what + ", rank " + std::to_string(r));
    expectSame(reference, ranks[r]);
  }
}

TEST(Trainer, TwoWorkersEqualOneWorkerWithTheGlobalBatch) {
  Mlp reference = plainLoop(20);
  expectEveryRankSame(reference, trainOn(1, 20, 1), "1 worker x 20");
  expectEveryRankSame(reference, trainOn(2, 10, 1), "2 workers x 10");
}

TEST(Trainer, AccumulationEqualsTheBiggerBatch) {
  Mlp reference = plainLoop(20);
  expectEveryRankSame(reference, trainOn(1, 10, 2), "1 worker x 10 x 2 accumulated");
  expectEveryRankSame(reference, trainOn(2, 5, 2), "2 workers x 5 x 2 accumulated");
}

TEST(Trainer, LeavesTheProcessCpuAllocatorAlone) {
  // No test of this binary installs lockstep's allocator, and a Trainer must not either:
  // it is a process-wide choice of the program (trainer.h).
  Mlp reference = plainLoop(20);
  expectEveryRankSame(reference, trainOn(2, 10, 1), "2 workers x 10");
  EXPECT_FALSE(tensorMemoryTracked()) << "the Trainer replaced the process's CPU allocator";
}

TEST(Trainer, TooSmallDatasetIsAClearError) {
  TrainSetup s = makeSetup();
  s.options.batchSize = 500;
  torch::manual_seed(1);
  Mlp model(MlpOptions{12, {16}, 5});
  test::runRanks(1, [&](int, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    Trainer trainer(shared, s.options);
    try {
      TensorDataset data(s.x, s.y);
      trainer.fit(model.ptr(), mse(), data);
      ADD_FAILURE();
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("the training set has 200 samples: too few"), std::string::npos) << e.what();
    }
  });
}

/// SGD with momentum and two parameter groups (the first layer learns faster).
std::unique_ptr<torch::optim::Optimizer> twoGroupSgd(const std::vector<at::Tensor>& params) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<at::Tensor>(params.begin(), params.begin() + 2),
                      std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.05).momentum(0.9)));
  groups.emplace_back(std::vector<at::Tensor>(params.begin() + 2, params.end()),
                      std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.01).momentum(0.9)));
  return std::make_unique<torch::optim::SGD>(std::move(groups), torch::optim::SGDOptions(0.1));
}

// A user's optimizer through the public API, against a plain loop written
// here (no Trainer, no DDP, no loader): the same global batches in the same
// order, each group keeping its own learning rate; every rank must match it.
TEST(Trainer, UserSuppliedOptimizerMatchesAPlainLoopOnEveryRank) {
  TrainSetup s = makeSetup();
  s.options.batchSize = 10;
  s.options.optimizerFactory = twoGroupSgd;
  const int world = 2;
  const int64_t globalBatch = 20;

  torch::manual_seed(1);
  Mlp reference(MlpOptions{12, {16}, 5});
  std::vector<Mlp> models;
  for (int r = 0; r < world; ++r) {
    models.emplace_back(MlpOptions{12, {16}, 5});
    auto from = reference->parameters();
    auto to = models.back()->parameters();
    c10::NoGradGuard noGrad;
    for (size_t i = 0; i < from.size(); ++i) to[i].copy_(r == 0 ? from[i] : at::randn_like(from[i]));
  }
  auto optimizer = twoGroupSgd(reference->parameters());
  for (int64_t epoch = 0; epoch < s.options.epochs; ++epoch) {
    auto order = globalOrder(s.x.size(0), /*shuffle=*/true, s.options.seed, epoch);
    for (int64_t start = 0; start + globalBatch <= static_cast<int64_t>(order.size()); start += globalBatch) {
      auto index = at::tensor(std::vector<int64_t>(order.begin() + start, order.begin() + start + globalBatch));
      optimizer->zero_grad();
      at::mse_loss(reference->forward(s.x.index_select(0, index)), s.y.index_select(0, index)).backward();
      optimizer->step();
    }
  }

  test::runRanks(world, [&](int rank, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    TensorDataset data(s.x, s.y);
    FitResult result = Trainer(shared, s.options).fit(models[rank].ptr(), mse(), data);
    EXPECT_EQ(result.steps, 20);
  });
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    expectSame(reference, models[r]);
  }
}

// precision: bf16 trains under autocast on every rank (thread-local state:
// each rank thread sets its own), keeps float32 weights that stay equal over
// the ranks, and computes something other than the fp32 run.
TEST(Trainer, Bf16TrainsWithFloat32WeightsEqualOverRanks) {
  auto train = [](Precision precision) {
    TrainSetup s = makeSetup();
    s.options.batchSize = 10;
    s.options.precision = precision;
    std::vector<Mlp> models;
    for (int r = 0; r < 2; ++r) {
      torch::manual_seed(1);
      models.emplace_back(MlpOptions{12, {64}, 5});
    }
    std::vector<FitResult> results(2);
    test::runRanks(2, [&](int rank, Communicator& comm) {
      auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
      TensorDataset data(s.x, s.y);
      results[rank] = Trainer(shared, s.options).fit(models[rank].ptr(), mse(), data);
    });
    return std::make_pair(models, results);
  };
  auto [fp32, fp32Results] = train(Precision::kFp32);
  auto [bf16, bf16Results] = train(Precision::kBf16);
  auto p0 = bf16[0]->parameters();
  auto p1 = bf16[1]->parameters();
  auto reference = fp32[0]->parameters();
  bool differs = false;
  for (size_t i = 0; i < p0.size(); ++i) {
    EXPECT_EQ(p0[i].scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(p0[i], p1[i])) << "parameter " << i << " differs between the ranks";
    EXPECT_TRUE(at::allclose(p0[i], reference[i], 0, 0.05))
        << "parameter " << i << " strays from the fp32 run by " << (p0[i] - reference[i]).abs().max().item<double>();
    differs |= !at::equal(p0[i], reference[i]);
  }
  EXPECT_TRUE(differs) << "bf16 computed exactly what fp32 did: autocast was not on";
  EXPECT_NEAR(bf16Results[0].lastTrainLoss, fp32Results[0].lastTrainLoss, 0.02 * fp32Results[0].lastTrainLoss);
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

/// Trains 2 ranks for 6 steps where rank 1's third loss is NaN, with `policy`;
/// returns each rank's error (empty when fit() returned) and result.
struct NanRun {
  std::vector<std::string> errors;
  std::vector<FitResult> results;
  std::vector<Mlp> models;
  std::string checkpointDir;
};

NanRun trainWithANan(NanPolicy policy) {
  TrainSetup s = makeSetup();
  s.options.batchSize = 10;
  s.options.maxSteps = 6;
  s.options.nanPolicy = policy;
  NanRun run;
  run.checkpointDir = test::makeTempDir();
  s.options.checkpoint.dir = run.checkpointDir;
  s.options.checkpoint.every = 1;
  run.errors.resize(2);
  run.results.resize(2);
  for (int r = 0; r < 2; ++r) {
    torch::manual_seed(1);
    run.models.emplace_back(MlpOptions{12, {16}, 5});
  }
  std::vector<int> calls(2, 0);
  test::runRanks(2, [&](int rank, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    LossFn loss = [&, rank](torch::nn::Module& m, const Batch& b) {
      at::Tensor l = at::mse_loss(static_cast<MlpImpl&>(m).forward(b.inputs), b.targets);
      return rank == 1 && ++calls[1] == 3 ? l * std::numeric_limits<double>::quiet_NaN() : l;
    };
    TensorDataset data(s.x, s.y);
    try {
      run.results[rank] = Trainer(shared, s.options).fit(run.models[rank].ptr(), loss, data);
    } catch (const Error& e) { run.errors[rank] = e.what(); }
  });
  return run;
}

TEST(Trainer, NonFiniteLossStopsEveryRankNamingTheStepAndTheRank) {
  NanRun run = trainWithANan(NanPolicy::kStop);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_HAS(run.errors[r], "the loss of step 3 is not finite on rank 1");
    EXPECT_HAS(run.errors[r], "trainer.nan_policy: stop");
  }
  EXPECT_HAS(run.errors[1], "(nan)");
  // Steps 1 and 2 were checkpointed; nothing of step 3.
  EXPECT_TRUE(std::filesystem::exists(run.checkpointDir + "/step-000000002.ckpt"));
  EXPECT_FALSE(std::filesystem::exists(run.checkpointDir + "/step-000000003.ckpt"));
  for (auto& model : run.models) {
    for (const auto& p : model->parameters()) EXPECT_TRUE(at::isfinite(p).all().item<bool>());
  }
}

TEST(Trainer, NonFiniteLossIsSkippedOnEveryRankWhenAsked) {
  NanRun run = trainWithANan(NanPolicy::kSkip);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_TRUE(run.errors[r].empty()) << run.errors[r];
    EXPECT_EQ(run.results[r].steps, 6);
    EXPECT_EQ(run.results[r].skippedSteps, 1);
    auto mine = run.models[r]->parameters(), first = run.models[0]->parameters();
    for (size_t i = 0; i < mine.size(); ++i) {
      EXPECT_TRUE(at::isfinite(mine[i]).all().item<bool>()) << "parameter " << i;
      EXPECT_TRUE(at::equal(mine[i], first[i])) << "the ranks agree, parameter " << i;
    }
  }
  EXPECT_TRUE(std::filesystem::exists(run.checkpointDir + "/step-000000006.ckpt"));
}

TEST(Trainer, NanPolicyParses) {
  EXPECT_EQ(parseNanPolicy("skip", "trainer.nan_policy"), NanPolicy::kSkip);
  EXPECT_EQ(parseNanPolicy("STOP", "trainer.nan_policy"), NanPolicy::kStop);
  EXPECT_HAS(test::errorOf([] { parseNanPolicy("ignore", "trainer.nan_policy"); }), "trainer.nan_policy");
}

}  // namespace
}  // namespace lockstep
