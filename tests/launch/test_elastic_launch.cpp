// `lockstep run --min-np`: a worker lost while enough others run no longer ends the job; the
// others re-form through the store the launcher serves (it outlives rank 0 too) and finish.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/expect.h"
#include "support/subprocess.h"

namespace lockstep {
namespace {

test::ProcessResult run(const std::vector<std::string>& args) {
  std::vector<std::string> argv{test::lockstepBin(), "run"};
  argv.insert(argv.end(), args.begin(), args.end());
  test::ProcessOptions o;
  o.timeout = std::chrono::seconds(90);
  o.setEnv["LOCKSTEP_COMM_TIMEOUT"] = "20";
  return test::runProcess(argv, o);
}

TEST(ElasticLaunch, TheOthersOfALostWorkerGoOnAtTheNewSize) {
  auto r = run({"-np", "3", "--min-np", "2", "--", test::helperBin("membership_worker"), "1"});
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_HAS(r.err, "lockstep run: rank 1 (pid ");
  EXPECT_HAS(r.err, "was killed by SIGKILL");
  EXPECT_HAS(r.err, "2 worker(s) go on (--min-np 2)");
  EXPECT_HAS(r.out, "[0] lost: ");
  EXPECT_HAS(r.out, "[0] generation 2: rank 0 of 2, previous ranks 0 2, sum of previous ranks 2");
  EXPECT_HAS(r.out, "[2] generation 2: rank 1 of 2, previous ranks 0 2, sum of previous ranks 2");
}

TEST(ElasticLaunch, TheStoreOutlivesRankZero) {
  // The launcher serves the store: the others of a lost rank 0 still meet, ranks 1 and 2 becoming 0 and 1.
  auto r = run({"-np", "3", "--min-np", "2", "--", test::helperBin("membership_worker"), "0"});
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_HAS(r.err, "lockstep run: rank 0 (pid ");
  EXPECT_HAS(r.out, "[1] generation 2: rank 0 of 2, previous ranks 1 2, sum of previous ranks 3");
  EXPECT_HAS(r.out, "[2] generation 2: rank 1 of 2, previous ranks 1 2, sum of previous ranks 3");
}

TEST(ElasticLaunch, BelowTheMinimumTheGroupStopsAsWithoutIt) {
  auto r = run({"-np", "3", "--min-np", "3", "--", test::helperBin("membership_worker"), "1"});
  EXPECT_EQ(r.exitCode, 128 + 9) << r.out << r.err;  // the lost worker's SIGKILL, as without --min-np
  EXPECT_HAS(r.err, "lockstep run: rank 1 (pid ");
  EXPECT_HAS(r.err, "it was the first worker to fail");
  EXPECT_EQ(r.err.find("go on"), std::string::npos) << r.err;
}

TEST(ElasticLaunch, WorkersOfAJobThatIsNotElasticAreToldSo) {
  auto r = run({"-np", "2", "--", test::helperBin("membership_worker"), "1"});
  EXPECT_EQ(r.exitCode, 2) << r.out << r.err;
  EXPECT_HAS(r.err, "membership_worker: not an elastic job (no LOCKSTEP_MIN_NP)");
}

TEST(ElasticLaunch, BadBoundsAreRefusedNamingTheFlag) {
  const std::string worker = test::helperBin("membership_worker");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"-np", "3", "--min-np", "4"}, "--min-np 4: must be between 1 and -np 3"},
      {{"-np", "3", "--min-np", "0", "--max-np", "4"}, "--max-np 4: an elastic job needs --min-np too"},
      {{"-np", "3", "--min-np", "2", "--max-np", "2"}, "--max-np 2: must be at least -np 3"},
      {{"-np", "2", "--min-np", "1", "--backend", "mpi"}, "--min-np: an MPI job cannot go on"},
      {{"-np", "2", "--min-np", "1", "--nnodes", "2", "--master-port", "29999"}, "elastic jobs run on one node"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> argv = args;
    argv.insert(argv.end(), {"--", worker, "1"});
    auto r = run(argv);
    EXPECT_EQ(r.exitCode, 2) << message << "\n" << r.err;
    EXPECT_HAS(r.err, message);
  }
}

}  // namespace
}  // namespace lockstep
