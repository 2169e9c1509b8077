// GlobalBatchPlan: the same global batches in the same order whatever the world, every sample of
// an epoch once across a change of world, shares whose weighted mean losses make the step's mean,
// and DistributedSampler's batches where the world divides the micro-batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "lockstep/common/error.h"
#include "lockstep/data/global_batches.h"
#include "lockstep/data/sampler.h"

namespace lockstep {
namespace {

GlobalBatchOptions options(int64_t n, int64_t globalBatch, int64_t micro, uint64_t seed = 11) {
  GlobalBatchOptions o;
  o.datasetSize = n;
  o.globalBatch = globalBatch;
  o.microBatches = micro;
  o.seed = seed;
  return o;
}

/// Every sample rank `rank` of `world` trains in step `step`, over its micro-batches.
std::vector<int64_t> rankStep(const GlobalBatchPlan& plan, int64_t step, int rank, int world) {
  std::vector<int64_t> out;
  for (int64_t m = 0; m < plan.options().microBatches; ++m) {
    const auto s = plan.share(step, m, rank, world).indices;
    out.insert(out.end(), s.begin(), s.end());
  }
  return out;
}

TEST(GlobalBatchPlan, EveryWorldSharesTheSameStepsWithoutOverlap) {
  GlobalBatchPlan plan(options(203, 24, 2));
  plan.setEpoch(3);
  ASSERT_EQ(plan.stepsPerEpoch(), 8);
  const auto order = globalOrder(203, true, 11, 3);
  for (int world = 1; world <= 7; ++world) {
    for (int64_t step = 0; step < plan.stepsPerEpoch(); ++step) {
      std::vector<int64_t> together;
      for (int r = 0; r < world; ++r) {
        const auto part = rankStep(plan, step, r, world);
        together.insert(together.end(), part.begin(), part.end());
      }
      auto expected = std::vector<int64_t>(order.begin() + step * 24, order.begin() + (step + 1) * 24);
      EXPECT_EQ(plan.stepSamples(step), expected);
      std::sort(together.begin(), together.end());
      std::sort(expected.begin(), expected.end());
      EXPECT_EQ(together, expected) << "world " << world << ", step " << step;
    }
  }
}

TEST(GlobalBatchPlan, AWorldChangedBetweenStepsTrainsEverySampleOfTheEpochOnce) {
  GlobalBatchPlan plan(options(100, 16, 1));
  std::multiset<int64_t> trained;
  for (int64_t step = 0; step < plan.stepsPerEpoch(); ++step) {
    const int world = step < 3 ? 4 : 3;  // a worker lost after step 3
    for (int r = 0; r < world; ++r) {
      const auto part = rankStep(plan, step, r, world);
      trained.insert(part.begin(), part.end());
    }
  }
  EXPECT_EQ(trained.size(), 96u);  // 6 steps of 16; the 4 left over are no step's
  EXPECT_EQ(std::set<int64_t>(trained.begin(), trained.end()).size(), trained.size()) << "a sample trained twice";
}

TEST(GlobalBatchPlan, WeightedMeansOfTheSharesAreTheStepsMean) {
  // Data parallelism averages the ranks' gradients: sum over ranks and micro-batches of
  // lossScale x the share's mean, divided by the world, must be the mean over the step's samples.
  std::mt19937 draw(5);
  std::vector<double> value(90);
  for (auto& v : value) v = std::uniform_real_distribution<double>(-1, 1)(draw);
  for (int64_t micro : {1, 3}) {
    GlobalBatchPlan plan(options(90, 17, micro));
    for (int world = 1; world <= 6; ++world) {
      double total = 0;
      for (int64_t m = 0; m < micro; ++m) {
        for (int r = 0; r < world; ++r) {
          const BatchShare s = plan.share(1, m, r, world);
          double mean = 0;
          for (int64_t i : s.indices) mean += value[static_cast<size_t>(i)] / static_cast<double>(s.indices.size());
          if (!s.indices.empty()) total += s.lossScale * mean / world;
        }
      }
      double expected = 0;
      for (int64_t i : plan.stepSamples(1)) expected += value[static_cast<size_t>(i)] / 17;
      EXPECT_NEAR(total, expected, 1e-12) << "world " << world << ", " << micro << " micro-batch(es)";
    }
  }
}

TEST(GlobalBatchPlan, WhereTheWorldDividesTheMicroBatchesSharesAreTheSamplersBatches) {
  const int world = 3, micro = 2;
  const int64_t perRank = 4, n = 157;
  GlobalBatchPlan plan(options(n, perRank * world * micro, micro));
  for (int64_t epoch : {0, 1}) {
    plan.setEpoch(epoch);
    for (int r = 0; r < world; ++r) {
      SamplerOptions so;
      so.datasetSize = n;
      so.rank = r;
      so.worldSize = world;
      so.seed = 11;
      DistributedSampler sampler(so);
      sampler.setEpoch(epoch);
      for (int64_t step = 0; step < plan.stepsPerEpoch(); ++step) {
        for (int64_t m = 0; m < micro; ++m) {
          const BatchShare s = plan.share(step, m, r, world);
          EXPECT_EQ(s.indices, sampler.batch(step * micro + m, perRank)) << "rank " << r << " step " << step;
          EXPECT_DOUBLE_EQ(s.lossScale, 1.0 / micro);
        }
      }
    }
  }
}

TEST(GlobalBatchPlan, AWorldLargerThanAMicroBatchLeavesSomeRanksEmpty) {
  GlobalBatchPlan plan(options(20, 5, 2));  // micro-batches of 3 and 2
  EXPECT_EQ(plan.microBatchSize(0), 3);
  EXPECT_EQ(plan.microBatchSize(1), 2);
  const BatchShare empty = plan.share(0, 1, 2, 4);
  EXPECT_TRUE(empty.indices.empty());
  EXPECT_EQ(empty.lossScale, 0);
}

TEST(GlobalBatchPlan, BadOptionsAndArgumentsAreNamed) {
  auto message = [](auto f) {
    try {
      f();
    } catch (const Error& e) { return std::string(e.what()); }
    return std::string("no error");
  };
  EXPECT_NE(message([] { GlobalBatchPlan(options(10, 0, 1)); }).find("globalBatch = 0"), std::string::npos);
  EXPECT_NE(message([] { GlobalBatchPlan(options(10, 4, 5)); }).find("microBatches = 5"), std::string::npos);
  EXPECT_NE(message([] { GlobalBatchPlan(options(3, 4, 1)); }).find("datasetSize = 3"), std::string::npos);
  GlobalBatchPlan plan(options(10, 4, 2));
  EXPECT_NE(message([&] { plan.share(2, 0, 0, 1); }).find("step 2, expected in [0, 2)"), std::string::npos);
  EXPECT_NE(message([&] { plan.share(0, 2, 0, 1); }).find("micro-batch 2"), std::string::npos);
  EXPECT_NE(message([&] { plan.share(0, 0, 3, 3); }).find("rank = 3"), std::string::npos);
  EXPECT_NE(message([&] { plan.share(0, 0, 0, 0); }).find("world = 0"), std::string::npos);
}

}  // namespace
}  // namespace lockstep
