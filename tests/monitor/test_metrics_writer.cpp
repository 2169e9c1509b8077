// Rank 0's run files, written from synthetic callback records: run.json,
// config.yaml, metrics.jsonl/csv and the event file; resume appends; a bad
// directory is a clear error at start, a failing file later only a warning.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "lockstep/common/error.h"
#include "lockstep/monitor/metrics_writer.h"
#include "lockstep/monitor/monitor.h"
#include "lockstep/train/trainer.h"
#include "monitor/run_dir.h"
#include "support/expect.h"
#include "support/subprocess.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr double kOrigin = 1700000000.0;

FitInfo fitInfo(int64_t startStep = 0) {
  FitInfo info;
  info.worldSize = 2;
  info.totalSteps = 40;
  info.startStep = startStep;
  info.stepsPerEpoch = 20;
  info.epochs = 2;
  info.globalBatch = 256;
  info.unixTimeAtOrigin = kOrigin;
  return info;
}

LogRecord logAt(int64_t step, double loss) {
  return LogRecord{step, 40, (step - 1) / 20, loss, 0.002, 5000.0, 0.05, static_cast<double>(step) * 1e5};
}

/// One session of training: steps (from, to], a log every 10 steps, validation at `validationStep`.
void drive(MetricsWriter& w, int64_t from, int64_t to, int64_t validationStep, double accuracy, bool end = true) {
  w.onFitStart(fitInfo(from));
  for (int64_t s = from + 1; s <= to; ++s) {
    w.onStepEnd(test::syntheticStep(s, static_cast<double>(s) * 1e4));
    if (s % 10 == 0) w.onLog(logAt(s, 1.0 / static_cast<double>(s)));
    if (s == validationStep) w.onValidation(ValidationRecord{s, 0, 0.75, accuracy, static_cast<double>(s) * 1e5 + 10});
  }
  if (end) w.onFitEnd(FitResult{});
}

TEST(MetricsWriter, WritesEveryRunFileFromTheCallbacks) {
  std::string dir = test::makeTempDir() + "/runs/fashion";
  {
    MetricsWriter writer(dir, "", "model:\n  type: convnet\n");
    drive(writer, 0, 20, 20, 0.8125);
  }
  EXPECT_EQ(test::readFile(dir + "/config.yaml"), "model:\n  type: convnet\n");

  auto run = json::parse(test::readFile(dir + "/run.json"));
  EXPECT_EQ(run["name"], "fashion");
  EXPECT_EQ(run["status"], "finished");
  EXPECT_EQ(run["world_size"], 2);
  EXPECT_EQ(run["total_steps"], 40);
  EXPECT_EQ(run["step"], 20);
  EXPECT_EQ(run["global_batch"], 256);
  EXPECT_FALSE(run["hostname"].get<std::string>().empty());
  EXPECT_GT(run["start_time"].get<double>(), 1.6e9);
  EXPECT_GE(run["updated_time"].get<double>(), run["start_time"].get<double>());
  EXPECT_FALSE(fs::exists(dir + "/run.json.tmp"));

  auto lines = test::readJsonLines(dir + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], json::parse(R"({"kind":"train","step":10,"epoch":0,"time":1700000001.0,"loss":0.1,"lr":0.002,)"
                                  R"("samples_per_sec":5000.0,"step_time":0.05})"));
  EXPECT_EQ(test::readLines(dir + "/metrics.jsonl")[0].rfind(R"({"kind":"train","step":10,"epoch":0,"time":)", 0), 0u);
  EXPECT_EQ(lines[1]["step"], 20);
  EXPECT_DOUBLE_EQ(lines[1]["loss"].get<double>(), 0.05);
  EXPECT_EQ(lines[2]["kind"], "val");
  EXPECT_EQ(lines[2]["step"], 20);
  EXPECT_DOUBLE_EQ(lines[2]["val_loss"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(lines[2]["val_accuracy"].get<double>(), 0.8125);
  EXPECT_DOUBLE_EQ(lines[2]["time"].get<double>(), kOrigin + 2.00001);

  auto csv = test::readLines(dir + "/metrics.csv");
  ASSERT_EQ(csv.size(), 4u);
  EXPECT_EQ(csv[0], "kind,step,epoch,time,loss,lr,samples_per_sec,step_time,val_loss,val_accuracy");
  EXPECT_EQ(csv[1], "train,10,0,1700000001,0.1,0.002,5000,0.05,,");
  EXPECT_EQ(csv[2], "train,20,0,1700000002,0.05,0.002,5000,0.05,,");
  EXPECT_EQ(csv[3], "val,20,0,1700000002.00001,,,,,0.75,0.8125");

  int eventFiles = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) {
      ++eventFiles;
      // 1 version record + 2 logs x 4 scalars + val loss and accuracy; each record >= 16 bytes of framing.
      EXPECT_GT(entry.file_size(), 11u * 16u);
    }
  }
  EXPECT_EQ(eventFiles, 1);
}

