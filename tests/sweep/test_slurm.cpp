// lockstep under a real one-host Slurm (tests/support/slurm_cluster.sh starts slurmctld, slurmd and
// munged in a temporary directory and stops them after the suite): `lockstep submit` runs a 2-task
// training through sbatch + srun; `lockstep sweep --scheduler slurm` submits one batch job per
// trial (a failing trial recorded), runs job steps inside an allocation, and cancels every job on
// SIGINT; without Slurm's commands it refuses to start. When the cluster cannot start the tests fail
// naming why (never a silent skip).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/expect.h"
#include "support/subprocess.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

const std::string kBase = std::string(LOCKSTEP_SOURCE_DIR) + "/configs/mlp-bench.yaml";
const std::string kCluster = std::string(LOCKSTEP_SOURCE_DIR) + "/tests/support/slurm_cluster.sh";

using test::quote;
using test::readFile;

class Slurm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) return;
    dir_ = new std::string(test::makeTempDir());
    auto r = test::runProcess({"bash", kCluster, "start", *dir_});
    if (r.exitCode != 0) startError_ = new std::string(r.out + r.err);
  }
  static void TearDownTestSuite() {
    if (dir_ != nullptr) test::runProcess({"bash", kCluster, "stop", *dir_});
  }
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root: the test Slurm's daemons run as root";
    ASSERT_EQ(startError_, nullptr) << "the one-host Slurm did not start:\n" << *startError_;
  }
  /// `sh -c SCRIPT` with this cluster's SLURM_CONF.
  static test::ProcessResult shell(const std::string& script, int seconds = 180) {
    test::ProcessOptions o;
    o.setEnv["SLURM_CONF"] = *dir_ + "/slurm.conf";
    o.timeout = std::chrono::seconds(seconds);
    return test::runProcess({"sh", "-c", script}, o);
  }
  static std::string spec(const std::string& dir, const std::string& steps, const std::string& space) {
    const std::string path = dir + "/spec.yaml";
    std::ofstream(path) << "base: " << kBase << "\noverrides: {trainer.max_steps: " << steps
                        << ", trainer.validate: true, model.hidden_sizes: [32], monitor.trace_steps: 0}\n"
                        << "space: " << space << "\nobjective: {metric: validation_loss, mode: min}\nalgorithm: grid\n";
    return path;
  }

  static std::string* dir_;
  static std::string* startError_;
};

std::string* Slurm::dir_ = nullptr;
std::string* Slurm::startError_ = nullptr;

TEST_F(Slurm, SubmitRunsATwoTaskTrainingThroughSbatchAndSrun) {
  const std::string dir = test::makeTempDir();
  auto r = shell("cd " + quote(dir) + " && " + quote(test::lockstepBin()) +
                 " submit --ntasks-per-node 2 --cpus-per-task 1 --wait -- lockstep train " + quote(kBase) +
                 " 'model.hidden_sizes=[32]' trainer.max_steps=20 monitor.dir=off checkpoint.dir=off");
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_HAS(r.out, "ended with exit code 0");
  const std::string script = readFile(dir + "/runs/mlp-bench/job.sbatch");
  EXPECT_HAS(script, "#SBATCH --ntasks-per-node=2");
  EXPECT_HAS(script, "exec srun --kill-on-bad-exit=1 " + test::lockstepBin() + " train");
  std::string output;
  for (const auto& e : fs::directory_iterator(dir + "/runs/mlp-bench")) {
    if (e.path().filename().string().rfind("slurm-", 0) == 0) output = readFile(e.path().string());
  }
  EXPECT_HAS(output, "training on 2 worker(s)");
  EXPECT_HAS(output, "done: 20 steps");
}

