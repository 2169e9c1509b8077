// zero_harness.h — the training runs the ZeRO tests compare: the same MLP on
// the same data with accumulation, clipping, weight decay and several buckets,
// trained by the Trainer on thread ranks with a chosen strategy.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "lockstep/models/char_lstm.h"
#include "lockstep/train/trainer.h"
#include "support/subprocess.h"
#include "support/thread_ranks.h"

namespace lockstep::test {

inline std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct RunSpec {
  OptimizerType optimizer;
  StrategyType strategy;
  int world;
  int64_t maxSteps;
  std::string checkpointDir;   ///< checkpoints every 25 steps; empty: none
  double clip = 0.5;           ///< clipGradNorm
  bool layered = false;        ///< Trainer::fit(LayeredModel): each Linear (+ ReLU) a layer
  double bucketCapMb = 0.001;  ///< several buckets
};

inline TrainerOptions optionsFor(const RunSpec& spec) {
  TrainerOptions o;
  o.epochs = 1000;
  o.maxSteps = spec.maxSteps;
  o.batchSize = 5;
  o.accumulation = 2;
  o.clipGradNorm = spec.clip;
  o.optimizer.type = spec.optimizer;
  o.optimizer.lr = spec.optimizer == OptimizerType::kSgd ? 0.05 : 0.01;
  o.optimizer.momentum = 0.9;
  o.optimizer.weightDecay = 0.01;
  o.lrScaling.rule = LrScalingRule::kNone;
  o.validate = false;
  o.logEvery = 100000;
  o.ddp.bucketCapMb = spec.bucketCapMb;
  o.seed = 3;
  o.strategy = spec.strategy;
  o.checkpoint.dir = spec.checkpointDir;
  o.checkpoint.every = 25;
  o.checkpoint.keepLast = 100;
  return o;
}

/// The MLP as a chain: Linear, ReLU after every Linear but the last (MlpImpl::forward, op for op).
inline std::vector<Layer> mlpLayers(Mlp& model) {
  std::vector<Layer> layers;
  auto children = model->named_children();
  for (size_t i = 0; i < children.size(); ++i) {
    auto linear = std::dynamic_pointer_cast<torch::nn::LinearImpl>(children[i].value());
    const bool last = i + 1 == children.size();
    layers.push_back({children[i].key(),
                      [linear, last](const at::Tensor& x) {
                        at::Tensor y = linear->forward(x);
                        return last ? y : at::relu(y);
                      },
                      {children[i].value()}});
  }
  return layers;
}

/// Trains one MLP per rank (rank 0's initialisation is broadcast) and returns every rank's model.
inline std::vector<Mlp> train(const RunSpec& spec) {
  torch::manual_seed(11);
  TensorDataset data(at::randn({200, 12}), at::randn({200, 5}));
  std::vector<Mlp> models;
  for (int r = 0; r < spec.world; ++r) {
    torch::manual_seed(r == 0 ? 1 : 50 + r);
    models.emplace_back(MlpOptions{12, {16, 8}, 5});
  }
  TrainerOptions options = optionsFor(spec);
  test::runRanks(spec.world, [&](int rank, Communicator& comm) {
    Trainer trainer(borrow(comm), options);
    FitResult result;
    if (spec.layered) {
      LayeredModel layered{models[rank].ptr(), mlpLayers(models[rank]),
                           [](const at::Tensor& out, const Batch& b) { return at::mse_loss(out, b.targets); }};
      result = trainer.fit(layered, data);
    } else {
      result = trainer.fit(
          models[rank].ptr(),
          [](torch::nn::Module& m, const Batch& b) {
            return at::mse_loss(static_cast<MlpImpl&>(m).forward(b.inputs), b.targets);
          },
          data);
    }
    EXPECT_EQ(result.steps, spec.maxSteps);
  });
  return models;
}

inline void expectBitwiseEqual(Mlp& expected, Mlp& actual, const std::string& what) {
  auto a = expected->parameters();
  auto b = actual->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(at::equal(a[i], b[i])) << what << ": parameter " << i << " differs by up to "
                                       << (a[i] - b[i]).abs().max().item<double>();
  }
}

/// For each (first, second): trains 2 ranks to step 25 with `first`, resumes to step 50 with `second`
/// (Adam, clipping `clip`; zero3 over the layers) and expects every rank's parameters and the step-50
/// checkpoint of one uninterrupted DDP run, bit for bit and byte for byte.
inline void expectResumesAcross(const std::vector<std::pair<StrategyType, StrategyType>>& pairs, double clip) {
  std::string straightDir = test::makeTempDir();
  auto straight = train({OptimizerType::kAdam, StrategyType::kDdp, 2, 50, straightDir, clip});
  const std::string expected = readFile(straightDir + "/step-000000050.ckpt");
  ASSERT_FALSE(expected.empty());
  for (auto [first, second] : pairs) {
    std::string label = fmt::format("{} then {}", toString(first), toString(second));
    SCOPED_TRACE(label);
    std::string resumedDir = test::makeTempDir();
    train({OptimizerType::kAdam, first, 2, 25, resumedDir, clip, first == StrategyType::kZero3});
    auto resumed = train({OptimizerType::kAdam, second, 2, 50, resumedDir, clip, second == StrategyType::kZero3});
    for (int r = 0; r < 2; ++r) expectBitwiseEqual(straight[0], resumed[r], label + ", rank " + std::to_string(r));
    EXPECT_TRUE(expected == readFile(resumedDir + "/step-000000050.ckpt")) << label;
  }
}

/// Relative difference at most `rtol` (plus a tiny absolute floor for values near zero).
inline void expectClose(Mlp& expected, Mlp& actual, const std::string& what, double rtol = 1e-4) {
  auto a = expected->parameters();
  auto b = actual->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(at::allclose(a[i], b[i], rtol, rtol / 10))
        << what << ": parameter " << i << " differs by up to " << (a[i] - b[i]).abs().max().item<double>();
  }
}

/// ||actual - expected|| / ||expected|| (2-norms) of one parameter.
inline double relativeDifference(const at::Tensor& expected, const at::Tensor& actual) {
  return (actual - expected).norm().item<double>() / expected.norm().item<double>();
}

/// Every parameter's relative difference at most `bound`.
inline void expectRelativeDifference(Mlp& expected, Mlp& actual, const std::string& what, double bound) {
  auto a = expected->parameters();
  auto b = actual->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_LE(relativeDifference(a[i], b[i]), bound)
        << what << ": parameter " << i << " differs by up to " << (a[i] - b[i]).abs().max().item<double>();
  }
}

}  // namespace lockstep::test
