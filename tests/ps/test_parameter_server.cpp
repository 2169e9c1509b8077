// Parameter servers (ps/parameter_server.h) on threads-as-ranks over Gloo: the layout, s = 0
// equal to synchronous SGD, the staleness bound held against a straggler, asynchronous training
// that learns, and a failed server or worker named by its peers.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>
#include <torch/optim/sgd.h>

#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "lockstep/common/error.h"
#include "lockstep/ps/parameter_server.h"
#include "support/expect.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

using test::borrow;
using test::errorOf;
using test::runRanks;

OptimizerFactory sgd(double lr) {
  return [lr](const std::vector<at::Tensor>& params) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(lr));
  };
}

// A linear model y = x W^T + b fitted to a fixed target map; worker w's k-th batch is a
// function of (w, k) alone.
struct Problem {
  static at::Tensor inputs(int w, int64_t k) {
    return at::sin(at::arange(8 * 5, at::kFloat).view({8, 5}) * 0.37 + 1.3 * w + 0.71 * static_cast<double>(k));
  }
  static at::Tensor targets(const at::Tensor& x) {
    const auto truth = at::linspace(-1, 1, 15, at::kFloat).view({3, 5});
    return at::matmul(x, truth.t()) + 0.5;
  }
  static std::vector<at::Tensor> initial() {
    return {at::full({3, 5}, 0.1, at::kFloat).requires_grad_(), at::zeros({3}, at::kFloat).requires_grad_()};
  }
  static at::Tensor loss(const std::vector<at::Tensor>& p, int w, int64_t k) {
    const auto x = inputs(w, k);
    return (at::matmul(x, p[0].t()) + p[1] - targets(x)).pow(2).mean();
  }
};

void computeGradients(std::vector<at::Tensor>& params, int w, int64_t k) {
  for (auto& p : params) p.mutable_grad() = at::Tensor();
  Problem::loss(params, w, k).backward();
}

double maxRelativeDiff(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item<double>();
}

TEST(PsLayout, RolesShardsAndOptionErrors) {
  const PsOptions two{2, 0};
  EXPECT_FALSE(psRole(0, 5, two).server);
  EXPECT_EQ(psRole(2, 5, two).index, 2);
  EXPECT_TRUE(psRole(3, 5, two).server);
  EXPECT_EQ(psRole(4, 5, two).index, 1);
  EXPECT_EQ(psRole(4, 5, two).workers, 3);
  int64_t next = 0;
  for (int j = 0; j < 3; ++j) {
    const auto range = psShardRange(10, 3, j);
    EXPECT_EQ(range.first, next);
    EXPECT_EQ(range.second - range.first, j < 2 ? 4 : 2);  // ceil(10 / 3), the last shorter
    next = range.second;
  }
  EXPECT_EQ(next, 10);
  EXPECT_HAS(errorOf([] { checkPsOptions({2, 0}, 2); }), "ps.servers 2");
  EXPECT_HAS(errorOf([] { checkPsOptions({0, 0}, 4); }), "ps.servers 0");
  EXPECT_HAS(errorOf([] { checkPsOptions({1, -1}, 4); }), "ps.staleness -1");
  EXPECT_HAS(errorOf([] {
               PsOptions o{1, 0};
               o.compensation = -1;
               checkPsOptions(o, 4);
             }),
             "ps.compensation -1");
  EXPECT_NO_THROW(checkPsOptions({2, 1}, 5));
  PsStats stats;
  EXPECT_EQ(stats.maxStaleness(), -1);
  stats.record(2, 5);
  stats.record(0, 0);
  EXPECT_EQ(stats.maxStaleness(), 2);
  EXPECT_EQ(stats.lag.size(), 6u);
  EXPECT_EQ(stats.updates, 2);
}

struct RunResult {
  std::mutex mutex;
  std::vector<std::vector<at::Tensor>> workerParams;  // by worker, after finish()
  std::vector<PsStats> serverStats;
  std::vector<int64_t> workerMaxStaleness;
  std::vector<std::vector<int64_t>> tickets;  // by worker: after the pull, then after each push
};

