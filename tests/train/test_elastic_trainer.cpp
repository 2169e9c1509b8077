// `lockstep train` as an elastic job (`lockstep run --min-np`, docs/elastic.md): a worker killed at
// a random step, or told SIGTERM (it leaves after its step), costs no step, and the others end with
// the parameters of the run without it; a newcomer in the killed worker's slot ends equal to the others;
// without a failure an elastic run trains as a fixed world does, bit for bit; the
// settings whose state a survivor could not hand on are refused by name.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "lockstep/common/tensor_archive.h"
#include "lockstep/nn/model_state.h"
#include "lockstep/train/checkpoint.h"
#include "support/replicas.h"
#include "support/subprocess.h"
#include "support/tiny_config.h"

namespace lockstep {
namespace {

using test::ProcessOptions;
using test::ProcessResult;

// 750 samples, a global batch of 4 x 16: 11 steps per epoch, so 26 steps cross two epoch ends.
const std::string kTinyConfig =
    test::tinyNamesConfig("  max_steps: 26\n  log_every: 2\n", "checkpoint:\n  dir: ckpt\n  every: 6\n");

// Rank 0's steps take 8 times their computation: the others wait for it, the math is the same.
const std::string kSlowSteps = "testing.slow_rank=0 testing.slow_factor=8";

/// `lockstep samples` on the run's trainer.sample_log=samples: every sample of each epoch trained
/// exactly once in the steps the run kept.
::testing::AssertionResult everySampleOnce(const std::string& dir) {
  const ProcessResult audit = test::runProcess({test::lockstepBin(), "samples", dir + "/samples"});
  if (audit.exitCode == 0 && audit.out.find("OK: every sample of each epoch") != std::string::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "lockstep samples exited " << audit.exitCode << ":\n"
                                       << audit.out << audit.err;
}

std::string makeRunDir() {
  std::string dir = test::makeTempDir();
  std::ofstream(dir + "/tiny.yaml") << kTinyConfig;
  return dir;
}

TensorArchive readArchive(const std::string& path) { return TensorArchive::parse(readCheckpoint(path), path); }

/// Every model tensor of checkpoint `a` within `relative` of checkpoint `b`'s (max-norm over the tensor).
::testing::AssertionResult sameModelWithin(const std::string& a, const std::string& b, double relative) {
  const TensorArchive x = readArchive(a), y = readArchive(b);
  const auto keys = y.keys(kModelEntryPrefix);
  if (x.keys(kModelEntryPrefix) != keys || keys.empty()) return ::testing::AssertionFailure() << "other model entries";
  for (const auto& key : keys) {
    const at::Tensor u = x.getTensor(key).to(at::kDouble), v = y.getTensor(key).to(at::kDouble);
    const double off = (u - v).abs().max().item<double>() / std::max(v.abs().max().item<double>(), 1e-12);
    if (!(off <= relative)) return ::testing::AssertionFailure() << key << " differs by " << off << " relative";
  }
  return ::testing::AssertionSuccess();
}

/// The 4-worker elastic run without a failure, once for the tests that compare with it.
const std::string& straightRun() {
  static const std::string dir = [] {
    std::string d = makeRunDir();
    const ProcessResult r = test::trainTiny(d, 4, "", {}, "--min-np 2");
    EXPECT_EQ(r.exitCode, 0) << r.err;
    return d;
  }();
  return dir;
}

/// `signal` ("KILL" or "TERM") to a worker of random rank at the end of a random step: the job ends
/// well, the others go on from that step quickly (the launcher's count of running workers closes
/// their generation, not the 5 s join window) and end with the parameters of the run without it.
/// Returns the run's standard error and sets `rank` and `step`.
std::string loseAWorker(const std::string& signal, int& rank, int& step) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  step = std::uniform_int_distribution<int>(1, 25)(rng);
  rank = std::uniform_int_distribution<int>(0, 3)(rng);
  SCOPED_TRACE("seed " + std::to_string(seed) + ": SIG" + signal + " to rank " + std::to_string(rank) +
               " at the end of step " + std::to_string(step));
  const std::string dir = makeRunDir();
  ProcessOptions fault;
  fault.setEnv = {{"LOCKSTEP_FAULT_KILL_AT_STEP", std::to_string(step)},
                  {"LOCKSTEP_FAULT_KILL_RANK", std::to_string(rank)},
                  {"LOCKSTEP_FAULT_SIGNAL", signal}};
  const ProcessResult r = test::trainTiny(dir, 4, "trainer.sample_log=samples", fault, "--min-np 2");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_TRUE(everySampleOnce(dir));
  // The worker completed its step: so did the others, and they go on from it.
  std::smatch m;
  const std::regex took("generation 2: 3 worker\\(s\\) \\(were 4\\) go on from step " + std::to_string(step) +
                        ", taken from rank \\d, in ([0-9.]+) s");
  EXPECT_TRUE(std::regex_search(r.err, m, took)) << r.err;
  if (!m.empty()) EXPECT_LT(std::stod(m[1].str()), 4.0) << r.err;
  // The same samples in the same steps at the same learning rate: the same parameters but for the
  // order of the sums (3 shares of a global batch are added in another order than 4 are).
  EXPECT_TRUE(sameModelWithin(test::ckptPath(dir, 26), test::ckptPath(straightRun(), 26), 1e-5));
  // Rank 0 writes the run's metrics; after its loss the new rank 0 takes them over: either way
  // they hold the new generation.
  {
    const auto run = nlohmann::json::parse(test::readAll(dir + "/runs/tiny/run.json"));
    EXPECT_EQ(run["status"], "finished");
    EXPECT_EQ(run["world_size"], 3);
    EXPECT_EQ(run["generations"].size(), 1u) << run.dump();
    EXPECT_EQ(run["generations"][0]["step"], step);
    EXPECT_EQ(run["generations"][0]["previous_world_size"], 4);
    EXPECT_NE(test::readAll(dir + "/runs/tiny/metrics.jsonl")
                  .find("{\"kind\":\"generation\",\"step\":" + std::to_string(step) + ","),
              std::string::npos);
  }
  return r.err;
}

TEST(ElasticTrainer, AKilledWorkerCostsNoStepAndTheOthersEndAsTheRunWithoutIt) {
  int rank = 0, step = 0;
  const std::string err = loseAWorker("KILL", rank, step);
  EXPECT_NE(err.find("rank " + std::to_string(rank) + " (pid"), std::string::npos) << err;
  EXPECT_NE(err.find("3 worker(s) go on (--min-np 2)"), std::string::npos) << err;
  EXPECT_TRUE(test::sameFinalParameters(err, 3)) << err;
}

// A preemption: SIGTERM to one worker makes it leave after its step, with exit code 0.
TEST(ElasticTrainer, ASigtermedWorkerLeavesAfterItsStepAndTheOthersLoseNothing) {
  int rank = 0, step = 0;
  const std::string err = loseAWorker("TERM", rank, step);
  EXPECT_NE(err.find("[" + std::to_string(rank) + "] [lockstep"), std::string::npos) << err;
  EXPECT_NE(err.find("SIGTERM: leaving the job after step " + std::to_string(step) + "; the others go on"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("killed by"), std::string::npos) << err;
  // Every worker reports its parameters; the three that trained to the end agree.
  auto checksums = test::finalChecksums(err);
  ASSERT_EQ(checksums.size(), 4u) << err;
  const std::string left = checksums[rank];
  checksums.erase(rank);
  for (const auto& [r, checksum] : checksums) EXPECT_EQ(checksum, checksums.begin()->second) << "rank " << r;
  EXPECT_NE(left, checksums.begin()->second) << "the worker that left trained to the end";
}

// With --max-restarts, the launcher starts a newcomer in the killed worker's slot: it joins the
// others at a step boundary, takes up their state over the communicator, and ends with their
// parameters bit for bit; the run ends as the one without the kill (to the order of the sums).
TEST(ElasticTrainer, ANewcomerTakesTheKilledWorkersSlotAndEndsEqualToTheOthers) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  const int step = std::uniform_int_distribution<int>(1, 6)(rng);
  const int rank = std::uniform_int_distribution<int>(0, 3)(rng);
  SCOPED_TRACE("seed " + std::to_string(seed) + ": SIGKILL to rank " + std::to_string(rank) + " at the end of step " +
               std::to_string(step));
  const std::string dir = makeRunDir();
  ProcessOptions fault;
  fault.setEnv = {{"LOCKSTEP_FAULT_KILL_AT_STEP", std::to_string(step)},
                  {"LOCKSTEP_FAULT_KILL_RANK", std::to_string(rank)}};
  // Slower steps (the same math), so that the newcomer starts before the run ends.
  const ProcessResult r =
      test::trainTiny(dir, 4, kSlowSteps + " trainer.sample_log=samples", fault, "--min-np 2 --max-restarts 1");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_TRUE(everySampleOnce(dir));
  EXPECT_NE(r.err.find("takes the slot of rank " + std::to_string(rank)), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("a newcomer to the running job: joining the workers at their next step"), std::string::npos)
      << r.err;
  std::smatch m;
  const std::regex joined("generation (\\d+): 4 worker\\(s\\) \\(were [34]\\) go on from step (\\d+)");
  ASSERT_TRUE(std::regex_search(r.err, m, joined)) << r.err;
  EXPECT_GE(std::stoi(m[2].str()), step);
  // The killed worker printed nothing at the end; its slot's newcomer did, and all four agree.
  EXPECT_TRUE(test::sameFinalParameters(r.err, 4)) << r.err;
  EXPECT_TRUE(sameModelWithin(test::ckptPath(dir, 26), test::ckptPath(straightRun(), 26), 1e-5));
  const auto run = nlohmann::json::parse(test::readAll(dir + "/runs/tiny/run.json"));
  EXPECT_EQ(run["status"], "finished");
  EXPECT_EQ(run["world_size"], 4);
  ASSERT_GE(run["generations"].size(), 1u) << run.dump();
  EXPECT_EQ(run["generations"].back()["world_size"], 4) << run.dump();
}

/// Seconds since midnight of a log line's "[lockstep HH:MM:SS.mmm" stamp found by `pattern`
/// (which must match up to the stamp's start); -1 when not found.
double stampOf(const std::string& log, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(log, m, std::regex(pattern + "\\[lockstep (\\d+):(\\d+):([0-9.]+)"))) return -1;
  return std::stoi(m[1].str()) * 3600.0 + std::stoi(m[2].str()) * 60.0 + std::stod(m[3].str());
}

// --host-discovery grows the job from 3 workers to 4 while it trains: the newcomer joins at the
// others' next step boundary (within two of the slowed rank's steps of its arrival), takes up their state and ends with
// their parameters bit for bit; the run ends as 3 workers without it would (to the order of the
// sums), at the global batch it started with.
TEST(ElasticTrainer, AWorkerTheDiscoveryScriptAddsJoinsAndEndsEqualToTheOthers) {
  const std::string straight = makeRunDir(), dir = makeRunDir();
  const ProcessResult a = test::trainTiny(straight, 3, "", {}, "--min-np 2");
  ASSERT_EQ(a.exitCode, 0) << a.err;
  const std::string discovery = "n=$(cat " + dir + "/calls 2>/dev/null || echo 0); n=$((n+1)); echo $n > " + dir +
                                "/calls; if [ $n -ge 3 ]; then echo localhost:4; else echo localhost:3; fi";
  const ProcessResult r =
      test::trainTiny(dir, 3, "testing.slow_rank=0 testing.slow_factor=30", {},
                      "--min-np 2 --max-np 4 --discovery-interval 0.5 --host-discovery " + test::quote(discovery));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.err.find("--host-discovery has 4 slot(s): a new worker (pid "), std::string::npos) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m,
                                std::regex("generation 2: 4 worker\\(s\\) \\(were 3\\) go on from step "
                                           "(\\d+), taken from rank 0, in [0-9.]+ s; global batch 48")))
      << r.err;
  const double arrival = stampOf(r.err, "\\[3\\] (?=\\[lockstep [0-9:.]+ r3 INFO\\] a newcomer)");
  const double formed = stampOf(r.err, "\\[0\\] (?=\\[lockstep [0-9:.]+ r0 INFO\\] generation 2)");
  ASSERT_GT(arrival, 0) << r.err;
  ASSERT_GT(formed, 0) << r.err;
  // At the step boundary after its arrival: within two of rank 0's slowed steps (about a second each).
  EXPECT_LT(formed - arrival, 3.0) << r.err;
  EXPECT_TRUE(test::sameFinalParameters(r.err, 4)) << r.err;
  EXPECT_TRUE(sameModelWithin(test::ckptPath(dir, 26), test::ckptPath(straight, 26), 1e-5));
  const auto run = nlohmann::json::parse(test::readAll(dir + "/runs/tiny/run.json"));
  EXPECT_EQ(run["world_size"], 4);
  EXPECT_EQ(run["generations"].back()["previous_world_size"], 3) << run.dump();
}

