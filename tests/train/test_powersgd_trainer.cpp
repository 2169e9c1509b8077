// `lockstep train ... ddp.compression=powersgd` under the real launcher: a run
// killed mid-way and resumed ends with the same checkpoint, to the bit, as an
// uninterrupted one (PowerSGD's step counts, Q and every rank's error feedback
// travel in the checkpoint), over Gloo with DDP and over MPI with zero1, and the
// end-of-run line reports the bytes saved.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/replicas.h"
#include "support/subprocess.h"
#include "support/tiny_config.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;
using test::ProcessOptions;
using test::ProcessResult;

// The tiny LSTM's 64 x 16 gate matrices are compressed at rank 2 from the 4th synchronised step.
const std::string kConfig =
    test::tinyNamesConfig("  max_steps: 20\n  log_every: 10\n",
                          "checkpoint:\n  dir: ckpt\n  every: 5\n  keep_last: 4\n"
                          "ddp:\n  compression: powersgd\n  powersgd_rank: 2\n  powersgd_start_step: 3\n");

std::string makeRunDir() {
  std::string dir = test::makeTempDir();
  std::ofstream(dir + "/tiny.yaml") << kConfig;
  return dir;
}

ProcessResult train(const std::string& dir, const std::string& runArgs, const std::string& args,
                    ProcessOptions o = {}) {
  return test::trainTiny(dir, 2, args, std::move(o), runArgs);
}

using test::readAll;

std::string ckpt(const std::string& dir, int step) { return test::ckptPath(dir, step); }

void expectResumeIsBitIdentical(const std::string& runArgs, const std::string& args) {
  std::string straight = makeRunDir();
  auto a = train(straight, runArgs, args);
  ASSERT_EQ(a.exitCode, 0) << a.err;
  EXPECT_TRUE(test::sameFinalParameters(a.err, 2)) << a.err;
  EXPECT_NE(a.err.find("powersgd compression (rank 2 from synchronised step 3)"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("powersgd_rank2: "), std::string::npos) << "no bytes line: " << a.err;
  EXPECT_NE(a.err.find("x fewer bytes)"), std::string::npos) << a.err;
  ASSERT_TRUE(fs::exists(ckpt(straight, 20))) << a.err;

  std::string interrupted = makeRunDir();
  ProcessOptions crash;
  crash.setEnv = {{"LOCKSTEP_FAULT_CRASH_AFTER_STEP", "10"}};
  auto b1 = train(interrupted, runArgs, args, crash);
  EXPECT_NE(b1.exitCode, 0) << b1.err;
  ASSERT_TRUE(fs::exists(ckpt(interrupted, 10))) << b1.err;
  ASSERT_FALSE(fs::exists(ckpt(interrupted, 15)));
  auto b2 = train(interrupted, runArgs, args);
  ASSERT_EQ(b2.exitCode, 0) << b2.err;
  EXPECT_EQ(test::finalChecksums(b2.err), test::finalChecksums(a.err)) << "every replica as in the uninterrupted run";
  EXPECT_NE(b2.err.find("resumed from ckpt/step-000000010.ckpt: step 10"), std::string::npos) << b2.err;
  EXPECT_EQ(b2.err.find("holds no PowerSGD state"), std::string::npos) << b2.err;
  EXPECT_TRUE(readAll(ckpt(straight, 15)) == readAll(ckpt(interrupted, 15)))
      << "the resumed run diverged from the uninterrupted one within 5 steps";
  EXPECT_TRUE(readAll(ckpt(straight, 20)) == readAll(ckpt(interrupted, 20)));
}

TEST(PowerSgdTrainer, ResumeIsBitIdenticalOverGloo) { expectResumeIsBitIdentical("", ""); }

TEST(PowerSgdTrainer, ResumeIsBitIdenticalOverMpiWithZero1) {
  expectResumeIsBitIdentical("--backend mpi", "strategy.type=zero1");
}

}  // namespace
}  // namespace lockstep