/// `workers` workers and `servers` servers, each worker pushing `steps` SGD gradients of the
/// Problem; worker `slow` sleeps `slowMs` before each push.
void runPs(int workers, int servers, int staleness, int64_t steps, double lr, int slow, int slowMs, RunResult& out) {
  out.workerParams.assign(static_cast<size_t>(workers), {});
  out.workerMaxStaleness.assign(static_cast<size_t>(workers), 0);
  out.tickets.assign(static_cast<size_t>(workers), {});
  out.serverStats.assign(static_cast<size_t>(servers), {});
  runRanks(workers + servers, [&](int rank, Communicator& comm) {
    auto params = Problem::initial();
    const PsOptions options{servers, staleness};
    if (rank >= workers) {
      ParameterServer server(borrow(comm), options, params, sgd(lr));
      server.serve();
      std::lock_guard<std::mutex> lock(out.mutex);
      out.serverStats[static_cast<size_t>(rank - workers)] = server.stats();
      return;
    }
    PsWorker worker(borrow(comm), options, params);
    if (rank == slow) std::this_thread::sleep_for(std::chrono::milliseconds(slowMs));  // late from the start
    worker.pull();
    std::vector<int64_t> tickets{worker.ticket()};
    for (int64_t k = 0; k < steps; ++k) {
      if (rank == slow) std::this_thread::sleep_for(std::chrono::milliseconds(slowMs));
      computeGradients(params, rank, k);
      worker.push();
      tickets.push_back(worker.ticket());
    }
    worker.finish();
    std::lock_guard<std::mutex> lock(out.mutex);
    out.workerParams[static_cast<size_t>(rank)] = {params[0].detach().clone(), params[1].detach().clone()};
    out.workerMaxStaleness[static_cast<size_t>(rank)] = worker.maxStaleness();
    out.tickets[static_cast<size_t>(rank)] = tickets;
  });
}

// 18 elements over 7 servers are ranges of 3 and an empty one: that server serves nothing and
// the run ends where one server's ends.
TEST(ParameterServer, AServerWithAnEmptyRangeTakesPart) {
  ASSERT_EQ(psShardRange(18, 7, 6).first, psShardRange(18, 7, 6).second);
  RunResult one, seven;
  runPs(2, 1, /*staleness=*/0, /*steps=*/4, 0.05, /*slow=*/-1, /*slowMs=*/0, one);
  runPs(2, 7, /*staleness=*/0, /*steps=*/4, 0.05, /*slow=*/-1, /*slowMs=*/0, seven);
  for (int w = 0; w < 2; ++w) {
    for (size_t i = 0; i < 2; ++i) EXPECT_LE(maxRelativeDiff(seven.workerParams[w][i], one.workerParams[w][i]), 1e-6);
  }
}

TEST(ParameterServer, ZeroStalenessEqualsSynchronousSgd) {
  const int workers = 3, servers = 2;
  const int64_t steps = 8;
  const double lr = 0.05;
  // Synchronous SGD: every worker's k-th gradient on the same weights, their sum applied at once.
  auto reference = Problem::initial();
  for (int64_t k = 0; k < steps; ++k) {
    std::vector<at::Tensor> sum{at::zeros({3, 5}), at::zeros({3})};
    for (int w = 0; w < workers; ++w) {
      computeGradients(reference, w, k);
      sum[0] += reference[0].grad();
      sum[1] += reference[1].grad();
    }
    c10::NoGradGuard noGrad;
    reference[0] -= lr * sum[0];
    reference[1] -= lr * sum[1];
  }
  RunResult run;
  // Worker 0 is slow: without the bound the others would compute on weights it has not seen.
  runPs(workers, servers, /*staleness=*/0, steps, lr, /*slow=*/0, /*slowMs=*/15, run);
  for (int w = 0; w < workers; ++w) {
    SCOPED_TRACE(w);
    EXPECT_LE(maxRelativeDiff(run.workerParams[w][0], reference[0].detach()), 1e-6);
    EXPECT_LE(maxRelativeDiff(run.workerParams[w][1], reference[1].detach()), 1e-6);
    EXPECT_EQ(run.workerMaxStaleness[w], 0);
    // Round k's grants are numbered k*W .. k*W+W-1: work handed out by ticket follows the rounds.
    for (size_t k = 0; k < run.tickets[w].size(); ++k) EXPECT_EQ(run.tickets[w][k] / workers, int64_t(k));
  }
  for (const auto& stats : run.serverStats) {
    EXPECT_EQ(stats.updates, workers * steps);
    EXPECT_EQ(stats.maxStaleness(), 0);
    EXPECT_LE(stats.lag.size(), static_cast<size_t>(workers));  // only the same round's others
  }
}