// A worker started by hand as a newcomer into the running job (the launcher's variables, its port
// and token): with another model it is refused by the fingerprint, with another token by the
// store; the job trains on as if neither came, bit for bit.
TEST(ElasticTrainer, AJoinerWithAnotherModelOrWithoutTheTokenIsRefusedAndChangesNothing) {
  const std::string dir = makeRunDir();
  const std::string token = "0123456789abcdef0123456789abcdef";
  const std::string bin = test::quote(test::lockstepBin());
  const std::string joiner =
      "LOCKSTEP_ELASTIC_NEWCOMER=1 LOCKSTEP_RANK=3 LOCKSTEP_WORLD_SIZE=4 LOCKSTEP_MASTER_ADDR=127.0.0.1 "
      "LOCKSTEP_MASTER_PORT=$PORT LOCKSTEP_AGENT_STORE=1 LOCKSTEP_MIN_NP=2 LOCKSTEP_MAX_NP=4 LOCKSTEP_BACKEND=gloo "
      "LOCKSTEP_COMM_TIMEOUT=20 ";
  const std::string script =
      "cd " + test::quote(dir) +
      "; PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); "
      "print(s.getsockname()[1])')"
      "; (LOCKSTEP_JOB_TOKEN=" +
      token + " " + bin + " run -np 4 --min-np 2 --comm-timeout 60 --master-port $PORT -- " + bin +
      " train tiny.yaml testing.slow_rank=0 testing.slow_factor=40 > job.out 2> job.err; echo $? > job.rc) &"
      " for i in $(seq 600); do grep -q 'step 2/26' " +
      test::quote(dir) +
      "/job.err 2>/dev/null && break; sleep 0.1; done;"
      " mkdir -p other; cd other; cp ../tiny.yaml .; " +
      joiner + "LOCKSTEP_JOB_TOKEN=" + token + " " + bin +
      " train tiny.yaml model.hidden=24; echo \"model joiner exit $?\";"
      " " +
      joiner + "LOCKSTEP_JOB_TOKEN=ffffffffffffffffffffffffffffffff " + bin +
      " train tiny.yaml; echo \"token joiner exit $?\"; wait";
  ProcessOptions o;
  o.timeout = std::chrono::seconds(240);
  const ProcessResult r = test::runProcess({"sh", "-c", script}, o);
  const std::string jobErr = test::readAll(dir + "/job.err");
  EXPECT_EQ(test::readAll(dir + "/job.rc"), "0\n") << jobErr;
  EXPECT_NE(r.out.find("model joiner exit 2"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("this newcomer does not fit the running elastic job: the job has 'parameter "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("token joiner exit 1"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("refused this process: wrong job token"), std::string::npos) << r.err;
  // Nobody joined: no generation after the first, and the parameters of the run without joiners.
  EXPECT_EQ(jobErr.find("generation 2"), std::string::npos) << jobErr;
  EXPECT_TRUE(sameModelWithin(test::ckptPath(dir, 26), test::ckptPath(straightRun(), 26), 0.0));
}

TEST(ElasticTrainer, WithoutAFailureItTrainsAsAFixedWorldBitForBit) {
  const std::string fixed = makeRunDir(), elastic = makeRunDir();
  const ProcessResult a = test::trainTiny(fixed, 4, "", {}, "--backend gloo");
  ASSERT_EQ(a.exitCode, 0) << a.err;
  const ProcessResult b = test::trainTiny(elastic, 4, "", {}, "--min-np 3");
  ASSERT_EQ(b.exitCode, 0) << b.err;
  EXPECT_NE(b.err.find("elastic: goes on with 3 or more worker(s) at this global batch"), std::string::npos) << b.err;
  EXPECT_EQ(test::finalChecksums(b.err), test::finalChecksums(a.err));
  EXPECT_TRUE(test::readAll(test::ckptPath(fixed, 26)) == test::readAll(test::ckptPath(elastic, 26)));
}

TEST(ElasticTrainer, SettingsWhoseStateASurvivorCannotHandOnAreRefused) {
  const std::string dir = makeRunDir();
  for (const std::string setting : {"strategy.type=zero1", "ddp.compression=powersgd", "schedule.type=async_ps"}) {
    SCOPED_TRACE(setting);
    const ProcessResult r = test::trainTiny(dir, 2, setting, {}, "--min-np 2");
    EXPECT_NE(r.exitCode, 0) << r.err;
    std::string named = setting;
    std::replace(named.begin(), named.end(), '=', ' ');
    EXPECT_NE(r.err.find(named + ": an elastic run (lockstep run --min-np) keeps the whole training state"),
              std::string::npos)
        << r.err;
  }
}

}  // namespace
}  // namespace lockstep
