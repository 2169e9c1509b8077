// ZeRO stage 1 (optim/sharded_optimizer.h; the Trainer's strategy zero1):
// training equals DDP's bit for bit on every rank, with accumulation and
// clipping, for SGD with momentum, Adam and AdamW at 2 and 3 ranks; each rank
// holds only its shard of the optimizer state; checkpoints are DDP's byte for
// byte, so a run resumes across the two strategies. Threads as ranks over Gloo.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adam.h>

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "lockstep/common/tensor_archive.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/models/char_lstm.h"
#include "lockstep/optim/optimizer.h"
#include "lockstep/optim/sharded_optimizer.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/trainer.h"
#include "support/expect.h"
#include "support/subprocess.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

std::shared_ptr<Communicator> borrow(Communicator& comm) {
  return std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ShardParameters, GreedyByElementsInOrder) {
  EXPECT_EQ(shardParameters({100, 10, 10, 50, 30}, 2), (std::vector<int>{0, 1, 1, 1, 1}));
  EXPECT_EQ(shardParameters({4, 4, 4, 4, 4}, 3), (std::vector<int>{0, 1, 2, 0, 1}));
  EXPECT_EQ(shardParameters({7, 3}, 1), (std::vector<int>{0, 0}));
  EXPECT_EQ(shardParameters({5}, 4), (std::vector<int>{0}));  // ranks may own nothing
  EXPECT_THROW(shardParameters({1}, 0), Error);
}

struct RunSpec {
  OptimizerType optimizer;
  StrategyType strategy;
  int world;
  int64_t maxSteps;
  std::string checkpointDir;  ///< checkpoints every 25 steps; empty: none
};

TrainerOptions optionsFor(const RunSpec& spec) {
  TrainerOptions o;
  o.epochs = 1000;
  o.maxSteps = spec.maxSteps;
  o.batchSize = 5;
  o.accumulation = 2;
  o.clipGradNorm = 0.5;
  o.optimizer.type = spec.optimizer;
  o.optimizer.lr = spec.optimizer == OptimizerType::kSgd ? 0.05 : 0.01;
  o.optimizer.momentum = 0.9;
  o.optimizer.weightDecay = 0.01;
  o.lrScaling.rule = LrScalingRule::kNone;
  o.validate = false;
  o.logEvery = 100000;
  o.ddp.bucketCapMb = 0.001;  // several buckets
  o.seed = 3;
  o.strategy = spec.strategy;
  o.checkpoint.dir = spec.checkpointDir;
  o.checkpoint.every = 25;
  o.checkpoint.keepLast = 100;
  return o;
}

/// Trains one MLP per rank (rank 0's initialisation is broadcast) and returns every rank's model.
std::vector<Mlp> train(const RunSpec& spec) {
  torch::manual_seed(11);
  TensorDataset data(at::randn({200, 12}), at::randn({200, 5}));
  std::vector<Mlp> models;
  for (int r = 0; r < spec.world; ++r) {
    torch::manual_seed(r == 0 ? 1 : 50 + r);
    models.emplace_back(MlpOptions{12, {16, 8}, 5});
  }
  TrainerOptions options = optionsFor(spec);
  test::runRanks(spec.world, [&](int rank, Communicator& comm) {
    FitResult result = Trainer(borrow(comm), options)
                           .fit(
                               models[rank].ptr(),
                               [](torch::nn::Module& m, const Batch& b) {
                                 return at::mse_loss(static_cast<MlpImpl&>(m).forward(b.inputs), b.targets);
                               },
                               data);
    EXPECT_EQ(result.steps, spec.maxSteps);
  });
  return models;
}

void expectBitwiseEqual(Mlp& expected, Mlp& actual, const std::string& what) {
  auto a = expected->parameters();
  auto b = actual->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(at::equal(a[i], b[i])) << what << ": parameter " << i << " differs by up to "
                                       << (a[i] - b[i]).abs().max().item<double>();
  }
}