class Straggler : public ::testing::TestWithParam<int> {};  // the number of servers

TEST_P(Straggler, HoldsNoWorkerBeyondTheBound) {
  const int workers = 3, staleness = 2;
  const int64_t steps = 12;
  RunResult run;
  runPs(workers, /*servers=*/GetParam(), staleness, steps, /*lr=*/0.02, /*slow=*/2, /*slowMs=*/25, run);
  const PsStats& stats = run.serverStats[0];
  EXPECT_EQ(stats.updates, workers * steps);
  // The fast workers pushed while the straggler computed, up to the bound and never beyond it.
  EXPECT_EQ(stats.maxStaleness(), staleness);
  for (int w = 0; w < workers; ++w) EXPECT_LE(run.workerMaxStaleness[w], staleness);
  EXPECT_EQ(run.workerMaxStaleness[2], staleness);
  EXPECT_GE(stats.lag.size(), 3u);  // the straggler computed on weights two updates old
  // Every grant has its own ticket.
  std::set<int64_t> tickets;
  for (const auto& t : run.tickets) tickets.insert(t.begin(), t.end());
  EXPECT_EQ(tickets.size(), static_cast<size_t>(workers * (steps + 1)));
  // Every worker ends with the servers' final weights.
  EXPECT_TRUE(at::equal(run.workerParams[0][0], run.workerParams[2][0]));
  EXPECT_TRUE(at::equal(run.workerParams[0][1], run.workerParams[1][1]));
}

// Two servers: the second applies the updates in the first one's order and hands out the versions
// it granted, so the bound holds on both and nothing deadlocks.
INSTANTIATE_TEST_SUITE_P(ParameterServer, Straggler, ::testing::Values(1, 2));

TEST(ParameterServer, AsynchronousTrainingLearns) {
  const int workers = 3;
  const int64_t steps = 60;
  RunResult run;
  runPs(workers, /*servers=*/1, /*staleness=*/4, steps, /*lr=*/0.03, /*slow=*/1, /*slowMs=*/3, run);
  auto initial = Problem::initial();
  std::vector<at::Tensor> final = run.workerParams[0];
  double before = 0, after = 0;
  for (int w = 0; w < workers; ++w) {
    before += Problem::loss(initial, w, 1000).item<double>();
    after += Problem::loss(final, w, 1000).item<double>();
  }
  EXPECT_LT(after, 0.1 * before) << "loss before " << before << ", after " << after;
  EXPECT_LE(run.serverStats[0].maxStaleness(), 4);
}

// A checkpoint hook must see exactly the updates of the tickets before its boundary: each worker
// pushes the one-hot gradient of its ticket plus 0.5 everywhere, so with SGD at rate 1 element t
// of the weights is -0.5 n - 1 once ticket t's update is applied and -0.5 n before, n the updates
// applied. The 0.5 also shows that every read of the weights is one version on every server: the
// elements that no ticket reaches (60..63 of server 0's range, 124..127 of the last) give the same n,
// and n tickets are marked.
constexpr int64_t kElements = 128;

void expectOneVersion(const at::Tensor& weights) {
  const auto* p = weights.data_ptr<float>();
  const double n = -2.0 * p[kElements - 1];
  EXPECT_EQ(-2.0 * p[kElements / 2 - 1], n) << "the servers' ranges are of different versions";
  int64_t marked = 0;
  for (int64_t i = 0; i < kElements / 2 - 4; ++i) marked += p[i] == static_cast<float>(-0.5 * n - 1.0);
  EXPECT_EQ(static_cast<double>(marked), n);
}
struct CheckpointRun {
  std::mutex mutex;
  std::vector<std::tuple<int, int64_t, at::Tensor>> seen;  // server, updates, its shard then
};

