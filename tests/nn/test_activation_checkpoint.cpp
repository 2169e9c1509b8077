// Activation checkpointing against the plain call, bit for bit: gradients,
// BatchNorm running statistics, dropout masks and the RNG stream after
// backward; alone, under 2-rank DDP, and under ZeRO-2 and ZeRO-3 (the parameters
// after SGD steps; one thread per rank over Gloo).
#include "lockstep/nn/activation_checkpoint.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <mutex>

#include "lockstep/common/error.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/ddp/fully_sharded_data_parallel.h"
#include "lockstep/ddp/sharded_data_parallel.h"
#include "lockstep/nn/precision.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

namespace nn = torch::nn;

/// Linear-BatchNorm-ReLU-Dropout blocks: every kind of state checkpointing must get right.
nn::Sequential makeNet(uint64_t seed, int blocks = 6, int64_t width = 16) {
  torch::manual_seed(seed);
  nn::Sequential net;
  int64_t in = 8;
  for (int b = 0; b < blocks; ++b) {
    net->push_back(nn::Linear(in, width));
    net->push_back(nn::BatchNorm1d(width));
    net->push_back(nn::ReLU());
    net->push_back(nn::Dropout(0.25));
    in = width;
  }
  net->push_back(nn::Linear(in, 3));
  return net;
}

void expectBitwiseEqual(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].defined() && b[i].defined()) << what << " " << i << " is undefined";
    EXPECT_TRUE(at::equal(a[i], b[i])) << what << " " << i << " differs by up to "
                                       << (a[i] - b[i]).abs().max().item<double>();
  }
}

std::vector<at::Tensor> gradsOf(nn::Module& m) {
  std::vector<at::Tensor> out;
  for (auto& p : m.parameters()) out.push_back(p.grad());
  return out;
}

/// Two steps of forward+backward with `segments` (0: plain); returns grads,
/// buffers and one draw of the generator after the last backward.
struct Outcome {
  std::vector<at::Tensor> grads, buffers, inputGrads;
  at::Tensor nextDraw;
};

Outcome runNet(int64_t segments) {
  auto net = makeNet(7);
  net->train();
  torch::manual_seed(123);
  Outcome out;
  for (int step = 0; step < 2; ++step) {
    at::Tensor x = at::randn({10, 8}).requires_grad_(step == 1);  // step 1: the input needs its gradient too
    at::Tensor y = segments > 0 ? checkpointSequential(*net, segments, x) : net->forward(x);
    y.pow(2).sum().backward();
    if (step == 1) out.inputGrads.push_back(x.grad());
  }
  out.grads = gradsOf(*net);
  out.buffers = net->buffers();
  out.nextDraw = at::rand({4});
  return out;
}

TEST(ActivationCheckpoint, SequentialMatchesThePlainRunBitForBit) {
  Outcome plain = runNet(0);
  for (int64_t segments : {1, 2, 3, 5, 25}) {
    SCOPED_TRACE("segments " + std::to_string(segments));
    Outcome ckpt = runNet(segments);
    expectBitwiseEqual(ckpt.grads, plain.grads, "parameter gradient");
    expectBitwiseEqual(ckpt.inputGrads, plain.inputGrads, "input gradient");
    // Running mean/var and num_batches_tracked: updated once per forward, not again when recomputed.
    expectBitwiseEqual(ckpt.buffers, plain.buffers, "buffer");
    expectBitwiseEqual({ckpt.nextDraw}, {plain.nextDraw}, "random draw after backward");
  }
}

TEST(ActivationCheckpoint, UnderBf16AutocastMatchesThePlainBf16Run) {
  // The forward runs inside the guard, backward outside it: the
  // recomputation must compute in bf16 as the forward did.
  auto run = [](int64_t segments) {
    auto net = makeNet(7);
    torch::manual_seed(123);
    at::Tensor x = at::randn({10, 8});
    at::Tensor y;
    {
      AutocastGuard amp(Precision::kBf16);
      y = segments > 0 ? checkpointSequential(*net, segments, x) : net->forward(x);
    }
    y.to(at::kFloat).pow(2).sum().backward();
    return gradsOf(*net);
  };
  auto plain = run(0);
  expectBitwiseEqual(run(3), plain, "parameter gradient");
}