TEST(Zero1, TrainsLikeDdpBitForBitAndWritesTheSameCheckpoints) {
  for (OptimizerType optimizer : {OptimizerType::kSgd, OptimizerType::kAdam, OptimizerType::kAdamW}) {
    for (int world : {2, 3}) {
      std::string label = fmt::format("{} at {} ranks", toString(optimizer), world);
      SCOPED_TRACE(label);
      std::string ddpDir = test::makeTempDir();
      std::string zeroDir = test::makeTempDir();
      auto ddp = train({optimizer, StrategyType::kDdp, world, 200, ddpDir});
      auto zero = train({optimizer, StrategyType::kZero1, world, 200, zeroDir});
      for (int r = 0; r < world; ++r) expectBitwiseEqual(ddp[0], zero[r], label + ", rank " + std::to_string(r));
      for (int step : {25, 200}) {
        std::string name = fmt::format("/step-{:09d}.ckpt", step);
        std::string expected = readFile(ddpDir + name);
        ASSERT_FALSE(expected.empty()) << ddpDir + name;
        EXPECT_TRUE(expected == readFile(zeroDir + name)) << label << ": " << name << " differs from DDP's";
      }
    }
  }
}

TEST(Zero1, OneRankIsPlainTraining) {
  auto ddp = train({OptimizerType::kAdam, StrategyType::kDdp, 1, 20, ""});
  auto zero = train({OptimizerType::kAdam, StrategyType::kZero1, 1, 20, ""});
  expectBitwiseEqual(ddp[0], zero[0], "one rank");
}

TEST(Zero1, ResumesAcrossStrategiesInBothDirections) {
  for (auto [first, second] :
       {std::pair{StrategyType::kDdp, StrategyType::kZero1}, std::pair{StrategyType::kZero1, StrategyType::kDdp}}) {
    std::string label = fmt::format("{} then {}", toString(first), toString(second));
    SCOPED_TRACE(label);
    std::string straightDir = test::makeTempDir();
    std::string resumedDir = test::makeTempDir();
    auto straight = train({OptimizerType::kAdam, StrategyType::kDdp, 2, 50, straightDir});
    train({OptimizerType::kAdam, first, 2, 25, resumedDir});
    auto resumed = train({OptimizerType::kAdam, second, 2, 50, resumedDir});
    for (int r = 0; r < 2; ++r) expectBitwiseEqual(straight[0], resumed[r], label + ", rank " + std::to_string(r));
    EXPECT_TRUE(readFile(straightDir + "/step-000000050.ckpt") == readFile(resumedDir + "/step-000000050.ckpt"));
  }
}

TEST(Zero1, EachRankHoldsOnlyItsShardOfTheState) {
  const int world = 3;
  torch::manual_seed(5);
  Mlp model(MlpOptions{12, {16, 8}, 5});
  int64_t total = 0;
  for (const auto& p : model->parameters()) total += p.numel();
  std::vector<int64_t> stateBytes(world), owned(world);
  test::runRanks(world, [&](int rank, Communicator& comm) {
    Mlp local(MlpOptions{12, {16, 8}, 5});
    DistributedDataParallel ddp(local.ptr(), borrow(comm), DdpOptions{});
    ShardedOptimizer sharded(std::make_unique<torch::optim::Adam>(local->parameters(), torch::optim::AdamOptions(0.01)),
                             borrow(comm));
    EXPECT_EQ(sharded.numParameters(), local->parameters().size());
    for (int step = 0; step < 3; ++step) {
      sharded.optimizer().zero_grad();
      at::mse_loss(local->forward(at::randn({4, 12})), at::randn({4, 5})).backward();
      ddp.finishGradientSync();
      sharded.step();
    }
    stateBytes[rank] = sharded.stateBytes();
    owned[rank] = sharded.ownedElements();
  });
  int64_t ownedSum = 0;
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_GT(owned[r], 0);
    EXPECT_EQ(stateBytes[r], 8 * owned[r]) << "Adam keeps exp_avg and exp_avg_sq, float32, for owned elements only";
    ownedSum += owned[r];
  }
  EXPECT_EQ(ownedSum, total);
}

}  // namespace
}  // namespace lockstep
