// The monitor callbacks on a real Trainer: two ranks (a thread each, Gloo over
// loopback) train a small MLP and the run directory is read back.
// MonitorCost: what the callbacks cost the training thread per step.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <filesystem>

#include "lockstep/models/char_lstm.h"
#include "lockstep/monitor/monitor.h"
#include "lockstep/monitor/progress.h"
#include "lockstep/train/trainer.h"
#include "monitor/run_dir.h"
#include "support/subprocess.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(MonitorFit, TwoRanksWriteTheRunDirectory) {
  std::string dir = test::makeTempDir() + "/runs/tiny";
  at::manual_seed(5);
  at::Tensor x = at::randn({256, 12}), y = at::randn({256, 5});
  at::Tensor vx = at::randn({64, 12}), vy = at::randn({64, 5});
  TrainerOptions options;
  options.epochs = 2;
  options.batchSize = 16;  // per worker: 256 / 32 = 8 steps per epoch
  options.optimizer.type = OptimizerType::kSgd;
  options.optimizer.lr = 0.05;
  options.logEvery = 4;
  options.ddp.bucketCapMb = 0.0005;  // several buckets, so the timeline has communication
  options.validate = true;
  options.loader.numWorkers = 0;
  std::vector<FitResult> results(2);
  test::runRanks(2, [&](int rank, Communicator& comm) {
    MonitorOptions m;
    m.dir = dir;
    m.rank = rank;
    m.worldSize = 2;
    m.configText = "trainer:\n  epochs: 2\n";
    m.systemInterval = 0.05;
    m.traceSteps = 5;
    m.progress = ProgressMode::kLines;
    m.progressInterval = 0;
    TrainerOptions o = options;
    o.callbacks = makeMonitorCallbacks(m);
    torch::manual_seed(1);
    Mlp model(MlpOptions{12, {16, 16}, 5});
    Trainer trainer(std::shared_ptr<Communicator>(&comm, [](Communicator*) {}), o);
    TensorDataset train(x, y), validation(vx, vy);
    results[rank] = trainer.fit(
        model.ptr(),
        [](torch::nn::Module& mod, const Batch& b) {
          return at::mse_loss(static_cast<MlpImpl&>(mod).forward(b.inputs), b.targets);
        },
        train, &validation);
  });
  const int64_t steps = results[0].steps;
  ASSERT_EQ(steps, 16);

  auto run = json::parse(test::readFile(dir + "/run.json"));
  EXPECT_EQ(run["status"], "finished");
  EXPECT_EQ(run["name"], "tiny");
  EXPECT_EQ(run["world_size"], 2);
  EXPECT_EQ(run["step"], steps);
  EXPECT_EQ(run["total_steps"], steps);
  EXPECT_EQ(run["global_batch"], 32);
  EXPECT_EQ(test::readFile(dir + "/config.yaml"), "trainer:\n  epochs: 2\n");

  int train = 0, val = 0;
  for (const auto& l : test::readJsonLines(dir + "/metrics.jsonl")) {
    if (l["kind"] == "train") {
      ++train;
      EXPECT_EQ(l["step"].get<int64_t>() % 4, 0);
      EXPECT_GT(l["samples_per_sec"].get<double>(), 0);
      EXPECT_GT(l["loss"].get<double>(), 0);
    } else {
      ++val;
      EXPECT_EQ(l["kind"], "val");
      EXPECT_GT(l["val_loss"].get<double>(), 0);
      EXPECT_TRUE(l["val_accuracy"].is_null());  // no CorrectFn
    }
  }
  EXPECT_EQ(train, 4);
  EXPECT_GE(val, 2);  // after each epoch
  EXPECT_EQ(test::readLines(dir + "/metrics.csv").size(), static_cast<size_t>(1 + train + val));

  for (int rank = 0; rank < 2; ++rank) {
    auto phases = test::readJsonLines(dir + "/phases/rank" + std::to_string(rank) + ".jsonl");
    ASSERT_EQ(phases.size(), static_cast<size_t>(steps)) << "rank " << rank;
    for (const auto& p : phases) {
      EXPECT_GT(p["buckets"].get<int>(), 1);
      EXPECT_GT(p["comm_ms"].get<double>(), 0);
      double sum = p["data_wait_ms"].get<double>() + p["forward_ms"].get<double>() + p["backward_ms"].get<double>() +
                   p["comm_wait_ms"].get<double>() + p["optimizer_ms"].get<double>();
      EXPECT_NEAR(sum, p["step_ms"].get<double>(), 0.01);  // the phases tile the step
    }
    auto trace = json::parse(test::readFile(dir + "/timeline/rank" + std::to_string(rank) + ".trace.json"));
    int stepSlices = 0, bucketSlices = 0;
    for (const auto& e : trace["traceEvents"]) {
      EXPECT_EQ(e["pid"], rank);
      std::string name = e["name"];
      stepSlices += name.rfind("step ", 0) == 0;
      bucketSlices += name.rfind("allreduce bucket ", 0) == 0;
    }
    EXPECT_EQ(stepSlices, 5);
    EXPECT_GE(bucketSlices, 5 * 2);
    auto system = test::readJsonLines(dir + "/system/rank" + std::to_string(rank) + ".jsonl");
    ASSERT_GE(system.size(), 1u);
    EXPECT_EQ(system[0]["rank"], rank);
  }
  int eventFiles = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    eventFiles += entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_EQ(eventFiles, 1);
}

double threadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// What monitoring adds to the training thread per step (the system sampler
// runs on its own thread): every callback of rank 0, a log every 50 steps, a
// trace of the first 50. CPU time of this thread, so other load on the
// machine does not count. docs/monitoring.md quotes the printed figure.
TEST(MonitorCost, TrainingThreadCpuPerStep) {
  MonitorOptions m;
  m.dir = test::makeTempDir() + "/cost";
  m.progress = ProgressMode::kOff;
  auto callbacks = makeMonitorCallbacks(m);
  // The bar as on a terminal, drawn into /dev/null.
  int devNull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(devNull, 0);
  callbacks.push_back(std::make_shared<ProgressReporter>(ProgressMode::kBar, 10, devNull));
  FitInfo info;
  info.totalSteps = 5000;
  info.globalBatch = 256;
  info.epochs = 1;
  info.unixTimeAtOrigin = 1700000000.0;
  std::vector<StepRecord> records;
  for (int s = 1; s <= 5000; ++s) records.push_back(test::syntheticStep(s, s * 1e5));
  for (auto& c : callbacks) c->onFitStart(info);
  double start = threadCpuSeconds();
  for (const auto& r : records) {
    for (auto& c : callbacks) c->onStepEnd(r);
    if (r.step % 50 == 0) {
      LogRecord log{r.step, 5000, 0, 0.5, 0.001, 3000, 0.08, r.startUs + r.durationUs};
      for (auto& c : callbacks) c->onLog(log);
    }
  }
  double perStepUs = (threadCpuSeconds() - start) / 5000 * 1e6;
  for (auto& c : callbacks) c->onFitEnd(FitResult{});
  std::printf("monitoring: %.1f us of training-thread CPU per step (5000 steps, a log every 50)\n", perStepUs);
  // Measured 5-7.4 us (five runs); the bound allows 4x for a slower machine and stays far below a step.
  EXPECT_LT(perStepUs, 30) << "monitoring must stay far below a step's time";
  EXPECT_EQ(test::readLines(m.dir + "/phases/rank0.jsonl").size(), 5000u);
  ::close(devNull);
}

}  // namespace
}  // namespace lockstep
