// DistributedDataParallel against one process with the whole batch (the
// project's core correctness test), accumulation, unused parameters, model
// mismatches — one thread per rank over real Gloo.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <type_traits>

#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/models/char_lstm.h"
#include "lockstep/nn/layer.h"
#include "support/regression_data.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

// The names a release renamed still compile, deprecated, for programs written against them.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static_assert(std::is_same_v<DdpOptions, SyncOptions> && std::is_same_v<DdpStats, SyncStats>);
static_assert(std::is_same_v<PipelineLayer, Layer>);
#pragma GCC diagnostic pop

using test::runRanks;

Mlp makeMlp(uint64_t seed, std::vector<int64_t> hidden = {24, 16}) {
  torch::manual_seed(seed);
  return Mlp(MlpOptions{12, hidden, 5});
}

void expectSameParameters(torch::nn::Module& a, torch::nn::Module& b, double rtol, double atol,
                          const std::string& what) {
  auto pa = a.named_parameters();
  auto pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    auto diff = (pa[i].value() - pb[i].value()).abs().max().item<double>();
    EXPECT_TRUE(at::allclose(pa[i].value(), pb[i].value(), rtol, atol))
        << what << ": parameter " << pa[i].key() << " differs by up to " << diff;
  }
}

/// One process on the whole batch of each step: SGD with momentum 0.9, lr 0.1 (what the replicas run).
Mlp trainReference(const test::RegressionSteps& data, int64_t steps) {
  Mlp reference = makeMlp(1);
  torch::optim::SGD refOpt(reference->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int64_t s = 0; s < steps; ++s) {
    refOpt.zero_grad();
    at::mse_loss(reference->forward(data.x[s]), data.y[s]).backward();
    refOpt.step();
  }
  return reference;
}

/// Trains a reference model on the whole batch and `world` DDP replicas on its
/// shards, then compares every replica with the reference.
void checkEquivalence(int world, double bucketCapMb, GradCompression compression, double rtol, double atol) {
  const int64_t perRank = 6;
  const int64_t steps = 5;
  test::RegressionSteps data = test::makeRegressionSteps(world * perRank, steps);
  Mlp reference = trainReference(data, steps);
  // Replicas start different on purpose: DDP must broadcast rank 0's weights.
  std::vector<Mlp> replicas;
  for (int r = 0; r < world; ++r) replicas.push_back(makeMlp(r == 0 ? 1 : 100 + r));
  std::vector<int> bucketCounts(world);
  runRanks(world, [&](int rank, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    Mlp model = replicas[rank];
    SyncOptions options;
    options.bucketCapMb = bucketCapMb;
    options.compression = compression;
    DistributedDataParallel ddp(model.ptr(), shared, options);
    bucketCounts[rank] = ddp.numBuckets();
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int64_t s = 0; s < steps; ++s) {
      opt.zero_grad();
      auto x = data.x[s].narrow(0, rank * perRank, perRank);
      auto y = data.y[s].narrow(0, rank * perRank, perRank);
      at::mse_loss(model->forward(x), y).backward();
      ddp.finishGradientSync();
      opt.step();
    }
    EXPECT_EQ(ddp.stats().syncs, steps);
    EXPECT_EQ(ddp.stats().bucketsLaunched, steps * ddp.numBuckets());
    EXPECT_GT(ddp.stats().bucketsLaunchedDuringBackward, 0) << "no bucket overlapped backward";
  });
  for (int r = 0; r < world; ++r) {
    expectSameParameters(*replicas[r], *reference, rtol, atol, "rank " + std::to_string(r));
  }
  if (bucketCapMb < 0.01) { EXPECT_GE(bucketCounts[0], 3) << "the small cap should force several buckets"; }
}

TEST(DdpEquivalence, TwoWorkersManyBucketsMatchOneProcess) {
  checkEquivalence(2, 0.001, GradCompression::kNone, 1e-5, 1e-6);
}
TEST(DdpEquivalence, ThreeWorkersManyBucketsMatchOneProcess) {
  checkEquivalence(3, 0.001, GradCompression::kNone, 1e-5, 1e-6);
}
TEST(DdpEquivalence, ThreeWorkersOneBucketMatchOneProcess) {
  checkEquivalence(3, 25, GradCompression::kNone, 1e-5, 1e-6);
}
TEST(DdpEquivalence, Bf16CompressionIsCloseToOneProcess) {
  checkEquivalence(2, 0.001, GradCompression::kBf16, 2e-2, 2e-3);
}
TEST(DdpEquivalence, Fp16CompressionIsCloseToOneProcess) {
  checkEquivalence(3, 0.001, GradCompression::kFp16, 5e-3, 5e-4);
}

