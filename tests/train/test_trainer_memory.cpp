// FitResult::memory: every rank's parameter, gradient, optimizer and buffer
// bytes, counted independently here from the model and the optimizer's
// documented state sizes, for ddp and zero1; the forward+backward peak when
// the counting allocator is on.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>

#include "lockstep/common/tensor_memory.h"
#include "lockstep/models/char_lstm.h"
#include "lockstep/train/trainer.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

std::vector<FitResult> fitRanks(int world, StrategyType strategy, int64_t& elements) {
  torch::manual_seed(2);
  at::Tensor x = at::randn({160, 12}), y = at::randn({160, 5});
  TrainerOptions o;
  o.maxSteps = 3;
  o.batchSize = 16;
  o.validate = false;
  o.logEvery = 1000;
  o.strategy = strategy;
  o.optimizer.type = OptimizerType::kAdam;
  std::vector<FitResult> results(static_cast<size_t>(world));
  std::vector<Mlp> models;
  for (int r = 0; r < world; ++r) models.emplace_back(MlpOptions{12, {64, 32}, 5});
  elements = 0;
  for (auto& p : models[0]->parameters()) elements += p.numel();
  test::runRanks(world, [&](int rank, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    TensorDataset data(x, y);
    LossFn mse = [](torch::nn::Module& m, const Batch& b) {
      return at::mse_loss(static_cast<MlpImpl&>(m).forward(b.inputs), b.targets);
    };
    results[static_cast<size_t>(rank)] = Trainer(shared, o).fit(models[static_cast<size_t>(rank)].ptr(), mse, data);
  });
  return results;
}

TEST(TrainerMemory, DdpRanksHoldTheWholeModelGradientsAndAdamState) {
  trackTensorMemory();
  int64_t n = 0;
  auto results = fitRanks(2, StrategyType::kDdp, n);
  for (const auto& result : results) {
    ASSERT_EQ(result.memory.size(), 2u) << "every rank's figures, on every rank";
    for (int r = 0; r < 2; ++r) {
      const RankMemory& m = result.memory[static_cast<size_t>(r)];
      EXPECT_EQ(m.rank, r);
      EXPECT_EQ(m.parameterBytes, 4 * n);
      EXPECT_EQ(m.gradientBytes, 4 * n);
      EXPECT_EQ(m.optimizerBytes, 8 * n) << "Adam: exp_avg and exp_avg_sq per element (its step is not a tensor)";
      EXPECT_EQ(m.commBufferBytes, 0) << "the gradients are DDP's buckets: held once, not twice";
      EXPECT_GT(m.peakRssBytes, 0);
    }
  }
}

TEST(TrainerMemory, OneWorkerAllocatesNoGradientBucketsAndReportsItsPeak) {
  trackTensorMemory();
  int64_t n = 0;
  auto results = fitRanks(1, StrategyType::kDdp, n);
  ASSERT_EQ(results[0].memory.size(), 1u);
  const RankMemory& m = results[0].memory[0];
  EXPECT_EQ(m.commBufferBytes, 0) << "a world of one communicates nothing";
  EXPECT_EQ(m.gradientBytes, 4 * n);
  // One rank alone in the process, so the process-wide counter is its own
  // (with ranks as threads each rank's peak includes the others'). At least
  // the hidden layers' activations: 16 x (64 + 32) floats.
  EXPECT_GT(m.stepPeakBytes, 16 * (64 + 32) * 4);
}

TEST(TrainerMemory, Zero1RanksSplitTheOptimizerState) {
  int64_t n = 0;
  auto results = fitRanks(3, StrategyType::kZero1, n);
  int64_t optimizerTotal = 0;
  for (const RankMemory& m : results[0].memory) {
    EXPECT_EQ(m.parameterBytes, 4 * n);
    EXPECT_LT(m.optimizerBytes, 8 * n) << "rank " << m.rank << " holds the whole optimizer state";
    optimizerTotal += m.optimizerBytes;
  }
  EXPECT_EQ(optimizerTotal, 8 * n);
}

}  // namespace
}  // namespace lockstep
