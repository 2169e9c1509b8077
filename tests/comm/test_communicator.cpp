// Every collective, checked for values with a thread per rank (world 1-4),
// sizes 0, 1, odd and several MiB, every dtype; plus argument errors and
// timeouts inside one process.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <chrono>

#include "support/thread_ranks.h"

namespace lockstep {
namespace {

using test::runRanks;

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};
// 0, 1, odd, and ~3 MiB of float32 (odd too, so chunks are uneven).
const std::vector<int64_t> kCounts = {0, 1, 1001, 786433};

/// Rank r's input: small integers, exact in every dtype and in their sums.
at::Tensor inputFor(int rank, int64_t n, at::ScalarType dtype) {
  return (at::arange(n, at::kLong).remainder(7) + (rank + 1)).to(dtype);
}

/// What the reduction of inputFor(0..world-1) must give, computed in float64.
at::Tensor expectedReduction(int world, int64_t n, ReduceOp op) {
  auto base = at::arange(n, at::kLong).remainder(7).to(at::kDouble);
  switch (op) {
    case ReduceOp::kSum: return base * world + world * (world + 1) / 2.0;
    case ReduceOp::kAvg: return base + (world + 1) / 2.0;
    case ReduceOp::kMax: return base + world;
    case ReduceOp::kMin: return base + 1;
  }
  return base;
}

void expectEqualValues(const at::Tensor& actual, const at::Tensor& expected, const std::string& what) {
  ASSERT_EQ(actual.numel(), expected.numel()) << what;
  if (actual.numel() == 0) return;
  auto diff = (actual.to(at::kDouble).view({-1}) - expected.to(at::kDouble).view({-1})).abs().max().item<double>();
  EXPECT_LE(diff, 1e-9) << what;
}

class CommunicatorWorlds : public ::testing::TestWithParam<int> {};

TEST_P(CommunicatorWorlds, AllreduceEveryOpDtypeAndSize) {
  int world = GetParam();
  runRanks(world, [&](int rank, Communicator& comm) {
    EXPECT_EQ(comm.rank(), rank);
    EXPECT_EQ(comm.size(), world);
    for (auto op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      for (auto dtype : kDtypes) {
        for (int64_t n : kCounts) {
          if (op != ReduceOp::kSum && n > 100000 && dtype != at::kFloat) continue;  // keep it quick
          std::vector<at::Tensor> t{inputFor(rank, n, dtype)};
          comm.allreduce(t, op)->wait();
          EXPECT_EQ(t[0].scalar_type(), dtype);
          expectEqualValues(
              t[0], expectedReduction(world, n, op),
              std::string("allreduce ") + toString(op) + " " + c10::toString(dtype) + " n=" + std::to_string(n));
        }
      }
    }
  });
}

TEST_P(CommunicatorWorlds, AllreduceListFusesMixedDtypesAndShapes) {
  int world = GetParam();
  runRanks(world, [&](int rank, Communicator& comm) {
    std::vector<at::Tensor> list{inputFor(rank, 5, at::kFloat).view({5, 1}),
                                 inputFor(rank, 0, at::kFloat),
                                 inputFor(rank, 13, at::kBFloat16),
                                 inputFor(rank, 1, at::kDouble),
                                 inputFor(rank, 7, at::kFloat),
                                 inputFor(rank, 3, at::kHalf)};
    std::vector<int64_t> sizes{5, 0, 13, 1, 7, 3};
    comm.allreduce(list, ReduceOp::kSum)->wait();
    for (size_t i = 0; i < list.size(); ++i) {
      expectEqualValues(list[i], expectedReduction(world, sizes[i], ReduceOp::kSum), "list entry " + std::to_string(i));
    }
    EXPECT_EQ(list[0].sizes(), (std::vector<int64_t>{5, 1}));
  });
}

TEST_P(CommunicatorWorlds, IntegerSumMaxAndBroadcast) {
  int world = GetParam();
  runRanks(world, [&](int rank, Communicator& comm) {
    for (auto dtype : {at::kInt, at::kLong, at::kByte, at::kChar}) {
      std::vector<at::Tensor> t{inputFor(rank, 9, dtype)};
      comm.allreduce(t, ReduceOp::kSum)->wait();
      expectEqualValues(t[0], expectedReduction(world, 9, ReduceOp::kSum), "int sum");
      std::vector<at::Tensor> m{inputFor(rank, 9, dtype)};
      comm.allreduce(m, ReduceOp::kMax)->wait();
      expectEqualValues(m[0], expectedReduction(world, 9, ReduceOp::kMax), "int max");
    }
  });
}

TEST_P(CommunicatorWorlds, BroadcastFromEveryRoot) {
  int world = GetParam();
  runRanks(world, [&](int rank, Communicator& comm) {
    for (int root = 0; root < world; ++root) {
      for (auto dtype : kDtypes) {
        for (int64_t n : kCounts) {
          std::vector<at::Tensor> t{inputFor(rank, n, dtype)};
          comm.broadcast(t, root)->wait();
          expectEqualValues(t[0], inputFor(root, n, at::kDouble), "broadcast root " + std::to_string(root));
        }
      }
      // A list of mixed dtypes in one call.
      std::vector<at::Tensor> list{inputFor(rank, 3, at::kFloat), inputFor(rank, 4, at::kBFloat16),
                                   inputFor(rank, 2, at::kLong), inputFor(rank, 6, at::kFloat)};
      comm.broadcast(list, root)->wait();
      std::vector<int64_t> sizes{3, 4, 2, 6};
      for (size_t i = 0; i < list.size(); ++i) {
        expectEqualValues(list[i], inputFor(root, sizes[i], at::kDouble), "broadcast list");
      }
    }
  });
}

TEST_P(CommunicatorWorlds, AllgatherFlatAndList) {
  int world = GetParam();
  runRanks(world, [&](int rank, Communicator& comm) {
    for (auto dtype : kDtypes) {
      for (int64_t n : kCounts) {
        at::Tensor in = inputFor(rank, n, dtype);
        at::Tensor out = at::full({world * n}, -1, at::TensorOptions().dtype(dtype));
        comm.allgather(in, out)->wait();
        for (int r = 0; r < world; ++r) {
          expectEqualValues(out.narrow(0, r * n, n), inputFor(r, n, at::kDouble), "allgather flat");
        }
      }
      // In place: the input is the output's own chunk.
      at::Tensor whole = at::full({world * 5}, -1, at::TensorOptions().dtype(dtype));
      whole.narrow(0, rank * 5, 5).copy_(inputFor(rank, 5, dtype));
      comm.allgather(whole.narrow(0, rank * 5, 5), whole)->wait();
      for (int r = 0; r < world; ++r) {
        expectEqualValues(whole.narrow(0, r * 5, 5), inputFor(r, 5, at::kDouble), "allgather in place");
      }
      std::vector<at::Tensor> outs;
      for (int r = 0; r < world; ++r) outs.push_back(at::zeros({2, 3}, at::TensorOptions().dtype(dtype)));
      comm.allgather(inputFor(rank, 6, dtype).view({2, 3}), outs)->wait();
      for (int r = 0; r < world; ++r) expectEqualValues(outs[r], inputFor(r, 6, at::kDouble), "allgather list");
    }
  });
}

TEST_P(CommunicatorWorlds, ReduceScatterEveryOpAndDtype) {
  int world = GetParam();
  runRanks(world, [&](int rank, Communicator& comm) {
    for (auto op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      for (auto dtype : kDtypes) {
        // 1500007: more chunks than are received ahead, so their buffers are reused.
        for (int64_t k : {int64_t(0), int64_t(1), int64_t(333), int64_t(262147), int64_t(1500007)}) {
          if (op != ReduceOp::kSum && k > 1000) continue;
          at::Tensor in = inputFor(rank, world * k, dtype);
          at::Tensor out = at::full({k}, -1, at::TensorOptions().dtype(dtype));
          comm.reduceScatter(in, out, op)->wait();
          auto expected = expectedReduction(world, world * k, op).narrow(0, rank * k, k);
          expectEqualValues(out, expected, std::string("reduce_scatter ") + toString(op) + " k=" + std::to_string(k));
        }
      }
    }
  });
}

/// Rank r's values for the rank-order test: magnitudes from 2^-60 to 2^10, so that adding the same
/// values in another order rounds differently.
at::Tensor unevenValuesFor(int rank, int64_t n, at::ScalarType dtype) {
  at::Generator gen = at::detail::createCPUGenerator(100 + rank);  // ranks are threads: not the global one
  at::Tensor scale = at::pow(2.0, at::randint(-60, 10, {n}, gen, at::kFloat));
  return (at::randn({n}, gen, at::kFloat) * scale).to(dtype);
}

TEST(GlooCommunicator, ReducesEveryElementInRankOrderInAllreduceAndReduceScatter) {
  // Each element is (((x0 + x1) + x2) + x3) in the tensor's dtype (float32 for 16-bit types, rounded
  // once): in every reduce-scatter, whatever its length, and in allreduces of ranks on one host, up
  // to 64 KB and of 16-bit types across hosts (larger float32/float64 allreduces across hosts are
  // c10d's ring), so that DDP and ZeRO's reduce-scatter give the same bits at any world size. Both
  // placements: every rank on 127.0.0.1 (one host: everything posted at once) and each on its own
  // loopback address (taken for separate hosts: paced chunks). 1001: small enough to go as whole
  // buffers in one round; 786433: several chunks, and blocks of unequal length.
  for (bool addressEach : {false, true}) {
    for (int64_t n : {int64_t(1001), int64_t(786433)}) {
      for (int world : {3, 4}) {
        for (auto dtype : {at::kFloat, at::kDouble, at::kBFloat16}) {
          const bool low = dtype == at::kBFloat16;
          at::Tensor rankOrder = unevenValuesFor(0, n, dtype).to(low ? at::kFloat : dtype);
          at::Tensor reversed = unevenValuesFor(world - 1, n, dtype).to(low ? at::kFloat : dtype);
          for (int r = 1; r < world; ++r) rankOrder += unevenValuesFor(r, n, dtype);
          for (int r = world - 2; r >= 0; --r) reversed += unevenValuesFor(r, n, dtype);
          rankOrder = rankOrder.to(dtype);
          std::string what = std::string(addressEach ? "an address each" : "one host") + ", n " + std::to_string(n) +
                             ", world " + std::to_string(world) + ", " + c10::toString(dtype);
          ASSERT_FALSE(at::equal(rankOrder, reversed.to(dtype))) << what << ": the values do not tell orders apart";
          const bool allreduceInOrder =
              !addressEach || low || n * static_cast<int64_t>(at::elementSize(dtype)) <= (int64_t(64) << 10);
          runRanks(
              world,
              [&](int rank, Communicator& comm) {
                std::vector<at::Tensor> t{unevenValuesFor(rank, n, dtype)};
                comm.allreduce(t, ReduceOp::kSum)->wait();
                if (allreduceInOrder) EXPECT_TRUE(at::equal(t[0], rankOrder)) << what << ", allreduce, rank " << rank;
                const int64_t k = n / world;
                at::Tensor out = at::empty({k}, dtype);
                comm.reduceScatter(unevenValuesFor(rank, n, dtype).narrow(0, 0, world * k), out, ReduceOp::kSum)
                    ->wait();
                EXPECT_TRUE(at::equal(out, rankOrder.narrow(0, rank * k, k)))
                    << what << ", reduce_scatter, rank " << rank;
                at::Tensor gathered = at::empty({world * k}, dtype);
                comm.allgather(out, gathered)->wait();
                EXPECT_TRUE(at::equal(gathered, rankOrder.narrow(0, 0, world * k)))
                    << what << ", allgather, rank " << rank;
              },
              std::chrono::seconds(20), addressEach);
        }
      }
    }
  }
}

class PointToPointWorlds : public ::testing::TestWithParam<int> {};

TEST_P(PointToPointWorlds, SendRecvRingAndBarrier) {
  int world = GetParam();
  runRanks(world, [&](int rank, Communicator& comm) {
    for (auto dtype : kDtypes) {
      for (int64_t n : kCounts) {
        // Even ranks send first, odd ranks receive first: no cycle of blocking sends.
        at::Tensor mine = inputFor(rank, n, dtype);
        at::Tensor got = at::empty({n}, at::TensorOptions().dtype(dtype));
        int next = (rank + 1) % world;
        int prev = (rank + world - 1) % world;
        auto sendWork = comm.send(mine, next, 7);
        auto recvWork = comm.recv(got, prev, 7);
        sendWork->wait();
        recvWork->wait();
        expectEqualValues(got, inputFor(prev, n, at::kDouble), "ring recv");
      }
    }
    comm.barrier()->wait();
  });
}

TEST_P(CommunicatorWorlds, ManyAsyncOperationsCompleteInOrder) {
  int world = GetParam();
  runRanks(world, [&](int rank, Communicator& comm) {
    std::vector<std::vector<at::Tensor>> tensors;
    std::vector<WorkHandle> works;
    for (int i = 0; i < 20; ++i) tensors.push_back({at::full({100}, double(rank + i))});
    for (auto& t : tensors) works.push_back(comm.allreduce(t, ReduceOp::kSum));
    for (int i = 19; i >= 0; --i) works[i]->wait();  // waiting out of order is fine
    for (int i = 0; i < 20; ++i) {
      EXPECT_TRUE(works[i]->isSuccess());
      double expected = world * (world - 1) / 2.0 + world * i;
      EXPECT_EQ(tensors[i][0][0].item<float>(), expected);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(World, CommunicatorWorlds, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });
// Point to point needs a peer: worlds 2-4.
INSTANTIATE_TEST_SUITE_P(World, PointToPointWorlds, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(CommunicatorErrors, InvalidArgumentsAreTypedAndSendNothing) {
  runRanks(2, [&](int rank, Communicator& comm) {
    auto expectInvalid = [&](const std::function<void()>& call, const std::string& needle) {
      try {
        call();
        ADD_FAILURE() << "expected CommError for " << needle;
      } catch (const CommError& e) {
        EXPECT_EQ(e.kind(), CommErrorKind::kInvalidArgument) << e.what();
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(rank) + " of 2"), std::string::npos) << e.what();
      }
    };
    at::Tensor in = at::ones({4});
    at::Tensor wrong = at::ones({5});
    expectInvalid([&] { comm.allgather(in, wrong); }, "world size (2) x input numel (4) = 8");
    expectInvalid([&] { comm.reduceScatter(in, wrong); }, "input must have world size");
    std::vector<at::Tensor> ints{at::ones({3}, at::kInt)};
    expectInvalid([&] { comm.allreduce(ints, ReduceOp::kAvg); }, "needs a floating-point tensor");
    std::vector<at::Tensor> strided{at::ones({4, 4}).t()};
    expectInvalid([&] { comm.allreduce(strided); }, "contiguous");
    std::vector<at::Tensor> bools{at::ones({3}, at::kBool)};
    expectInvalid([&] { comm.allreduce(bools); }, "unsupported dtype");
    std::vector<at::Tensor> ok{at::ones({3})};
    expectInvalid([&] { comm.broadcast(ok, 2); }, "root=2 is not a rank");
    expectInvalid([&] { comm.send(in, rank); }, "cannot send to itself");
    // Gloo's all-gather messages use tag 2^30: a program's send/recv may not.
    expectInvalid([&] { comm.send(in, 1 - rank, 1 << 30); }, "must be below 1073741824 (lockstep's own)");
    expectInvalid([&] { comm.recv(in, 1 - rank, 1 << 30); }, "must be below 1073741824 (lockstep's own)");
    // The communicator still works after argument errors.
    comm.allreduce(ok)->wait();
    EXPECT_EQ(ok[0][0].item<float>(), 2.0f);
  });
}

TEST(CommunicatorErrors, MissingPeerTimesOutWithTypedErrorThenAborts) {
  using Clock = std::chrono::steady_clock;
  // Rank 1 never joins the allreduce: rank 0 must fail within its per-op timeout.
  runRanks(
      2,
      [&](int rank, Communicator& comm) {
        if (rank == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2500));
          return;  // leaves, closing its connections
        }
        std::vector<at::Tensor> t{at::ones({1024})};
        CollectiveOptions options;
        options.timeout = std::chrono::milliseconds(500);
        auto start = Clock::now();
        try {
          comm.allreduce(t, ReduceOp::kSum, options)->wait();
          ADD_FAILURE() << "allreduce without a peer succeeded";
        } catch (const CommError& e) {
          double seconds = std::chrono::duration<double>(Clock::now() - start).count();
          EXPECT_EQ(e.kind(), CommErrorKind::kTimeout) << e.what();
          EXPECT_LT(seconds, 1.5) << e.what();
          EXPECT_GE(seconds, 0.45);
          std::string what = e.what();
          EXPECT_NE(what.find("allreduce(sum)"), std::string::npos) << what;
          EXPECT_NE(what.find("rank 0 of 2"), std::string::npos) << what;
          EXPECT_NE(what.find("peer: rank 1"), std::string::npos) << what;
          EXPECT_NE(what.find("4096 B"), std::string::npos) << what;
          EXPECT_NE(what.find("timeout 500 ms"), std::string::npos) << what;
        }
        // Every later operation fails at once, naming the first failure.
        auto later = Clock::now();
        try {
          comm.barrier()->wait();
          ADD_FAILURE() << "barrier after a failure succeeded";
        } catch (const CommError& e) {
          EXPECT_EQ(e.kind(), CommErrorKind::kAborted) << e.what();
          EXPECT_NE(std::string(e.what()).find("operation #1 (allreduce(sum)) failed"), std::string::npos) << e.what();
        }
        EXPECT_LT(std::chrono::duration<double>(Clock::now() - later).count(), 0.5);
      },
      std::chrono::seconds(3));
}

TEST(CommunicatorErrors, RejectsBadRankAndWorld) {
  Store store = Store::inMemory();
  GlooOptions o;
  o.rank = 2;
  o.worldSize = 2;
  EXPECT_THROW(makeGlooCommunicator(store, o), Error);
  o.rank = 0;
  o.worldSize = 0;
  EXPECT_THROW(makeGlooCommunicator(store, o), Error);
}

TEST(CommunicatorErrors, JoinTimesOutWhenRanksAreMissing) {
  Store store = Store::inMemory(std::chrono::milliseconds(800));
  GlooOptions o;
  o.rank = 0;
  o.worldSize = 3;
  o.timeout = std::chrono::milliseconds(800);
  auto start = std::chrono::steady_clock::now();
  try {
    makeGlooCommunicator(store, o);
    ADD_FAILURE() << "joined a world whose other ranks never came";
  } catch (const CommError& e) {
    EXPECT_EQ(e.kind(), CommErrorKind::kTimeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("connect (gloo)"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
}

TEST(Groups, SplitByKeyNestedAndLeftOut) {
  // 4 thread ranks: evens {0,2} and odds {1,3} ordered by a reversed key; rank 3 stays out of a second split;
  // each group splits again into singletons.
  std::vector<std::string> errors(4);
  test::runRanks(4, [&](int rank, Communicator& world) {
    auto parity = world.split(rank % 2, -rank, rank % 2 == 0 ? "even" : "odd");
    ASSERT_NE(parity, nullptr);
    EXPECT_EQ(parity->size(), 2);
    EXPECT_EQ(parity->rank(), rank < 2 ? 1 : 0);  // the higher global rank first
    EXPECT_EQ(parity->globalRanks(), (std::vector<int>{rank % 2 + 2, rank % 2}));
    EXPECT_EQ(parity->groupName(), rank % 2 == 0 ? "even" : "odd");
    auto notThree = world.split(rank == 3 ? -1 : 0, rank);
    EXPECT_EQ(notThree == nullptr, rank == 3);
    std::vector<at::Tensor> t{at::full({8}, static_cast<double>(rank))};
    parity->allreduce(t)->wait();
    EXPECT_TRUE(t[0].eq(rank % 2 == 0 ? 2.0 : 4.0).all().item<bool>()) << "rank " << rank;
    if (notThree) {
      EXPECT_EQ(notThree->groupName(), "color0");
      std::vector<at::Tensor> u{at::full({3}, 1.0)};
      notThree->allreduce(u)->wait();
      EXPECT_TRUE(u[0].eq(3.0).all().item<bool>());
    }
    auto alone = parity->split(parity->rank(), 0, "alone");
    EXPECT_EQ(alone->size(), 1);
    EXPECT_EQ(alone->globalRanks(), std::vector<int>{rank});
    std::vector<at::Tensor> v{at::full({2}, 5.0)};
    alone->allreduce(v, ReduceOp::kAvg)->wait();
    EXPECT_TRUE(v[0].eq(5.0).all().item<bool>());
    // An error inside a group names it and the global ranks.
    try {
      at::Tensor in = at::ones({3}), out = at::empty({5});
      parity->allgather(in, out);
    } catch (const CommError& e) { errors[static_cast<size_t>(rank)] = e.what(); }
  });
  EXPECT_NE(errors[2].find("on rank 0 of 2 in group 'even' (global rank 2)"), std::string::npos) << errors[2];
  EXPECT_NE(errors[1].find("on rank 1 of 2 in group 'odd' (global rank 1)"), std::string::npos) << errors[1];
}

}  // namespace
}  // namespace lockstep
