// ZeRO stage 3 (ddp/fully_sharded_data_parallel.h; the Trainer's strategy
// zero3): training equals DDP's bit for bit at 2 ranks with accumulation and
// clipping over 200 steps (each layer a unit, and the whole model one unit), and at 3 and 4
// ranks as zero2 and DDP do (Gloo on one host reduces in rank order); checkpoints are DDP's byte for
// byte and resume across strategies; each unit is gathered only around its use, and between steps a rank holds 1/N of
// the parameters, gradients and state. Threads as ranks over Gloo.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <fmt/format.h>

#include <cstdlib>

#include "lockstep/ddp/fully_sharded_data_parallel.h"
#include "lockstep/ddp/sharded_data_parallel.h"
#include "lockstep/models/char_lstm.h"
#include "lockstep/optim/optimizer.h"
#include "lockstep/train/strategy.h"
#include "lockstep/train/trainer.h"
#include "support/expect.h"
#include "support/subprocess.h"
#include "support/thread_ranks.h"
#include "train/zero_harness.h"

namespace lockstep {
namespace {

using test::borrow;
using test::expectBitwiseEqual;
using test::readFile;
using test::train;

TEST(Zero3, TrainsLikeDdpBitForBitAtTwoRanksAndWritesTheSameCheckpoints) {
  for (bool layered : {true, false}) {
    for (OptimizerType optimizer : {OptimizerType::kSgd, OptimizerType::kAdam, OptimizerType::kAdamW}) {
      std::string label =
          fmt::format("{} at 2 ranks, {}", toString(optimizer), layered ? "a unit per layer" : "one unit");
      SCOPED_TRACE(label);
      std::string ddpDir = test::makeTempDir();
      std::string zeroDir = test::makeTempDir();
      auto ddp = train({optimizer, StrategyType::kDdp, 2, 200, ddpDir, 0.1});
      auto zero = train({optimizer, StrategyType::kZero3, 2, 200, zeroDir, 0.1, layered});
      for (int r = 0; r < 2; ++r) expectBitwiseEqual(ddp[0], zero[r], label + ", rank " + std::to_string(r));
      for (int step : {25, 200}) {
        std::string name = fmt::format("/step-{:09d}.ckpt", step);
        std::string expected = readFile(ddpDir + name);
        ASSERT_FALSE(expected.empty()) << ddpDir + name;
        EXPECT_TRUE(expected == readFile(zeroDir + name)) << label << ": " << name << " differs from DDP's";
      }
    }
  }
}

TEST(Zero3, WithClippingAtThreeAndFourRanksEqualsZero2AndDdpBitForBit) {
  // Over Gloo the reduce-scatter and every float allreduce between ranks of one host (these threads)
  // add the ranks' values in rank order, element by element (gloo_communicator.cpp), so DDP's
  // allreduce, at either bucket cap, and zero2/zero3's reduce-scatter give the same bits at any world
  // size: after 200 clipped steps, with Adam too. (Across hosts, float buckets over 64 KB go through
  // c10d's ring.)
  for (OptimizerType optimizer : {OptimizerType::kSgd, OptimizerType::kAdam}) {
    for (int world : {3, 4}) {
      std::string label = fmt::format("{} at {} ranks, clipped at 0.5, 200 steps", toString(optimizer), world);
      SCOPED_TRACE(label);
      auto ddp = train({optimizer, StrategyType::kDdp, world, 200, "", 0.5});
      auto zero2 = train({optimizer, StrategyType::kZero2, world, 200, "", 0.5});
      auto zero = train({optimizer, StrategyType::kZero3, world, 200, "", 0.5, true});
      test::RunSpec otherCap{optimizer, StrategyType::kDdp, world, 200, "", 0.5};
      otherCap.bucketCapMb = 0.0005;
      auto ddpOtherCap = train(otherCap);
      expectBitwiseEqual(ddp[0], ddpOtherCap[0], label + ": DDP with another bucket cap");
      for (int r = 0; r < world; ++r) {
        expectBitwiseEqual(ddp[0], zero2[r], label + ": zero2, rank " + std::to_string(r));
        expectBitwiseEqual(ddp[0], zero[r], label + ": zero3, rank " + std::to_string(r));
      }
    }
  }
}

TEST(Zero3, OneRankIsPlainTraining) {
  auto ddp = train({OptimizerType::kAdam, StrategyType::kDdp, 1, 20, "", 0});
  auto zero = train({OptimizerType::kAdam, StrategyType::kZero3, 1, 20, "", 0, true});
  expectBitwiseEqual(ddp[0], zero[0], "one rank");
}

TEST(Zero3, ResumesAcrossStrategiesByteForByte) {
  test::expectResumesAcross(
      {std::pair{StrategyType::kDdp, StrategyType::kZero3}, std::pair{StrategyType::kZero3, StrategyType::kDdp},
       std::pair{StrategyType::kZero3, StrategyType::kZero2}, std::pair{StrategyType::kZero3, StrategyType::kZero3}},
      0);
}

TEST(Zero3, ResumesWithAnotherWorldSizeByReshardingTheCheckpoint) {
  // A 2-rank zero3 checkpoint, resumed by 3 ranks: zero3 cuts its shards (parameters and Adam
  // state) for 3 ranks and continues as DDP does from the same file.
  std::string dir = test::makeTempDir();
  train({OptimizerType::kAdam, StrategyType::kZero3, 2, 25, dir, 0, true});
  std::string copy = test::makeTempDir();
  ASSERT_EQ(std::system(("cp " + dir + "/step-000000025.ckpt " + copy + "/").c_str()), 0);
  auto zero = train({OptimizerType::kAdam, StrategyType::kZero3, 3, 40, dir, 0, true});
  auto ddp = train({OptimizerType::kAdam, StrategyType::kDdp, 3, 40, copy, 0});
  for (int r = 0; r < 3; ++r) {
    test::expectRelativeDifference(ddp[0], zero[r], "3 ranks from a 2-rank checkpoint, rank " + std::to_string(r),
                                   1e-6);
  }
}

bool allocated(const at::Tensor& p) { return p.storage().nbytes() > 0; }

TEST(Zero3, GathersEachUnitOnlyAroundItsUseAndKeepsAShardBetweenSteps) {
  const int world = 3;
  const std::vector<int64_t> hidden{16, 8, 8};
  int64_t total = 0;
  for (const auto& p : Mlp(MlpOptions{12, hidden, 5})->parameters()) total += p.numel();
  std::vector<int64_t> owned(world), paramBytes(world), gradBytes(world), stateBytes(world), buffers(world);
  test::runRanks(world, [&](int rank, Communicator& comm) {
    torch::manual_seed(1);
    Mlp local(MlpOptions{12, hidden, 5});
    auto layers = test::mlpLayers(local);
    const size_t n = layers.size();
    std::vector<std::vector<at::Tensor>> unitParams;
    for (const auto& layer : layers) unitParams.push_back(layer.modules[0]->parameters());
    auto gathered = [&](size_t u) { return allocated(unitParams[u][0]); };
    std::vector<std::string> problems;
    FullyShardedDataParallel* fsdp = nullptr;  // set once built; the hooks run after
    for (size_t k = 0; k < n; ++k) {
      auto inner = layers[k].forward;
      layers[k].forward = [&, k, inner](const at::Tensor& x) {
        // Forward: this unit is whole; those before it were freed; at most the next one is on its way.
        if (!gathered(k)) problems.push_back(fmt::format("forward of unit {}: not gathered", k));
        for (size_t u = 0; u < k; ++u) {
          if (gathered(u)) problems.push_back(fmt::format("forward of unit {}: unit {} still gathered", k, u));
        }
        for (size_t u = k + 2; u < n; ++u) {
          if (gathered(u)) problems.push_back(fmt::format("forward of unit {}: unit {} already gathered", k, u));
        }
        if (k > 0 && x.requires_grad()) {
          // Backward reached unit k's input: unit k-1 is whole again, the units after k are freed.
          x.register_hook([&, k](const at::Tensor& grad) {
            if (!gathered(k - 1)) problems.push_back(fmt::format("backward of unit {}: not gathered", k - 1));
            // The units after k hold no parameters: their memory is freed or lent to their reduce-scatter.
            int64_t held = 0;
            for (size_t u = k + 1; u < n; ++u) {
              if (gathered(u)) held += static_cast<int64_t>(unitParams[u][0].storage().nbytes());
            }
            if (held > fsdp->bufferBytes()) {
              problems.push_back(fmt::format("backward of unit {}: units after {} hold {} bytes, {} lent", k - 1, k,
                                             held, fsdp->bufferBytes()));
            }
            return grad;
          });
        }
        return inner(x);
      };
    }
    FullyShardedDataParallel zero(
        local.ptr(), layers, borrow(comm),
        std::make_unique<torch::optim::Adam>(local->parameters(), torch::optim::AdamOptions(0.01)));
    fsdp = &zero;
    EXPECT_EQ(zero.numUnits(), static_cast<int>(n));
    for (size_t u = 0; u < n; ++u) EXPECT_FALSE(gathered(u)) << "unit " << u << " whole after construction";
    const int64_t gathersBefore = zero.gathers();
    for (int step = 0; step < 3; ++step) {
      at::mse_loss(zero.forward(at::randn({4, 12})), at::randn({4, 5})).backward();
      zero.finishGradientSync();
      zero.step();
      for (size_t u = 0; u < n; ++u) EXPECT_FALSE(gathered(u)) << "unit " << u << " whole after step " << step;
    }
    // Each step gathers every unit for forward and, but the last, again for backward.
    EXPECT_EQ(zero.gathers() - gathersBefore, 3 * static_cast<int64_t>(2 * n - 1));
    for (const auto& p : problems) ADD_FAILURE() << "rank " << rank << ": " << p;
    owned[rank] = zero.ownedElements();
    paramBytes[rank] = zero.parameterBytes();
    gradBytes[rank] = zero.gradientBytes();
    stateBytes[rank] = zero.stateBytes();
    buffers[rank] = zero.bufferBytes();
    zero.restoreModule();
    for (const auto& p : local->parameters()) EXPECT_TRUE(allocated(p) && p.storage().nbytes() == p.nbytes());
  });
  int64_t ownedSum = 0;
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_GT(owned[r], 0);
    // Its shard of every unit, padding included: at most one element per unit more than it owns.
    EXPECT_GE(paramBytes[r], 4 * owned[r]);
    EXPECT_LE(paramBytes[r], 4 * owned[r] + 4 * (world - 1) * 4);
    EXPECT_EQ(gradBytes[r], paramBytes[r]) << "the averaged gradients of its shards, nothing whole";
    EXPECT_EQ(stateBytes[r], 8 * owned[r]) << "Adam keeps exp_avg and exp_avg_sq, float32, for owned elements only";
    EXPECT_EQ(buffers[r], 0) << "gradient buffers are freed once reduce-scattered";
    ownedSum += owned[r];
  }
  EXPECT_EQ(ownedSum, total);
}

TEST(Zero3, UnusedParametersAreNamed) {
  test::runRanks(2, [&](int, Communicator& comm) {
    torch::manual_seed(1);
    Mlp local(MlpOptions{6, {4}, 3});
    FullyShardedDataParallel zero(
        local.ptr(), {}, borrow(comm),
        std::make_unique<torch::optim::Adam>(local->parameters(), torch::optim::AdamOptions(0.01)));
    zero.gatherAll();
    auto named = local->named_parameters();
    (at::matmul(at::randn({2, 4}), named["fc1.weight"].t()) + named["fc1.bias"]).sum().backward();
    EXPECT_HAS(test::errorOf([&] { zero.finishGradientSync(); }), "fc0.weight");
  });
}

TEST(Zero3, BadInputNamesTheParameterOrTheStrategy) {
  test::runRanks(1, [&](int, Communicator& comm) {
    torch::manual_seed(1);
    Mlp local(MlpOptions{6, {4}, 3});
    auto adam = [&] {
      return std::make_unique<torch::optim::Adam>(local->parameters(), torch::optim::AdamOptions(0.01));
    };
    auto layers = test::mlpLayers(local);
    // A layer missing: its parameters belong to no unit.
    std::vector<Layer> partial{layers[0]};
    std::string message = test::errorOf([&] { FullyShardedDataParallel(local.ptr(), partial, borrow(comm), adam()); });
    EXPECT_HAS(message, "fc1.weight");
    EXPECT_HAS(message, "no layer");
    // One module in two layers: a parameter in two units.
    std::vector<Layer> shared{layers[0], layers[1], layers[1]};
    shared[2].name = "again";
    message = test::errorOf([&] { FullyShardedDataParallel(local.ptr(), shared, borrow(comm), adam()); });
    EXPECT_HAS(message, "fc1.weight");
    EXPECT_HAS(message, "again");
    // Not float32.
    Mlp wide(MlpOptions{6, {4}, 3});
    wide->to(at::kDouble);
    message = test::errorOf([&] {
      FullyShardedDataParallel(
          wide.ptr(), {}, borrow(comm),
          std::make_unique<torch::optim::Adam>(wide->parameters(), torch::optim::AdamOptions(0.01)));
    });
    EXPECT_HAS(message, "fc0.weight");
    EXPECT_HAS(message, "float32");
    // Not on the CPU: LibTorch's meta device (shapes without storage) stands in for an accelerator here.
    auto elsewhere = std::make_shared<torch::nn::Module>();
    elsewhere->register_parameter("kernel", at::empty({4, 3}, at::TensorOptions().device(at::kMeta)));
    message = test::errorOf([&] {
      FullyShardedDataParallel(
          elsewhere, {}, borrow(comm),
          std::make_unique<torch::optim::Adam>(elsewhere->parameters(), torch::optim::AdamOptions(0.01)));
    });
    EXPECT_HAS(message, "FullyShardedDataParallel (ZeRO-3) takes CPU or CUDA parameters; on meta");
    // ZeRO-2 takes any one device, but not two.
    auto split = std::make_shared<torch::nn::Module>();
    split->register_parameter("here", at::zeros({4}));
    split->register_parameter("there", at::empty({4, 3}, at::TensorOptions().device(at::kMeta)));
    message = test::errorOf([&] {
      ShardedDataParallel(split, borrow(comm),
                          std::make_unique<torch::optim::Adam>(split->parameters(), torch::optim::AdamOptions(0.01)));
    });
    EXPECT_HAS(message, "'there'");
    EXPECT_HAS(message, "float32 parameters on one device (cpu)");
    StrategyOptions piped;
    piped.type = StrategyType::kZero3;
    piped.pipeline.stages = 2;
    const LossFn noLoss = [](torch::nn::Module&, const Batch&) { return at::Tensor(); };
    EXPECT_HAS(test::errorOf([&] { makeStrategy(wholeModel(local.ptr(), noLoss), borrow(comm), piped, adam()); }),
               "strategy.type zero3 cannot be combined with parallel.pipeline 2");
    // What ZeRO does not take, named with the front and the stage.
    EXPECT_HAS(test::errorOf([&] { FullyShardedDataParallel(local.ptr(), layers, borrow(comm), nullptr); }),
               "FullyShardedDataParallel needs a module, a communicator and an optimizer");
    SyncOptions compressed;
    compressed.compression = GradCompression::kFp16;
    EXPECT_HAS(test::errorOf([&] { ShardedDataParallel(local.ptr(), borrow(comm), adam(), compressed); }),
               "ZeRO-2 reduce-scatters float32 gradients");
    EXPECT_HAS(test::errorOf([&] { FullyShardedDataParallel(local.ptr(), layers, borrow(comm), adam(), compressed); }),
               "ZeRO-3 reduce-scatters float32 gradients");
  });
}

}  // namespace
}  // namespace lockstep