TEST(DdpEquivalence, CharLstmTwoWorkersMatchOneProcess) {
  const int world = 2;
  const int64_t perRank = 4;
  const int64_t window = 6;
  const int64_t steps = 3;
  CharLstmOptions o{8, 16, 2};
  torch::manual_seed(9);
  at::Tensor inputs = at::randint(0, 8, {steps, world * perRank, window}, at::kLong);
  at::Tensor targets = at::randint(0, 8, {steps, world * perRank, window}, at::kLong);
  targets.index_put_({targets == 0}, -100);  // some ignored positions, as padding gives
  torch::manual_seed(5);
  CharLstm reference(o);
  torch::optim::SGD refOpt(reference->parameters(), torch::optim::SGDOptions(0.5));
  for (int64_t s = 0; s < steps; ++s) {
    refOpt.zero_grad();
    charLstmLoss(reference->forward(inputs[s]), targets[s]).backward();
    refOpt.step();
  }
  std::vector<CharLstm> replicas;
  for (int r = 0; r < world; ++r) {
    torch::manual_seed(r == 0 ? 5 : 77);
    replicas.emplace_back(o);
  }
  runRanks(world, [&](int rank, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    SyncOptions options;
    options.bucketCapMb = 0.005;
    DistributedDataParallel ddp(replicas[rank].ptr(), shared, options);
    torch::optim::SGD opt(replicas[rank]->parameters(), torch::optim::SGDOptions(0.5));
    for (int64_t s = 0; s < steps; ++s) {
      opt.zero_grad();
      auto x = inputs[s].narrow(0, rank * perRank, perRank);
      auto y = targets[s].narrow(0, rank * perRank, perRank);
      charLstmLoss(replicas[rank]->forward(x), y).backward();
      ddp.finishGradientSync();
      opt.step();
    }
  });
  for (int r = 0; r < world; ++r)
    expectSameParameters(*replicas[r], *reference, 1e-5, 1e-6, "charlstm rank " + std::to_string(r));
}

/// Counts the allreduce launches that reach the communicator.
class CountingHook : public CommHook {
 public:
  std::string name() const override { return "counting"; }
  WorkHandle start(Communicator& comm, GradBucket& bucket) override {
    ++calls;
    std::vector<at::Tensor> t{*bucket.buffer};
    return comm.allreduce(t, ReduceOp::kAvg);
  }
  void finish(Communicator&, GradBucket&) override {}
  std::atomic<int> calls{0};
};

TEST(DdpAccumulation, FourMicroBatchesUnderNoSyncEqualOneBigStep) {
  const int world = 2;
  const int micro = 4;
  const int64_t perMicro = 3;
  test::RegressionSteps data = test::makeRegressionSteps(world * micro * perMicro, 1);
  Mlp reference = makeMlp(1);
  torch::optim::SGD refOpt(reference->parameters(), torch::optim::SGDOptions(0.2));
  refOpt.zero_grad();
  at::mse_loss(reference->forward(data.x[0]), data.y[0]).backward();
  refOpt.step();

  std::vector<Mlp> replicas{makeMlp(1), makeMlp(2)};
  std::vector<std::shared_ptr<CountingHook>> hooks{std::make_shared<CountingHook>(), std::make_shared<CountingHook>()};
  runRanks(world, [&](int rank, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    SyncOptions options;
    options.bucketCapMb = 0.001;
    options.hook = hooks[rank];
    DistributedDataParallel ddp(replicas[rank].ptr(), shared, options);
    torch::optim::SGD opt(replicas[rank]->parameters(), torch::optim::SGDOptions(0.2));
    opt.zero_grad();
    auto shard = [&](int m, const at::Tensor& t) { return t[0].narrow(0, (rank * micro + m) * perMicro, perMicro); };
    for (int m = 0; m < micro; ++m) {
      auto loss = at::mse_loss(replicas[rank]->forward(shard(m, data.x)), shard(m, data.y)) / micro;
      if (m < micro - 1) {
        auto guard = ddp.noSync();
        loss.backward();
        ddp.finishGradientSync();  // a no-op while sync is off
        EXPECT_EQ(hooks[rank]->calls.load(), 0) << "communication during an accumulation step";
      } else {
        loss.backward();
        ddp.finishGradientSync();
      }
    }
    opt.step();
    EXPECT_EQ(hooks[rank]->calls.load(), ddp.numBuckets()) << "exactly one allreduce per bucket on the boundary";
    EXPECT_EQ(ddp.stats().syncs, 1);
  });
  // Per-rank data order differs from the reference's (rank-major), but the mean is the same.
  for (auto& r : replicas) expectSameParameters(*r, *reference, 1e-5, 1e-6, "accumulated");
}

