// The model of `lockstep bench predict` (cli/bench/scaling_model.h) on cases worked
// out by hand: link parsing, the allreduce cost of each algorithm, the fit of
// the backend's own cost, and the step timeline (buckets released during
// backward, one allreduce at a time, what is left after backward is exposed).
#include <gtest/gtest.h>

#include "cli/bench/scaling_model.h"
#include "lockstep/common/error.h"

namespace lockstep::cli {
namespace {

TEST(ScalingModel, ParsesLinksWithAndWithoutLatency) {
  auto links = parseLinks("10gbit,1Gbit@20us,100mbit@0.5ms", 25e-6);
  ASSERT_EQ(links.size(), 3u);
  EXPECT_EQ(links[0].name, "10gbit");
  EXPECT_DOUBLE_EQ(links[0].bitsPerSecond, 1e10);
  EXPECT_DOUBLE_EQ(links[0].latencySeconds, 25e-6);
  EXPECT_DOUBLE_EQ(links[1].bitsPerSecond, 1e9);
  EXPECT_DOUBLE_EQ(links[1].latencySeconds, 20e-6);
  EXPECT_DOUBLE_EQ(links[2].bitsPerSecond, 1e8);
  EXPECT_DOUBLE_EQ(links[2].latencySeconds, 5e-4);
  for (const char* bad : {"10gbps", "fast", "", "1gbit,", "-1gbit", "1gbit@soon", "0mbit"}) {
    try {
      parseLinks(bad, 25e-6);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) { EXPECT_NE(std::string(e.what()).find("--link"), std::string::npos) << e.what(); }
  }
  EXPECT_DOUBLE_EQ(parseLatencySeconds("0s", "--latency"), 0);
  EXPECT_THROW(parseLatencySeconds("25", "--latency"), ConfigError);
}

TEST(ScalingModel, AllreduceCostsOfRingAndHalvingDoubling) {
  LinkSpec gigabit{"1gbit", 1e9, 10e-6};
  // Two workers: each sends its 1 MB once (8 ms at 1 Gbit) over 2 hops.
  EXPECT_NEAR(allreduceSeconds(AllreduceAlgorithm::kRing, 1'000'000, 2, gigabit, 0), 8e-3 + 2 * 10e-6, 1e-12);
  // Eight: 2·7/8 of the bytes, 14 hops in a ring, 6 halving-doubling.
  const double wire = 2.0 * 7 / 8 * 8e-3;
  EXPECT_NEAR(allreduceSeconds(AllreduceAlgorithm::kRing, 1'000'000, 8, gigabit, 0), wire + 14 * 10e-6, 1e-12);
  EXPECT_NEAR(allreduceSeconds(AllreduceAlgorithm::kHalvingDoubling, 1'000'000, 8, gigabit, 0), wire + 6 * 10e-6,
              1e-12);
  EXPECT_NEAR(allreduceSeconds(AllreduceAlgorithm::kFastest, 1'000'000, 8, gigabit, 0), wire + 6 * 10e-6, 1e-12);
  // The backend's own cost adds per byte moved.
  EXPECT_NEAR(allreduceSeconds(AllreduceAlgorithm::kRing, 1'000'000, 2, gigabit, 1e-9), 8e-3 + 1e-3 + 2 * 10e-6, 1e-12);
  EXPECT_EQ(allreduceSeconds(AllreduceAlgorithm::kRing, 1'000'000, 1, gigabit, 0), 0);
}

TEST(ScalingModel, FitsTheBackendsCostPerByteAndPerCall) {
  SoftwareCost fit = fitSoftwareCost({{65'536, 1e-3 + 65'536 * 0.5e-9}, {16'777'216, 1e-3 + 16'777'216 * 0.5e-9}});
  EXPECT_NEAR(fit.perByteSeconds, 0.5e-9, 1e-15);
  EXPECT_NEAR(fit.perCallSeconds, 1e-3, 1e-10);
  // A line below zero at no bytes: through zero instead.
  fit = fitSoftwareCost({{1'000, 0}, {1'000'000, 1e-3}});
  EXPECT_EQ(fit.perCallSeconds, 0);
  EXPECT_NEAR(fit.perByteSeconds, 1e-9, 1e-12);
  // One size cannot separate the two: all of it per byte.
  fit = fitSoftwareCost({{1'000'000, 2e-3}});
  EXPECT_EQ(fit.perCallSeconds, 0);
  EXPECT_NEAR(fit.perByteSeconds, 2e-9, 1e-18);
  EXPECT_EQ(fitSoftwareCost({}).perByteSeconds, 0);
}

ModelInputs twoBucketModel(double firstReady) {
  ModelInputs in;
  in.single.workers = 1;
  in.single.globalBatch = 100;
  in.single.samplesPerSecond = 1000;  // 100 ms a step alone
  in.single.forward = 0.04;
  in.single.backward = 0.06;
  in.pair = in.single;
  in.pair.workers = 2;
  in.pair.globalBatch = 200;
  in.pair.forward = 0.05;
  in.pair.backward = 0.07;
  in.pair.optimizer = 0.01;  // compute 130 ms a step with two workers
  // 1 MB released at firstReady after backward's start, 1 MB at its end.
  in.pair.buckets = {ProfiledBucket{1'000'000, firstReady, 0}, ProfiledBucket{1'000'000, 0.07, 0}};
  return in;
}

TEST(ScalingModel, OnlyCommunicationAfterBackwardIsExposed) {
  LinkSpec gigabit{"1gbit", 1e9, 0};  // 8 ms per bucket at two workers
  ModelInputs in = twoBucketModel(0.01);
  Prediction p = predict(in, gigabit, 2);
  EXPECT_NEAR(p.commSeconds, 0.016, 1e-12);
  EXPECT_NEAR(p.exposedSeconds, 0.008, 1e-12) << "the first bucket hides behind backward, the last cannot";
  EXPECT_NEAR(p.computeSeconds, 0.13, 1e-12);
  EXPECT_NEAR(p.stepSeconds, 0.138, 1e-12);
  EXPECT_NEAR(p.samplesPerSecond, 200 / 0.138, 1e-9);
  EXPECT_NEAR(p.efficiency, 200 / 0.138 / 2000, 1e-12);
  // Released 2 ms before backward's end, the first bucket is still on the wire when the second comes.
  p = predict(twoBucketModel(0.068), gigabit, 2);
  EXPECT_NEAR(p.exposedSeconds, 0.014, 1e-12);
  // A slow link: 80 ms per bucket, the channel busy past backward's end.
  LinkSpec slow{"100mbit", 1e8, 0};
  p = predict(twoBucketModel(0.01), slow, 2);
  EXPECT_NEAR(p.exposedSeconds, 0.01 + 0.16 - 0.07, 1e-12);
  // More workers move 2(N-1)/N of the bytes: 14 ms per bucket at 8 (1 Gbit).
  p = predict(twoBucketModel(0.01), gigabit, 8);
  EXPECT_NEAR(p.exposedSeconds, 0.014, 1e-12) << "the first bucket done by 24 ms, the last one exposed";
  // One worker is the single profile.
  p = predict(twoBucketModel(0.01), gigabit, 1);
  EXPECT_DOUBLE_EQ(p.samplesPerSecond, 1000);
  EXPECT_DOUBLE_EQ(p.efficiency, 1);
}

TEST(ScalingModel, ABucketKeepsItsProfiledFixedCostAndScalesItsBytes) {
  LinkSpec free{"free", 1e15, 0};
  ModelInputs in = twoBucketModel(0.01);
  in.software.perByteSeconds = 1e-9;  // 1 ms of each bucket's profiled 3 ms is its bytes, 2 ms fixed
  for (auto& b : in.pair.buckets) b.commSeconds = 3e-3;
  Prediction two = predict(in, free, 2);
  EXPECT_NEAR(two.commSeconds, 6e-3, 1e-7) << "two workers on a free wire replay the profile";
  EXPECT_NEAR(two.exposedSeconds, 3e-3, 1e-7);
  Prediction four = predict(in, free, 4);
  EXPECT_NEAR(four.commSeconds, 2 * (2e-3 + 1.5e-3), 1e-7) << "four move 2·3/4 of the bytes";
}

TEST(ScalingModel, SharedCoresStretchCompute) {
  LinkSpec fast{"1000gbit", 1e12, 0};
  ModelInputs in = twoBucketModel(0.01);
  in.pair.threadsPerWorker = 1;
  in.sharedCores = 2;
  in.software.perByteSeconds = 1e-9;
  Prediction two = predict(in, fast, 2);
  EXPECT_NEAR(two.computeSeconds, 0.13, 1e-12) << "two workers on two cores: as profiled";
  Prediction four = predict(in, fast, 4);
  EXPECT_NEAR(four.computeSeconds, 0.26, 1e-12) << "four workers on two cores: twice the compute";
  // The backend's cost does not stretch: each bucket 2·3/4 of 1 MB at 1 ns/byte plus the wire.
  EXPECT_NEAR(four.commSeconds, 2 * (1.5e6 * 1e-9 + 1.5e6 * 8 / 1e12), 1e-12);
  // Backward stretched to 140 ms: the last bucket is released at its end, 1.5 ms exposed.
  EXPECT_NEAR(four.exposedSeconds, 1.5e-3 + 1.5e6 * 8 / 1e12, 1e-12);
  in.sharedCores = 0;
  EXPECT_NEAR(predict(in, fast, 4).computeSeconds, 0.13, 1e-12) << "own cores: no stretch";
}

}  // namespace
}  // namespace lockstep::cli