/// Workers stop by ticket once `updates` were handed out, as a Trainer does; with `steps` > 0 each
/// stops after that many pushes instead, leaving its last ticket unpushed.
void runCheckpointed(int workers, int servers, int staleness, int64_t every, int64_t first, int64_t updates,
                     int64_t steps, CheckpointRun& out) {
  runRanks(workers + servers, [&](int rank, Communicator& comm) {
    std::vector<at::Tensor> params{at::zeros({kElements}, at::kFloat).requires_grad_()};
    PsOptions options{servers, staleness};
    options.checkpointEvery = every;
    options.firstUpdate = first;
    if (rank >= workers) {
      ParameterServer server(borrow(comm), options, params, sgd(1.0));
      server.setCheckpointHook([&, rank](int64_t updates) {
        EXPECT_EQ(server.updates(), updates);
        std::lock_guard<std::mutex> lock(out.mutex);
        out.seen.emplace_back(rank - workers, updates, server.shard().detach().clone());
      });
      server.serve();
      return;
    }
    PsWorker worker(borrow(comm), options, params);
    worker.pull();
    for (int64_t k = 0; steps > 0 ? k < steps : worker.ticket() < first + updates; ++k) {
      if (rank == workers - 1) std::this_thread::sleep_for(std::chrono::milliseconds(4));  // a straggler
      EXPECT_GE(worker.ticket(), first);
      params[0].mutable_grad() = at::full({kElements}, 0.5, at::kFloat);
      params[0].mutable_grad()[worker.ticket()] = 1.5;
      worker.push();
      expectOneVersion(params[0].detach());
    }
    worker.finish();
  });
}

/// Every server ran the hook at each multiple of `every` in (first, last], and saw exactly the
/// updates of the tickets before it.
/// (last < 0: only the second; which boundaries are reached then depends on the tickets left unpushed.)
void expectExactCheckpoints(const CheckpointRun& run, int servers, int64_t every, int64_t first, int64_t last) {
  std::vector<std::set<int64_t>> boundaries(static_cast<size_t>(servers));
  for (const auto& [server, at, shard] : run.seen) {
    SCOPED_TRACE(::testing::Message() << "server " << server << " at " << at << " updates");
    boundaries[static_cast<size_t>(server)].insert(at);
    const auto range = psShardRange(kElements, servers, server);
    at::Tensor expected = at::full({range.second - range.first}, -0.5 * static_cast<double>(at - first), at::kFloat);
    for (int64_t i = range.first; i < range.second; ++i) {
      if (i >= first && i < at) expected[i - range.first] -= 1.0;
    }
    EXPECT_TRUE(at::equal(shard, expected)) << shard << " expected " << expected;
  }
  if (last < 0) return;
  std::set<int64_t> all;
  for (int64_t b = (first / every + 1) * every; b <= last; b += every) all.insert(b);
  for (const auto& b : boundaries) EXPECT_EQ(b, all);
}

TEST(ParameterServer, CheckpointsHoldExactlyTheUpdatesBeforeTheirBoundary) {
  struct Case {
    const char* what;
    int servers, staleness;
    int64_t every, first, updates, steps;
    int64_t last;  // the last boundary every server must reach; -1: whichever the unpushed tickets allow
  };
  const Case cases[] = {
      {"one server, staleness 2, a straggler", 1, 2, 5, 0, 24, 0, 24},
      {"two servers, staleness 0, resumed at 10 updates", 2, 0, 4, 10, 18, 0, 28},
      {"two servers, staleness 2, a straggler", 2, 2, 5, 0, 24, 0, 24},
      {"two servers, staleness 2, workers that stop with tickets in hand", 2, 2, 5, 0, 0, 8, -1},
      // Each worker stops after 8 pushes holding one of the tickets 24..26 unpushed: checkpoints up
      // to 20 only, and nobody waits for 25.
      {"one server, staleness 0, workers that stop with tickets in hand", 1, 0, 5, 0, 0, 8, 20},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    CheckpointRun run;
    runCheckpointed(3, c.servers, c.staleness, c.every, c.first, c.updates, c.steps, run);
    expectExactCheckpoints(run, c.servers, c.every, c.first, c.last);
  }
}