TEST_F(Slurm, SweepSubmitsOneBatchJobPerTrialAndRecordsAFailedOne) {
  const std::string dir = test::makeTempDir();
  const std::string s = spec(dir, "40", "{optimizer.lr: [0.01], data.root: ['', /nonexistent-fashion]}");
  auto r =
      shell(quote(test::lockstepBin()) + " sweep " + quote(s) + " -j 2 --scheduler slurm --dir " + quote(dir + "/sw"));
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_HAS(r.out, "on slurm (one sbatch job per trial)");
  EXPECT_HAS(r.out, "2 trials, 1 done, 1 failed");
  const std::string journal = readFile(dir + "/sw/trials.jsonl");
  EXPECT_HAS(journal, "\"command\":\"sbatch " + dir + "/sw/trial-0000/job.sbatch  # job ");
  EXPECT_HAS(journal, "/nonexistent-fashion/train-images-idx3-ubyte.gz not found");
  EXPECT_EQ(journal.find("\"slurm_job\":\"\""), std::string::npos) << journal;
  EXPECT_TRUE(fs::exists(dir + "/sw/trial-0000/run.json"));
  EXPECT_TRUE(fs::exists(dir + "/sw/best.yaml"));
}

TEST_F(Slurm, SweepInsideAnAllocationRunsOneJobStepPerTrial) {
  const std::string dir = test::makeTempDir();
  const std::string s = spec(dir, "40", "{optimizer.lr: [0.01, 0.05]}");
  std::ofstream(dir + "/job.sh") << "#!/bin/bash\n#SBATCH --ntasks=2\n#SBATCH --output=" << dir << "/job.out\n"
                                 << quote(test::lockstepBin()) << " sweep " << quote(s)
                                 << " -j 2 --scheduler slurm --dir " << quote(dir + "/sw") << "\n";
  auto r = shell("sbatch --wait " + quote(dir + "/job.sh"));
  const std::string out = readFile(dir + "/job.out");
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err << out;
  EXPECT_HAS(out, "on slurm (job steps in allocation");
  EXPECT_HAS(out, "2 trials, 2 done, 0 failed");
  EXPECT_HAS(readFile(dir + "/sw/trials.jsonl"), "\"command\":\"srun --exclusive --kill-on-bad-exit=1 -n 1 -c 1");
}

TEST_F(Slurm, SigintCancelsEveryJobOfTheSweep) {
  const std::string dir = test::makeTempDir();
  const std::string s = spec(dir, "100000000", "{optimizer.lr: [0.01, 0.05]}");
  const std::string script =
      quote(test::lockstepBin()) + " sweep " + quote(s) + " -j 2 --scheduler slurm --dir " + quote(dir + "/sw") +
      " > " + quote(dir + "/out.txt") +
      " 2>&1 & pid=$!; "
      "until [ \"$(squeue -h -t RUNNING -n sw-trial-0000,sw-trial-0001 | wc -l)\" -ge 2 ]; do sleep 0.2; done; "
      "kill -INT $pid; wait $pid; echo exit=$?; "
      "for i in $(seq 1 100); do [ -z \"$(squeue -h -n sw-trial-0000,sw-trial-0001)\" ] && break; sleep 0.2; done; "
      "squeue -h -n sw-trial-0000,sw-trial-0001 | wc -l | sed 's/^/jobs left: /'";
  auto r = shell(script, 240);
  EXPECT_HAS(r.out, "exit=130");
  EXPECT_HAS(r.out, "jobs left: 0");
  EXPECT_HAS(readFile(dir + "/sw/trials.jsonl"), "\"status\":\"stopped\"");
}

TEST_F(Slurm, WithoutSlurmCommandsTheSweepRefusesToStart) {
  const std::string dir = test::makeTempDir();
  const std::string s = spec(dir, "40", "{optimizer.lr: [0.01]}");
  auto r = shell("PATH=/nonexistent " + quote(test::lockstepBin()) + " sweep " + quote(s) +
                 " --scheduler slurm --dir " + quote(dir + "/sw"));
  EXPECT_EQ(r.exitCode, 2) << r.out << r.err;
  EXPECT_HAS(r.err, "--scheduler slurm: Slurm's sbatch is not on PATH");
  EXPECT_FALSE(fs::exists(dir + "/sw"));
}

}  // namespace
}  // namespace lockstep
