// Pipeline parallelism (pipeline/pipeline.h): schedules that cannot deadlock and idle (p-1)/(m+p-1),
// balancing, option errors, and stages on threads-as-ranks over Gloo that train exactly like the
// unsplit model (P = 2 and 3; M = 1, 4, 8; GPipe and 1F1B), BatchNorm included.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <fmt/format.h>

#include <mutex>

#include "lockstep/pipeline/pipeline.h"
#include "support/expect.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

using test::borrow;
using test::errorOf;
using test::runRanks;

// ---- schedules ----------------------------------------------------------------------------------

std::string text(const std::vector<PipelineOp>& ops) {
  std::string out;
  for (const auto& op : ops) out += fmt::format("{}{} ", op.kind == PipelineOp::kForward ? 'F' : 'B', op.micro);
  return out;
}

TEST(PipelineSchedule, GpipeFillsThenDrains) {
  EXPECT_EQ(text(pipelineSchedule(PipelineSchedule::kGpipe, 2, 0, 3)), "F0 F1 F2 B0 B1 B2 ");
  EXPECT_EQ(text(pipelineSchedule(PipelineSchedule::kGpipe, 2, 1, 3)), "F0 F1 F2 B0 B1 B2 ");
}

TEST(PipelineSchedule, OneForwardOneBackward) {
  EXPECT_EQ(text(pipelineSchedule(PipelineSchedule::k1f1b, 3, 0, 4)), "F0 F1 F2 B0 F3 B1 B2 B3 ");
  EXPECT_EQ(text(pipelineSchedule(PipelineSchedule::k1f1b, 3, 1, 4)), "F0 F1 B0 F2 B1 F3 B2 B3 ");
  EXPECT_EQ(text(pipelineSchedule(PipelineSchedule::k1f1b, 3, 2, 4)), "F0 B0 F1 B1 F2 B2 F3 B3 ");
  EXPECT_EQ(text(pipelineSchedule(PipelineSchedule::k1f1b, 4, 0, 2)), "F0 F1 B0 B1 ");
  // 1F1B keeps at most P - stage micro-batches alive; GPipe all M.
  EXPECT_EQ(peakMicrobatchesInFlight(pipelineSchedule(PipelineSchedule::k1f1b, 2, 0, 8)), 2);
  EXPECT_EQ(peakMicrobatchesInFlight(pipelineSchedule(PipelineSchedule::k1f1b, 2, 1, 8)), 1);
  EXPECT_EQ(peakMicrobatchesInFlight(pipelineSchedule(PipelineSchedule::kGpipe, 2, 0, 8)), 8);
}

/// Runs every stage's schedule against the others with forward 1 and backward 2 time units, a
/// forward waiting for the previous stage's and a backward for the next stage's; returns the
/// finishing time, or -1 when no stage can move (a deadlock).
int simulate(PipelineSchedule schedule, int p, int m) {
  std::vector<std::vector<PipelineOp>> ops;
  for (int s = 0; s < p; ++s) ops.push_back(pipelineSchedule(schedule, p, s, m));
  std::vector<size_t> next(p, 0);
  std::vector<int> freeAt(p, 0);
  std::vector<std::vector<int>> fwdDone(p, std::vector<int>(m, -1)), bwdDone(p, std::vector<int>(m, -1));
  for (;;) {
    bool moved = false, left = false;
    for (int s = 0; s < p; ++s) {
      if (next[s] == ops[s].size()) continue;
      left = true;
      const PipelineOp op = ops[s][next[s]];
      int ready = freeAt[s];
      if (op.kind == PipelineOp::kForward) {
        if (s > 0 && fwdDone[s - 1][op.micro] < 0) continue;
        if (s > 0) ready = std::max(ready, fwdDone[s - 1][op.micro]);
        fwdDone[s][op.micro] = freeAt[s] = ready + 1;
      } else {
        if (fwdDone[s][op.micro] < 0 || (s + 1 < p && bwdDone[s + 1][op.micro] < 0)) continue;
        if (s + 1 < p) ready = std::max(ready, bwdDone[s + 1][op.micro]);
        bwdDone[s][op.micro] = freeAt[s] = ready + 2;
      }
      ++next[s];
      moved = true;
    }
    if (!left) return *std::max_element(freeAt.begin(), freeAt.end());
    if (!moved) return -1;
  }
}

