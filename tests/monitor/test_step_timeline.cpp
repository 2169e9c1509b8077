// Per-rank step files from synthetic records: phases/rank<R>.jsonl is
// buffered until a log, the Chrome trace holds only the first N steps with
// the phases on tid 0 and the buckets on tid 1 of pid = rank.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "lockstep/monitor/step_timeline.h"
#include "lockstep/train/trainer.h"
#include "monitor/run_dir.h"
#include "monitor/system_sample.h"
#include "support/subprocess.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

FitInfo fitInfo(int rank) {
  FitInfo info;
  info.rank = rank;
  info.worldSize = 4;
  info.totalSteps = 8;
  info.unixTimeAtOrigin = 1700000000.0;
  return info;
}

TEST(StepTimeline, BucketUnionMergesOverlaps) {
  EXPECT_DOUBLE_EQ(bucketUnionUs({}), 0);
  // [2200, 2800] and [2600, 3500] overlap: 1300 µs; [4000, 4100] apart: +100.
  auto step = test::syntheticStep(1, 0);
  EXPECT_DOUBLE_EQ(bucketUnionUs(step.buckets), 1300);
  step.buckets.push_back(BucketSpan{2, 8, 4000, 4100});
  EXPECT_DOUBLE_EQ(bucketUnionUs(step.buckets), 1400);
}

