// PowerSGD (ddp.compression powersgd) against plain allreduce: at full rank it
// averages the same gradients, at low rank the replicas still agree bit for
// bit, error feedback keeps what compression lost, accumulation works, and the
// 20M-parameter MLP sends over 100x fewer bytes — one thread per rank over real Gloo.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <iostream>

#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/models/char_lstm.h"
#include "support/regression_data.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

using test::runRanks;

Mlp makeMlp() {
  torch::manual_seed(1);
  return Mlp(MlpOptions{12, {24, 16}, 5});
}

struct Trained {
  std::vector<Mlp> models;
  std::vector<SyncStats> stats;
  std::vector<at::Tensor> grads;  ///< rank 0's averaged gradients after each sync, flattened
};

/// `world` DDP replicas of the same MLP trained for `steps` synchronised steps of
/// `micro` micro-batches each (all but the last under noSync), SGD with momentum at `lr`.
Trained train(int world, const SyncOptions& options, int64_t steps, int micro = 1, double lr = 0.1) {
  const int64_t perRank = 16;  // 32 samples or more a step: every gradient matrix has full rank
  test::RegressionSteps data = test::makeRegressionSteps(world * perRank * micro, steps);
  Trained run;
  for (int r = 0; r < world; ++r) run.models.push_back(makeMlp());
  run.stats.resize(world);
  runRanks(world, [&](int rank, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    Mlp model = run.models[rank];
    DistributedDataParallel ddp(model.ptr(), shared, options);
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(lr).momentum(0.9));
    for (int64_t s = 0; s < steps; ++s) {
      opt.zero_grad();
      for (int m = 0; m < micro; ++m) {
        auto x = data.x[s].narrow(0, (rank * micro + m) * perRank, perRank);
        auto y = data.y[s].narrow(0, (rank * micro + m) * perRank, perRank);
        auto loss = at::mse_loss(model->forward(x), y);
        if (m + 1 < micro) {
          auto guard = ddp.noSync();
          loss.backward();
        } else {
          loss.backward();
        }
      }
      ddp.finishGradientSync();
      if (rank == 0) {
        std::vector<at::Tensor> flat;
        for (const auto& p : model->parameters()) flat.push_back(p.grad().reshape({-1}));
        run.grads.push_back(at::cat(flat));
      }
      opt.step();
    }
    run.stats[rank] = ddp.stats();
  });
  return run;
}

SyncOptions powerSgd(int rank, int64_t startStep, double minCompressionRate = 2.0, bool errorFeedback = true) {
  SyncOptions o;
  o.bucketCapMb = 0.001;  // several buckets
  o.compression = GradCompression::kPowerSgd;
  o.powerSgd.rank = rank;
  o.powerSgd.startStep = startStep;
  o.powerSgd.minCompressionRate = minCompressionRate;
  o.powerSgd.errorFeedback = errorFeedback;
  return o;
}

SyncOptions plain() {
  SyncOptions o;
  o.bucketCapMb = 0.001;
  return o;
}

void expectClose(const Mlp& a, const Mlp& b, double rtol, double atol, const std::string& what) {
  auto pa = a->named_parameters();
  auto pb = b->named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    auto diff = (pa[i].value() - pb[i].value()).abs().max().item<double>();
    EXPECT_TRUE(at::allclose(pa[i].value(), pb[i].value(), rtol, atol))
        << what << ": " << pa[i].key() << " differs by up to " << diff;
  }
}

void expectEqual(const Mlp& a, const Mlp& b, const std::string& what) {
  auto pa = a->named_parameters();
  auto pb = b->named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(pa[i].value().equal(pb[i].value())) << what << ": " << pa[i].key();
}

TEST(PowerSgd, FullRankAveragesLikePlainAllreduce) {
  for (int world : {2, 3}) {
    Trained reference = train(world, plain(), 8);
    // Rank 64 >= every matrix's smaller side, and every matrix compressed (rate 0): P Q^T is exact.
    Trained compressed = train(world, powerSgd(64, 0, 0.0), 8);
    EXPECT_LT(compressed.stats[0].bytesSent, compressed.stats[0].bytesReduced * 3) << "nothing was sent?";
    EXPECT_NE(compressed.stats[0].bytesSent, compressed.stats[0].bytesReduced) << "nothing was compressed";
    for (int r = 0; r < world; ++r) {
      expectClose(compressed.models[r], reference.models[r], 1e-5, 1e-6,
                  "world " + std::to_string(world) + " rank " + std::to_string(r));
    }
  }
}

