// Parameters no rank used keep their gradient untouched (findUnusedParameters),
// so DDP, ZeRO-2 and ZeRO-3 train as one process does under LibTorch's default
// zero_grad() (none) and a stateful optimizer: the scenario of
// support/unused_scenario.h on threads over Gloo, and on worker processes
// over Gloo and MPI; and the rule itself on one step.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <fmt/format.h>

#include "lockstep/ddp/distributed_data_parallel.h"
#include "support/expect.h"
#include "support/subprocess.h"
#include "support/thread_ranks.h"
#include "support/unused_scenario.h"

namespace lockstep {
namespace {

using test::borrow;
using test::runRanks;
using test::UnusedFront;

constexpr double kTolerance = 1e-5;

void expectLikeOneProcess(int world, UnusedFront front, const std::string& optimizer) {
  test::UnusedScenario scenario;
  scenario.front = front;
  scenario.optimizer = optimizer;
  std::vector<test::UnusedResult> results(static_cast<size_t>(world));
  runRanks(world, [&](int rank, Communicator& comm) {
    results[static_cast<size_t>(rank)] = test::runUnusedScenario(borrow(comm), scenario);
  });
  for (int r = 0; r < world; ++r) {
    const auto& result = results[static_cast<size_t>(r)];
    EXPECT_LE(result.maxRelativeDifference, kTolerance)
        << optimizer << ", " << world << " ranks, rank " << r << ": at " << result.worst;
  }
}

TEST(UnusedParameters, DdpTrainsAsOneProcessWithMomentumSgdAndAdamW) {
  for (int world : {2, 3}) {
    expectLikeOneProcess(world, UnusedFront::kDdp, "sgd");
    expectLikeOneProcess(world, UnusedFront::kDdp, "adamw");
  }
}

TEST(UnusedParameters, Zero2TrainsAsOneProcess) {
  expectLikeOneProcess(2, UnusedFront::kZero2, "sgd");
  expectLikeOneProcess(3, UnusedFront::kZero2, "adamw");
}

TEST(UnusedParameters, Zero3TrainsAsOneProcess) {
  expectLikeOneProcess(2, UnusedFront::kZero3, "adamw");
  expectLikeOneProcess(3, UnusedFront::kZero3, "sgd");
}

struct TwoLayersImpl : torch::nn::Module {
  TwoLayersImpl() {
    used = register_module("used", torch::nn::Linear(4, 2));
    unused = register_module("unused", torch::nn::Linear(4, 2));
  }
  torch::nn::Linear used{nullptr}, unused{nullptr};
};
TORCH_MODULE(TwoLayers);

TEST(UnusedParameters, NoRankUsedLeavesTheGradientAsItWas) {
  for (int world : {1, 2}) {
    std::vector<TwoLayers> models(static_cast<size_t>(world));
    runRanks(world, [&](int rank, Communicator& comm) {
      TwoLayers& model = models[static_cast<size_t>(rank)];
      SyncOptions options;
      options.findUnusedParameters = true;
      options.bucketCapMb = 1e-5;  // a bucket per parameter: unused parameters alone in theirs
      DistributedDataParallel ddp(model.ptr(), borrow(comm), options);
      auto step = [&] {
        model->used->forward(at::ones({3, 4})).sum().backward();
        ddp.finishGradientSync();
      };
      // None stays none.
      step();
      EXPECT_FALSE(model->unused->weight.grad().defined()) << "world " << world;
      ASSERT_TRUE(model->used->weight.grad().defined());
      // A gradient it had (zero_grad(false), a gradient kept on purpose) stays, bit for bit, and
      // is not the bucket's memory, which the next steps overwrite.
      at::Tensor kept = at::full({2, 4}, 0.25 + rank);
      model->unused->weight.mutable_grad() = kept.clone();
      step();
      EXPECT_TRUE(at::equal(model->unused->weight.grad(), kept)) << "world " << world;
      // Used by one rank only: the average of its gradient and the others' (what their .grad held).
      model->used->weight.mutable_grad() = at::Tensor();
      model->unused->weight.mutable_grad() = at::Tensor();
      model->unused->bias.mutable_grad() = at::Tensor();
      at::Tensor out = model->used->forward(at::ones({3, 4}));
      if (rank == 0) out = out + model->unused->forward(at::ones({3, 4}));
      out.sum().backward();
      ddp.finishGradientSync();
      ASSERT_TRUE(model->unused->weight.grad().defined()) << "world " << world;
      EXPECT_TRUE(at::allclose(model->unused->weight.grad(), at::full({2, 4}, 3.0 / world)))
          << model->unused->weight.grad();
      // Bound to its bucket again (and changed in place, differently on each rank), then unused by
      // all: its gradient keeps its values apart from the bucket's average.
      model->unused->weight.grad().add_(rank);
      at::Tensor bound = model->unused->weight.grad().clone();
      model->used->weight.mutable_grad() = at::Tensor();
      step();
      EXPECT_TRUE(at::equal(model->unused->weight.grad(), bound)) << "world " << world;
    });
  }
}

void expectWorkersLikeOneProcess(const std::string& backend, int world, const std::string& front) {
  auto r = test::runProcess(
      {test::lockstepBin(), "run", "-np", std::to_string(world), "--backend", backend, "--comm-timeout", "60", "--",
       test::helperBin("unused_worker"), front, fmt::format("{}", kTolerance)},
      {.timeout = std::chrono::seconds(180)});
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  for (int rank = 0; rank < world; ++rank) {
    for (const char* optimizer : {"sgd", "adamw"}) {
      std::string prefix =
          fmt::format("rank {} {} {} on {}: max relative difference ", rank, optimizer, front, backend);
      size_t at = r.out.find(prefix);
      ASSERT_NE(at, std::string::npos) << prefix << "\n" << r.out << r.err;
      std::string line = r.out.substr(at, r.out.find('\n', at) - at);
      EXPECT_NE(line.find(" ok"), std::string::npos) << line;
    }
  }
}

TEST(UnusedParameters, WorkerProcessesOverGlooAndMpiTrainAsOneProcess) {
  LOCKSTEP_SKIP_UNLESS(mpiBackendBuilt(), "the MPI backend (lockstep built with libopenmpi-dev)");
  for (int world : {2, 3}) {
    expectWorkersLikeOneProcess("gloo", world, "ddp");
    expectWorkersLikeOneProcess("mpi", world, "ddp");
  }
  expectWorkersLikeOneProcess("mpi", 2, "zero2");
}

}  // namespace
}  // namespace lockstep
