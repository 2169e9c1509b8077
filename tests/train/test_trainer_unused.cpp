// The Trainer with a module used on every other step only (findUnusedParameters):
// under ddp, zero1 and zero2 on 2 ranks it trains as a plain loop in one process
// over the same global batches (LibTorch's SGD with momentum, zero_grad() with
// its default, none), which skips the unused module's parameters on the steps
// it is not used: no momentum step for them there.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include "lockstep/data/sampler.h"
#include "lockstep/train/trainer.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

/// Head `sometimes` joins the output on every other training forward (counted per module).
struct SometimesImpl : torch::nn::Module {
  SometimesImpl() {
    trunk = register_module("trunk", torch::nn::Linear(12, 16));
    always = register_module("always", torch::nn::Linear(16, 5));
    sometimes = register_module("sometimes", torch::nn::Linear(16, 5));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = at::relu(trunk->forward(x));
    at::Tensor out = always->forward(h);
    if (calls++ % 2 == 0) out = out + sometimes->forward(h);
    return out;
  }
  torch::nn::Linear trunk{nullptr}, always{nullptr}, sometimes{nullptr};
  int64_t calls = 0;
};
TORCH_MODULE(Sometimes);

constexpr int64_t kSamples = 120;
constexpr int kEpochs = 2;
constexpr int64_t kGlobalBatch = 20;

struct Data {
  at::Tensor x, y;
};

Data makeData() {
  torch::manual_seed(11);
  return {at::randn({kSamples, 12}), at::randn({kSamples, 5})};
}

Sometimes freshModel() {
  torch::manual_seed(1);
  return Sometimes();
}

Sometimes plainLoop(const Data& data, uint64_t seed) {
  Sometimes model = freshModel();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int64_t epoch = 0; epoch < kEpochs; ++epoch) {
    auto order = globalOrder(kSamples, /*shuffle=*/true, seed, epoch);
    for (int64_t start = 0; start + kGlobalBatch <= kSamples; start += kGlobalBatch) {
      auto index = at::tensor(std::vector<int64_t>(order.begin() + start, order.begin() + start + kGlobalBatch));
      optimizer.zero_grad();
      at::mse_loss(model->forward(data.x.index_select(0, index)), data.y.index_select(0, index)).backward();
      optimizer.step();
    }
  }
  return model;
}

TEST(TrainerUnusedParameters, AModuleUsedEveryOtherStepTrainsAsInOneProcess) {
  const Data data = makeData();
  TrainerOptions options;
  options.epochs = kEpochs;
  options.batchSize = kGlobalBatch / 2;
  options.optimizer.type = OptimizerType::kSgd;
  options.optimizer.lr = 0.05;
  options.optimizer.momentum = 0.9;
  options.lrScaling.rule = LrScalingRule::kNone;
  options.validate = false;
  options.logEvery = 1000;
  options.seed = 3;
  options.ddp.bucketCapMb = 0.001;
  options.ddp.findUnusedParameters = true;
  Sometimes reference = plainLoop(data, options.seed);
  for (StrategyType strategy : {StrategyType::kDdp, StrategyType::kZero1, StrategyType::kZero2}) {
    SCOPED_TRACE(toString(strategy));
    options.strategy = strategy;
    std::vector<Sometimes> models{freshModel(), freshModel()};
    test::runRanks(2, [&](int rank, Communicator& comm) {
      TensorDataset dataset(data.x, data.y);
      auto loss = [](torch::nn::Module& m, const Batch& b) {
        return at::mse_loss(static_cast<SometimesImpl&>(m).forward(b.inputs), b.targets);
      };
      Trainer(test::borrow(comm), options).fit(models[static_cast<size_t>(rank)].ptr(), loss, dataset);
    });
    auto want = reference->named_parameters();
    for (int rank = 0; rank < 2; ++rank) {
      for (const auto& p : models[static_cast<size_t>(rank)]->named_parameters()) {
        const double scale = want[p.key()].abs().max().item<double>();
        const double difference = (p.value() - want[p.key()]).abs().max().item<double>() / scale;
        EXPECT_LE(difference, 1e-5) << "rank " << rank << ", " << p.key();
      }
    }
  }
}

}  // namespace
}  // namespace lockstep
