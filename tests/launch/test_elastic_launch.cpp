// `lockstep run --min-np`: a worker lost while enough others run no longer ends the job; the
// others re-form through the store the launcher serves (it outlives rank 0 too) and finish.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <cstdio>

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

// A worker that SIGKILLs itself unless it is a newcomer; a newcomer says so and ends well.
const char* kLoseRankOne =
    "if [ \"$LOCKSTEP_ELASTIC_NEWCOMER\" = 1 ]; then echo newcomer in slot $LOCKSTEP_RANK of $LOCKSTEP_WORLD_SIZE;"
    " exit 0; fi; if [ $LOCKSTEP_RANK = 1 ]; then kill -9 $$; fi; sleep 3";

TEST(ElasticLaunch, ANewcomerTakesALostWorkersSlotWithinMaxRestarts) {
  auto r = run({"-np", "3", "--min-np", "2", "--max-restarts", "2", "--", "sh", "-c", kLoseRankOne});
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_HAS(r.err, "2 worker(s) go on (--min-np 2)");
  EXPECT_HAS(r.err, "lockstep run: a new worker (pid ");
  EXPECT_HAS(r.err, ") takes the slot of rank 1; it joins the others at their next step (--max-restarts: 1 more)");
  EXPECT_HAS(r.out, "[1] newcomer in slot 1 of 3");
  // Only the lost worker's stderr is shown as lost, not the newcomer's.
  EXPECT_HAS(r.err, "lockstep run: rank 1 was lost; the others went on (--min-np)");
}

TEST(ElasticLaunch, WithoutRestartsLeftNoNewcomerIsStarted) {
  auto r = run({"-np", "3", "--min-np", "2", "--", "sh", "-c", kLoseRankOne});
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_HAS(r.err, "2 worker(s) go on (--min-np 2)");
  EXPECT_EQ(r.err.find("a new worker"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("newcomer"), std::string::npos) << r.out;
}

/// A discovery script that says `first` slots on its first call and `later` after, counting its
/// calls in `dir`/calls.
std::string countingDiscovery(const std::string& dir, int first, int later) {
  return "n=$(cat " + dir + "/calls 2>/dev/null || echo 0); n=$((n+1)); echo $n > " + dir +
         "/calls; if [ $n -ge 2 ]; then echo localhost:" + std::to_string(later) +
         "; else echo localhost:" + std::to_string(first) + "; fi";
}

TEST(ElasticLaunch, HostDiscoveryGrowsTheJobUpToMaxNp) {
  const std::string dir = test::makeTempDir();
  const char* worker =
      "if [ \"$LOCKSTEP_ELASTIC_NEWCOMER\" = 1 ]; then echo newcomer in slot $LOCKSTEP_RANK of $LOCKSTEP_WORLD_SIZE,"
      " started with $LOCKSTEP_START_NP; exit 0; fi; sleep 4";
  // The script asks for 5: the job holds at most --max-np 3.
  auto r = run({"-np", "2", "--min-np", "1", "--max-np", "3", "--host-discovery", countingDiscovery(dir, 2, 5),
                "--discovery-interval", "0.3", "--", "sh", "-c", worker});
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_HAS(r.err, "lockstep run: --host-discovery has 5 slot(s): a new worker (pid ");
  EXPECT_HAS(r.err, ") in slot 2; it joins the others at their next step");
  EXPECT_HAS(r.out, "[2] newcomer in slot 2 of 3, started with 2");
  EXPECT_EQ(r.err.find("in slot 3"), std::string::npos) << r.err;
}

TEST(ElasticLaunch, HostDiscoveryShrinksTheJobBySigterm) {
  const std::string dir = test::makeTempDir();
  const char* worker = "trap 'echo rank $LOCKSTEP_RANK leaves; exit 0' TERM; sleep 4 & wait";
  auto r = run({"-np", "3", "--min-np", "1", "--host-discovery", countingDiscovery(dir, 3, 2), "--discovery-interval",
                "0.3", "--", "sh", "-c", worker});
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_HAS(r.err, "lockstep run: --host-discovery has 2 slot(s): rank 2 (pid ");
  EXPECT_HAS(r.err, ") is told to leave after its step (SIGTERM)");
  EXPECT_HAS(r.out, "[2] rank 2 leaves");
  EXPECT_EQ(r.out.find("rank 1 leaves"), std::string::npos) << r.out;
}

TEST(ElasticLaunch, AFailingOrGarbledDiscoveryScriptIsSaidOnceAndTheJobGoesOn) {
  for (const std::string script : {"exit 3", "echo 'two hosts please'"}) {
    SCOPED_TRACE(script);
    auto r = run({"-np", "2", "--min-np", "1", "--max-np", "3", "--host-discovery", script, "--discovery-interval",
                  "0.2", "--", "sh", "-c", "sleep 2"});
    EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
    const std::string said = "lockstep run: --host-discovery '" + script + "' ";
    EXPECT_HAS(r.err, said);
    EXPECT_HAS(r.err, "; the job goes on with the workers it has");
    EXPECT_EQ(r.err.find(said), r.err.rfind(said)) << "said more than once: " << r.err;
    EXPECT_EQ(r.err.find("a new worker"), std::string::npos) << r.err;
  }
}

TEST(ElasticLaunch, WorkersOfAJobThatIsNotElasticAreToldSo) {
  auto r = run({"-np", "2", "--", test::helperBin("membership_worker"), "1"});
  EXPECT_EQ(r.exitCode, 2) << r.out << r.err;
  EXPECT_HAS(r.err, "membership_worker: not an elastic job (no LOCKSTEP_MIN_NP)");
}

/// Rank 0's "parameter K: SUM WEIGHTED" lines of an elastic_trainer run.
std::vector<std::pair<double, double>> parameters(const std::string& out) {
  std::vector<std::pair<double, double>> found;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    int k = 0;
    double sum = 0, weighted = 0;
    if (std::sscanf(line.c_str(), "[0] parameter %d: %lf %lf", &k, &sum, &weighted) == 3)
      found.emplace_back(sum, weighted);
  }
  return found;
}