TEST(ActivationCheckpoint, WithoutRngReplayDropoutMasksDiffer) {
  // The replay is what makes the masks agree: without it the recomputation draws new ones.
  auto plain = runNet(0);
  auto net = makeNet(7);
  torch::manual_seed(123);
  std::vector<CheckpointStage> stages;
  for (auto& child : *net) {
    nn::AnyModule* any = &child;
    stages.push_back({[any](const at::Tensor& x) { return any->forward<at::Tensor>(x); }, child.ptr()});
  }
  for (int step = 0; step < 2; ++step) {
    at::Tensor x = at::randn({10, 8});
    checkpointSequence(stages, 3, x, /*preserveRngState=*/false).pow(2).sum().backward();
  }
  auto grads = gradsOf(*net);
  bool anyDiffers = false;
  for (size_t i = 0; i < grads.size(); ++i) anyDiffers |= !at::equal(grads[i], plain.grads[i]);
  EXPECT_TRUE(anyDiffers);
}

TEST(ActivationCheckpoint, ManyInputsAndOutputs) {
  torch::manual_seed(3);
  auto w = at::randn({5, 5}).requires_grad_(true);
  auto a = at::randn({4, 5}).requires_grad_(true);
  auto b = at::randn({4, 5});  // needs no gradient
  auto fn = [&w](const std::vector<at::Tensor>& in) {
    at::Tensor h = at::tanh(in[0].mm(w) + in[1]);
    return std::vector<at::Tensor>{h, h.sum(1), in[1] * 2};
  };
  auto plainOut = fn({a, b});
  (plainOut[0].sum() + plainOut[1].pow(2).sum()).backward();
  std::vector<at::Tensor> plainGrads{w.grad().clone(), a.grad().clone()};
  w.mutable_grad() = at::Tensor();
  a.mutable_grad() = at::Tensor();
  auto out = checkpoint(TensorsFn(fn), {a, b});
  ASSERT_EQ(out.size(), 3u);
  expectBitwiseEqual(out, plainOut, "output");
  (out[0].sum() + out[1].pow(2).sum()).backward();  // the third output gets no gradient
  expectBitwiseEqual({w.grad(), a.grad()}, plainGrads, "gradient");
  EXPECT_FALSE(b.grad().defined());
}

TEST(ActivationCheckpoint, WithoutGradModeItJustRuns) {
  int calls = 0;
  c10::NoGradGuard noGrad;
  at::Tensor y = checkpoint(
      [&](const at::Tensor& x) {
        ++calls;
        return x * 3;
      },
      at::ones({2}));
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(y.requires_grad());
}

TEST(ActivationCheckpoint, RecomputesOncePerBackward) {
  int calls = 0;
  auto w = at::ones({3}).requires_grad_(true);
  at::Tensor y = checkpoint(
      [&](const at::Tensor& x) {
        ++calls;
        return x * w;
      },
      at::ones({3}));
  EXPECT_EQ(calls, 1);
  y.sum().backward();
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(at::equal(w.grad(), at::ones({3})));  // reached through the anchor, though no input needs grad
}

TEST(ActivationCheckpoint, TheLongerSegmentsComeLastSoFewerStagesRunTwice) {
  // 5 stages in 3 segments: 1, 2, 2. The last segment is not checkpointed, so
  // stages 0..2 run twice (forward and recomputation) and 3..4 once; with the
  // longer segments first (2, 2, 1) four stages would run twice.
  std::vector<int> calls(5, 0);
  auto w = at::ones({3}).requires_grad_(true);
  std::vector<CheckpointStage> stages;
  for (size_t i = 0; i < calls.size(); ++i) {
    stages.push_back({[&calls, &w, i](const at::Tensor& x) {
                        ++calls[i];
                        return x * w;
                      },
                      nullptr});
  }
  checkpointSequence(stages, 3, at::ones({3})).sum().backward();
  EXPECT_EQ(calls, (std::vector<int>{2, 2, 2, 1, 1}));
}

