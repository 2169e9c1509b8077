// Generations of members (lockstep/rendezvous/membership.h), one thread per member over one
// in-memory store: survivors of a member that left form the next generation at the new size with
// their order kept, a newcomer joins the next generation after the last closed and is ranked after
// the members, a generation below the minimum fails on every member naming both counts, a member
// beyond the maximum is told it is late and joins the next, two claims of one rank are named, and
// the launcher's count of running workers closes a generation without waiting out its window.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/rendezvous/membership.h"
#include "support/expect.h"

namespace lockstep {
namespace {

MembershipOptions optionsFor(int minMembers, int maxMembers, std::chrono::milliseconds window) {
  MembershipOptions o;
  o.minMembers = minMembers;
  o.maxMembers = maxMembers;
  o.joinWindow = window;
  o.gloo.timeout = std::chrono::seconds(10);
  return o;
}

/// The sum over the generation's communicator of each member's `value`.
double sumOver(const Generation& g, double value) {
  std::vector<at::Tensor> t{at::full({1}, value, at::kDouble)};
  g.comm->allreduce(t)->wait();
  return t[0].item<double>();
}

/// Runs fn(i) on a thread per member; rethrows the first exception after all joined.
void onThreads(int n, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        fn(i);
      } catch (...) { errors[static_cast<size_t>(i)] = std::current_exception(); }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

TEST(Membership, SurvivorsFormTheNextGenerationAtTheNewSizeInTheirOrder) {
  Store store = Store::inMemory(std::chrono::seconds(20));
  std::mutex mutex;
  std::vector<Generation> second(4);
  onThreads(4, [&](int r) {
    Membership m(store, fmt::format("member{}", r), r, optionsFor(2, 4, std::chrono::seconds(1)));
    {
      const Generation first = m.next();
      EXPECT_EQ(first.number, 1);
      EXPECT_EQ(first.rank, r);
      EXPECT_EQ(first.size, 4);
      EXPECT_EQ(sumOver(first, 1), 4);
    }
    if (r == 2) return;  // leaves: never calls next() again
    Generation g = m.next();
    EXPECT_EQ(sumOver(g, r), 0 + 1 + 3) << "not the survivors' communicator";
    std::lock_guard<std::mutex> lock(mutex);
    second[static_cast<size_t>(r)] = std::move(g);
  });
  for (int r : {0, 1, 3}) {
    SCOPED_TRACE(r);
    const Generation& g = second[static_cast<size_t>(r)];
    EXPECT_EQ(g.number, 2);
    EXPECT_EQ(g.size, 3);
    EXPECT_EQ(g.rank, r == 3 ? 2 : r);
    EXPECT_EQ(g.previousRanks, (std::vector<int>{0, 1, 3}));
  }
}

// The launcher's count of running workers closes a generation as soon as they all arrived; a
// count that is not a number is ignored, and the window decides.
TEST(Membership, TheLaunchersCountOfRunningWorkersClosesAGenerationWithoutTheWindow) {
  for (const std::string running : {"2", "garbage"}) {
    SCOPED_TRACE(running);
    Store store = Store::inMemory(std::chrono::seconds(20));
    store.set(kRunningMembersKey, std::vector<uint8_t>(running.begin(), running.end()));
    const auto window = std::chrono::seconds(3);
    const auto start = std::chrono::steady_clock::now();
    onThreads(2, [&](int r) {
      Membership m(store, fmt::format("member{}", r), r, optionsFor(1, 4, window));
      const Generation g = m.next();
      EXPECT_EQ(g.size, 2);
      EXPECT_EQ(sumOver(g, 1), 2);
    });
    const auto took = std::chrono::steady_clock::now() - start;
    if (running == "2") {
      EXPECT_LT(took, window / 2) << "the generation waited for its window";
    } else {
      EXPECT_GE(took, window);
    }
  }
}

TEST(Membership, NewcomerJoinsTheGenerationAfterTheLastClosedAndIsRankedLast) {
  Store store = Store::inMemory(std::chrono::seconds(20));
  std::promise<void> firstFormed;
  std::shared_future<void> formed = firstFormed.get_future().share();
  std::mutex mutex;
  std::vector<Generation> second(4);
  onThreads(4, [&](int i) {
    const bool newcomer = i == 3;
    // Up to 4: the first generation closes with the 3 members when its window passes.
    Membership m(store, fmt::format("member{}", i), newcomer ? -1 : i, optionsFor(1, 4, std::chrono::seconds(2)));
    if (newcomer) {
      formed.wait();  // starts once generation 1 is closed: it joins generation 2
    } else {
      const Generation first = m.next();
      EXPECT_EQ(first.size, 3);
      if (first.rank == 0) firstFormed.set_value();
    }
    Generation g = m.next();
    EXPECT_EQ(sumOver(g, 1), 4);
    std::lock_guard<std::mutex> lock(mutex);
    second[static_cast<size_t>(i)] = std::move(g);
  });
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(second[static_cast<size_t>(i)].rank, i);
    EXPECT_EQ(second[static_cast<size_t>(i)].previousRanks, (std::vector<int>{0, 1, 2, -1}));
  }
}

TEST(Membership, FewerThanTheMinimumFailsOnEveryMember) {
  Store store = Store::inMemory(std::chrono::seconds(20));
  std::mutex mutex;
  std::vector<std::string> errors;
  onThreads(2, [&](int r) {
    Membership m(store, fmt::format("member{}", r), r, optionsFor(3, 4, std::chrono::milliseconds(200)));
    const std::string e = test::errorOf([&] { m.next(); });
    std::lock_guard<std::mutex> lock(mutex);
    errors.push_back(e);
  });
  ASSERT_EQ(errors.size(), 2u);
  for (const auto& e : errors) EXPECT_HAS(e, "membership generation 1: 2 member(s), fewer than the minimum of 3");
}

TEST(Membership, ArrivalBeyondTheMaximumIsLateAndJoinsTheNext) {
  Store store = Store::inMemory(std::chrono::seconds(20));
  std::mutex mutex;
  int late = 0;
  std::vector<int64_t> joined;
  onThreads(3, [&](int r) {
    Membership m(store, fmt::format("member{}", r), -1, optionsFor(1, 2, std::chrono::seconds(1)));
    try {
      const Generation g = m.next();
      EXPECT_EQ(g.size, 2);
      std::lock_guard<std::mutex> lock(mutex);
      joined.push_back(g.number);
      return;
    } catch (const LateMemberError& e) {
      EXPECT_HAS(std::string(e.what()), "closed with 2 member(s) before 'member");
      std::lock_guard<std::mutex> lock(mutex);
      ++late;
    }
    // Alone in the next generation (its window passes with one member, the minimum).
    const Generation g = m.next();
    EXPECT_EQ(g.size, 1);
    std::lock_guard<std::mutex> lock(mutex);
    joined.push_back(g.number);
  });
  EXPECT_EQ(late, 1);
  std::sort(joined.begin(), joined.end());
  EXPECT_EQ(joined, (std::vector<int64_t>{1, 1, 2}));
}

TEST(Membership, TwoClaimsOfOneRankAreNamed) {
  Store store = Store::inMemory(std::chrono::seconds(20));
  std::mutex mutex;
  std::vector<std::string> errors;
  onThreads(2, [&](int r) {
    Membership m(store, fmt::format("member{}", r), 0, optionsFor(1, 2, std::chrono::seconds(5)));
    const std::string e = test::errorOf([&] { m.next(); });
    std::lock_guard<std::mutex> lock(mutex);
    errors.push_back(e);
  });
  for (const auto& e : errors) EXPECT_HAS(e, "both say they were rank 0 of generation 0");
}

}  // namespace
}  // namespace lockstep