// Delay compensation: two workers push fixed gradients G0, G1 computed on the first weights w0;
// whichever is applied second comes one update late and is corrected by
// lambda0 / sqrt(v) * G * G * (w1 - w0), v = 0.95 G_first^2 + 0.05 G_second^2. The same with two
// servers, each correcting its range.
TEST(ParameterServer, DelayCompensationCorrectsTheStaleUpdate) {
  const double lr = 0.1, lambda0 = 2.0;
  const at::Tensor w0 = at::linspace(-1, 1, 10, at::kFloat);
  const std::vector<at::Tensor> pushed{at::linspace(0.5, 1.5, 10, at::kFloat), at::linspace(2, -1, 10, at::kFloat)};
  auto expected = [&](int firstWorker) {
    const at::Tensor& a = pushed[static_cast<size_t>(firstWorker)];
    const at::Tensor& b = pushed[static_cast<size_t>(1 - firstWorker)];
    const at::Tensor w1 = w0 - lr * a;
    const at::Tensor v = 0.95 * a * a + 0.05 * b * b;
    const at::Tensor corrected = b + lambda0 / (v.sqrt() + 1e-7) * b * b * (w1 - w0);
    return w1 - lr * corrected;
  };
  for (int servers : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << servers << " server(s)");
    std::mutex mutex;
    std::vector<at::Tensor> finals;
    runRanks(2 + servers, [&](int rank, Communicator& comm) {
      std::vector<at::Tensor> params{w0.clone().requires_grad_()};
      PsOptions options{servers, /*staleness=*/1};
      options.compensation = lambda0;
      if (rank >= 2) {
        ParameterServer server(borrow(comm), options, params, sgd(lr));
        server.serve();
        EXPECT_EQ(server.stats().lag.size(), 2u);  // the second update came one update late
        return;
      }
      PsWorker worker(borrow(comm), options, params);
      worker.pull();
      params[0].mutable_grad() = pushed[static_cast<size_t>(rank)].clone();
      worker.push();
      worker.finish();
      std::lock_guard<std::mutex> lock(mutex);
      finals.push_back(params[0].detach().clone());
    });
    ASSERT_EQ(finals.size(), 2u);
    EXPECT_TRUE(at::equal(finals[0], finals[1]));
    const double d = std::min(maxRelativeDiff(finals[0], expected(0)), maxRelativeDiff(finals[0], expected(1)));
    EXPECT_LE(d, 1e-6) << finals[0] << " expected " << expected(0) << " or " << expected(1);
    // Without the correction the result would be w0 - lr (G0 + G1): make sure the test can tell.
    EXPECT_GT(maxRelativeDiff(finals[0], w0 - lr * (pushed[0] + pushed[1])), 1e-3);
  }
}

TEST(ParameterServer, FailedServerIsNamedByItsWorkers) {
  std::mutex mutex;
  std::vector<std::string> errors;
  runRanks(
      3,
      [&](int rank, Communicator& comm) {
        auto params = Problem::initial();
        if (rank == 2) {
          ParameterServer server(borrow(comm), {1, 0}, params, sgd(0.1));
          return;  // gone without serving
        }
        PsWorker worker(borrow(comm), {1, 0}, params);
        const std::string e = errorOf([&] { worker.pull(); });
        std::lock_guard<std::mutex> lock(mutex);
        errors.push_back(e);
      },
      std::chrono::seconds(5));
  ASSERT_EQ(errors.size(), 2u);
  for (const auto& e : errors) EXPECT_HAS(e, "parameter server 0 (rank 2) failed");
}

TEST(ParameterServer, FailedWorkerIsNamedByTheServer) {
  std::string serverError;
  runRanks(
      3,
      [&](int rank, Communicator& comm) {
        auto params = Problem::initial();
        if (rank == 2) {
          ParameterServer server(borrow(comm), {1, 0}, params, sgd(0.1));
          serverError = errorOf([&] { server.serve(); });
          return;
        }
        PsWorker worker(borrow(comm), {1, 0}, params);
        worker.pull();
        if (rank == 1) return;  // gone after its first pull
        try {
          for (int k = 0; k < 3; ++k) {
            computeGradients(params, rank, k);
            worker.push();
          }
          worker.finish();
        } catch (const Error&) {  // the server stopped serving: expected
        }
      },
      std::chrono::seconds(5));
  EXPECT_HAS(serverError, "parameter server 0 (rank 2): worker 1 (rank 1) failed");
}

}  // namespace
}  // namespace lockstep
