// The model of `lockstep bench predict` (cli/scaling_model.h) on cases worked
// out by hand: link parsing, the allreduce cost of each algorithm, the fit of
// the backend's own cost, and the step timeline (buckets released during
// backward, one allreduce at a time, what is left after backward is exposed).
#include <gtest/gtest.h>

#include "cli/scaling_model.h"
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
  SoftwareCost none;
  // Two workers: each sends its 1 MB once (8 ms at 1 Gbit) over 2 hops.
  EXPECT_NEAR(allreduceSeconds(AllreduceAlgorithm::kRing, 1'000'000, 2, gigabit, none), 8e-3 + 2 * 10e-6, 1e-12);
  // Eight: 2·7/8 of the bytes, 14 hops in a ring, 6 halving-doubling.
  const double wire = 2.0 * 7 / 8 * 8e-3;
  EXPECT_NEAR(allreduceSeconds(AllreduceAlgorithm::kRing, 1'000'000, 8, gigabit, none), wire + 14 * 10e-6, 1e-12);
  EXPECT_NEAR(allreduceSeconds(AllreduceAlgorithm::kHalvingDoubling, 1'000'000, 8, gigabit, none), wire + 6 * 10e-6,
              1e-12);
  EXPECT_NEAR(allreduceSeconds(AllreduceAlgorithm::kFastest, 1'000'000, 8, gigabit, none), wire + 6 * 10e-6, 1e-12);
  SoftwareCost software{5e-6, 1e-9, true};  // adds per hop and per byte moved
  EXPECT_NEAR(allreduceSeconds(AllreduceAlgorithm::kRing, 1'000'000, 2, gigabit, software), 8e-3 + 1e-3 + 2 * 15e-6,
              1e-12);
  EXPECT_EQ(allreduceSeconds(AllreduceAlgorithm::kRing, 1'000'000, 1, gigabit, none), 0);
}

TEST(ScalingModel, FitsTheBackendsCostPerByteAndPerMessage) {
  StepProfile pair;
  pair.workers = 2;
  for (int64_t bytes : {100'000, 1'000'000, 4'000'000}) {
    pair.buckets.push_back(ProfiledBucket{bytes, 0, 2 * 40e-6 + bytes * 0.5e-9});
  }
  SoftwareCost fit = fitSoftwareCost(pair);
  EXPECT_TRUE(fit.fitted);
  EXPECT_NEAR(fit.perByteSeconds, 0.5e-9, 1e-15);
  EXPECT_NEAR(fit.perMessageSeconds, 40e-6, 1e-10);
  // One bucket cannot separate the two: all of it per byte.
  pair.buckets.resize(1);
  fit = fitSoftwareCost(pair);
  EXPECT_EQ(fit.perMessageSeconds, 0);
  EXPECT_NEAR(fit.perByteSeconds, (80e-6 + 100'000 * 0.5e-9) / 100'000, 1e-15);
  pair.buckets.clear();
  EXPECT_FALSE(fitSoftwareCost(pair).fitted);
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

TEST(ScalingModel, SharedCoresStretchComputeAndTheBackendsCost) {
  LinkSpec fast{"1000gbit", 1e12, 0};
  ModelInputs in = twoBucketModel(0.01);
  in.pair.threadsPerWorker = 1;
  in.sharedCores = 2;
  in.software = SoftwareCost{0, 1e-9, true};  // 1 ms per bucket at two workers
  Prediction two = predict(in, fast, 2);
  EXPECT_NEAR(two.computeSeconds, 0.13, 1e-12) << "two workers on two cores: as profiled";
  Prediction four = predict(in, fast, 4);
  EXPECT_NEAR(four.computeSeconds, 0.26, 1e-12) << "four workers on two cores: twice the compute";
  // Each bucket: 2·3/4 of 1 MB at 2 ns/byte (stretched) = 3 ms plus the wire (0.012 ms).
  EXPECT_NEAR(four.commSeconds, 2 * (1.5e6 * 2e-9 + 1.5e6 * 8 / 1e12), 1e-12);
  in.sharedCores = 0;
  EXPECT_NEAR(predict(in, fast, 4).computeSeconds, 0.13, 1e-12) << "own cores: no stretch";
}

}  // namespace
}  // namespace lockstep::cli