TEST(DdpGradients, AreViewsOfTheBucketsSoTheAverageNeedsNoCopyBack) {
  // After a sync every .grad is its bucket's memory, so the buckets are all the gradient memory DDP
  // holds, whether the loop fills gradients with zeros (the next backward accumulates into the bucket
  // in place: the same memory as the step before) or drops them (a parameter alone in its bucket
  // lends its new gradient as the bucket, the others are copied in once), and with noSync
  // accumulation in between. Training still equals one process.
  const int world = 2;
  const int64_t perRank = 4;
  const int64_t steps = 4;
  test::RegressionSteps data = test::makeRegressionSteps(world * perRank, steps);
  Mlp reference = trainReference(data, steps);
  std::vector<Mlp> replicas{makeMlp(1), makeMlp(2)};
  runRanks(world, [&](int rank, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    Mlp model = replicas[rank];
    SyncOptions options;
    options.bucketCapMb = 0.001;  // several buckets
    DistributedDataParallel ddp(model.ptr(), shared, options);
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    int64_t parameterBytes = 0;
    for (const auto& p : model->parameters()) parameterBytes += static_cast<int64_t>(p.nbytes());
    std::vector<const void*> previous;
    for (int64_t s = 0; s < steps; ++s) {
      if (s % 2 == 0) {
        opt.zero_grad(/*set_to_none=*/false);  // fills zeros
      } else {
        for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
      }
      auto x = data.x[s].narrow(0, rank * perRank, perRank);
      auto y = data.y[s].narrow(0, rank * perRank, perRank);
      if (s == 2) {  // two half batches, the first under noSync: the same mean gradient
        {
          auto guard = ddp.noSync();
          (at::mse_loss(model->forward(x.narrow(0, 0, 2)), y.narrow(0, 0, 2)) / 2).backward();
        }
        (at::mse_loss(model->forward(x.narrow(0, 2, 2)), y.narrow(0, 2, 2)) / 2).backward();
      } else {
        at::mse_loss(model->forward(x), y).backward();
      }
      ddp.finishGradientSync();
      EXPECT_EQ(ddp.gradientBytes(), parameterBytes) << "step " << s << ": gradients held twice";
      std::vector<const void*> now;
      for (const auto& p : model->parameters()) now.push_back(p.grad().data_ptr());
      if (s % 2 == 0 && s > 0)
        EXPECT_EQ(now, previous) << "step " << s << ": zero-filled .grad not accumulated in place";
      previous = now;
      opt.step();
    }
    EXPECT_EQ(ddp.bufferBytes(), 0);
  });
  for (int r = 0; r < world; ++r) {
    expectSameParameters(*replicas[r], *reference, 1e-5, 1e-6, "rank " + std::to_string(r));
  }
}

/// An MLP with an extra layer that forward() skips unless asked.
struct SometimesUnusedImpl : torch::nn::Module {
  SometimesUnusedImpl() {
    used = register_module("used", torch::nn::Linear(4, 2));
    unused = register_module("unused", torch::nn::Linear(4, 2));
  }
  at::Tensor forward(const at::Tensor& x, bool both) {
    return both ? used->forward(x) + unused->forward(x) : used->forward(x);
  }
  torch::nn::Linear used{nullptr};
  torch::nn::Linear unused{nullptr};
};
TORCH_MODULE(SometimesUnused);

TEST(DdpUnusedParameters, ErrorNamesThemUnlessFindUnusedIsSet) {
  std::vector<SometimesUnused> models{SometimesUnused(), SometimesUnused()};
  runRanks(2, [&](int rank, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    {
      DistributedDataParallel ddp(models[rank].ptr(), shared, {});
      models[rank]->forward(at::ones({3, 4}), false).sum().backward();
      try {
        ddp.finishGradientSync();
        ADD_FAILURE() << "unused parameters went unnoticed";
      } catch (const Error& e) {
        std::string what = e.what();
        EXPECT_NE(what.find("unused.weight"), std::string::npos) << what;
        EXPECT_NE(what.find("findUnusedParameters"), std::string::npos) << what;
      }
    }
  });
  std::vector<SometimesUnused> again{SometimesUnused(), SometimesUnused()};
  runRanks(2, [&](int rank, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    SyncOptions options;
    options.findUnusedParameters = true;
    DistributedDataParallel ddp(again[rank].ptr(), shared, options);
    for (auto& p : again[rank]->parameters()) p.mutable_grad() = at::Tensor();
    // Rank 0 uses both layers, rank 1 only one: the unused layer gets rank 0's gradient / 2.
    again[rank]->forward(at::ones({3, 4}), rank == 0).sum().backward();
    ddp.finishGradientSync();
    auto g = again[rank]->unused->weight.grad();
    ASSERT_TRUE(g.defined());
    EXPECT_TRUE(at::allclose(g, at::full({2, 4}, 1.5))) << g;  // (3 rows of ones summed) / 2 ranks
  });
}