TEST(MetricsWriter, ValidationWithoutAccuracyIsNull) {
  std::string dir = test::makeTempDir() + "/run";
  {
    MetricsWriter writer(dir, "named", "");
    drive(writer, 0, 5, 5, -1);
  }
  auto lines = test::readJsonLines(dir + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(lines[0]["val_accuracy"].is_null());
  EXPECT_EQ(test::readLines(dir + "/metrics.csv").back(), "val,5,0,1700000000.50001,,,,,0.75,");
  EXPECT_EQ(json::parse(test::readFile(dir + "/run.json"))["name"], "named");
}

TEST(MetricsWriter, ResumedRunAppendsAndWritesTheHeaderOnce) {
  std::string dir = test::makeTempDir() + "/run";
  {
    MetricsWriter first(dir, "", "first\n");
    drive(first, 0, 20, 0, -1);
  }
  {
    MetricsWriter second(dir, "", "second\n");
    drive(second, 20, 40, 0, -1);
  }
  auto lines = test::readJsonLines(dir + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 4u);
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i]["step"], 10 * static_cast<int>(i + 1));
  auto csv = test::readLines(dir + "/metrics.csv");
  ASSERT_EQ(csv.size(), 5u);
  EXPECT_EQ(csv[0].rfind("kind,", 0), 0u);
  EXPECT_EQ(csv[4].rfind("train,40,", 0), 0u);
  EXPECT_EQ(test::readFile(dir + "/config.yaml"), "second\n");
  auto run = json::parse(test::readFile(dir + "/run.json"));
  EXPECT_EQ(run["step"], 40);
  EXPECT_EQ(run["start_step"], 20);
}

TEST(MetricsWriter, FitThatNeverEndsLeavesStatusFailed) {
  std::string dir = test::makeTempDir() + "/run";
  {
    MetricsWriter writer(dir, "", "");
    drive(writer, 0, 10, 0, -1, /*end=*/false);
    EXPECT_EQ(json::parse(test::readFile(dir + "/run.json"))["status"], "running");
  }  // an exception unwinding the trainer destroys the callbacks without onFitEnd
  EXPECT_EQ(json::parse(test::readFile(dir + "/run.json"))["status"], "failed");
}

TEST(MetricsWriter, UnwritableDirectoryIsAClearErrorAtStart) {
  std::string blocker = test::makeTempDir() + "/not-a-dir";
  std::ofstream(blocker) << "x";
  std::string message = test::errorOf([&] { MetricsWriter writer(blocker + "/run", "", ""); });
  EXPECT_HAS(message, blocker + "/run");
  EXPECT_HAS(message, "monitor.dir");

  MonitorOptions o;
  o.dir = blocker;  // a file, not a directory
  message = test::errorOf([&] { makeMonitorCallbacks(o); });
  EXPECT_HAS(message, blocker);
}

TEST(MetricsWriter, AFileThatStopsAcceptingWritesOnlyWarns) {
  // metrics.jsonl on a full disk: /dev/full fails every write with ENOSPC.
  std::string dir = test::makeTempDir() + "/run";
  fs::create_directories(dir);
  fs::create_symlink("/dev/full", dir + "/metrics.jsonl");
  {
    MetricsWriter writer(dir, "", "");
    EXPECT_NO_THROW(drive(writer, 0, 30, 30, 0.5));
  }
  // The other files go on.
  EXPECT_EQ(test::readLines(dir + "/metrics.csv").size(), 5u);
  EXPECT_EQ(json::parse(test::readFile(dir + "/run.json"))["status"], "finished");
}

}  // namespace
}  // namespace lockstep
