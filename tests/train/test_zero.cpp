// ZeRO stage 1 (optim/sharded_optimizer.h; the Trainer's strategy zero1):
// training equals DDP's bit for bit on every rank, with accumulation and
// clipping, for SGD with momentum, Adam and AdamW at 2, 3 and 4 ranks; each
// rank holds only its shard of the optimizer state; checkpoints are DDP's byte
// for byte, so a run resumes across the two strategies. ZeRO stage 2
// (ddp/sharded_data_parallel.h; strategy zero2): the same at 2 ranks, with
// accumulation and clipping, over 200 steps (at 3 ranks equal to rounding),
// gradients and state held 1/N, resume across all three strategies. Threads as
// ranks over Gloo.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "lockstep/common/tensor_archive.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/ddp/sharded_data_parallel.h"
#include "lockstep/models/char_lstm.h"
#include "lockstep/optim/optimizer.h"
#include "lockstep/optim/sharded_optimizer.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/trainer.h"
#include "support/expect.h"
#include "support/subprocess.h"
#include "support/thread_ranks.h"
#include "train/zero_harness.h"

namespace lockstep {
namespace {

using test::borrow;
using test::expectBitwiseEqual;
using test::expectClose;
using test::readFile;
using test::RunSpec;
using test::train;

TEST(Zero1, TrainsLikeDdpBitForBitAndWritesTheSameCheckpoints) {
  for (OptimizerType optimizer : {OptimizerType::kSgd, OptimizerType::kAdam, OptimizerType::kAdamW}) {
    for (int world : {2, 3, 4}) {
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
  test::expectResumesAcross(
      {std::pair{StrategyType::kDdp, StrategyType::kZero1}, std::pair{StrategyType::kZero1, StrategyType::kDdp}}, 0.5);
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
    DistributedDataParallel ddp(local.ptr(), borrow(comm), SyncOptions{});
    ShardedOptimizer sharded(std::make_unique<torch::optim::Adam>(local->parameters(), torch::optim::AdamOptions(0.01)),
                             borrow(comm));
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
    // Equal parts of the flattened parameters, whatever their sizes (the first layer is half of them).
    EXPECT_EQ(owned[r], std::min((total + world - 1) / world, total - r * ((total + world - 1) / world)));
    EXPECT_EQ(stateBytes[r], 8 * owned[r]) << "Adam keeps exp_avg and exp_avg_sq, float32, for owned elements only";
    ownedSum += owned[r];
  }
  EXPECT_EQ(ownedSum, total);
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

TEST(GradientPieces, EachRankGetsItsPartOfEachBucketPaddedToEqualParts) {
  // Bucket 0: params 2 (3 elements) and 1 (4); bucket 1: param 0 (5). Parts at 3 ranks: 3 and 2 elements.
  std::vector<std::vector<size_t>> buckets{{2, 1}, {0}};
  std::vector<int64_t> numels{5, 4, 3};
  auto r0 = gradientPieces(buckets, numels, 3, 0);
  auto r1 = gradientPieces(buckets, numels, 3, 1);
  auto r2 = gradientPieces(buckets, numels, 3, 2);
  auto same = [](const GradientPiece& a, const GradientPiece& b) {
    return a.param == b.param && a.bucket == b.bucket && a.paramOffset == b.paramOffset && a.length == b.length &&
           a.chunkOffset == b.chunkOffset;
  };
  ASSERT_EQ(r0.size(), 2u);
  EXPECT_TRUE(same(r0[0], {2, 0, 0, 3, 0}));
  EXPECT_TRUE(same(r0[1], {0, 1, 0, 2, 0}));
  ASSERT_EQ(r1.size(), 2u);
  EXPECT_TRUE(same(r1[0], {1, 0, 0, 3, 0}));
  EXPECT_TRUE(same(r1[1], {0, 1, 2, 2, 0}));
  ASSERT_EQ(r2.size(), 2u);
  EXPECT_TRUE(same(r2[0], {1, 0, 3, 1, 0}));  // then two padding elements
  EXPECT_TRUE(same(r2[1], {0, 1, 4, 1, 0}));  // then one
  // Every element of every parameter belongs to exactly one rank.
  std::vector<std::vector<int>> owners;
  for (int64_t n : numels) owners.emplace_back(static_cast<size_t>(n), 0);
  for (const auto& pieces : {r0, r1, r2}) {
    for (const auto& piece : pieces) {
      for (int64_t e = 0; e < piece.length; ++e) ++owners[piece.param][static_cast<size_t>(piece.paramOffset + e)];
    }
  }
  for (const auto& p : owners) {
    for (int count : p) EXPECT_EQ(count, 1);
  }
  EXPECT_THROW(gradientPieces(buckets, numels, 2, 2), Error);
}

TEST(Zero2, TrainsLikeDdpBitForBitAtTwoRanksAndWritesTheSameCheckpoints) {
  // Accumulation 2 and clipping at 0.1 (clipGradNorm scales by the same float32 coefficient
  // whether a rank holds whole gradients or pieces of them), 200 steps.
  for (OptimizerType optimizer : {OptimizerType::kSgd, OptimizerType::kAdam, OptimizerType::kAdamW}) {
    std::string label = fmt::format("{} at 2 ranks, clipped at 0.1", toString(optimizer));
    SCOPED_TRACE(label);
    std::string ddpDir = test::makeTempDir();
    std::string zeroDir = test::makeTempDir();
    auto ddp = train({optimizer, StrategyType::kDdp, 2, 200, ddpDir, 0.1});
    auto zero = train({optimizer, StrategyType::kZero2, 2, 200, zeroDir, 0.1});
    for (int r = 0; r < 2; ++r) expectBitwiseEqual(ddp[0], zero[r], label + ", rank " + std::to_string(r));
    for (int step : {25, 200}) {
      std::string name = fmt::format("/step-{:09d}.ckpt", step);
      std::string expected = readFile(ddpDir + name);
      ASSERT_FALSE(expected.empty()) << ddpDir + name;
      EXPECT_TRUE(expected == readFile(zeroDir + name)) << label << ": " << name << " differs from DDP's";
    }
  }
}

TEST(Zero2, WithClippingAtThreeRanksEqualsDdpToRoundingAndTheClippingActs) {
  // At 3 ranks the reduce-scatter adds in another order than DDP's ring: equal to rounding.
  // SGD: Adam's update hardly depends on a common scale of the gradients.
  const int world = 3;
  auto ddp = train({OptimizerType::kSgd, StrategyType::kDdp, world, 40, "", 0.1});
  auto zero = train({OptimizerType::kSgd, StrategyType::kZero2, world, 40, "", 0.1});
  auto unclipped = train({OptimizerType::kSgd, StrategyType::kZero2, world, 40, "", 0});
  for (int r = 0; r < world; ++r) {
    expectClose(ddp[0], zero[r], "clipped at 0.1, rank " + std::to_string(r));
    expectBitwiseEqual(zero[0], zero[r], "ranks agree, rank " + std::to_string(r));
  }
  // The clipping did something (at 0.1, as in the 2-rank test above): without it the run ends elsewhere.
  auto a = zero[0]->parameters(), b = unclipped[0]->parameters();
  double largest = 0;
  for (size_t i = 0; i < a.size(); ++i) largest = std::max(largest, (a[i] - b[i]).abs().max().item<double>());
  EXPECT_GT(largest, 1e-3);
}

TEST(Zero2, ZeroOneAndTwoResumeWithAnotherWorldSizeFromTheSameFileAsDdp) {
  // Their checkpoints are DDP's whole-model files: a 2-rank file, resumed by 3 ranks, is cut into 3
  // ranks' pieces on load, and training goes on as DDP's does from the same file.
  for (StrategyType strategy : {StrategyType::kZero1, StrategyType::kZero2}) {
    std::string label = fmt::format("{} from 2 ranks to 3", toString(strategy));
    SCOPED_TRACE(label);
    std::string dir = test::makeTempDir();
    train({OptimizerType::kAdam, strategy, 2, 25, dir});
    std::string copy = test::makeTempDir();
    std::filesystem::copy_file(dir + "/step-000000025.ckpt", copy + "/step-000000025.ckpt");
    auto zero = train({OptimizerType::kAdam, strategy, 3, 40, dir});
    auto ddp = train({OptimizerType::kAdam, StrategyType::kDdp, 3, 40, copy});
    for (int r = 0; r < 3; ++r) {
      test::expectRelativeDifference(ddp[0], zero[r], label + ", rank " + std::to_string(r), 1e-6);
    }
  }
}

TEST(Zero2, OneRankIsPlainTraining) {
  auto ddp = train({OptimizerType::kAdam, StrategyType::kDdp, 1, 20, "", 0});
  auto zero = train({OptimizerType::kAdam, StrategyType::kZero2, 1, 20, "", 0});
  expectBitwiseEqual(ddp[0], zero[0], "one rank");
}

TEST(Zero2, ResumesAcrossStrategiesByteForByte) {
  test::expectResumesAcross(
      {std::pair{StrategyType::kDdp, StrategyType::kZero2}, std::pair{StrategyType::kZero2, StrategyType::kDdp},
       std::pair{StrategyType::kZero2, StrategyType::kZero1}, std::pair{StrategyType::kZero2, StrategyType::kZero2}},
      0);
}

TEST(Zero2, EachRankHoldsOnlyItsPartOfTheGradientsAndState) {
  const int world = 3;
  torch::manual_seed(5);
  Mlp reference(MlpOptions{12, {16, 8}, 5});
  int64_t total = 0;
  for (const auto& p : reference->parameters()) total += p.numel();
  std::vector<int64_t> stateBytes(world), gradBytes(world), owned(world), buffers(world);
  std::vector<int> undefinedGrads(world);
  test::runRanks(world, [&](int rank, Communicator& comm) {
    Mlp local(MlpOptions{12, {16, 8}, 5});
    SyncOptions options;
    options.bucketCapMb = 0.001;
    ShardedDataParallel zero(local.ptr(), borrow(comm),
                             std::make_unique<torch::optim::Adam>(local->parameters(), torch::optim::AdamOptions(0.01)),
                             options);
    EXPECT_GT(zero.numBuckets(), 1);
    for (int step = 0; step < 3; ++step) {
      at::mse_loss(local->forward(at::randn({4, 12})), at::randn({4, 5})).backward();
      zero.finishGradientSync();
      zero.step();
    }
    stateBytes[rank] = zero.stateBytes();
    gradBytes[rank] = zero.gradientBytes();
    owned[rank] = zero.ownedElements();
    buffers[rank] = zero.bufferBytes();
    for (const auto& p : local->parameters()) undefinedGrads[rank] += p.grad().defined() ? 0 : 1;
    EXPECT_EQ(static_cast<size_t>(undefinedGrads[rank]), local->parameters().size());
  });
  int64_t ownedSum = 0;
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    // Equal parts of the flattened parameters, whatever their sizes (the first layer is half of them).
    EXPECT_EQ(owned[r], std::min((total + world - 1) / world, total - r * ((total + world - 1) / world)));
    EXPECT_EQ(stateBytes[r], 8 * owned[r]) << "Adam keeps exp_avg and exp_avg_sq, float32, for owned elements only";
    // Its parts of the buckets, padding included: at most one element per bucket more than what it owns.
    EXPECT_GE(gradBytes[r], 4 * owned[r]);
    EXPECT_LE(gradBytes[r], 4 * owned[r] + 4 * 8);
    EXPECT_EQ(buffers[r], 0) << "bucket buffers are freed once reduce-scattered";
    ownedSum += owned[r];
  }
  EXPECT_EQ(ownedSum, total);
}

TEST(Zero2, UnusedParametersAreNamedOrGetZeros) {
  test::runRanks(2, [&](int, Communicator& comm) {
    torch::manual_seed(1);
    Mlp local(MlpOptions{6, {4}, 3});
    auto params = local->parameters();
    {
      ShardedDataParallel zero(local.ptr(), borrow(comm),
                               std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(0.01)));
      // Only the last layer takes part: the first layer's weight and bias get no gradient.
      auto named = local->named_parameters();
      at::Tensor out = at::matmul(at::randn({2, 4}), named["fc1.weight"].t()) + named["fc1.bias"];
      out.sum().backward();
      try {
        zero.finishGradientSync();
        ADD_FAILURE() << "expected an error naming the unused parameters";
      } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find("fc0.weight"), std::string::npos) << e.what(); }
    }
    SyncOptions options;
    options.findUnusedParameters = true;
    ShardedDataParallel zero(local.ptr(), borrow(comm),
                             std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1)), options);
    at::Tensor before = params[0].detach().clone();
    auto named = local->named_parameters();
    (at::matmul(at::randn({2, 4}), named["fc1.weight"].t()) + named["fc1.bias"]).sum().backward();
    zero.finishGradientSync();
    zero.step();
    EXPECT_TRUE(at::equal(before, params[0])) << "an unused parameter's gradient is zero";
  });
}

