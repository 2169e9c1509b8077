// The NCCL-order wrapper (lockstep/comm/nccl_order.h) over Gloo: orders that work on NCCL work
// through it with the right data; orders that deadlock on NCCL (both ranks of a pair sending
// first) fail within the stall limit, naming both ranks' operations; a send meeting a receive of
// another tag fails; nothing is complete before a wait.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "lockstep/comm/nccl_order.h"
#include "lockstep/comm/store/store.h"
#include "lockstep/common/comm_error.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

/// fn(rank, comm) on two thread-ranks whose Gloo communicators run in NCCL's order.
void runOrdered(const std::function<void(int, Communicator&)>& fn,
                std::chrono::milliseconds stall = std::chrono::milliseconds(1500)) {
  Store store = Store::inMemory();  // the wrappers' own, shared by both ranks
  test::runRanks(2, [&](int rank, Communicator& gloo) {
    detail::NcclOrderOptions options;
    options.stallLimit = stall;
    auto comm = detail::withNcclOrder(test::borrow(gloo), store, options);
    fn(rank, *comm);
  });
}

TEST(NcclOrder, APairThatSendsAndReceivesInMatchingOrderExchanges) {
  runOrdered([](int rank, Communicator& comm) {
    const int peer = 1 - rank;
    for (int round = 0; round < 3; ++round) {
      at::Tensor out = at::full({4}, 10.0 * rank + round), in = at::empty({4});
      WorkHandle first, second;
      if (rank == 0) {  // the lower rank sends first, the higher receives first
        first = comm.send(out, peer, 5);
        second = comm.recv(in, peer, 5);
      } else {
        first = comm.recv(in, peer, 5);
        second = comm.send(out, peer, 5);
      }
      first->wait();
      second->wait();
      EXPECT_TRUE(at::equal(in, at::full({4}, 10.0 * peer + round))) << "round " << round;
    }
  });
}

TEST(NcclOrder, BothRanksSendingFirstIsTheDeadlockNcclWouldHave) {
  std::string messages[2];
  const auto start = std::chrono::steady_clock::now();
  runOrdered([&](int rank, Communicator& comm) {
    const int peer = 1 - rank;
    at::Tensor out = at::full({40}, 1.0 * rank), in = at::empty({40});
    auto sent = comm.send(out, peer, 32001);  // the pattern of a ZeRO-1 step that queues all sends first
    auto received = comm.recv(in, peer, 32001);
    try {
      sent->wait();
      received->wait();
    } catch (const CommError& e) { messages[rank] = e.what(); }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15)) << "a deadlock should fail fast";
  for (int rank = 0; rank < 2; ++rank) {
    const std::string& m = messages[rank];
    SCOPED_TRACE(m);
    EXPECT_NE(m.find("NCCL order: send #1 to rank " + std::to_string(1 - rank) + " (tag 32001, 40 x Float)"),
              std::string::npos);
    EXPECT_NE(m.find("to post its receive #1"), std::string::npos);
    EXPECT_NE(m.find("is at: at send #1 to rank " + std::to_string(rank)), std::string::npos) << "the peer's head";
    EXPECT_NE(m.find("on NCCL this order deadlocks"), std::string::npos);
  }
}

TEST(NcclOrder, ASendMeetingAReceiveOfAnotherTagFails) {
  std::string senderMessage;
  runOrdered(
      [&](int rank, Communicator& comm) {
        at::Tensor t = at::zeros({8});
        if (rank == 0) {
          comm.send(t, 1, 71)->wait();  // a header
          try {
            comm.send(t, 1, 72)->wait();  // Gloo would hold it for the receive of tag 72
          } catch (const CommError& e) {
            senderMessage = e.what();
            EXPECT_EQ(e.kind(), CommErrorKind::kDesync);
          }
        } else {
          comm.recv(t, 0, 71)->wait();
          at::Tensor other = at::zeros({8});
          try {
            comm.recv(other, 0, 73)->wait();  // the second receive of the pair expects another tag
          } catch (const CommError&) {}
        }
      },
      std::chrono::milliseconds(800));
  EXPECT_NE(senderMessage.find("met rank 1's receive #2 (tag 73, 8 x Float)"), std::string::npos) << senderMessage;
}

TEST(NcclOrder, NothingIsCompleteBeforeAWait) {
  runOrdered([](int rank, Communicator& comm) {
    std::vector<at::Tensor> t{at::ones({16})};
    auto work = comm.allreduce(t);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_FALSE(work->test()) << "test() before a wait";
    EXPECT_FALSE(work->isCompleted());
    work->wait();
    EXPECT_TRUE(work->isCompleted());
    EXPECT_TRUE(at::equal(t[0], at::full({16}, 2.0)));
    at::Tensor x = at::full({3}, 1.0 + rank);
    auto p2p = rank == 0 ? comm.send(x, 1) : comm.recv(x, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_FALSE(p2p->test());
    p2p->wait();
    EXPECT_TRUE(at::equal(x, at::full({3}, 1.0)));
  });
}

TEST(NcclOrder, GroupsOfASplitKeepTheOrder) {
  runOrdered([](int rank, Communicator& comm) {
    auto group = comm.split(0, rank);
    ASSERT_NE(group, nullptr);
    at::Tensor x = at::full({2}, 5.0 + rank);
    auto a = group->send(x, 1 - rank), b = group->recv(x, 1 - rank);
    EXPECT_THROW(a->wait(), CommError);
    EXPECT_THROW(b->wait(), CommError);
  });
}

}  // namespace
}  // namespace lockstep