/// Every sample of every "step S world W samples ..." line of every rank, by step.
std::map<int, std::multiset<int>> samplesByStep(const std::string& out, std::set<int>& worlds) {
  std::map<int, std::multiset<int>> steps;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    const auto at = line.find("] step ");
    if (at == std::string::npos || line.find(" samples ") == std::string::npos) continue;
    std::istringstream words(line.substr(at + 2));
    std::string word, ids;
    int step = 0, world = 0;
    words >> word >> step >> word >> world >> word >> ids;
    worlds.insert(step * 100 + world);
    std::istringstream list(ids);
    for (std::string id; std::getline(list, id, ',');) steps[step].insert(std::stoi(id));
  }
  return steps;
}

TEST(ElasticLaunch, TrainingThroughAKilledWorkerEqualsTheUninterruptedRun) {
  // 4 workers, --min-np 2, rank 3 killed with SIGKILL as a random step begins: the other 3 take up
  // the furthest state and train on at the same global batch of 28 (shares 10, 9, 9).
  const int dieStep = std::random_device{}() % 10 + 1;
  SCOPED_TRACE("rank 3 killed at step " + std::to_string(dieStep));
  const std::string trainer = test::helperBin("elastic_trainer");
  auto straight = run({"-np", "4", "--min-np", "2", "--", trainer, "-1", "-1", "12"});
  auto lost = run({"-np", "4", "--min-np", "2", "--", trainer, "3", std::to_string(dieStep), "12"});
  ASSERT_EQ(straight.exitCode, 0) << straight.err;
  ASSERT_EQ(lost.exitCode, 0) << lost.out << lost.err;
  EXPECT_HAS(lost.err, "lockstep run: rank 3 (pid ");
  EXPECT_HAS(lost.out, "[0] generation 2: rank 0 of 3, from step " + std::to_string(dieStep - 1) + " of rank 0");
  const auto a = parameters(straight.out), b = parameters(lost.out);
  ASSERT_EQ(a.size(), 6u) << straight.out;
  ASSERT_EQ(b.size(), a.size()) << lost.out;
  for (size_t k = 0; k < a.size(); ++k) {
    // Not bit for bit: the averaged gradient sums 3 shares instead of 4, in another order.
    EXPECT_NEAR(b[k].first, a[k].first, 1e-5 * std::abs(a[k].first) + 1e-7) << "parameter " << k;
    EXPECT_NEAR(b[k].second, a[k].second, 1e-5 * std::abs(a[k].second) + 1e-7) << "parameter " << k;
  }
  std::set<int> worlds;
  const auto steps = samplesByStep(lost.out, worlds);
  ASSERT_EQ(steps.size(), 12u);
  std::set<int> epoch;
  for (const auto& [step, samples] : steps) {
    EXPECT_EQ(samples.size(), 28u) << "step " << step;
    EXPECT_TRUE(worlds.count(step * 100 + (step < dieStep ? 4 : 3))) << "step " << step;
    epoch.insert(samples.begin(), samples.end());
  }
  EXPECT_EQ(epoch.size(), 12u * 28) << "a sample trained twice in the epoch's committed steps";
}

TEST(ElasticLaunch, BadBoundsAreRefusedNamingTheFlag) {
  const std::string worker = test::helperBin("membership_worker");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"-np", "3", "--min-np", "4"}, "--min-np 4: must be between 1 and -np 3"},
      {{"-np", "3", "--min-np", "0", "--max-np", "4"}, "--max-np 4: an elastic job needs --min-np too"},
      {{"-np", "3", "--min-np", "2", "--max-np", "2"}, "--max-np 2: must be at least -np 3"},
      {{"-np", "2", "--min-np", "1", "--backend", "mpi"}, "--min-np: an MPI job cannot go on"},
      {{"-np", "2", "--min-np", "1", "--nnodes", "2", "--master-port", "29999"}, "elastic jobs run on one node"},
      {{"-np", "2", "--host-discovery", "echo localhost:2"}, "--host-discovery: an elastic job's option"},
      {{"-np", "2", "--min-np", "1", "--host-discovery", "true", "--discovery-interval", "0"},
       "--discovery-interval 0: expected seconds in 0.1..3600"},
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
