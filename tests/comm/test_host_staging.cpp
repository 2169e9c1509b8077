// withHostStaging: every operation through host buffers. The machine that runs CI has no GPU, so
// the tests stage every tensor (a predicate that picks CPU tensors too): the copies in, the inner
// operation on the copies, the copies back in wait() are what a CUDA tensor goes through; only the
// device of the caller's tensor differs.
#include "lockstep/comm/host_staging.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "lockstep/comm/nccl.h"
#include "lockstep/common/device.h"
#include "support/expect.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

/// Every rank's communicator, staging every tensor; counts what it staged.
std::shared_ptr<Communicator> stagingAll(Communicator& comm, std::atomic<int>& staged) {
  return withHostStaging(test::borrow(comm), [&staged](const at::Tensor&) {
    ++staged;
    return true;
  });
}

TEST(HostStaging, EveryCollectiveLandsInTheCallersTensors) {
  std::atomic<int> staged{0};
  test::runRanks(3, [&](int rank, Communicator& inner) {
    auto comm = stagingAll(inner, staged);
    std::vector<at::Tensor> sum{at::full({5}, rank + 1.0f), at::full({2}, rank + 1.0, at::kDouble)};
    auto work = comm->allreduce(sum, ReduceOp::kSum);
    work->wait();
    EXPECT_TRUE(at::equal(sum[0], at::full({5}, 6.0f)));
    EXPECT_TRUE(at::equal(sum[1], at::full({2}, 6.0, at::kDouble)));
    EXPECT_TRUE(work->isCompleted() && work->isSuccess());

    std::vector<at::Tensor> b{at::full({4}, static_cast<float>(rank))};
    comm->broadcast(b, /*root=*/2)->wait();
    EXPECT_TRUE(at::equal(b[0], at::full({4}, 2.0f)));

    at::Tensor whole = at::zeros({6});  // in place: the input is this rank's chunk of the output
    whole.narrow(0, 2 * rank, 2).fill_(rank + 10.0f);
    at::Tensor chunk = whole.narrow(0, 2 * rank, 2);
    comm->allgather(chunk, whole)->wait();
    EXPECT_TRUE(at::equal(whole, at::tensor({10.0f, 10.0f, 11.0f, 11.0f, 12.0f, 12.0f})));

    std::vector<at::Tensor> parts{at::empty({1}), at::empty({1}), at::empty({1})};
    comm->allgather(at::full({1}, rank * 2.0f), parts)->wait();
    for (int r = 0; r < 3; ++r) EXPECT_EQ(parts[r].item<float>(), r * 2.0f);

    at::Tensor out = at::empty({2});
    comm->reduceScatter(at::arange(6, at::kFloat), out, ReduceOp::kSum)->wait();
    EXPECT_TRUE(at::equal(out, at::arange(2 * rank, 2 * rank + 2, at::kFloat) * 3));

    at::Tensor message = at::full({3}, 7.0f + rank);
    if (rank == 0) comm->send(message, 1)->wait();
    if (rank == 1) {
      comm->recv(message, 0)->wait();
      EXPECT_TRUE(at::equal(message, at::full({3}, 7.0f)));
    }
    comm->barrier()->wait();
  });
  EXPECT_GT(staged.load(), 0);
}

TEST(HostStaging, CallersTensorsChangeOnlyInWait) {
  std::atomic<int> staged{0};
  test::runRanks(2, [&](int rank, Communicator& inner) {
    auto comm = stagingAll(inner, staged);
    std::vector<at::Tensor> t{at::full({3}, rank + 1.0f)};
    auto work = comm->allreduce(t);
    comm->barrier()->wait();  // queued behind the allreduce, which has therefore finished
    // Not waited yet: the result sits in the host buffer, the caller's tensor is as it was.
    EXPECT_TRUE(at::equal(t[0], at::full({3}, rank + 1.0f)));
    work->wait();
    EXPECT_TRUE(at::equal(t[0], at::full({3}, 3.0f)));
  });
}

TEST(HostStaging, TestDoesNotWaitForTheInnerOperation) {
  using Clock = std::chrono::steady_clock;
  std::atomic<int> staged{0};
  test::runRanks(2, [&](int rank, Communicator& inner) {
    auto comm = stagingAll(inner, staged);
    std::vector<at::Tensor> t{at::full({3}, rank + 1.0f)};
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(600));  // rank 0's allreduce waits for it
    auto work = comm->allreduce(t);
    if (rank == 0) {
      const auto before = Clock::now();
      EXPECT_FALSE(work->test()) << "finished without rank 1";
      EXPECT_LT(Clock::now() - before, std::chrono::milliseconds(300)) << "test() waited for the operation";
    }
    while (!work->test()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_TRUE(work->isSuccess());
    EXPECT_TRUE(at::equal(t[0], at::full({3}, 3.0f))) << "test() completed it without the copy back";
  });
}

TEST(HostStaging, GroupsStageAndErrorsAreTheInnerOperations) {
  std::atomic<int> staged{0};
  std::atomic<bool> received{false};  // the others stay connected until rank 0's receive ended
  test::runRanks(4, [&](int rank, Communicator& inner) {
    auto comm = stagingAll(inner, staged);
    auto group = comm->split(rank % 2, rank);
    ASSERT_NE(group, nullptr);
    const int before = staged.load();
    std::vector<at::Tensor> t{at::full({2}, static_cast<float>(rank))};
    group->allreduce(t)->wait();
    EXPECT_TRUE(at::equal(t[0], at::full({2}, rank % 2 == 0 ? 2.0f : 4.0f)));  // 0 + 2, 1 + 3
    EXPECT_GT(staged.load(), before) << "the group did not stage";
    if (rank == 0) {  // nobody sends: the inner recv's timeout is the staged recv's error
      at::Tensor never = at::empty({1});
      try {
        comm->recv(never, 1, /*tag=*/5, {std::chrono::milliseconds(300)})->wait();
        ADD_FAILURE() << "a receive nobody sends to completed";
      } catch (const CommError& e) { EXPECT_EQ(e.kind(), CommErrorKind::kTimeout) << e.what(); }
      received = true;
    }
    while (!received) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
}

TEST(HostStaging, CpuTensorsPassThroughByDefault) {
  test::runRanks(2, [&](int rank, Communicator& inner) {
    auto comm = withHostStaging(test::borrow(inner));
    std::vector<at::Tensor> t{at::full({3}, rank + 1.0f)};
    auto work = comm->allreduce(t);
    work->wait();
    EXPECT_TRUE(at::equal(t[0], at::full({3}, 3.0f)));
  });
}

// The NCCL backend wants this rank's GPU; a device index beyond the visible ones (all of them
// here, where none is) is an error naming the rank, the device and what is visible.
TEST(NcclBackend, RefusesADeviceThatIsNotVisible) {
  ASSERT_TRUE(ncclBackendBuilt()) << "the torch wheel's LibTorch has c10d's ProcessGroupNCCL";
  NcclOptions o;
  o.deviceIndex = visibleCudaDevices();
  const std::string message = test::errorOf([&] { makeNcclCommunicator(Store::inMemory(std::chrono::seconds(5)), o); });
  EXPECT_HAS(message, fmt::format("backend nccl: rank 0 wants cuda:{}, but {} CUDA device(s) are visible to it",
                                  o.deviceIndex, o.deviceIndex));
  EXPECT_HAS(message, "use the gloo backend");
}

}  // namespace
}  // namespace lockstep
