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
  std::atomic<bool> givenUp{false};
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
      // Rank 1 never sends: rank 0's receive waits until the group is given up.
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      givenUp = true;
      return;
    }
    at::Tensor landing = at::zeros({4}, at::kDouble);
    const auto start = Clock::now();
    WorkHandle recv = comm->recv(landing, 1);
    const CommError e = test::commErrorOf([&] { recv->wait(); });
    EXPECT_EQ(e.kind(), CommErrorKind::kAborted);
    EXPECT_NE(std::string(e.what()).find("given up: the test gave it up"), std::string::npos) << e.what();
    const auto took = Clock::now() - start;
    EXPECT_GE(took, std::chrono::milliseconds(250));
    EXPECT_LT(took, std::chrono::seconds(5)) << "it waited for the deadline";
  });
}

}  // namespace
}  // namespace lockstep
