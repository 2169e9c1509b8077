// Collectives between real processes: under the launcher (values), and
// started by hand for the failure cases (a killed peer, a stalled peer, a
// desynchronised call), where each survivor must raise the typed error
// within the timeout.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <future>
#include <regex>
#include <set>
#include <thread>

#include "launch/launch_commands.h"
#include "lockstep/comm/communicator.h"
#include "lockstep/launch/launcher.h"
#include "support/expect.h"
#include "support/subprocess.h"

namespace lockstep {
namespace {

using test::ProcessOptions;
using test::ProcessResult;
using test::runProcess;

/// Starts `world` comm_worker processes by hand (no launcher) and collects them.
std::vector<ProcessResult> runWorld(int world, const std::vector<std::string>& args, double commTimeoutSeconds) {
  int port = detail::pickFreePort("127.0.0.1");
  std::vector<std::future<ProcessResult>> futures;
  for (int r = 0; r < world; ++r) {
    ProcessOptions o;
    o.setEnv = {{"LOCKSTEP_RANK", std::to_string(r)},
                {"LOCKSTEP_WORLD_SIZE", std::to_string(world)},
                {"LOCKSTEP_MASTER_ADDR", "127.0.0.1"},
                {"LOCKSTEP_MASTER_PORT", std::to_string(port)},
                {"LOCKSTEP_NUM_THREADS", "1"},
                {"LOCKSTEP_JOB_TOKEN", "comm-multiprocess-test"},
                {"LOCKSTEP_COMM_TIMEOUT", std::to_string(commTimeoutSeconds)}};
    o.timeout = std::chrono::seconds(90);
    std::vector<std::string> argv{test::helperBin("comm_worker")};
    argv.insert(argv.end(), args.begin(), args.end());
    futures.push_back(std::async(std::launch::async, [argv, o] { return runProcess(argv, o); }));
  }
  std::vector<ProcessResult> results;
  for (auto& f : futures) results.push_back(f.get());
  return results;
}

/// Milliseconds the worker reported between starting the failed op and the error.
long afterMs(const std::string& err) {
  auto pos = err.find("after_ms=");
  return pos == std::string::npos ? -1 : std::stol(err.substr(pos + 9));
}

/// Every rank printed its own verdict (comm_worker check): all of its checks, more than none, passed.
void expectEveryRankChecked(const std::string& out, int world) {
  const std::regex verdict("rank ([0-9]+): ([0-9]+) of ([0-9]+) checks passed");
  std::set<int> passed;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), verdict); it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    EXPECT_EQ(m[2].str(), m[3].str()) << m[0].str();
    EXPECT_GT(std::stoi(m[3].str()), 0) << m[0].str();
    passed.insert(std::stoi(m[1].str()));
  }
  for (int r = 0; r < world; ++r) EXPECT_TRUE(passed.count(r)) << "rank " << r << " printed no verdict:\n" << out;
}

class LaunchedWorlds : public ::testing::TestWithParam<int> {};

TEST_P(LaunchedWorlds, EveryCollectiveBetweenProcesses) {
  int world = GetParam();
  auto r = runProcess({test::lockstepBin(), "run", "-np", std::to_string(world), "--comm-timeout", "60", "--",
                       test::helperBin("comm_worker"), "check"});
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[0] all checks passed on " + std::to_string(world) + " ranks"), std::string::npos)
      << r.out << r.err;
  expectEveryRankChecked(r.out, world);
}

INSTANTIATE_TEST_SUITE_P(World, LaunchedWorlds, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "np" + std::to_string(info.param); });

class MpiWorlds : public ::testing::TestWithParam<int> {};

TEST_P(MpiWorlds, EveryCollectiveOverTheMpiBackend) {
  LOCKSTEP_SKIP_UNLESS(mpiBackendBuilt(), "the MPI backend (lockstep built with libopenmpi-dev)");
  int world = GetParam();
  auto r = runProcess({test::lockstepBin(), "run", "-np", std::to_string(world), "--backend", "mpi", "--comm-timeout",
                       "60", "--", test::helperBin("comm_worker"), "check"});
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[0] all checks passed on " + std::to_string(world) + " ranks (backend mpi)"), std::string::npos)
      << r.out << r.err;
  expectEveryRankChecked(r.out, world);
}

