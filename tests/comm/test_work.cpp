// Work's host and stream waits, test(), and the DeadlineWatch that keeps the deadline of a
// work waited for on the stream only. The backends' works are exercised with real
// communicators elsewhere; here a Work is driven the way a polled backend drives it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "comm/deadline_watch.h"
#include "comm/work_access.h"
#include "lockstep/comm/work.h"
#include "lockstep/common/error.h"

namespace lockstep {
namespace {

using namespace std::chrono_literals;
using Clock = Work::Clock;

/// A polled work that completes at its `polls`-th poll (never for 0); counts its timeouts.
struct Polled {
  std::atomic<int> polled{0};
  std::atomic<int> timeouts{0};
  WorkHandle work;

  Polled(int polls, std::chrono::milliseconds deadline) {
    auto self = std::make_shared<std::weak_ptr<Work>>();
    auto poll = [this, polls, self] {
      if (++polled == polls) {
        if (auto w = self->lock()) detail::completeWork(*w, nullptr);
      }
      std::this_thread::sleep_for(1ms);
    };
    auto onTimeout = [this] {
      ++timeouts;
      return std::make_exception_ptr(std::runtime_error("late"));
    };
    work = std::make_shared<Work>("op #1", Clock::now() + deadline, onTimeout, poll);
    *self = work;
  }
};

TEST(Work, WaitOnStreamIsWaitWhereTheBackendHasNoStream) {
  Polled p(5, 10s);
  p.work->waitOnStream();
  EXPECT_TRUE(p.work->isSuccess());
  EXPECT_EQ(p.polled.load(), 5);
}

TEST(Work, WaitOnStreamLeavesTheHostFreeWhenTheStreamWaits) {
  Polled onStream(0, 10s);
  int calls = 0;
  detail::setStreamWait(*onStream.work, [&] { return ++calls, true; });
  const auto start = Clock::now();
  onStream.work->waitOnStream();
  EXPECT_LT(Clock::now() - start, 1s);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(onStream.work->isCompleted());  // still running: the host did not wait

  // The backend declines (a failure to report): the host waits.
  Polled declined(3, 10s);
  detail::setStreamWait(*declined.work, [] { return false; });
  declined.work->waitOnStream();
  EXPECT_TRUE(declined.work->isSuccess());
}

TEST(Work, WaitOnStreamRethrowsAFailureInsteadOfWaitingOnTheStream) {
  Polled p(0, 10s);
  bool asked = false;
  detail::setStreamWait(*p.work, [&] { return asked = true; });
  detail::completeWork(*p.work, std::make_exception_ptr(std::runtime_error("broken")));
  EXPECT_THROW(p.work->waitOnStream(), std::runtime_error);
  EXPECT_FALSE(asked);
}

TEST(Work, TestPollsOnceAndFailsALateWorkOnceFromAnyThread) {
  Polled p(0, 150ms);
  EXPECT_FALSE(p.work->test());
  EXPECT_EQ(p.polled.load(), 1);
  std::this_thread::sleep_for(200ms);
  std::vector<std::thread> threads;
  std::atomic<int> completed{0};
  for (int t = 0; t < 4; ++t) threads.emplace_back([&] { completed += p.work->test() ? 1 : 0; });
  for (auto& t : threads) t.join();
  EXPECT_EQ(completed.load(), 4);
  EXPECT_EQ(p.timeouts.load(), 1);
  EXPECT_FALSE(p.work->isSuccess());
  EXPECT_THROW(p.work->wait(), std::runtime_error);
}

TEST(Work, ALateWorkFailsWhateverItsTimeoutHandlerDoes) {
  auto throwing = std::make_shared<Work>("op #3", Clock::now() + 20ms,
                                         []() -> std::exception_ptr { throw std::runtime_error("the abort failed"); });
  EXPECT_THROW(throwing->wait(), std::runtime_error);
  EXPECT_TRUE(throwing->isCompleted());
  EXPECT_FALSE(throwing->isSuccess());
  EXPECT_THROW(throwing->wait(), std::runtime_error) << "the second wait sees the same error";

  auto silent = std::make_shared<Work>("op #4", Clock::now() + 20ms, nullptr);
  std::this_thread::sleep_for(30ms);
  EXPECT_TRUE(silent->test());
  EXPECT_FALSE(silent->isSuccess()) << "a late work without a handler counted as done";
  try {
    silent->wait();
    ADD_FAILURE() << "a late work waited without an error";
  } catch (const Error& e) { EXPECT_STREQ(e.what(), "op #4 did not finish by its deadline"); }
}

TEST(DeadlineWatch, FailsAWorkNobodyWaitsForByItsDeadline) {
  Polled late(0, 200ms);
  Polled onTime(3, 10s);
  detail::DeadlineWatch watch(5ms);
  watch.watch(late.work);
  watch.watch(onTime.work);
  const auto start = Clock::now();
  while (watch.watching() > 0 && Clock::now() - start < 5s) std::this_thread::sleep_for(5ms);
  const auto took = Clock::now() - start;
  EXPECT_EQ(watch.watching(), 0u);
  EXPECT_GE(took, 150ms);
  EXPECT_LT(took, 2s);
  EXPECT_TRUE(onTime.work->isSuccess());
  EXPECT_TRUE(late.work->isCompleted());
  EXPECT_FALSE(late.work->isSuccess());
  EXPECT_EQ(late.timeouts.load(), 1);
  EXPECT_EQ(onTime.timeouts.load(), 0);
}

TEST(DeadlineWatch, APollThatThrowsFailsItsWorkNotTheThread) {
  auto thrown = std::make_shared<Work>("op #2", Clock::now() + 10s, nullptr,
                                       [] { throw std::runtime_error("an illegal memory access"); });
  Polled after(3, 10s);
  detail::DeadlineWatch watch(5ms);
  watch.watch(thrown);
  const auto start = Clock::now();
  while (!thrown->isCompleted() && Clock::now() - start < 5s) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(thrown->isCompleted());
  EXPECT_FALSE(thrown->isSuccess());
  try {
    thrown->wait();
    ADD_FAILURE() << "a failed work waited without an error";
  } catch (const std::runtime_error& e) { EXPECT_STREQ(e.what(), "an illegal memory access"); }
  watch.watch(after.work);  // the thread still runs
  while (!after.work->isCompleted() && Clock::now() - start < 5s) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(after.work->isSuccess());
}

TEST(DeadlineWatch, StopsWithWorksStillRunning) {
  Polled running(0, 60s);
  {
    detail::DeadlineWatch watch(5ms);
    watch.watch(running.work);
    std::this_thread::sleep_for(30ms);
    EXPECT_EQ(watch.watching(), 1u);
  }  // joins its thread without waiting for the work
  EXPECT_FALSE(running.work->isCompleted());
  EXPECT_GT(running.polled.load(), 1);
}

}  // namespace
}  // namespace lockstep
