// unused_scenario.cpp — tests/support/unused_scenario.h.
#include "support/unused_scenario.h"

#include <ATen/ATen.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include <algorithm>

#include "lockstep/common/error.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/ddp/fully_sharded_data_parallel.h"
#include "lockstep/ddp/sharded_data_parallel.h"
#include "lockstep/ddp/sharded_gradient_sync.h"

namespace lockstep::test {
namespace {

constexpr int64_t kInputs = 6;
constexpr int64_t kOutputs = 3;

struct HeadsImpl : torch::nn::Module {
  HeadsImpl() {
    trunk = register_module("trunk", torch::nn::Linear(kInputs, 8));
    a = register_module("a", torch::nn::Linear(8, kOutputs));
    b = register_module("b", torch::nn::Linear(8, kOutputs));
    c = register_module("c", torch::nn::Linear(8, kOutputs));
  }
  torch::nn::Linear trunk{nullptr}, a{nullptr}, b{nullptr}, c{nullptr};
};
TORCH_MODULE(Heads);

bool usesB(int step, int micro) { return step % 2 == 0 && micro == 0; }
bool usesC(int step) { return step % 3 == 1; }

/// The loss of `x` (rows) against `y`; head c is applied to the rows where `cRows` is 1.
at::Tensor lossOf(Heads& model, const at::Tensor& x, const at::Tensor& y, bool b, const at::Tensor* cRows) {
  at::Tensor h = at::tanh(model->trunk->forward(x));
  at::Tensor out = model->a->forward(h);
  if (b) out = out + model->b->forward(h);
  if (cRows != nullptr) out = out + model->c->forward(h) * *cRows;
  return at::mse_loss(out, y);
}

/// The global micro-batch `micro` of `step`: every rank makes the same rows.
std::pair<at::Tensor, at::Tensor> globalBatch(int step, int micro, int64_t rows) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 + 10 * step + micro);
  at::Tensor x = at::randn({rows, kInputs}, generator);
  at::Tensor y = at::randn({rows, kOutputs}, generator);
  return {x, y};
}

/// The same initial values in every call, from a generator of its own (ranks may be threads of
/// one process, whose global generator they would share).
Heads freshModel() {
  Heads model;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(7);
  c10::NoGradGuard noGrad;
  for (auto& p : model->parameters()) p.copy_(at::randn(p.sizes(), generator) * 0.3);
  return model;
}

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const std::string& name, std::vector<at::Tensor> params) {
  if (name == "sgd") {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1).momentum(0.9));
  }
  LOCKSTEP_CHECK(name == "adamw", "unknown optimizer '", name, "' (sgd or adamw)");
  return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(0.01).weight_decay(0.1));
}

/// One process over the global batch of a world of `world`.
Heads trainReference(const UnusedScenario& s, int world) {
  Heads model = freshModel();
  auto optimizer = makeOptimizer(s.optimizer, model->parameters());
  const int64_t rows = static_cast<int64_t>(world) * s.batch;
  at::Tensor rank0Rows = at::zeros({rows, 1});
  rank0Rows.narrow(0, 0, s.batch).fill_(1);
  for (int step = 0; step < s.steps; ++step) {
    optimizer->zero_grad();
    for (int micro = 0; micro < 2; ++micro) {
      auto [x, y] = globalBatch(step, micro, rows);
      lossOf(model, x, y, usesB(step, micro), usesC(step) ? &rank0Rows : nullptr).backward();
    }
    optimizer->step();
  }
  return model;
}

/// This rank's loop: its rows of each global micro-batch, the first micro-batch under noSync().
Heads trainDistributed(const std::shared_ptr<Communicator>& comm, const UnusedScenario& s) {
  Heads model = freshModel();
  SyncOptions options;
  options.findUnusedParameters = true;
  options.bucketCapMb = s.bucketCapMb;
  options.firstBucketCapMb = s.bucketCapMb;
  const int rank = comm->rank();
  std::unique_ptr<torch::optim::Optimizer> optimizer;  // DDP's; the ZeRO fronts keep their own
  std::unique_ptr<GradientSync> sync;
  FullyShardedDataParallel* zero3 = nullptr;
  if (s.front == UnusedFront::kDdp) {
    optimizer = makeOptimizer(s.optimizer, model->parameters());
    sync = std::make_unique<DistributedDataParallel>(model.ptr(), comm, options);
  } else if (s.front == UnusedFront::kZero2) {
    sync = std::make_unique<ShardedDataParallel>(model.ptr(), comm, makeOptimizer(s.optimizer, model->parameters()),
                                                 options);
  } else {
    auto fsdp = std::make_unique<FullyShardedDataParallel>(model.ptr(), std::vector<Layer>{}, comm,
                                                           makeOptimizer(s.optimizer, model->parameters()), options);
    zero3 = fsdp.get();
    sync = std::move(fsdp);
  }
  at::Tensor mine = at::ones({s.batch, 1});
  for (int step = 0; step < s.steps; ++step) {
    if (optimizer) optimizer->zero_grad();
    for (int micro = 0; micro < 2; ++micro) {
      auto [x, y] = globalBatch(step, micro, static_cast<int64_t>(comm->size()) * s.batch);
      const bool c = usesC(step) && rank == 0;
      if (zero3 != nullptr) zero3->gatherAll();
      auto run = [&] {
        lossOf(model, x.narrow(0, rank * s.batch, s.batch), y.narrow(0, rank * s.batch, s.batch), usesB(step, micro),
               c ? &mine : nullptr)
            .backward();
      };
      if (micro == 0) {
        auto guard = sync->noSync();
        run();
      } else {
        run();
      }
    }
    sync->finishGradientSync();
    if (optimizer) {
      optimizer->step();
    } else {
      static_cast<ShardedGradientSync&>(*sync).step();
    }
  }
  if (zero3 != nullptr) zero3->restoreModule();
  return model;
}

}  // namespace

UnusedResult runUnusedScenario(const std::shared_ptr<Communicator>& comm, const UnusedScenario& scenario) {
  Heads ours = trainDistributed(comm, scenario);
  Heads reference = trainReference(scenario, comm->size());
  UnusedResult result;
  auto mineNamed = ours->named_parameters();
  for (const auto& p : reference->named_parameters()) {
    const at::Tensor& want = p.value();
    const double scale = std::max(want.abs().max().item<double>(), 1e-12);
    const double difference = (mineNamed[p.key()] - want).abs().max().item<double>() / scale;
    if (difference >= result.maxRelativeDifference) {
      result.maxRelativeDifference = difference;
      result.worst = p.key();
    }
  }
  return result;
}

}  // namespace lockstep::test
