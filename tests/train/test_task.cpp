// A user-defined Task through the public API: registered in a TaskRegistry of
// the program's own, chosen by data.dataset, trained on 2 ranks by trainTask.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <atomic>
#include <map>
#include <mutex>

#include "lockstep/train/task.h"
#include "support/subprocess.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

/// Linear regression on a fixed random set: the smallest workload a user might bring.
class SensorTask final : public Task {
 public:
  SensorTask(std::atomic<int>* afterFits, std::vector<std::shared_ptr<torch::nn::Module>>* models, std::mutex* mutex)
      : afterFits_(afterFits), models_(models), mutex_(mutex) {}

  TaskParts build(const TrainConfig& config, int /*rank*/) override {
    auto generator = at::detail::createCPUGenerator(42);  // the same data on every rank
    at::Tensor x = at::randn({200, 6}, generator);
    at::Tensor y = x.matmul(at::randn({6, 2}, generator));
    TaskParts parts;
    parts.model = torch::nn::Linear(6, 2).ptr();
    parts.train = std::make_shared<TensorDataset>(x, y);
    parts.loss = [](torch::nn::Module& m, const Batch& b) {
      return at::mse_loss(dynamic_cast<torch::nn::LinearImpl&>(m).forward(b.inputs), b.targets);
    };
    parts.checkpointExtras = {{"task", "sensors"}, {"inputs", "6"}};
    std::lock_guard<std::mutex> lock(*mutex_);
    models_->push_back(parts.model);
    return parts;
  }

  void afterFit(const TrainConfig& config, const FitResult& result, int rank) override {
    EXPECT_EQ(result.steps, 20);
    afterFits_->fetch_add(1);
  }

  std::atomic<int>* afterFits_;
  std::vector<std::shared_ptr<torch::nn::Module>>* models_;
  std::mutex* mutex_;
};

TEST(Task, AUserTaskTrainsThroughTheRegistryOnEveryRank) {
  std::string dir = test::makeTempDir() + "/ckpt";
  TrainConfig config = loadTrainConfig("", {"data.dataset=sensors", "trainer.batch_size=10", "trainer.epochs=2",
                                            "optimizer.type=sgd", "optimizer.lr=0.2", "trainer.log_every=5",
                                            "lr_scaling.rule=none", "data.num_workers=0", "checkpoint.dir=" + dir});
  std::atomic<int> afterFits{0};
  std::vector<std::shared_ptr<torch::nn::Module>> made;  // each rank's model
  std::mutex madeMutex;
  TaskRegistry tasks;
  tasks.add("sensors", [&] { return std::make_unique<SensorTask>(&afterFits, &made, &madeMutex); });
  std::vector<FitResult> results(2);
  test::runRanks(2, [&](int rank, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    results[rank] = trainTask(tasks, config, config.trainer, shared);
  });
  EXPECT_EQ(afterFits.load(), 2);
  ASSERT_EQ(made.size(), 2u);
  auto a = made[0]->parameters();
  auto b = made[1]->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << "parameter " << i << " differs";
  for (const auto& r : results) {
    EXPECT_EQ(r.worldSize, 2);
    // The targets' mean square is ~6 (6 inputs, unit weights); the last 5 steps should be far below it.
    EXPECT_LT(r.lastTrainLoss, 0.3) << "20 SGD steps of a linear regression should have fitted it";
  }
  // The task's entries are in the checkpoint, beside the Trainer's.
  CheckpointInfo info = readCheckpointInfo(results[0].lastCheckpoint);
  EXPECT_EQ(info.step, 20);
  std::map<std::string, std::string> extras(info.extras.begin(), info.extras.end());
  EXPECT_EQ(extras["task"], "sensors");
  EXPECT_EQ(extras["inputs"], "6");
}

TEST(Task, AnUnknownDatasetNamesTheKnownOnes) {
  TaskRegistry tasks;
  tasks.add("sensors", [] { return std::unique_ptr<Task>(); });
  tasks.add("audio", [] { return std::unique_ptr<Task>(); });
  try {
    tasks.make("sensor");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "data.dataset 'sensor' is unknown; expected audio, sensors");
  }
}

}  // namespace
}  // namespace lockstep