TEST(MpiBlockingPath, EveryCollectiveWithAllreducesOnTheCommunicationThread) {
  LOCKSTEP_SKIP_UNLESS(mpiBackendBuilt(), "the MPI backend (lockstep built with libopenmpi-dev)");
  // Threshold 0: every allreduce is a blocking MPI_Allreduce on the communication
  // thread, and every other operation queues behind it in order.
  ProcessOptions o;
  o.setEnv = {{"LOCKSTEP_MPI_BLOCKING_BYTES", "0"}};
  auto r = runProcess({test::lockstepBin(), "run", "-np", "3", "--backend", "mpi", "--comm-timeout", "60", "--",
                       test::helperBin("comm_worker"), "check"},
                      o);
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[0] all checks passed on 3 ranks (backend mpi)"), std::string::npos) << r.out << r.err;
  expectEveryRankChecked(r.out, 3);
}

INSTANTIATE_TEST_SUITE_P(World, MpiWorlds, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "np" + std::to_string(info.param); });

TEST(LaunchedByOthers, MpirunWorkersUseMpiByDefaultAndGlooWhenAsked) {
  // No lockstep launcher and no MASTER_*: init() reads OMPI_COMM_WORLD_* (and, for
  // Gloo, derives the rendezvous port from the OpenMPI job id). CI runs as root, hence the flags.
  // With MPI, rank 0 draws the job token and broadcasts it; Gloo needs one given, as docs/multi-node.md
  // says: a token file every host can read (-x with the file's name), or -x with the variable's name only,
  // so that mpirun takes the value from its environment and no command line (ps) shows it.
  std::string tokenFile = test::makeTempDir() + "/token";
  std::ofstream(tokenFile) << "0123456789abcdef0123456789abcdef-from-a-file\n";
  ::chmod(tokenFile.c_str(), 0600);
  for (std::string backend : {"auto", "gloo-token-file", "gloo-token-variable"}) {
    std::string chosen = backend == "auto" ? "auto" : "gloo";
    std::vector<std::string> argv{
        "mpirun", "--allow-run-as-root",       "--oversubscribe", "-np", "3", "-x", "LOCKSTEP_COMM_TIMEOUT=60",
        "-x",     "LOCKSTEP_BACKEND=" + chosen};
    ProcessOptions o;
    if (backend == "gloo-token-file") argv.insert(argv.end(), {"-x", "LOCKSTEP_JOB_TOKEN_FILE=" + tokenFile});
    if (backend == "gloo-token-variable") {
      o.setEnv = {{"LOCKSTEP_JOB_TOKEN", "0123456789abcdef0123456789abcdef-from-the-job-script"}};
      argv.insert(argv.end(), {"-x", "LOCKSTEP_JOB_TOKEN"});
    }
    argv.insert(argv.end(), {test::helperBin("comm_worker"), "check"});
    auto r = runProcess(argv, o);
    EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
    std::string used = chosen == "gloo" || !mpiBackendBuilt() ? "gloo" : "mpi";
    EXPECT_NE(r.out.find("all checks passed on 3 ranks (backend " + used + ")"), std::string::npos) << r.out << r.err;
    expectEveryRankChecked(r.out, 3);
  }
}

