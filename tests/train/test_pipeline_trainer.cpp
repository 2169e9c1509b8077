// The Trainer with pipeline stages (parallel.pipeline): against one worker training the unsplit
// model on the same global batch (P = 2 and 3, both schedules, accumulation and clipping), 2-D
// (2 pipelines x 2 stages) against DDP on 2 workers, one unsplit checkpoint that resumes byte for
// byte and loads into runs with another P, and the errors. Threads as ranks over Gloo.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "lockstep/common/tensor_archive.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/trainer.h"
#include "support/expect.h"
#include "support/regression_data.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

/// fc1..fc4 with tanh between: a chain of four layers.
struct ChainNet : torch::nn::Module {
  ChainNet() {
    const int64_t widths[] = {12, 24, 24, 16, 5};
    for (int i = 0; i < 4; ++i) {
      fc.push_back(register_module(fmt::format("fc{}", i + 1),
                                   std::make_shared<torch::nn::LinearImpl>(widths[i], widths[i + 1])));
    }
  }
  std::vector<std::shared_ptr<torch::nn::LinearImpl>> fc;
};

LayeredModel layered(const std::shared_ptr<ChainNet>& net) {
  LayeredModel m;
  m.model = net;
  for (size_t i = 0; i < net->fc.size(); ++i) {
    auto linear = net->fc[i];
    const bool last = i + 1 == net->fc.size();
    m.layers.push_back({fmt::format("fc{}", i + 1),
                        [linear, last](const at::Tensor& x) {
                          at::Tensor y = linear->forward(x);
                          return last ? y : at::tanh(y);
                        },
                        {linear}});
  }
  m.loss = [](const at::Tensor& out, const Batch& b) { return at::mse_loss(out, b.targets); };
  return m;
}

using Data = test::RegressionData;
using test::makeRegressionData;

TrainerOptions baseOptions(const std::string& dir) {
  TrainerOptions o;
  o.maxSteps = 12;
  o.batchSize = 8;
  o.optimizer.type = OptimizerType::kSgd;
  o.optimizer.lr = 0.05;
  o.optimizer.momentum = 0.9;
  o.lrScaling.rule = LrScalingRule::kNone;
  o.logEvery = 4;
  o.seed = 3;
  o.checkpoint.dir = dir;
  o.checkpoint.every = 6;
  o.checkpoint.keepLast = 10;
  return o;
}

/// Trains on `world` thread ranks; returns rank 0's result.
FitResult train(int world, const TrainerOptions& options) {
  Data data = makeRegressionData();
  std::vector<std::shared_ptr<ChainNet>> nets;
  for (int r = 0; r < world; ++r) {
    at::manual_seed(1);  // the same initial model on every rank, as a Task builds it
    nets.push_back(std::make_shared<ChainNet>());
  }
  FitResult result;
  test::runRanks(world, [&](int rank, Communicator& comm) {
    Trainer trainer(std::shared_ptr<Communicator>(&comm, [](Communicator*) {}), options);
    FitResult r = trainer.fit(layered(nets[rank]), *data.train, data.validation.get());
    if (rank == 0) result = r;
  });
  return result;
}