TEST(PowerSgd, LowRankKeepsTheReplicasIdenticalAndSendsLess) {
  Trained reference = train(2, plain(), 6);
  Trained compressed = train(2, powerSgd(1, 0), 6);
  expectEqual(compressed.models[0], compressed.models[1], "rank 1 against rank 0");
  // Rank 1 is an approximation: the parameters move, but not as plain DDP's do.
  auto w = compressed.models[0]->named_parameters()[0].value();
  auto wRef = reference.models[0]->named_parameters()[0].value();
  EXPECT_FALSE(at::allclose(w, wRef, 1e-4, 1e-5)) << "rank 1 averaged exactly: was anything compressed?";
  EXPECT_LT(compressed.stats[0].bytesSent * 2, compressed.stats[0].bytesReduced);
}

TEST(PowerSgd, PlainAllreduceUntilTheStartStep) {
  Trained reference = train(2, plain(), 5);
  Trained late = train(2, powerSgd(1, 5), 5);  // compression would start at the 6th sync
  EXPECT_EQ(late.stats[0].bytesSent, late.stats[0].bytesReduced);
  expectEqual(late.models[0], reference.models[0], "before the start step");
  Trained started = train(2, powerSgd(1, 3), 5);
  int64_t perStep = reference.stats[0].bytesReduced / 5;
  EXPECT_GT(started.stats[0].bytesSent, 3 * perStep);
  EXPECT_LT(started.stats[0].bytesSent, 4 * perStep) << "two compressed steps should cost less than one plain one";
}

TEST(PowerSgd, ErrorFeedbackKeepsWhatCompressionLost) {
  // lr 0: the parameters stay put, so plain DDP's averages are the true ones. With error
  // feedback the applied averages add up to the true sum but for the last error (bounded);
  // without it what rank 1 cannot carry is lost anew every step.
  const int64_t steps = 100;
  Trained reference = train(2, plain(), steps, 1, 0.0);
  at::Tensor truth = at::zeros_like(reference.grads[0]);
  for (const auto& g : reference.grads) truth += g;
  auto gapAfter = [&](bool errorFeedback) {
    Trained run = train(2, powerSgd(1, 0, 2.0, errorFeedback), steps, 1, 0.0);
    at::Tensor sum = at::zeros_like(truth);
    for (const auto& g : run.grads) sum += g;
    return ((sum - truth).norm() / truth.norm()).item<double>();
  };
  double with = gapAfter(true);
  double without = gapAfter(false);
  std::cout << "relative gap after " << steps << " steps: with error feedback " << with << ", without " << without
            << "\n";
  EXPECT_LT(with, 0.25 * without) << "relative gap with error feedback " << with << ", without " << without;
}

TEST(PowerSgd, AccumulatedMicroBatchesAreCompressedTogether) {
  Trained reference = train(2, plain(), 4, /*micro=*/2);
  Trained compressed = train(2, powerSgd(64, 0, 0.0), 4, /*micro=*/2);
  for (int r = 0; r < 2; ++r) expectClose(compressed.models[r], reference.models[r], 1e-5, 1e-6, "accumulation");
  EXPECT_EQ(compressed.stats[0].syncs, 4);
}

TEST(PowerSgd, TheTwentyMillionParameterMlpSendsOverAHundredTimesFewerBytes) {
  // configs/mlp-bench.yaml's model: 784-4096-4096-10, 20.0 M parameters.
  std::vector<Mlp> models;
  for (int r = 0; r < 2; ++r) {
    torch::manual_seed(3);
    models.push_back(Mlp(MlpOptions{784, {4096, 4096}, 10}));
  }
  std::vector<SyncStats> stats(2);
  runRanks(2, [&](int rank, Communicator& comm) {
    auto shared = std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
    SyncOptions options;
    options.compression = GradCompression::kPowerSgd;
    options.powerSgd.rank = 4;
    options.powerSgd.startStep = 0;
    DistributedDataParallel ddp(models[rank].ptr(), shared, options);
    torch::manual_seed(10 + rank);
    auto x = at::randn({4, 784});
    auto y = at::randint(0, 10, {4});
    at::cross_entropy_loss(models[rank]->forward(x), y).backward();
    ddp.finishGradientSync();
    stats[rank] = ddp.stats();
  });
  const double ratio = static_cast<double>(stats[0].bytesReduced) / static_cast<double>(stats[0].bytesSent);
  EXPECT_GE(ratio, 100.0) << stats[0].bytesReduced << " bytes of gradients, " << stats[0].bytesSent << " sent";
  // Every matrix at rank 4 (the 10 x 4096 head too: 2.5x smaller) and the biases uncompressed:
  // 4 x (P + Q + biases) floats, 307,656 bytes for 80,150,568: 260x fewer.
  const int64_t expected = 4 * (4 * ((4096 + 784) + (4096 + 4096) + (10 + 4096)) + 4096 + 4096 + 10);
  EXPECT_EQ(stats[0].bytesSent, expected);
}

}  // namespace
}  // namespace lockstep
