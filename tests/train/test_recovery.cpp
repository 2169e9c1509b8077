// A lost worker's generation taken up by the next: 3 ranks train DDP with Adam at a fixed global
// batch (GlobalBatchPlan); after step 4 one leaves, the other two form a communicator of 2, take
// up the furthest state (recoverFromFurthest) and train on to step 8 — equal to 8 uninterrupted
// steps of 3 ranks to 1e-5 (relative: only the order of the float sums differs), also when the
// survivor that completed step 4 is not the new rank 0 and the other has nothing to give.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adam.h>

#include <string>
#include <vector>

#include "lockstep/data/global_batches.h"
#include "lockstep/train/recovery.h"
#include "support/elastic_steps.h"
#include "support/thread_ranks.h"
#include "train/zero_harness.h"

namespace lockstep {
namespace {

constexpr int kSteps = 8;
constexpr int kLoseAfter = 4;

struct Data {
  at::Tensor x, y;
};

/// Trains step `step` (0-based in the epoch) of `plan` on rank `rank` of `world`: its share, weighted.
void trainStep(Strategy& strategy, Mlp& mlp, const Data& d, const GlobalBatchPlan& plan, int64_t step, int rank,
               int world) {
  test::trainShare(strategy, *mlp, d.x, d.y, plan.share(step, 0, rank, world));
}

/// Rank 0's parameters after kSteps; with `behind` >= 0, rank 2 leaves after kLoseAfter steps and
/// the survivor `behind` (0 or 1) takes up the state of the other instead of bringing its own.
std::vector<at::Tensor> train(int behind) {
  torch::manual_seed(3);
  const Data d{at::randn({112, 12}), at::randn({112, 5})};
  GlobalBatchOptions po;
  po.datasetSize = 112;
  po.globalBatch = 14;  // 3 ranks share 5, 5, 4 of each step; 2 ranks 7, 7
  po.seed = 9;
  const GlobalBatchPlan plan(po);
  std::vector<Mlp> mlps;
  for (int r = 0; r < 3; ++r) {
    torch::manual_seed(r == 0 ? 1 : 40 + r);  // DDP starts every rank from rank 0's model
    mlps.emplace_back(MlpOptions{12, {16, 8}, 5});
  }
  std::vector<at::Tensor> out;
  test::runRanks(3, [&](int rank, Communicator& comm) {
    Mlp& mlp = mlps[static_cast<size_t>(rank)];
    const LayeredModel model{mlp.ptr(), test::mlpLayers(mlp),
                             [](const at::Tensor& o, const Batch& b) { return at::mse_loss(o, b.targets); }};
    StrategyBuilder build = [&](std::shared_ptr<Communicator> c) {
      auto adam = std::make_unique<torch::optim::Adam>(mlp->parameters(), torch::optim::AdamOptions(0.01));
      return makeStrategy(model, std::move(c), StrategyOptions{}, std::move(adam));
    };
    std::unique_ptr<Strategy> strategy = build(test::borrow(comm));
    strategy->start();
    int world = 3, myRank = rank;
    std::shared_ptr<Communicator> next;
    for (int64_t step = 0; step < kSteps; ++step) {
      if (behind >= 0 && step == kLoseAfter) {
        next = comm.split(rank == 2 ? -1 : 0, rank, "generation 2");
        if (rank == 2) return;  // lost
        world = 2;
        myRank = next->rank();
        const bool gives = myRank != behind;
        Recovery r = recoverFromFurthest(gives ? std::move(strategy) : nullptr, gives ? step : -1, next, build);
        EXPECT_EQ(r.step, kLoseAfter);
        EXPECT_EQ(r.source, 1 - behind);
        strategy = std::move(r.strategy);
      }
      trainStep(*strategy, mlp, d, plan, step, myRank, world);
    }
    if (rank != 0) return;
    for (const auto& p : mlp->parameters()) out.push_back(p.detach().clone());
  });
  return out;
}

void expectSameAsUninterrupted(int behind) {
  const auto straight = train(-1);
  const auto recovered = train(behind);
  ASSERT_EQ(straight.size(), recovered.size());
  ASSERT_GT(straight.size(), 4u);
  for (size_t i = 0; i < straight.size(); ++i) {
    const double scale = straight[i].abs().max().item<double>();
    const double diff = (straight[i] - recovered[i]).abs().max().item<double>();
    EXPECT_LE(diff, 1e-5 * scale) << "parameter " << i << " differs by " << diff;
  }
}

TEST(Recovery, SurvivorsTrainOnAsIfNoWorkerWasLost) { expectSameAsUninterrupted(1); }
TEST(Recovery, TheFurthestSurvivorNeedNotBeRankZero) { expectSameAsUninterrupted(0); }

}  // namespace
}  // namespace lockstep