std::string tempDir(const std::string& name) {
  auto dir = fs::temp_directory_path() / fmt::format("lockstep-pipe-{}-{}", name, ::getpid());
  fs::remove_all(dir);
  return dir.string();
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Every model and optimizer tensor of two checkpoints agrees to `tolerance` (relative to the tensor's max).
void expectSameState(const std::string& a, const std::string& b, double tolerance) {
  TensorArchive x = TensorArchive::parse(readCheckpoint(a), a), y = TensorArchive::parse(readCheckpoint(b), b);
  int compared = 0;
  for (const std::string prefix : {"model/", "optimizer/param"}) {
    auto keys = x.keys(prefix);
    EXPECT_EQ(keys, y.keys(prefix)) << a << " vs " << b;
    for (const auto& key : keys) {
      if (x.kind(key) != TensorArchive::Kind::kTensor) continue;
      at::Tensor p = x.getTensor(key).to(at::kDouble), q = y.getTensor(key).to(at::kDouble);
      ASSERT_TRUE(p.sizes().equals(q.sizes())) << key;
      double scale = std::max(1e-12, q.abs().max().item<double>());
      EXPECT_LE((p - q).abs().max().item<double>() / scale, tolerance) << key;
      ++compared;
    }
  }
  EXPECT_GT(compared, 8);
}

TEST(PipelineTrainer, TrainsLikeOneWorkerOnTheSameBatch) {
  const std::string ref = tempDir("ref");
  TrainerOptions o = baseOptions(ref);
  o.clipGradNorm = 0.5;
  o.accumulation = 2;
  FitResult reference = train(1, o);
  for (int p : {2, 3}) {
    for (auto schedule : {PipelineSchedule::kGpipe, PipelineSchedule::k1f1b}) {
      SCOPED_TRACE(fmt::format("P={} {}", p, toString(schedule)));
      const std::string dir = tempDir(fmt::format("p{}{}", p, toString(schedule)));
      TrainerOptions po = baseOptions(dir);
      po.clipGradNorm = 0.5;
      po.accumulation = 2;
      po.pipeline = {p, 4, schedule};
      FitResult got = train(p, po);
      EXPECT_EQ(got.globalBatch, reference.globalBatch);
      EXPECT_NEAR(got.lastTrainLoss, reference.lastTrainLoss, 1e-6);
      EXPECT_NEAR(got.lastValidationLoss, reference.lastValidationLoss, 1e-6);
      EXPECT_GE(got.breakdown.pipelineIdleFraction, 0.0);
      expectSameState(got.lastCheckpoint, reference.lastCheckpoint, 1e-6);
      fs::remove_all(dir);
    }
  }
  fs::remove_all(ref);
}

TEST(PipelineTrainer, TwoPipelinesOfTwoStagesTrainLikeDdpOnTwoWorkers) {
  const std::string ddp = tempDir("ddp"), twoD = tempDir("2d");
  FitResult reference = train(2, baseOptions(ddp));
  TrainerOptions o = baseOptions(twoD);
  o.pipeline = {2, 2};
  FitResult got = train(4, o);
  EXPECT_EQ(got.globalBatch, 16);
  EXPECT_EQ(got.globalBatch, reference.globalBatch);
  EXPECT_NEAR(got.lastTrainLoss, reference.lastTrainLoss, 1e-6);
  EXPECT_NEAR(got.lastValidationLoss, reference.lastValidationLoss, 1e-6);
  expectSameState(got.lastCheckpoint, reference.lastCheckpoint, 1e-6);
  fs::remove_all(ddp);
  fs::remove_all(twoD);
}

TEST(PipelineTrainer, ResumesByteForByteAndItsCheckpointLoadsWithAnyP) {
  const std::string whole = tempDir("whole"), halves = tempDir("halves");
  TrainerOptions o = baseOptions(whole);
  o.pipeline = {2, 4};
  FitResult full = train(2, o);
  TrainerOptions first = baseOptions(halves);
  first.pipeline = o.pipeline;
  first.maxSteps = 6;
  train(2, first);
  first.maxSteps = 12;
  FitResult resumed = train(2, first);
  EXPECT_EQ(resumed.resumedFromStep, 6);
  const std::string name = "step-000000012.ckpt";
  EXPECT_EQ(readFile(whole + "/" + name), readFile(halves + "/" + name)) << "the resumed run's checkpoint differs";

  // The same checkpoint into one unsplit worker and into three stages: both continue from step 12.
  for (int p : {1, 3}) {
    SCOPED_TRACE(fmt::format("P={}", p));
    const std::string dir = tempDir(fmt::format("into{}", p));
    TrainerOptions next = baseOptions(dir);
    next.pipeline = {p, 4};
    next.checkpoint.resume = whole + "/" + name;
    next.maxSteps = 14;
    FitResult r = train(p, next);
    EXPECT_EQ(r.resumedFromStep, 12);
    EXPECT_EQ(r.steps, 14);
    fs::remove_all(dir);
  }
  auto net = std::make_shared<ChainNet>();
  EXPECT_EQ(loadModelFromCheckpoint(whole + "/" + name, *net).step, 12);
  fs::remove_all(whole);
  fs::remove_all(halves);
}

TEST(PipelineTrainer, BadSettingsFailBeforeTrainingNamingTheKey) {
  Data data = makeRegressionData();
  auto fitWith = [&](int world, TrainerOptions o, bool asLayers) {
    std::vector<std::string> errors(world);
    std::vector<std::shared_ptr<ChainNet>> nets;
    for (int r = 0; r < world; ++r) nets.push_back(std::make_shared<ChainNet>());
    test::runRanks(world, [&](int rank, Communicator& comm) {
      Trainer trainer(std::shared_ptr<Communicator>(&comm, [](Communicator*) {}), o);
      errors[rank] = test::errorOf([&] {
        if (asLayers) {
          trainer.fit(layered(nets[rank]), *data.train);
        } else {
          trainer.fit(
              nets[rank], [](torch::nn::Module&, const Batch& b) { return b.inputs.sum(); }, *data.train);
        }
      });
    });
    return errors[0];
  };
  TrainerOptions o = baseOptions("");
  o.pipeline.stages = 3;
  EXPECT_HAS(fitWith(2, o, true), "parallel.pipeline 3 does not divide the 2 worker(s)");
  o.pipeline.stages = 5;
  EXPECT_HAS(fitWith(5, o, true), "parallel.pipeline 5 asks for more pipeline stages than the model's 4 layer(s)");
  o.pipeline.stages = 2;
  EXPECT_HAS(fitWith(2, o, false), "parallel.pipeline 2 needs the model as a chain of layers");
  o.pipeline.balance = {1, 2};
  EXPECT_HAS(fitWith(2, o, true), "parallel.balance sums to 3 layers, but the model has 4 layer(s)");
  o.pipeline.balance = {};
  o.strategy = StrategyType::kZero1;
  EXPECT_HAS(fitWith(2, o, true), "strategy.type zero1 cannot be combined with parallel.pipeline 2");
  o.strategy = StrategyType::kDdp;
  o.pipeline.microbatches = 16;  // batch 8
  EXPECT_HAS(fitWith(2, o, true), "trainer.batch_size 8 cannot be split into 16 micro-batches (parallel.microbatches");
}

}  // namespace
}  // namespace lockstep