TEST(PipelineSchedule, NeverDeadlocksAndIdlesTheTheoreticalBubble) {
  for (auto schedule : {PipelineSchedule::kGpipe, PipelineSchedule::k1f1b}) {
    for (int p = 1; p <= 5; ++p) {
      for (int m = 1; m <= 9; ++m) {
        SCOPED_TRACE(fmt::format("{} p={} m={}", toString(schedule), p, m));
        const int finish = simulate(schedule, p, m);
        ASSERT_GT(finish, 0) << "deadlock";
        // Busy 3m of the step on each stage: idle = 1 - 3m / finish = (p-1)/(m+p-1).
        EXPECT_NEAR(1.0 - 3.0 * m / finish, double(p - 1) / (m + p - 1), 1e-12);
      }
    }
  }
}

// ---- balance and options ------------------------------------------------------------------------

TEST(PipelineBalance, ContiguousMinimisingTheLargestStage) {
  EXPECT_EQ(balanceByParameters({401920, 131328, 2570}, 2), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(balanceByParameters({10, 10, 10, 10}, 2), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(balanceByParameters({1, 1, 1, 100}, 2), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(balanceByParameters({0, 0, 0}, 3), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(balanceByParameters({5, 1, 1, 1, 1, 5}, 3), (std::vector<int64_t>{1, 4, 1}));
  EXPECT_THROW(balanceByParameters({1, 2}, 3), Error);
}

TEST(PipelineOptionsCheck, EachMistakeNamesItsKey) {
  auto message = [](PipelineOptions o, int64_t layers, int world) {
    return errorOf([&] { checkPipelineOptions(o, layers, world); });
  };
  EXPECT_NO_THROW(checkPipelineOptions({2, 4}, 4, 4));
  EXPECT_HAS(message({3, 4}, 4, 4), ("parallel.pipeline 3 does not divide the 4 worker(s)"));
  EXPECT_HAS(message({0, 4}, 4, 4), ("parallel.pipeline must be at least 1"));
  EXPECT_HAS(message({4, 4}, 3, 4), ("parallel.pipeline 4 asks for more pipeline stages than"));
  EXPECT_HAS(message({2, -1}, 4, 2), ("parallel.microbatches must be at least 1"));
  PipelineOptions o{2, 4};
  o.balance = {1, 2, 1};
  EXPECT_HAS(message(o, 4, 2), ("parallel.balance has 3 entries"));
  o.balance = {1, 2};
  EXPECT_HAS(message(o, 4, 2), ("parallel.balance sums to 3 layers, but the model has 4"));
  o.balance = {0, 4};
  EXPECT_HAS(message(o, 4, 2), ("parallel.balance[0] is 0"));
  EXPECT_THROW(parsePipelineSchedule("zigzag", "parallel.schedule"), ConfigError);
  EXPECT_EQ(parsePipelineSchedule("GPipe", "parallel.schedule"), PipelineSchedule::kGpipe);
}

// ---- stages at work -----------------------------------------------------------------------------

/// A chain of Linear(-tanh) layers, optionally with a BatchNorm1d after the first, seeded.
struct Chain {
  std::vector<std::shared_ptr<torch::nn::Module>> modules;
  std::vector<Layer> layers;
};

Chain makeChain(bool batchNorm) {
  at::manual_seed(7);
  Chain c;
  const std::vector<int64_t> widths = {8, 16, 16, 12, 4};
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    auto linear = std::make_shared<torch::nn::LinearImpl>(widths[i], widths[i + 1]);
    const bool last = i + 2 == widths.size();
    c.modules.push_back(linear);
    c.layers.push_back({fmt::format("fc{}", i + 1),
                        [linear, last](const at::Tensor& x) {
                          at::Tensor y = linear->forward(x);
                          return last ? y : at::tanh(y);
                        },
                        {linear}});
    if (batchNorm && i == 0) {
      auto bn = std::make_shared<torch::nn::BatchNorm1dImpl>(widths[1]);
      c.modules.push_back(bn);
      c.layers.push_back({"bn", [bn](const at::Tensor& x) { return bn->forward(x); }, {bn}});
    }
  }
  return c;
}

at::Tensor crossEntropy(const at::Tensor& out, const Batch& b) { return at::cross_entropy_loss(out, b.targets); }

Batch batchAt(int step, int64_t rows) {
  at::Generator g = at::detail::createCPUGenerator(1000 + step);
  return {at::randn({rows, 8}, g), at::randint(0, 4, {rows}, g)};
}

std::vector<at::Tensor> stateOf(const std::vector<std::shared_ptr<torch::nn::Module>>& modules) {
  std::vector<at::Tensor> out;
  for (const auto& m : modules) {
    for (const auto& p : m->parameters()) out.push_back(p.detach().clone());
    for (const auto& b : m->buffers()) out.push_back(b.detach().clone());
  }
  return out;
}

double maxRelative(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>()) /
         std::max(1e-12, b.to(at::kDouble).abs().max().item<double>());
}

/// The unsplit model trained `steps` steps; with micro > 0 each batch in micro-batches as the pipeline does.
std::vector<at::Tensor> trainUnsplit(bool batchNorm, int steps, int64_t rows, int micro) {
  Chain c = makeChain(batchNorm);
  std::vector<at::Tensor> params;
  for (auto& m : c.modules) {
    for (auto& p : m->parameters()) params.push_back(p);
  }
  torch::optim::SGD opt(params, torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    Batch b = batchAt(step, rows);
    auto run = [&](const at::Tensor& x) {
      at::Tensor y = x;
      for (auto& l : c.layers) y = l.forward(y);
      return y;
    };
    if (micro == 0) {
      crossEntropy(run(b.inputs), b).backward();
    } else {
      auto xs = at::tensor_split(b.inputs, micro), ts = at::tensor_split(b.targets, micro);
      for (int m = 0; m < micro; ++m) {
        double share = double(xs[m].size(0)) / double(rows);
        (at::cross_entropy_loss(run(xs[m]), ts[m]) * share).backward();
      }
    }
    opt.step();
  }
  return stateOf(c.modules);
}

/// Trains the chain as a pipeline on threads; returns the full state gathered from the stages.
std::vector<at::Tensor> trainPipelined(bool batchNorm, int steps, int64_t rows, PipelineOptions o,
                                       std::vector<double>* losses = nullptr) {
  std::vector<Chain> chains;
  for (int r = 0; r < o.stages; ++r) chains.push_back(makeChain(batchNorm));
  std::vector<std::vector<at::Tensor>> pieces(o.stages);
  runRanks(o.stages, [&](int rank, Communicator& comm) {
    PipelineStage stage(chains[rank].layers, borrow(comm), o);
    torch::optim::SGD opt(stage.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < steps; ++step) {
      opt.zero_grad();
      double loss = stage.trainBatch(batchAt(step, rows), crossEntropy);
      if (losses && rank == 0) losses->push_back(loss);
      opt.step();
    }
    pieces[rank] = stateOf(stage.modules());
  });
  std::vector<at::Tensor> all;
  for (auto& p : pieces) all.insert(all.end(), p.begin(), p.end());
  return all;
}

TEST(PipelineStage, TrainsLikeTheUnsplitModel) {
  const auto reference = trainUnsplit(false, 20, 24, 0);
  for (int p : {2, 3, 4}) {
    for (int m : {1, 4, 8}) {
      for (auto schedule : {PipelineSchedule::kGpipe, PipelineSchedule::k1f1b}) {
        SCOPED_TRACE(fmt::format("P={} M={} {}", p, m, toString(schedule)));
        PipelineOptions o{p, m, schedule};
        auto got = trainPipelined(false, 20, 24, o);
        ASSERT_EQ(got.size(), reference.size());
        for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(maxRelative(got[i], reference[i]), 1e-6) << "tensor " << i;
      }
    }
  }
}

// 10 rows in 4 micro-batches are 3, 3, 2 and 2 rows: a new shape in the middle of the batch, whose
// header the next stage must receive in the order NCCL pairs the messages (LOCKSTEP_NCCL_ORDER=1).
TEST(PipelineStage, UnevenMicroBatchesTrainLikeTheUnsplitModel) {
  const auto reference = trainUnsplit(false, 6, 10, 4);
  for (int p : {2, 3}) {
    for (auto schedule : {PipelineSchedule::kGpipe, PipelineSchedule::k1f1b}) {
      SCOPED_TRACE(fmt::format("P={} {}", p, toString(schedule)));
      auto got = trainPipelined(false, 6, 10, {p, 4, schedule});
      ASSERT_EQ(got.size(), reference.size());
      for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(maxRelative(got[i], reference[i]), 1e-6) << "tensor " << i;
    }
  }
}

TEST(PipelineStage, ReportsTheBatchLossOnEveryStage) {
  std::vector<double> losses;
  trainPipelined(false, 3, 12, {3, 4}, &losses);  // rank 0 is the first stage: the loss came from the last
  ASSERT_EQ(losses.size(), 3u);
  Chain c = makeChain(false);
  Batch b = batchAt(0, 12);
  at::Tensor y = b.inputs;
  for (auto& l : c.layers) y = l.forward(y);
  EXPECT_NEAR(losses[0], crossEntropy(y, b).item<double>(), 1e-6);
}

TEST(PipelineStage, BatchNormAsInTheUnsplitModelOverTheSameMicroBatches) {
  const auto reference = trainUnsplit(true, 10, 24, 4);
  for (auto schedule : {PipelineSchedule::kGpipe, PipelineSchedule::k1f1b}) {
    SCOPED_TRACE(toString(schedule));
    PipelineOptions o{2, 4, schedule};
    o.balance = {1, 4};  // the BatchNorm (layer 1) on the second stage
    auto got = trainPipelined(true, 10, 24, o);
    ASSERT_EQ(got.size(), reference.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(maxRelative(got[i], reference[i]), 1e-6) << "tensor " << i;
  }
}

TEST(PipelineStage, ForwardGivesTheModelsOutputOnTheLastStage) {
  Chain c = makeChain(false);
  Batch b = batchAt(3, 10);
  at::Tensor expected = b.inputs;
  for (auto& l : c.layers) expected = l.forward(expected);
  std::vector<Chain> chains{makeChain(false), makeChain(false), makeChain(false)};
  runRanks(3, [&](int rank, Communicator& comm) {
    PipelineStage stage(chains[rank].layers, borrow(comm), {3, 3});
    at::Tensor out = stage.forward(b);
    if (rank < 2) {
      EXPECT_FALSE(out.defined());
    } else {
      EXPECT_LE(maxRelative(out, expected.detach()), 1e-6);
    }
    out = stage.forward(b);  // shapes known now: data only
    if (rank == 2) EXPECT_LE(maxRelative(out, expected.detach()), 1e-6);
  });
}

TEST(PipelineStage, RefusesWhatItCannotRun) {
  std::vector<Chain> chains{makeChain(false), makeChain(false)};
  std::vector<std::string> errors(2);
  runRanks(2, [&](int rank, Communicator& comm) {
    EXPECT_HAS(errorOf([&] {
                 PipelineStage(chains[rank].layers, borrow(comm), {3, 2});
               }),
               "parallel.pipeline is 3, but the pipeline group has 2 rank(s)");
    PipelineStage stage(chains[rank].layers, borrow(comm), {2, 8});
    errors[rank] = errorOf([&] { stage.trainBatch(batchAt(0, 5), crossEntropy); });
  });
  for (const auto& e : errors) { EXPECT_HAS(e, "a batch of 5 row(s) cannot be split into 8 micro-batches"); }
}

}  // namespace
}  // namespace lockstep