TEST(ActivationCheckpoint, ErrorsNameTheSegment) {
  ActivationCheckpointOptions o;
  o.name = "segment 2 of 4";
  try {
    checkpoint([](const std::vector<at::Tensor>&) { return std::vector<at::Tensor>{}; },
               {at::ones({1}).requires_grad_(true)}, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("segment 2 of 4 returned no tensor"), std::string::npos) << e.what();
  }
  try {
    checkpoint([](const at::Tensor&) { return at::Tensor(); }, at::ones({1}), o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("segment 2 of 4 returned an undefined tensor"), std::string::npos) << e.what();
  }
  auto net = makeNet(1, 1);  // 5 stages
  for (int64_t bad : {0, 6}) {
    try {
      checkpointSequential(*net, bad, at::ones({2, 8}));
      FAIL() << "no error for " << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("between 1 and the number of stages (5), got " + std::to_string(bad)),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(ActivationCheckpoint, UnderDdpGradientsEqualThePlainModelsBitForBit) {
  // Each rank's forward+backward runs under one lock with the generator
  // seeded per rank and step (the CPU generator is process-global and the
  // ranks are threads); DDP's bucket allreduces are launched from the
  // backward hooks and waited for after the lock is released.
  auto trainRanks = [](int64_t segments) {
    std::vector<std::vector<at::Tensor>> grads(2);
    std::mutex rngLock;
    // Built here, one after the other: construction draws from the global generator too.
    std::vector<nn::Sequential> nets{makeNet(7), makeNet(7)};
    test::runRanks(2, [&](int rank, Communicator& comm) {
      nn::Sequential net = nets[static_cast<size_t>(rank)];
      std::shared_ptr<nn::Module> module = net.ptr();
      DistributedDataParallel ddp(module, std::shared_ptr<Communicator>(&comm, [](Communicator*) {}));
      for (int step = 0; step < 3; ++step) {
        for (auto& p : net->parameters()) p.mutable_grad() = at::Tensor();
        {
          std::lock_guard<std::mutex> lock(rngLock);
          torch::manual_seed(1000 * static_cast<uint64_t>(step) + static_cast<uint64_t>(rank));
          at::Tensor x = at::randn({6, 8});
          at::Tensor y = segments > 0 ? checkpointSequential(*net, segments, x) : net->forward(x);
          y.pow(2).mean().backward();
        }
        ddp.finishGradientSync();
      }
      grads[static_cast<size_t>(rank)] = gradsOf(*net);
      for (auto& b : net->buffers()) grads[static_cast<size_t>(rank)].push_back(b.clone());
    });
    return grads;
  };
  auto plain = trainRanks(0);
  auto ckpt = trainRanks(4);
  for (size_t r = 0; r < 2; ++r) expectBitwiseEqual(ckpt[r], plain[r], "rank " + std::to_string(r));
}

TEST(ActivationCheckpoint, UnderZero2AndZero3ParametersEqualThePlainModelsBitForBit) {
  // As above, with the gradients reduce-scattered into shards and stepped by SGD: after three
  // steps every parameter and BatchNorm statistic equals the run without checkpointing.
  auto trainRanks = [](int stage, int64_t segments) {
    std::vector<std::vector<at::Tensor>> state(2);
    std::mutex rngLock;
    std::vector<nn::Sequential> nets{makeNet(7), makeNet(7)};
    test::runRanks(2, [&](int rank, Communicator& comm) {
      nn::Sequential net = nets[static_cast<size_t>(rank)];
      std::shared_ptr<nn::Module> module = net.ptr();
      auto comms = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
      auto sgd = std::make_unique<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
      std::unique_ptr<ShardedDataParallel> zero2;
      std::unique_ptr<FullyShardedDataParallel> zero3;
      if (stage == 2) zero2 = std::make_unique<ShardedDataParallel>(module, comms, std::move(sgd));
      if (stage == 3)
        zero3 = std::make_unique<FullyShardedDataParallel>(module, std::vector<Layer>{}, comms, std::move(sgd));
      for (int step = 0; step < 3; ++step) {
        if (zero3) zero3->gatherAll();  // collective: outside the generator's lock
        {
          std::lock_guard<std::mutex> lock(rngLock);
          torch::manual_seed(1000 * static_cast<uint64_t>(step) + static_cast<uint64_t>(rank));
          at::Tensor x = at::randn({6, 8});
          at::Tensor y = segments > 0 ? checkpointSequential(*net, segments, x) : net->forward(x);
          y.pow(2).mean().backward();
        }
        if (zero2) {
          zero2->finishGradientSync();
          zero2->step();
        } else {
          zero3->finishGradientSync();
          zero3->step();
        }
      }
      if (zero3) zero3->restoreModule();
      for (auto& p : net->parameters()) state[static_cast<size_t>(rank)].push_back(p.detach().clone());
      for (auto& b : net->buffers()) state[static_cast<size_t>(rank)].push_back(b.clone());
    });
    return state;
  };
  for (int stage : {2, 3}) {
    auto plain = trainRanks(stage, 0);
    auto ckpt = trainRanks(stage, 4);
    for (size_t r = 0; r < 2; ++r) {
      expectBitwiseEqual(ckpt[r], plain[r], "zero" + std::to_string(stage) + ", rank " + std::to_string(r));
    }
  }
}

}  // namespace
}  // namespace lockstep