TEST(DdpConsistency, MismatchedModelsGiveAClearErrorOnEveryRank) {
  std::vector<Mlp> models{makeMlp(1, {24, 16}), makeMlp(1, {24, 17})};
  std::vector<std::string> messages(2);
  runRanks(2, [&](int rank, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    try {
      DistributedDataParallel ddp(models[rank].ptr(), shared, {});
    } catch (const Error& e) { messages[rank] = e.what(); }
  });
  for (const auto& m : messages) {
    EXPECT_NE(m.find("the model differs between ranks"), std::string::npos) << m;
    EXPECT_NE(
        m.find("'parameter fc1.weight float32[16,24]' on rank 0 but 'parameter fc1.weight float32[17,24]' on rank 1"),
        std::string::npos)
        << m;
  }
}

TEST(DdpBuckets, ReverseRegistrationOrderAndCap) {
  std::vector<Mlp> models{makeMlp(1), makeMlp(1)};
  runRanks(2, [&](int rank, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    SyncOptions options;
    options.bucketCapMb = 400.0 / (1024 * 1024);  // 400 bytes = 100 floats
    DistributedDataParallel ddp(models[rank].ptr(), shared, options);
    auto layout = ddp.bucketLayout();
    ASSERT_FALSE(layout.empty());
    EXPECT_EQ(layout.front().front(), "fc2.bias") << "the last registered parameter comes first";
    EXPECT_EQ(layout.back().back(), "fc0.weight");
    // fc0.weight (24x12 = 288 floats) exceeds the cap alone and gets its own bucket.
    EXPECT_EQ(layout.back().size(), 1u);
  });
}

TEST(DdpBuckets, FirstBucketIsSmallSoCommunicationStartsEarly) {
  // Mlp 12 -> 24 -> 16 -> 5: fc2 (16x5+5 = 85 floats) is produced first by backward.
  std::vector<Mlp> models{makeMlp(1), makeMlp(1)};
  runRanks(2, [&](int rank, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    SyncOptions options;                               // the whole model fits in one 25 MB bucket ...
    options.firstBucketCapMb = 400.0 / (1024 * 1024);  // ... but the first holds at most 100 floats
    DistributedDataParallel ddp(models[rank].ptr(), shared, options);
    auto layout = ddp.bucketLayout();
    ASSERT_EQ(layout.size(), 2u);
    EXPECT_EQ(layout[0], (std::vector<std::string>{"fc2.bias", "fc2.weight"}));
    EXPECT_EQ(layout[1].back(), "fc0.weight");
  });
}

TEST(DdpWorldOfOne, CommunicatesNothingAndLeavesAutogradsGradients) {
  Mlp reference = makeMlp(3);
  Mlp wrapped = makeMlp(3);
  auto comm = makeGlooCommunicator(Store::inMemory(), GlooOptions{});
  SyncOptions options;
  options.bucketCapMb = 0.0001;  // many buckets, none of which may be launched
  DistributedDataParallel ddp(wrapped.ptr(), comm, options);
  test::RegressionSteps data = test::makeRegressionSteps(8, 2);
  for (int step = 0; step < 2; ++step) {
    for (auto* m : {&reference, &wrapped}) {
      (*m)->zero_grad();
      torch::nn::functional::mse_loss((*m)->forward(data.x[step]), data.y[step]).backward();
    }
    ddp.finishGradientSync();
    auto pr = reference->named_parameters();
    auto pw = wrapped->named_parameters();
    for (size_t i = 0; i < pr.size(); ++i) {
      EXPECT_TRUE(at::equal(pr[i].value().grad(), pw[i].value().grad())) << pr[i].key();
    }
  }
  EXPECT_EQ(ddp.stats().syncs, 2);
  EXPECT_EQ(ddp.stats().bucketsLaunched, 0);
  // The same misuse is caught as with more ranks.
  torch::nn::functional::mse_loss(wrapped->forward(data.x[0]), data.y[0]).backward();
  try {
    torch::nn::functional::mse_loss(wrapped->forward(data.x[0]), data.y[0]).backward();
    FAIL() << "a second backward without finishGradientSync() was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("arrived twice"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lockstep
