// withAbandonment (lockstep/comm/abandonable.h), two thread ranks over Gloo: a wait on a peer that
// never answers fails with kAborted, naming why, soon after the group is given up (not at the
// deadline); operations that complete are untouched, results and completion times included.
#include "lockstep/comm/abandonable.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "lockstep/comm/comm_error.h"
#include "support/expect.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

using Clock = std::chrono::steady_clock;

TEST(Abandonable, AWaitOnASilentPeerEndsOnceTheGroupIsGivenUp) {
  std::atomic<bool> givenUp{false}, waiting{false}, done{false};
  std::atomic<int64_t> givenUpAt{0};
  test::runRanks(2, [&](int rank, Communicator& raw) {
    auto comm = withAbandonment(
        test::borrow(raw), [&] { return givenUp.load(); }, "the test gave it up", std::chrono::milliseconds(20));
    // Completed operations pass through: an allreduce's sum and its backend completion time.
    std::vector<at::Tensor> t{at::full({4}, static_cast<double>(rank + 1), at::kDouble)};
    WorkHandle sum = comm->allreduce(t);
    sum->wait();
    EXPECT_TRUE(sum->isSuccess());
    EXPECT_DOUBLE_EQ(t[0][0].item<double>(), 3.0);
    EXPECT_NE(sum->completedAt(), Work::Clock::time_point{});
    if (rank == 1) {
      // Rank 1 never sends: once rank 0 waits for it, it gives the group up a little later.
      while (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      givenUpAt = Clock::now().time_since_epoch().count();
      givenUp = true;
      while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // its connection stays open
      return;
    }
    at::Tensor landing = at::zeros({4}, at::kDouble);
    WorkHandle recv = comm->recv(landing, 1);
    waiting = true;
    const CommError e = test::commErrorOf([&] { recv->wait(); });
    const auto ended = Clock::now().time_since_epoch().count();
    done = true;
    EXPECT_EQ(e.kind(), CommErrorKind::kAborted);
    EXPECT_NE(std::string(e.what()).find("given up: the test gave it up"), std::string::npos) << e.what();
    ASSERT_TRUE(givenUp) << "the wait ended before the group was given up";
    EXPECT_LT(Clock::duration(ended - givenUpAt.load()), std::chrono::seconds(2)) << "it waited for the deadline";
  });
}

}  // namespace
}  // namespace lockstep