TEST(Zero2, RefusesACheckpointThatDoesNotFitNamingTheEntry) {
  test::runRanks(2, [&](int, Communicator& comm) {
    torch::manual_seed(1);
    Mlp local(MlpOptions{6, {4}, 3});
    ShardedDataParallel zero(
        local.ptr(), borrow(comm),
        std::make_unique<torch::optim::Adam>(local->parameters(), torch::optim::AdamOptions(0.01)));
    at::mse_loss(local->forward(at::randn({2, 6})), at::randn({2, 3})).backward();
    zero.finishGradientSync();
    zero.step();
    TensorArchive archive("ckpt.bin");
    TensorArchive* writer = comm.rank() == 0 ? &archive : nullptr;
    zero.saveState(writer);
    // Every rank loads rank 0's archive, as the Trainer does; broadcast it as bytes.
    std::string bytes = comm.rank() == 0 ? archive.serialize() : std::string();
    at::Tensor length = at::tensor({static_cast<int64_t>(bytes.size())}, at::kLong);
    std::vector<at::Tensor> l{length};
    comm.broadcast(l, 0)->wait();
    bytes.resize(static_cast<size_t>(l[0].item<int64_t>()));
    std::vector<at::Tensor> b{at::from_blob(bytes.data(), {static_cast<int64_t>(bytes.size())}, at::kByte)};
    comm.broadcast(b, 0)->wait();
    TensorArchive good = TensorArchive::parse(bytes, "ckpt.bin");
    EXPECT_NO_THROW(zero.loadState(good, false));
    TensorArchive wrongShape = TensorArchive::parse(bytes, "ckpt.bin");
    wrongShape.putTensor("optimizer/param0/exp_avg", at::zeros({5}));
    std::string message = test::errorOf([&] { zero.loadState(wrongShape, false); });
    EXPECT_HAS(message, "ckpt.bin");
    EXPECT_HAS(message, "optimizer/param0/exp_avg");
    EXPECT_HAS(message, "[5]");
    TensorArchive extra = TensorArchive::parse(bytes, "ckpt.bin");
    extra.putBool("optimizer/param9/present", true);
    EXPECT_HAS(test::errorOf([&] { zero.loadState(extra, false); }), "optimizer/param9/present");
  });
}

}  // namespace
}  // namespace lockstep