TEST(MpiFailures, StalledPeerTimesOutAndTheLauncherStopsTheJob) {
  LOCKSTEP_SKIP_UNLESS(mpiBackendBuilt(), "the MPI backend (lockstep built with libopenmpi-dev)");
  // Rank 1 sleeps 30 s; rank 0's allreduce has a 2 s timeout, fails, exits 3; mpirun stops rank 1.
  auto start = std::chrono::steady_clock::now();
  auto r = runProcess({test::lockstepBin(), "run", "-np", "2", "--backend", "mpi", "--comm-timeout", "2", "--",
                       test::helperBin("comm_worker"), "stall", "1", "30"});
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exitCode, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("[0] CommError kind=timeout"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("peer: rank 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("mpirun reports rank 0 as the first worker to fail"), std::string::npos) << r.err;
  EXPECT_LT(seconds, 20) << r.err;
}

TEST(MpiFailures, KilledWorkerIsNamedAndTheRunEndsQuickly) {
  LOCKSTEP_SKIP_UNLESS(mpiBackendBuilt(), "the MPI backend (lockstep built with libopenmpi-dev)");
  auto start = std::chrono::steady_clock::now();
  auto r = runProcess({test::lockstepBin(), "run", "-np", "3", "--backend", "mpi", "--comm-timeout", "60", "--",
                       test::helperBin("comm_worker"), "die", "1", "20"});
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exitCode, 0) << r.err;
  EXPECT_NE(r.err.find("mpirun reports rank 1 as the first worker to fail"), std::string::npos) << r.err;
  EXPECT_LT(seconds, 20) << r.err;
}

class StallInspector : public ::testing::TestWithParam<std::string> {};

TEST_P(StallInspector, RankZeroNamesTheRankThatHasNotArrivedBeforeTheTimeout) {
  LOCKSTEP_SKIP_UNLESS(GetParam() != "mpi" || mpiBackendBuilt(),
                       "the MPI backend (lockstep built with libopenmpi-dev)");
  // Rank 1 of 3 sleeps 4 s before its allreduce; reports start after 1 s; the timeout is 8 s.
  ProcessOptions o;
  o.setEnv = {{"LOCKSTEP_STALL_WARN_SECONDS", "1"}};
  o.timeout = std::chrono::seconds(60);
  auto r = runProcess({test::lockstepBin(), "run", "-np", "3", "--backend", GetParam(), "--comm-timeout", "8", "--",
                       test::helperBin("comm_worker"), "stall", "1", "4"},
                      o);
  auto report = r.err.find("[0] [lockstep");
  auto stall = r.err.find("stall: operation #1 has waited");
  ASSERT_NE(stall, std::string::npos) << r.err;
  EXPECT_NE(report, std::string::npos) << r.err;
  EXPECT_NE(r.err.find("s on ranks 0, 2; rank 1 has not submitted it yet; rank 1 has submitted nothing. "
                       "Its timeout (8 s) will fail it."),
            std::string::npos)
      << r.err;
  auto error = r.err.find("CommError kind=");
  if (error != std::string::npos) EXPECT_LT(stall, error) << "the report must come before the failure: " << r.err;
}

INSTANTIATE_TEST_SUITE_P(Backend, StallInspector, ::testing::Values("gloo", "mpi"),
                         [](const auto& info) { return info.param; });

TEST(CommFailures, KilledPeerGivesTypedErrorOnEverySurvivor) {
  // Rank 1 of 3 dies by SIGKILL in its 20th allreduce; comm timeout 20 s.
  auto results = runWorld(3, {"die", "1", "20"}, 20);
  EXPECT_EQ(results[1].signal, SIGKILL);
  for (int r : {0, 2}) {
    const auto& res = results[r];
    EXPECT_EQ(res.exitCode, 3) << "rank " << r << ": " << res.err;
    EXPECT_NE(res.err.find("CommError kind="), std::string::npos) << res.err;
    EXPECT_NE(res.err.find("allreduce(sum) failed"), std::string::npos) << res.err;
    EXPECT_NE(res.err.find("on rank " + std::to_string(r) + " of 3"), std::string::npos) << res.err;
    EXPECT_NE(res.err.find("16384 B"), std::string::npos) << res.err;  // 4096 float32
    long ms = afterMs(res.err);
    std::printf("[ info     ] rank %d: CommError %ld ms after its allreduce started\n", r, ms);
    EXPECT_GE(ms, 0) << res.err;
    // Measured 31-33 ms (five runs): the survivors learn of the death from the closed
    // connections, not from the 20 s timeout.
    EXPECT_LT(ms, 300) << "rank " << r << " did not notice the closed connection: " << res.err;
  }
}

TEST(CommFailures, StalledPeerTimesOutWithinTheTimeout) {
  // Rank 1 of 2 sleeps 6 s; rank 0 has a 2 s timeout.
  auto results = runWorld(2, {"stall", "1", "6"}, 2);
  const auto& r0 = results[0];
  EXPECT_EQ(r0.exitCode, 3) << r0.out << r0.err;
  EXPECT_NE(r0.err.find("CommError kind=timeout"), std::string::npos) << r0.err;
  EXPECT_NE(r0.err.find("peer: rank 1"), std::string::npos) << r0.err;
  long ms = afterMs(r0.err);
  EXPECT_GE(ms, 1900) << r0.err;
  EXPECT_LT(ms, 4000) << r0.err;
}

TEST(CommFailures, MismatchedSizesFailInsteadOfHanging) {
  // Rank 0 sends 4 elements, rank 1 expects 8: Gloo reports a size mismatch or
  // the op times out; either way a typed error, never a hang.
  auto results = runWorld(2, {"mismatch"}, 3);
  bool someoneRaised = false;
  for (const auto& r : results) {
    EXPECT_NE(r.exitCode, 0) << r.out << r.err;
    EXPECT_EQ(r.out.find("mismatched allreduce returned"), std::string::npos) << r.out;
    if (r.exitCode == 3) {
      someoneRaised = true;
      EXPECT_LT(afterMs(r.err), 5000) << r.err;
    }
    EXPECT_LT(r.seconds, 30) << r.err;
  }
  EXPECT_TRUE(someoneRaised);
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

/// 4 ranks split two ways (2x2), both groups used at once: every collective with value checks in each,
/// and sums of global ranks that tell the groups apart (a message crossing groups would change them).
void expectGroupsWork(const std::string& backend) {
  auto r = runProcess({test::lockstepBin(), "run", "-np", "4", "--backend", backend, "--comm-timeout", "60", "--",
                       test::helperBin("comm_worker"), "groups"});
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  const std::regex verdict("rank ([0-9]+): ([0-9]+) of ([0-9]+) group checks passed");
  std::set<int> ranks;
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), verdict); it != std::sregex_iterator(); ++it) {
    EXPECT_EQ((*it)[2], (*it)[3]) << r.out;
    EXPECT_GT(std::stoi((*it)[3]), 100) << r.out;
    ranks.insert(std::stoi((*it)[1]));
  }
  EXPECT_EQ(ranks.size(), 4u) << r.out;
}

