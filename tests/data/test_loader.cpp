// DataLoader: same batches in the same order whatever the number of workers,
// bounded prefetch, errors surface in next(), a new plan abandons the old one.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "lockstep/common/error.h"
#include "lockstep/data/loader.h"
#include "lockstep/data/sampler.h"

namespace lockstep {
namespace {

/// Batch = the indices themselves (plus the epoch), computed slowly; counts calls in flight.
class SlowDataset : public Dataset {
 public:
  int64_t size() const override { return 1000; }
  Batch batch(const std::vector<int64_t>& indices, int64_t epoch) const override {
    ++calls;
    int now = ++inFlight;
    int seen = maxInFlight.load();
    while (now > seen && !maxInFlight.compare_exchange_weak(seen, now)) {}
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    --inFlight;
    for (int64_t i : indices) {
      if (i == poison) throw Error("cannot decode sample " + std::to_string(i));
    }
    return {at::tensor(indices, at::kLong), at::full({1}, epoch, at::kLong)};
  }
  mutable std::atomic<int> calls{0};
  mutable std::atomic<int> inFlight{0};
  mutable std::atomic<int> maxInFlight{0};
  int64_t poison = -1;
};

std::vector<std::vector<int64_t>> planOf(int64_t epoch) {
  DistributedSampler sampler(SamplerOptions{1000, 1, 3, true, 5, false});
  sampler.setEpoch(epoch);
  std::vector<std::vector<int64_t>> plan;
  for (int64_t b = 0; b < sampler.numBatches(16, true); ++b) plan.push_back(sampler.batch(b, 16));
  return plan;
}

TEST(DataLoader, SameBatchesInOrderForAnyWorkerCount) {
  for (int workers : {0, 1, 3}) {
    SlowDataset data;
    DataLoader loader(data, LoaderOptions{workers, 4});
    auto plan = planOf(2);
    loader.start(plan, 2);
    for (const auto& expected : plan) {
      Batch b = loader.next();
      ASSERT_EQ(b.inputs.numel(), static_cast<int64_t>(expected.size()));
      for (size_t i = 0; i < expected.size(); ++i)
        EXPECT_EQ(b.inputs[static_cast<int64_t>(i)].item<int64_t>(), expected[i]);
      EXPECT_EQ(b.targets[0].item<int64_t>(), 2);
    }
    EXPECT_THROW(loader.next(), Error) << "past the end of the plan";
    EXPECT_EQ(loader.batchesServed(), static_cast<int64_t>(plan.size()));
  }
}

TEST(DataLoader, PrefetchIsBounded) {
  SlowDataset data;
  DataLoader loader(data, LoaderOptions{4, 2});
  loader.start(planOf(0), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // Nobody consumed: exactly `prefetch` batches were made ahead (a 2 ms batch
  // each, 100 ms to do it), no more, and never more than that at once.
  EXPECT_EQ(data.calls.load(), 2) << "the loader must prefetch, and only `prefetch` batches";
  EXPECT_GE(data.maxInFlight.load(), 1);
  EXPECT_LE(data.maxInFlight.load(), 2);
  loader.next();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(data.calls.load(), 3) << "one batch taken, one more made ahead";
}

TEST(DataLoader, WorkerErrorsSurfaceInNext) {
  SlowDataset data;
  auto plan = planOf(0);
  data.poison = plan[3][5];
  DataLoader loader(data, LoaderOptions{2, 4});
  loader.start(plan, 0);
  for (int i = 0; i < 3; ++i) loader.next();
  try {
    loader.next();
    ADD_FAILURE() << "the decoding error was lost";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot decode sample " + std::to_string(plan[3][5])), std::string::npos);
  }
}

TEST(DataLoader, NewPlanAbandonsTheOld) {
  SlowDataset data;
  DataLoader loader(data, LoaderOptions{2, 8});
  loader.start(planOf(0), 0);
  loader.next();
  auto plan = planOf(1);
  loader.start(plan, 1);
  Batch b = loader.next();
  EXPECT_EQ(b.inputs[0].item<int64_t>(), plan[0][0]);
  EXPECT_EQ(b.targets[0].item<int64_t>(), 1);
}

TEST(DataLoader, TensorDatasetGathersRows) {
  TensorDataset data(at::arange(10, at::kFloat).view({5, 2}), at::arange(5, at::kLong));
  DataLoader loader(data, LoaderOptions{1, 2});
  loader.start({{4, 0}}, 0);
  Batch b = loader.next();
  EXPECT_EQ(b.inputs[0][1].item<float>(), 9.0f);
  EXPECT_EQ(b.targets[1].item<int64_t>(), 0);
  EXPECT_THROW(TensorDataset(at::zeros({3, 1}), at::zeros({2})), Error);
  EXPECT_THROW(DataLoader(data, LoaderOptions{-1, 2}), Error);
}

}  // namespace
}  // namespace lockstep
