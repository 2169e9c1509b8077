// Membership over real processes and a real TCP store: three members form generation 1 and
// allreduce; one is killed with SIGKILL; the two survivors get a CommError, form generation 2 of
// size 2 in their old order and allreduce over it.
#include <gtest/gtest.h>
#include <signal.h>

#include <future>
#include <string>
#include <vector>

#include "lockstep/comm/store/store.h"
#include "support/expect.h"
#include "support/subprocess.h"

namespace lockstep {
namespace {

TEST(MembershipProcesses, SurvivorsOfAKilledMemberTrainOnAtTheNewSize) {
  TcpStoreOptions so;
  so.port = 0;
  so.isServer = true;
  so.token = "membership-test";
  Store store = Store::tcp(so);
  std::vector<std::future<test::ProcessResult>> futures;
  for (int r = 0; r < 3; ++r) {
    std::vector<std::string> argv{test::helperBin("membership_worker"), std::to_string(store.port()), std::to_string(r),
                                  "1"};
    test::ProcessOptions o;
    o.timeout = std::chrono::seconds(60);
    futures.push_back(std::async(std::launch::async, [argv, o] { return test::runProcess(argv, o); }));
  }
  std::vector<test::ProcessResult> results;
  for (auto& f : futures) results.push_back(f.get());
  EXPECT_EQ(results[1].signal, SIGKILL) << results[1].err;
  for (int r : {0, 2}) {
    SCOPED_TRACE(r);
    const auto& res = results[static_cast<size_t>(r)];
    EXPECT_EQ(res.exitCode, 0) << res.out << res.err;
    EXPECT_HAS(res.out, "lost: ");
    const std::string rank = r == 0 ? "0" : "1";
    EXPECT_HAS(res.out, "generation 2: rank " + rank + " of 2, previous ranks 0 2, sum of previous ranks 2");
  }
}

}  // namespace
}  // namespace lockstep
