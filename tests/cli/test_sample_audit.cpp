// trainer.sample_log's writer (train/sample_log.h) and `lockstep samples`' audit of it
// (cli/sample_audit.h): runs of one generation, of a lost worker, of a restart, and the ways a
// run can train a sample twice or not at all.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "cli/sample_audit.h"
#include "lockstep/common/error.h"
#include "train/sample_log.h"

namespace {

using lockstep::cli::auditSampleLog;
using lockstep::cli::SampleAudit;
using lockstep::detail::SampleLog;

// 10 samples, global batch 4: 2 steps per epoch (2 samples of each epoch in none), 4 steps.
const SampleLog::Run kRun{10, 4, 2, 4, 1};

/// The samples of `step` (from 1) as a world-independent plan gives them: a rotation per epoch.
std::vector<int64_t> stepSamples(int64_t step) {
  const int64_t epoch = (step - 1) / 2;
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 4; ++i) ids.push_back((3 * epoch + ((step - 1) % 2) * 4 + i) % 10);
  return ids;
}

/// Rank `rank`'s share of `step` among `world` (contiguous, as GlobalBatchPlan's).
std::vector<int64_t> share(int64_t step, int rank, int world) {
  const auto all = stepSamples(step);
  std::vector<int64_t> mine;
  for (size_t i = 0; i < all.size(); ++i) {
    if (static_cast<int>(i * world / all.size()) == rank) mine.push_back(all[i]);
  }
  return mine;
}

class SampleAuditTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("lockstep_sample_audit_" + std::to_string(::getpid()) + "_" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  /// Steps `first..last` of generation `gen` on every rank of `world`; `done`: each completed.
  void train(SampleLog& log, int rank, int world, int64_t first, int64_t last, bool done = true) {
    for (int64_t s = first; s <= last; ++s) {
      log.micro((s - 1) / 2, s, 0, share(s, rank, world));
      if (done) log.stepDone(s);
    }
  }
  std::unique_ptr<SampleLog> open(int64_t attempt = 0) {
    return std::make_unique<SampleLog>(dir_.string(), kRun, attempt);
  }

  std::filesystem::path dir_;
};

TEST_F(SampleAuditTest, AWholeRunOfTwoRanksTrainsEverySampleOfEachEpochOnce) {
  for (int rank = 0; rank < 2; ++rank) {
    auto log = open();
    log->generation(1, rank, 2, 0);
    train(*log, rank, 2, 1, 4);
  }
  const SampleAudit a = auditSampleLog(dir_.string());
  ASSERT_TRUE(a.ok()) << lockstep::cli::formatSampleAudit(a);
  EXPECT_EQ(a.keptSteps, 4);
  ASSERT_EQ(a.epochs.size(), 2u);
  EXPECT_EQ(a.epochs[0].trainedOnce, 8);
  EXPECT_EQ(a.epochs[0].leftOut, 2);
  EXPECT_EQ(a.redoneSteps, 0);
  EXPECT_NE(lockstep::cli::formatSampleAudit(a).find("OK: every sample"), std::string::npos);
}

TEST_F(SampleAuditTest, ALostRanksStepInFlightIsTrainedAgainByTheNextGenerationOnly) {
  auto r0 = open();
  auto r1 = open();
  r0->generation(1, 0, 2, 0);
  r1->generation(1, 1, 2, 0);
  train(*r0, 0, 2, 1, 2);
  train(*r1, 1, 2, 1, 2);
  train(*r0, 0, 2, 3, 3, /*done=*/false);  // rank 1 dies in step 3
  train(*r1, 1, 2, 3, 3, /*done=*/false);
  r0->generation(2, 0, 1, 2);
  train(*r0, 0, 1, 3, 4);
  const SampleAudit a = auditSampleLog(dir_.string());
  ASSERT_TRUE(a.ok()) << lockstep::cli::formatSampleAudit(a);
  EXPECT_EQ(a.generations, 2);
  EXPECT_EQ(a.redoneSteps, 1);
  EXPECT_EQ(a.rolledBackSteps, 0);
  EXPECT_EQ(a.epochs[1].trainedOnce, 8);
}

TEST_F(SampleAuditTest, ARestartReplacesTheStepsAfterItsCheckpoint) {
  {
    auto log = open(0);
    log->generation(1, 0, 1, 0);
    train(*log, 0, 1, 1, 3);
  }
  auto log = open(1);
  log->generation(1, 0, 1, 2);  // resumed from the checkpoint of step 2
  train(*log, 0, 1, 3, 4);
  const SampleAudit a = auditSampleLog(dir_.string());
  ASSERT_TRUE(a.ok()) << lockstep::cli::formatSampleAudit(a);
  EXPECT_EQ(a.rolledBackSteps, 1);
  EXPECT_EQ(a.keptSteps, 4);
}

TEST_F(SampleAuditTest, ANewWorldThatTakesOtherSamplesIsCaughtAsDoubled) {
  auto log = open();
  log->generation(1, 0, 2, 0);
  train(*log, 0, 2, 1, 1);
  auto other = open();
  other->generation(1, 1, 2, 0);
  train(*other, 1, 2, 1, 1);
  log->generation(2, 0, 1, 1);
  log->micro(0, 2, 0, stepSamples(1));  // step 1's samples again, as a world-dependent sampler would
  log->stepDone(2);
  const SampleAudit a = auditSampleLog(dir_.string());
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.epochs[0].doubled, 4);
  EXPECT_NE(a.problems.back().find("epoch 1: 4 sample(s) trained more than once"), std::string::npos)
      << a.problems.back();
}

TEST_F(SampleAuditTest, AMissingShareAndAMissingStepAreNamed) {
  auto r0 = open();
  auto r1 = open();
  r0->generation(1, 0, 2, 0);
  r1->generation(1, 1, 2, 0);
  train(*r0, 0, 2, 1, 1);      // rank 1's share of step 1 is not logged
  r0->generation(2, 0, 1, 2);  // goes on from step 2, which no generation trained
  train(*r0, 0, 1, 3, 4);
  const SampleAudit a = auditSampleLog(dir_.string());
  ASSERT_FALSE(a.ok());
  const std::string text = lockstep::cli::formatSampleAudit(a);
  EXPECT_NE(text.find("step 1 (generation 1 of attempt 0, 2 worker(s)): rank 1's micro-batch 0 is not in the log"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("epoch 1: 1 step(s) kept by no generation: 2"), std::string::npos) << text;
}

TEST_F(SampleAuditTest, ALastLineCutShortIsSkippedAndGarbageElsewhereIsNamed) {
  {
    auto log = open();
    log->generation(1, 0, 1, 0);
    train(*log, 0, 1, 1, 4);
    std::ofstream(log->path(), std::ios::app) << R"({"kind":"micro","attempt":0,"ge)";
  }
  EXPECT_TRUE(auditSampleLog(dir_.string()).ok());
  const auto file = std::filesystem::directory_iterator(dir_)->path();
  std::ofstream(file, std::ios::app) << "\nnot json\n{\"kind\":\"done\"}\n";
  try {
    auditSampleLog(dir_.string());
    FAIL() << "garbage was accepted";
  } catch (const lockstep::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(file.string() + ":"), std::string::npos) << e.what();
  }
  EXPECT_THROW(auditSampleLog((dir_ / "nothing").string()), lockstep::ConfigError);
}

}  // namespace
