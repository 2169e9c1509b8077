// The desync check (desync_check.h): ranks that call different collectives,
// sizes or an extra collective get CommError kDesync on every rank, naming
// every side's view, before the backend sees the mismatched call; sampled
// mode checks only the sampled collectives; off adds nothing. Threads as
// ranks over Gloo, then real processes.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>

#include "launch/launch_commands.h"
#include "lockstep/comm/desync_check.h"
#include "lockstep/common/error.h"
#include "lockstep/launch/launcher.h"
#include "support/expect.h"
#include "support/subprocess.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

using test::runRanks;

/// Forwards to a communicator it does not own and records what reaches it, in order.
class CountingCommunicator final : public Communicator {
 public:
  explicit CountingCommunicator(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string backendName() const override { return inner_.backendName(); }
  std::chrono::milliseconds defaultTimeout() const override { return inner_.defaultTimeout(); }
  WorkHandle allreduce(std::vector<at::Tensor>& t, ReduceOp op, const CollectiveOptions& o) override {
    ++allreduces;
    return note("allreduce " + std::to_string(t.empty() ? 0 : t[0].numel()), inner_.allreduce(t, op, o));
  }
  WorkHandle broadcast(std::vector<at::Tensor>& t, int root, const CollectiveOptions& o) override {
    ++broadcasts;
    return note("broadcast", inner_.broadcast(t, root, o));
  }
  WorkHandle allgather(const at::Tensor& in, at::Tensor& out, const CollectiveOptions& o) override {
    ++allgathers;
    return note("allgather", inner_.allgather(in, out, o));
  }
  WorkHandle allgather(const at::Tensor& in, std::vector<at::Tensor>& outs, const CollectiveOptions& o) override {
    ++allgathers;
    return note("allgather", inner_.allgather(in, outs, o));
  }
  WorkHandle reduceScatter(const at::Tensor& in, at::Tensor& out, ReduceOp op, const CollectiveOptions& o) override {
    ++others;
    return note("reduce_scatter", inner_.reduceScatter(in, out, op, o));
  }
  WorkHandle barrier(const CollectiveOptions& o) override {
    ++barriers;
    return note("barrier", inner_.barrier(o));
  }
  WorkHandle send(const at::Tensor& t, int dst, int tag, const CollectiveOptions& o) override {
    ++others;
    return note("send", inner_.send(t, dst, tag, o));
  }
  WorkHandle recv(at::Tensor& t, int src, int tag, const CollectiveOptions& o) override {
    ++others;
    return note("recv", inner_.recv(t, src, tag, o));
  }

  /// The calls that reached this communicator, in order ("allreduce N" with N the first tensor's numel).
  std::vector<std::string> calls() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }
  /// The Work this communicator returned last.
  WorkHandle lastWork() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_;
  }

  std::atomic<int> allreduces{0}, broadcasts{0}, allgathers{0}, barriers{0}, others{0};

 private:
  WorkHandle note(std::string call, WorkHandle work) {
    std::lock_guard<std::mutex> lock(mutex_);
    calls_.push_back(std::move(call));
    last_ = work;
    return work;
  }

  Communicator& inner_;
  mutable std::mutex mutex_;
  std::vector<std::string> calls_;
  WorkHandle last_;
};

DesyncCheckOptions all() {
  DesyncCheckOptions o;
  o.mode = DesyncCheckMode::kAll;
  return o;
}

std::vector<at::Tensor> ones(int64_t n) { return {at::ones({n})}; }