TEST(Groups, EveryCollectiveInsideRowsAndColumnsOfFourRanksGloo) { expectGroupsWork("gloo"); }

TEST(Groups, EveryCollectiveInsideRowsAndColumnsOfFourRanksMpi) {
  LOCKSTEP_SKIP_UNLESS(mpiBackendBuilt(), "the MPI backend (lockstep built with libopenmpi-dev)");
  expectGroupsWork("mpi");
}

TEST(Groups, ADeadMemberIsNamedByGroupAndGlobalRank) {
  // Rank 3 dies after the split into rows {0,1} and {2,3}: rank 2's row allreduce fails naming the group
  // and rank 3 in it; the other row carries on to the end.
  auto results = runWorld(4, {"groups-die", "3"}, 20);
  EXPECT_EQ(results[3].signal, SIGKILL);
  const auto& survivor = results[2];
  EXPECT_EQ(survivor.exitCode, 3) << survivor.err;
  EXPECT_HAS(survivor.err, "allreduce(sum) failed");
  EXPECT_HAS(survivor.err, "on rank 0 of 2 in group 'row1' (global rank 2)");
  EXPECT_HAS(survivor.err, "peer: rank 1 of the group (global rank 3)");
  EXPECT_LT(afterMs(survivor.err), 300) << survivor.err;
  for (int r : {0, 1}) {
    EXPECT_EQ(results[r].exitCode, 0) << results[r].err;
    EXPECT_HAS(results[r].out, "row allreduces done");
  }
}

}  // namespace
}  // namespace lockstep
