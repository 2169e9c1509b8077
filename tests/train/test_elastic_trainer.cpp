// `lockstep train` as an elastic job (`lockstep run --min-np`, docs/elastic.md): a worker killed at
// a random step costs no step, and the others end with the parameters of the run without the
// kill; without a failure an elastic run trains as a fixed world does, bit for bit; the settings
// whose state a survivor could not hand on are refused by name.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <regex>
#include <string>

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

TEST(ElasticTrainer, AKilledWorkerCostsNoStepAndTheOthersEndAsTheRunWithoutIt) {
  const std::string straight = makeRunDir();
  const ProcessResult a = test::trainTiny(straight, 4, "", {}, "--min-np 2");
  ASSERT_EQ(a.exitCode, 0) << a.err;

  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  const int step = std::uniform_int_distribution<int>(1, 25)(rng);
  const int rank = std::uniform_int_distribution<int>(0, 3)(rng);
  SCOPED_TRACE("seed " + std::to_string(seed) + ": rank " + std::to_string(rank) + " killed at the end of step " +
               std::to_string(step));
  const std::string killed = makeRunDir();
  ProcessOptions kill;
  kill.setEnv = {{"LOCKSTEP_FAULT_KILL_AT_STEP", std::to_string(step)},
                 {"LOCKSTEP_FAULT_KILL_RANK", std::to_string(rank)}};
  const ProcessResult b = test::trainTiny(killed, 4, "", kill, "--min-np 2");
  ASSERT_EQ(b.exitCode, 0) << b.err;
  EXPECT_NE(b.err.find("rank " + std::to_string(rank) + " (pid"), std::string::npos) << b.err;
  EXPECT_NE(b.err.find("3 worker(s) go on (--min-np 2)"), std::string::npos) << b.err;
  // The killed worker completed its step: so did the others, and they go on from it. They close
  // their generation when the launcher's count of running workers arrived, not after the join
  // window (5 s).
  std::smatch m;
  const std::regex took("generation 1: 3 worker\\(s\\) \\(were 4\\) go on from step " + std::to_string(step) +
                        ", taken from rank \\d, in ([0-9.]+) s");
  ASSERT_TRUE(std::regex_search(b.err, m, took)) << b.err;
  EXPECT_LT(std::stod(m[1].str()), 4.0) << b.err;
  EXPECT_TRUE(test::sameFinalParameters(b.err, 3)) << b.err;
  // The same samples in the same steps at the same learning rate: the same parameters but for the
  // order of the sums (3 shares of a global batch are added in another order than 4 are).
  EXPECT_TRUE(sameModelWithin(test::ckptPath(killed, 26), test::ckptPath(straight, 26), 1e-5));
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