TEST(DesyncCheck, DifferentSizesFailOnEveryRankWithBothViewsAndPoison) {
  runRanks(2, [](int rank, Communicator& gloo) {
    auto counting = std::make_shared<CountingCommunicator>(gloo);
    auto comm = withDesyncCheck(counting, all());
    for (int i = 0; i < 2; ++i) {
      auto t = ones(16);
      comm->allreduce(t)->wait();
      EXPECT_EQ(t[0][0].item<float>(), 2.0f);
    }
    auto t = ones(rank == 0 ? 1024 : 512);
    CommError e = test::commErrorOf([&] { comm->allreduce(t)->wait(); });
    std::string what = e.what();
    EXPECT_EQ(e.kind(), CommErrorKind::kDesync) << what;
    EXPECT_NE(what.find("allreduce(sum) failed (desync) on rank " + std::to_string(rank) + " of 2, operation #3"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("collectives out of step at #3: rank 0 calls allreduce(sum) float32 x 1024 (4096 B) but "
                        "rank 1 calls allreduce(sum) float32 x 512 (2048 B)"),
              std::string::npos)
        << what;
    EXPECT_EQ(e.info().peer, 1 - rank);
    EXPECT_EQ(e.info().sequence, 3u);
    // The mismatched allreduce never reached the backend: 2 real ones, 3 fingerprint exchanges.
    EXPECT_EQ(counting->allreduces.load(), 2);
    EXPECT_EQ(counting->allgathers.load(), 3);
    EXPECT_EQ(t[0][0].item<float>(), 1.0f);
    // Poisoned: every later operation fails at once, naming the desync.
    for (auto* later : {+[](Communicator& c) {
                          auto x = ones(4);
                          c.allreduce(x)->wait();
                        },
                        +[](Communicator& c) { c.barrier()->wait(); },
                        +[](Communicator& c) { c.send(at::ones({2}), 1 - c.rank(), 0)->wait(); }}) {
      CommError a = test::commErrorOf([&] { later(*comm); });
      EXPECT_EQ(a.kind(), CommErrorKind::kAborted) << a.what();
      EXPECT_NE(std::string(a.what()).find("unusable since operation #3 (allreduce(sum)) failed: desync"),
                std::string::npos)
          << a.what();
    }
    EXPECT_EQ(counting->allreduces.load() + counting->barriers.load() + counting->others.load(), 2);
  });
}

TEST(DesyncCheck, AllreduceAgainstBroadcastIsNamedOnBothSides) {
  runRanks(2, [](int rank, Communicator& gloo) {
    auto comm = withDesyncCheck(std::shared_ptr<Communicator>(&gloo, [](Communicator*) {}), all());
    comm->barrier()->wait();
    WorkHandle work;
    std::vector<at::Tensor> t;
    if (rank == 0) {
      t = ones(1024);
      work = comm->allreduce(t, ReduceOp::kSum);
    } else {
      t = ones(10);
      work = comm->broadcast(t, 0);
    }
    CommError e = test::commErrorOf([&] { work->wait(); });
    EXPECT_EQ(e.kind(), CommErrorKind::kDesync) << e.what();
    EXPECT_NE(std::string(e.what()).find("collectives out of step at #2: rank 0 calls allreduce(sum) float32 x 1024 "
                                         "(4096 B) but rank 1 calls broadcast(root=0) float32 x 10 (40 B)"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(rank == 0 ? "allreduce(sum) failed (desync)"
                                                   : "broadcast(root=0) failed "
                                                     "(desync)"),
              std::string::npos)
        << e.what();
  });
}

TEST(DesyncCheck, OneRankCallingAnExtraCollectiveIsDetectedWhereTheOrderShifts) {
  runRanks(3, [](int rank, Communicator& gloo) {
    auto comm = withDesyncCheck(std::shared_ptr<Communicator>(&gloo, [](Communicator*) {}), all());
    auto a = ones(8);
    comm->allreduce(a)->wait();
    // Rank 1 calls one barrier the others do not; they go on with allreduces. Submitted without
    // waiting, as DDP submits its buckets: the error comes from the first Work that was out of step.
    std::vector<WorkHandle> works;
    std::vector<std::vector<at::Tensor>> keep;
    if (rank == 1) works.push_back(comm->barrier());
    for (int i = 0; i < 2; ++i) {
      keep.push_back(ones(8));
      works.push_back(comm->allreduce(keep.back()));
    }
    CommError e = test::commErrorOf([&] { works[0]->wait(); });
    EXPECT_EQ(e.kind(), CommErrorKind::kDesync) << e.what();
    EXPECT_NE(std::string(e.what()).find("collectives out of step at #2: ranks 0, 2 call allreduce(sum) float32 x 8 "
                                         "(32 B) but rank 1 calls barrier"),
              std::string::npos)
        << e.what();
    EXPECT_EQ(e.info().peer, rank == 1 ? 0 : 1);
    for (size_t i = 1; i < works.size(); ++i) {
      CommError later = test::commErrorOf([&] { works[i]->wait(); });
      EXPECT_EQ(later.kind(), CommErrorKind::kAborted) << later.what();
    }
  });
}

TEST(DesyncCheck, MissingCollectiveTimesOutInTheCheckInsteadOfHanging) {
  std::promise<void> done;
  auto doneFuture = done.get_future().share();
  runRanks(2, [&](int rank, Communicator& gloo) {
    auto comm = withDesyncCheck(std::shared_ptr<Communicator>(&gloo, [](Communicator*) {}), all());
    comm->barrier()->wait();
    if (rank == 0) {  // stays connected, but never calls the second barrier
      doneFuture.wait_for(std::chrono::seconds(30));
      return;
    }
    CollectiveOptions shortTimeout;
    shortTimeout.timeout = std::chrono::milliseconds(700);
    auto start = std::chrono::steady_clock::now();
    CommError e = test::commErrorOf([&] { comm->barrier(shortTimeout)->wait(); });
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    done.set_value();
    EXPECT_EQ(e.kind(), CommErrorKind::kTimeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("barrier failed (timeout) on rank 1 of 2, operation #2"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("desync check before it"), std::string::npos) << e.what();
    EXPECT_LT(seconds, 5.0) << e.what();
  });
}

TEST(DesyncCheck, SampledModeChecksOnlySampledCollectivesAndCatchesAMismatchThere) {
  runRanks(2, [](int rank, Communicator& gloo) {
    auto counting = std::make_shared<CountingCommunicator>(gloo);
    DesyncCheckOptions sampled;
    sampled.mode = DesyncCheckMode::kSampled;
    sampled.every = 4;
    sampled.first = 2;
    auto comm = withDesyncCheck(counting, sampled);
    for (int k = 1; k <= 7; ++k) {
      auto t = ones(4);
      WorkHandle work = comm->allreduce(t);
      // Unchecked (#3, #5, #6, #7), with nothing queued: went straight through, the caller holds the
      // backend's own Work. Checked (#1, #2, #4): the wrapper's.
      bool checked = k <= 2 || k % 4 == 0;
      EXPECT_EQ(work == counting->lastWork(), !checked) << "collective #" << k;
      work->wait();
      EXPECT_EQ(t[0][0].item<float>(), 2.0f);
    }
    EXPECT_EQ(counting->allgathers.load(), 3);
    EXPECT_EQ(counting->allreduces.load(), 7);
    auto t = ones(rank == 0 ? 4 : 6);  // #8 is sampled
    CommError e = test::commErrorOf([&] { comm->allreduce(t)->wait(); });
    EXPECT_EQ(e.kind(), CommErrorKind::kDesync) << e.what();
    EXPECT_NE(std::string(e.what()).find("collectives out of step at #8: rank 0 calls allreduce(sum) float32 x 4 "
                                         "(16 B) but rank 1 calls allreduce(sum) float32 x 6 (24 B) (sampled check: "
                                         "the ranks agreed at #4, so they went apart in #5..#8"),
              std::string::npos)
        << e.what();
    EXPECT_EQ(counting->allgathers.load(), 4);
    EXPECT_EQ(counting->allreduces.load(), 7);
    // Poisoned: an unchecked collective (#9) no longer goes straight through either.
    auto after = ones(4);
    CommError a = test::commErrorOf([&] { comm->allreduce(after)->wait(); });
    EXPECT_EQ(a.kind(), CommErrorKind::kAborted) << a.what();
    EXPECT_EQ(counting->allreduces.load(), 7);
  });
}

TEST(DesyncCheck, SampledModeKeepsSubmissionOrderWhenCollectivesQueueBehindACheck) {
  runRanks(2, [](int rank, Communicator& gloo) {
    auto counting = std::make_shared<CountingCommunicator>(gloo);
    DesyncCheckOptions sampled;
    sampled.mode = DesyncCheckMode::kSampled;
    sampled.every = 3;
    sampled.first = 0;
    auto comm = withDesyncCheck(counting, sampled);
    // Submitted without waiting, as DDP submits its buckets: #3 and #6 are checked, and the
    // unchecked ones after them must wait behind them instead of overtaking them.
    std::vector<std::vector<at::Tensor>> sums;
    std::vector<WorkHandle> works;
    for (int k = 1; k <= 7; ++k) {
      sums.push_back({at::full({k}, rank + 1.0)});
      works.push_back(comm->allreduce(sums.back()));
    }
    for (auto& w : works) w->wait();
    for (int k = 1; k <= 7; ++k) EXPECT_TRUE(at::allclose(sums[k - 1][0], at::full({k}, 3.0))) << "#" << k;
    std::vector<std::string> expected{"allreduce 1", "allreduce 2", "allgather",   "allreduce 3", "allreduce 4",
                                      "allreduce 5", "allgather",   "allreduce 6", "allreduce 7"};
    EXPECT_EQ(counting->calls(), expected);
    // The queue drained: the next unchecked collective (#8) goes straight through again.
    auto t = ones(4);
    WorkHandle work = comm->allreduce(t);
    EXPECT_EQ(work, counting->lastWork());
    work->wait();
    EXPECT_EQ(t[0][0].item<float>(), 2.0f);
  });
}

TEST(DesyncCheck, ShapesThatDifferWithEqualSizesShowTheirHashes) {
  runRanks(2, [](int rank, Communicator& gloo) {
    auto comm = withDesyncCheck(std::shared_ptr<Communicator>(&gloo, [](Communicator*) {}), all());
    std::vector<at::Tensor> t{rank == 0 ? at::ones({2, 3}) : at::ones({3, 2})};
    CommError e = test::commErrorOf([&] { comm->allreduce(t)->wait(); });
    EXPECT_EQ(e.kind(), CommErrorKind::kDesync) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 0 calls allreduce(sum) float32 x 6 (24 B) [shapes "), std::string::npos)
        << e.what();
  });
}

TEST(DesyncCheck, EveryOperationStillWorksThroughTheCheck) {
  runRanks(2, [](int rank, Communicator& gloo) {
    auto comm = withDesyncCheck(std::shared_ptr<Communicator>(&gloo, [](Communicator*) {}), all());
    // Several operations in flight at once, mixed with point to point.
    std::vector<std::vector<at::Tensor>> sums;
    std::vector<WorkHandle> works;
    for (int i = 0; i < 5; ++i) {
      sums.push_back({at::full({100 + i}, rank + 1.0), at::full({3}, rank + 1.0, at::kDouble)});
      works.push_back(comm->allreduce(sums.back(), ReduceOp::kAvg));
    }
    at::Tensor got = at::zeros({4});
    auto s = comm->send(at::full({4}, rank + 10.0), 1 - rank, 5);
    auto r = comm->recv(got, 1 - rank, 5);
    std::vector<at::Tensor> b{at::full({7}, rank + 1.0)};
    works.push_back(comm->broadcast(b, 1));
    at::Tensor gathered = at::empty({6});
    works.push_back(comm->allgather(at::full({3}, static_cast<double>(rank)), gathered));
    std::vector<at::Tensor> outs{at::empty({2}), at::empty({2})};
    works.push_back(comm->allgather(at::full({2}, rank + 5.0), outs));
    at::Tensor scattered = at::empty({2});
    works.push_back(comm->reduceScatter(at::arange(4).to(at::kFloat), scattered, ReduceOp::kSum));
    works.push_back(comm->barrier());
    for (auto& w : works) w->wait();
    s->wait();
    r->wait();
    for (const auto& pair : sums) {
      EXPECT_TRUE(at::allclose(pair[0], at::full_like(pair[0], 1.5)));
      EXPECT_TRUE(at::allclose(pair[1], at::full_like(pair[1], 1.5)));
    }
    EXPECT_TRUE(at::allclose(got, at::full({4}, (1 - rank) + 10.0)));
    EXPECT_TRUE(at::allclose(b[0], at::full({7}, 2.0)));
    EXPECT_TRUE(at::allclose(gathered, at::tensor({0.f, 0.f, 0.f, 1.f, 1.f, 1.f})));
    EXPECT_TRUE(at::allclose(outs[1], at::full({2}, 6.0)));
    EXPECT_TRUE(at::allclose(scattered, at::arange(4).to(at::kFloat).narrow(0, 2 * rank, 2) * 2));
    // Invalid arguments still throw at submission and leave the communicator usable.
    at::Tensor wrong = at::empty({5});
    EXPECT_THROW(comm->allgather(at::ones({3}), wrong), CommError);
    auto t = ones(3);
    comm->allreduce(t)->wait();
    EXPECT_TRUE(at::allclose(t[0], at::full({3}, 2.0)));
  });
}

TEST(DesyncCheck, OffAndWorldOfOneAddNothing) {
  runRanks(2, [](int, Communicator& gloo) {
    auto counting = std::make_shared<CountingCommunicator>(gloo);
    DesyncCheckOptions off;
    off.mode = DesyncCheckMode::kOff;
    auto comm = withDesyncCheck(counting, off);
    EXPECT_EQ(comm.get(), counting.get());
    for (int i = 0; i < 10; ++i) {
      auto t = ones(4);
      comm->allreduce(t)->wait();
    }
    comm->barrier()->wait();
    EXPECT_EQ(counting->allgathers.load(), 0);
    EXPECT_EQ(counting->allreduces.load(), 10);
    EXPECT_EQ(counting->barriers.load(), 1);
  });
  runRanks(1, [](int, Communicator& gloo) {
    auto counting = std::make_shared<CountingCommunicator>(gloo);
    EXPECT_EQ(withDesyncCheck(counting, all()).get(), counting.get());
  });
}

TEST(DesyncCheck, BadOptionsAreRejected) {
  runRanks(2, [](int, Communicator& gloo) {
    auto counting = std::make_shared<CountingCommunicator>(gloo);
    DesyncCheckOptions every;
    every.every = 0;
    EXPECT_HAS(test::errorOf([&] { withDesyncCheck(counting, every); }), "DesyncCheckOptions::every=0");
    DesyncCheckOptions first;
    first.first = -1;
    EXPECT_HAS(test::errorOf([&] { withDesyncCheck(counting, first); }), "DesyncCheckOptions::first=-1");
  });
}

DesyncCheckOptions fromEnv(std::map<std::string, std::string> vars) {
  return desyncCheckFromEnv(Environment(std::move(vars)));
}

TEST(DesyncCheckEnv, ModesAndDefaults) {
  auto d = fromEnv({});
  EXPECT_EQ(d.mode, DesyncCheckMode::kSampled);
  EXPECT_EQ(d.every, DesyncCheckOptions{}.every);
  EXPECT_EQ(d.first, DesyncCheckOptions{}.first);
  EXPECT_EQ(fromEnv({{"LOCKSTEP_DEBUG", "1"}}).mode, DesyncCheckMode::kAll);
  EXPECT_EQ(fromEnv({{"LOCKSTEP_DEBUG", "0"}}).mode, DesyncCheckMode::kSampled);
  EXPECT_EQ(fromEnv({{"LOCKSTEP_DEBUG", "1"}, {"LOCKSTEP_DESYNC_CHECK", "off"}}).mode, DesyncCheckMode::kOff);
  EXPECT_EQ(fromEnv({{"LOCKSTEP_DEBUG", "1"}, {"LOCKSTEP_DESYNC_CHECK", "sample"}}).mode, DesyncCheckMode::kSampled);
  EXPECT_EQ(fromEnv({{"LOCKSTEP_DESYNC_CHECK", "all"}}).mode, DesyncCheckMode::kAll);
  EXPECT_EQ(fromEnv({{"LOCKSTEP_DESYNC_CHECK", "OFF"}}).mode, DesyncCheckMode::kOff);
  auto seven = fromEnv({{"LOCKSTEP_DESYNC_CHECK", "sample:7"}});
  EXPECT_EQ(seven.mode, DesyncCheckMode::kSampled);
  EXPECT_EQ(seven.every, 7);
  EXPECT_EQ(fromEnv({{"LOCKSTEP_DESYNC_CHECK", "sample"}}).every, DesyncCheckOptions{}.every);
}

TEST(DesyncCheckEnv, BadValuesNameTheVariableAndWhatIsExpected) {
  for (std::string bad : {"sometimes", "sample:0", "sample:x", "sample:", "sample:-3", "sample:99999999999", ""}) {
    try {
      fromEnv({{"LOCKSTEP_DESYNC_CHECK", bad}});
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("LOCKSTEP_DESYNC_CHECK='" + bad + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("expected off, all, sample"), std::string::npos) << what;
    }
  }
  try {
    fromEnv({{"LOCKSTEP_DEBUG", "maybe"}});
    ADD_FAILURE() << "accepted LOCKSTEP_DEBUG=maybe";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("LOCKSTEP_DEBUG='maybe'"), std::string::npos) << e.what();
  }
}

// ---- real processes ------------------------------------------------------

TEST(DesyncCheckProcesses, DifferentSizesFailFastOnBothProcessesWithTheDefaultSampledCheck) {
  // No LOCKSTEP_DESYNC_CHECK: the default (sampled) checks the first collectives; #4 differs.
  int port = detail::pickFreePort("127.0.0.1");
  std::vector<std::future<test::ProcessResult>> futures;
  for (int r = 0; r < 2; ++r) {
    test::ProcessOptions o;
    o.setEnv = {{"LOCKSTEP_RANK", std::to_string(r)},
                {"LOCKSTEP_WORLD_SIZE", "2"},
                {"LOCKSTEP_MASTER_ADDR", "127.0.0.1"},
                {"LOCKSTEP_MASTER_PORT", std::to_string(port)},
                {"LOCKSTEP_NUM_THREADS", "1"},
                {"LOCKSTEP_COMM_TIMEOUT", "30"},
                {"LOCKSTEP_JOB_TOKEN", "desync-test-token"}};
    o.unsetEnv = {"LOCKSTEP_DESYNC_CHECK", "LOCKSTEP_DEBUG"};
    o.timeout = std::chrono::seconds(60);
    std::vector<std::string> argv{test::helperBin("desync_worker"), "size"};
    futures.push_back(std::async(std::launch::async, [argv, o] { return test::runProcess(argv, o); }));
  }
  for (int r = 0; r < 2; ++r) {
    auto res = futures[r].get();
    EXPECT_EQ(res.exitCode, 3) << "rank " << r << ": " << res.out << res.err;
    EXPECT_NE(res.err.find("CommError kind=desync"), std::string::npos) << res.err;
    EXPECT_NE(res.err.find("on rank " + std::to_string(r) + " of 2, operation #4"), std::string::npos) << res.err;
    EXPECT_NE(res.err.find("collectives out of step at #4: rank 0 calls allreduce(sum) float32 x 1024 (4096 B) but "
                           "rank 1 calls allreduce(sum) float32 x 512 (2048 B)"),
              std::string::npos)
        << res.err;
    EXPECT_LT(res.seconds, 20) << res.err;
  }
}

}  // namespace
}  // namespace lockstep
