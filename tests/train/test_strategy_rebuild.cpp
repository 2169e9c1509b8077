// A Strategy rebuilt in a running process: its state saved to memory after step k, a new strategy
// built over a new communicator of the same size, the state loaded, training continued — bit for
// bit what the strategy that was never rebuilt trains, for ddp, zero1-3 and pipeline stages.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adam.h>

#include <fmt/format.h>

#include <string>
#include <vector>

#include "lockstep/common/tensor_archive.h"
#include "lockstep/train/strategy.h"
#include "support/thread_ranks.h"
#include "train/zero_harness.h"

namespace lockstep {
namespace {

using test::borrow;

constexpr int kSteps = 6;
constexpr int kMicro = 2;  // micro-batches per step: the first accumulates without communication

/// Rows of micro-batch `micro` of step `step` for data rank `dataRank` (the ranks of one pipeline share them).
Batch batchAt(const at::Tensor& x, const at::Tensor& y, int step, int micro, int dataRank) {
  const int64_t rows = 4;
  const int64_t start = ((step * kMicro + micro) * 4 + dataRank) * rows % (x.size(0) - rows);
  Batch b;
  b.inputs = x.narrow(0, start, rows);
  b.targets = y.narrow(0, start, rows);
  return b;
}

/// What a rank ends with: the strategy's state (the unsplit model and the optimizer, as a checkpoint
/// holds them) and, without pipeline stages, the module's parameters (a stage steps only its own).
using Ending = std::vector<std::pair<std::string, at::Tensor>>;

/// Trains kSteps steps on `world` thread ranks; after step `rebuildAt` (0: never) the strategy's
/// state goes to memory, the strategy ends, and a new one over a new communicator loads it.
std::vector<Ending> train(const StrategyOptions& options, int world, int rebuildAt) {
  torch::manual_seed(7);
  const at::Tensor x = at::randn({96, 12});
  const at::Tensor y = at::randn({96, 5});
  std::vector<Ending> endings(static_cast<size_t>(world));
  std::vector<Mlp> mlps;  // here, not on the ranks' threads, which would share the generator
  for (int r = 0; r < world; ++r) {
    torch::manual_seed(r == 0 ? 1 : 50 + r);  // the strategies start every rank from rank 0's model
    mlps.emplace_back(MlpOptions{12, {16, 8}, 5});
  }
  test::runRanks(world, [&](int rank, Communicator& comm) {
    Mlp& mlp = mlps[static_cast<size_t>(rank)];
    const LayeredModel model{mlp.ptr(), test::mlpLayers(mlp),
                             [](const at::Tensor& out, const Batch& b) { return at::mse_loss(out, b.targets); }};
    auto adam = [&] {
      return std::make_unique<torch::optim::Adam>(mlp->parameters(),
                                                  torch::optim::AdamOptions(0.01).weight_decay(0.01));
    };
    std::shared_ptr<Communicator> current = borrow(comm);
    auto strategy = makeStrategy(model, current, options, adam());
    strategy->start();
    MicroBatchHooks hooks;
    const int dataRank = rank / static_cast<int>(options.pipeline.stages);
    for (int step = 1; step <= kSteps; ++step) {
      for (auto& p : mlp->parameters()) p.mutable_grad() = at::Tensor();
      for (int m = 0; m < kMicro; ++m) {
        strategy->trainMicroBatch(batchAt(x, y, step, m, dataRank), 1.0 / kMicro, m + 1 == kMicro, hooks);
      }
      strategy->finishGradientSync();
      strategy->step(/*clipGradNorm=*/0.5);
      if (step != rebuildAt) continue;
      TensorArchive state = strategyState(*strategy, *current);
      strategy->end();
      strategy.reset();
      current = comm.split(0, rank, "rebuilt");
      ASSERT_EQ(current->size(), comm.size());
      strategy = makeStrategy(model, current, options, adam());
      strategy->loadState(state, /*report=*/false);
      strategy->start();
    }
    Ending& ending = endings[static_cast<size_t>(rank)];
    const TensorArchive state = strategyState(*strategy, *current);
    for (const auto& key : state.keys()) {
      if (state.kind(key) == TensorArchive::Kind::kTensor) ending.emplace_back(key, state.getTensor(key));
    }
    strategy->end();
    if (options.pipeline.stages > 1) return;
    const auto named = mlp->named_parameters();
    for (const auto& p : named) ending.emplace_back("parameter " + p.key(), p.value().detach().clone());
  });
  return endings;
}

void expectRebuildContinues(const StrategyOptions& options, int world) {
  const auto straight = train(options, world, /*rebuildAt=*/0);
  const auto rebuilt = train(options, world, /*rebuildAt=*/3);
  for (int r = 0; r < world; ++r) {
    const Ending& a = straight[static_cast<size_t>(r)];
    const Ending& b = rebuilt[static_cast<size_t>(r)];
    ASSERT_EQ(a.size(), b.size()) << "rank " << r;
    ASSERT_GT(a.size(), 6u) << "rank " << r << ": the state has the model's tensors and Adam's";
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i].first, b[i].first) << "rank " << r;
      EXPECT_TRUE(a[i].second.sizes() == b[i].second.sizes() && at::equal(a[i].second, b[i].second))
          << "rank " << r << ", " << a[i].first << " differs";
    }
  }
}

StrategyOptions optionsOf(StrategyType type) {
  StrategyOptions o;
  o.type = type;
  o.sync.bucketCapMb = 0.001;  // several buckets
  return o;
}

TEST(StrategyRebuild, DdpContinuesBitIdentically) { expectRebuildContinues(optionsOf(StrategyType::kDdp), 2); }
TEST(StrategyRebuild, Zero1ContinuesBitIdentically) { expectRebuildContinues(optionsOf(StrategyType::kZero1), 2); }
TEST(StrategyRebuild, Zero2ContinuesBitIdentically) { expectRebuildContinues(optionsOf(StrategyType::kZero2), 2); }
TEST(StrategyRebuild, Zero3ContinuesBitIdentically) { expectRebuildContinues(optionsOf(StrategyType::kZero3), 2); }

TEST(StrategyRebuild, PipelineStagesContinueBitIdentically) {
  StrategyOptions o = optionsOf(StrategyType::kDdp);
  o.pipeline.stages = 2;  // 2 pipelines of 2 stages: DDP across the pipelines too
  o.pipeline.microbatches = 2;
  expectRebuildContinues(o, 4);
}

}  // namespace
}  // namespace lockstep
