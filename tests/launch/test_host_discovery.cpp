// `lockstep run --host-discovery`: the slots of this node in a discovery script's output, and the
// script run without blocking, its failures and garbage said once (launch/host_discovery.h).
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launch/host_discovery.h"
#include "lockstep/common/error.h"

namespace lockstep::detail {
namespace {

const std::vector<std::string> kThisNode{"localhost", "127.0.0.1", "node7"};

TEST(HostDiscovery, CountsTheSlotsOfThisNodeAndNamesTheOthers) {
  std::vector<std::string> others;
  EXPECT_EQ(slotsOfThisNode("localhost:3\n# a comment\n\nnode7  \nfar:8\n127.0.0.1:2 # two more\n", kThisNode, &others),
            6);
  EXPECT_EQ(others, std::vector<std::string>{"far"});
  EXPECT_EQ(slotsOfThisNode("", kThisNode, nullptr), 0);
}

TEST(HostDiscovery, GarbageIsNamedByItsLine) {
  for (const std::string bad : {"localhost:three", "localhost:", ":4", "two words:2", "localhost:99999999"}) {
    SCOPED_TRACE(bad);
    try {
      slotsOfThisNode("localhost:1\n" + bad + "\n", kThisNode, nullptr);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "line 2 is '" + bad + "', expected HOST:SLOTS or HOST");
    }
  }
}

/// The first result of polling `d` for up to `wait`; nullopt when none came.
std::optional<int> firstResult(HostDiscovery& d, std::chrono::milliseconds wait = std::chrono::seconds(5)) {
  const auto until = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < until) {
    if (auto slots = d.poll()) return slots;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::nullopt;
}

TEST(HostDiscovery, RunsTheScriptWithoutBlockingAndAgainAfterTheInterval) {
  HostDiscovery d("sleep 0.3; echo localhost:4", std::chrono::milliseconds(200), {{"PATH", "/usr/bin:/bin"}});
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(d.poll(), std::nullopt);  // started, not ended
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100));
  EXPECT_EQ(firstResult(d), 4);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));
  EXPECT_EQ(firstResult(d), 4);  // run again
}

TEST(HostDiscovery, AFailingOrGarbledScriptChangesNothing) {
  for (const std::string script : {"echo localhost:2; exit 3", "echo 'not a host list'", "kill -9 $$"}) {
    SCOPED_TRACE(script);
    HostDiscovery d(script, std::chrono::milliseconds(50), {{"PATH", "/usr/bin:/bin"}});
    EXPECT_EQ(firstResult(d, std::chrono::seconds(1)), std::nullopt);
  }
}

}  // namespace
}  // namespace lockstep::detail