TEST(StepTimeline, PhaseLinesAreBufferedUntilALog) {
  std::string dir = test::makeTempDir();
  std::string phases = dir + "/phases/rank3.jsonl";
  StepTimeline timeline(dir, 3, 0);
  EXPECT_FALSE(fs::exists(dir + "/timeline"));  // trace_steps 0: no trace
  timeline.onFitStart(fitInfo(3));
  for (int s = 1; s <= 3; ++s) timeline.onStepEnd(test::syntheticStep(s, s * 10000.0));
  EXPECT_EQ(fs::file_size(phases), 0u);
  timeline.onLog(LogRecord{});
  auto lines = test::readJsonLines(phases);
  ASSERT_EQ(lines.size(), 3u);
  const auto& l = lines[1];
  EXPECT_EQ(l["step"], 2);
  EXPECT_NEAR(l["time"].get<double>(), 1700000000.0 + (20000 + 5000) * 1e-6, 1e-6);
  for (const char* key : {"data_wait_ms", "forward_ms", "backward_ms", "comm_wait_ms", "optimizer_ms"}) {
    EXPECT_DOUBLE_EQ(l[key].get<double>(), 1.0) << key;
  }
  EXPECT_DOUBLE_EQ(l["step_ms"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(l["comm_ms"].get<double>(), 1.3);
  EXPECT_EQ(l["buckets"], 2);
  EXPECT_FALSE(l.contains("device_peak_bytes")) << "on the CPU";
  StepRecord onGpu = test::syntheticStep(4, 40000);
  onGpu.devicePeakBytes = int64_t{3} << 30;  // the CUDA caching allocator's peak of the step
  timeline.onStepEnd(onGpu);
  timeline.onFitEnd(FitResult{});
  lines = test::readJsonLines(phases);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[3]["device_peak_bytes"], int64_t{3} << 30);
}

TEST(StepTimeline, ChromeTraceHoldsTheFirstStepsOnly) {
  std::string dir = test::makeTempDir();
  std::string trace = dir + "/timeline/rank1.trace.json";
  {
    StepTimeline timeline(dir, 1, 3);
    EXPECT_EQ(timeline.tracePath(), trace);
    timeline.onFitStart(fitInfo(1));
    for (int s = 1; s <= 3; ++s) timeline.onStepEnd(test::syntheticStep(s, s * 10000.0));
    // Written as soon as the 3 steps are in: a run that dies later keeps it.
    EXPECT_EQ(json::parse(test::readFile(trace))["traceEvents"].size(), 4u + 3u * (1 + 5 + 2));
    for (int s = 4; s <= 6; ++s) timeline.onStepEnd(test::syntheticStep(s, s * 10000.0));
    timeline.onFitEnd(FitResult{});
  }
  auto doc = json::parse(test::readFile(trace));
  EXPECT_EQ(doc["displayTimeUnit"], "ms");
  std::set<int> steps;
  std::map<std::string, std::string> names;  // metadata "name/tid" -> value
  int phaseEvents = 0, bucketEvents = 0;
  for (const auto& e : doc["traceEvents"]) {
    EXPECT_EQ(e["pid"], 1);
    if (e["ph"] == "M") {
      names[e["name"].get<std::string>() + "/" + std::to_string(e["tid"].get<int>())] =
          e["args"].contains("name") ? e["args"]["name"].get<std::string>() : "";
      continue;
    }
    ASSERT_EQ(e["ph"], "X");
    std::string name = e["name"];
    double ts = e["ts"], dur = e["dur"];
    EXPECT_GE(dur, 0);
    EXPECT_GT(ts, 1.7e15);  // µs since the Unix epoch
    if (name.rfind("step ", 0) == 0) {
      EXPECT_EQ(e["tid"], 0);
      steps.insert(e["args"]["step"].get<int>());
      EXPECT_DOUBLE_EQ(dur, 5000);
    } else if (name.rfind("allreduce bucket ", 0) == 0) {
      EXPECT_EQ(e["tid"], 1);
      ++bucketEvents;
      int bucket = e["args"]["bucket"];
      EXPECT_EQ(name, "allreduce bucket " + std::to_string(bucket));
      EXPECT_EQ(e["args"]["bytes"], bucket == 0 ? 4096 : 1024);
      // Bucket 1 waits for bucket 0 on the communication thread: drawn from 2800, not its launch at 2600.
      int step = e["args"]["step"];
      double stepStart = 1700000000.0 * 1e6 + step * 10000.0;
      EXPECT_DOUBLE_EQ(ts - stepStart, bucket == 0 ? 2200 : 2800);
      EXPECT_DOUBLE_EQ(dur, bucket == 0 ? 600 : 700);
    } else {
      EXPECT_EQ(e["tid"], 0);
      ++phaseEvents;
      EXPECT_DOUBLE_EQ(dur, 1000);
    }
  }
  EXPECT_EQ(steps, (std::set<int>{1, 2, 3}));
  EXPECT_EQ(phaseEvents, 3 * 5);
  EXPECT_EQ(bucketEvents, 3 * 2);
  EXPECT_EQ(names["process_name/0"], "rank 1");
  EXPECT_EQ(names["thread_name/0"], "compute");
  EXPECT_EQ(names["thread_name/1"], "communication");
}

TEST(StepTimeline, EveryStepWithMinusOneAndTheTraceSurvivesAnUnfinishedFit) {
  std::string dir = test::makeTempDir();
  {
    StepTimeline timeline(dir, 0, -1);
    timeline.onFitStart(fitInfo(0));
    for (int s = 1; s <= 7; ++s) timeline.onStepEnd(test::syntheticStep(s, s * 10000.0));
  }  // destroyed without onFitEnd, as when fit() throws
  auto doc = json::parse(test::readFile(dir + "/timeline/rank0.trace.json"));
  int stepEvents = 0;
  for (const auto& e : doc["traceEvents"]) stepEvents += e["name"].get<std::string>().rfind("step ", 0) == 0;
  EXPECT_EQ(stepEvents, 7);
  EXPECT_EQ(test::readLines(dir + "/phases/rank0.jsonl").size(), 7u);
}

// The worker's system samples become counter tracks of its trace: the samples from 2 s before the
// first traced step on, CPU and memory always, the GPU's where a sample has one.
TEST(StepTimeline, SystemSamplesAreCounterTracks) {
  std::string dir = test::makeTempDir();
  auto samples = std::make_shared<detail::SystemSamples>();
  const double origin = 1700000000.0;  // fitInfo's; step 1 starts at origin + 10 ms
  detail::GpuSample gpu;
  gpu.utilPercent = 93;
  gpu.memBytes = int64_t{3} << 30;
  samples->add({origin - 5.0, 12, int64_t{100} << 20, 9, std::nullopt});  // too early: not drawn
  samples->add({origin - 1.0, 50, int64_t{200} << 20, 9, std::nullopt});
  samples->add({origin + 0.5, 175.5, int64_t{300} << 20, 11, gpu});
  {
    StepTimeline timeline(dir, 1, 2);
    timeline.drawSystemSamples(samples);
    timeline.onFitStart(fitInfo(1));
    for (int s = 1; s <= 2; ++s) timeline.onStepEnd(test::syntheticStep(s, s * 10000.0));
  }
  auto doc = json::parse(test::readFile(dir + "/timeline/rank1.trace.json"));
  std::vector<std::string> counters;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != "C") continue;
    EXPECT_EQ(e["pid"], 1);
    counters.push_back(fmt::format("{} @{} {}", e["name"].get<std::string>(),
                                   e["ts"].get<int64_t>() - int64_t{1700000000} * 1000000, e["args"].dump()));
  }
  EXPECT_EQ(counters,
            (std::vector<std::string>{"cpu % @-1000000 {\"cpu\":50}", "memory MiB @-1000000 {\"rss\":200}",
                                      "cpu % @500000 {\"cpu\":175.5}", "memory MiB @500000 {\"rss\":300}",
                                      "gpu % @500000 {\"util\":93}", "gpu memory MiB @500000 {\"used\":3072}"}));
}

}  // namespace
}  // namespace lockstep
