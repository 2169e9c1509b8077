// Pipeline stages as a user runs them: `lockstep run -np 4 -- lockstep train cfg parallel.pipeline=2`
// (2 pipelines x 2 stages of the convnet on the real Fashion-MNIST) learns, draws each stage's
// micro-batches in the timeline, and writes a checkpoint an unsplit run continues; a bad
// parallel.pipeline fails before training with a message naming it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "support/expect.h"
#include "support/replicas.h"
#include "support/subprocess.h"
#include "support/tiny_config.h"

namespace lockstep {
namespace {

std::string quote(const std::string& s) { return "'" + s + "'"; }

test::ProcessResult lockstep(const std::string& dir, int np, const std::string& config, const std::string& args) {
  std::string bin = test::lockstepBin();
  std::string cmd = "cd " + quote(dir) + " && exec " + quote(bin) + " run -np " + std::to_string(np) +
                    " --comm-timeout 60 -- " + quote(bin) + " train " + quote(config) + " " + args;
  test::ProcessOptions o;
  o.timeout = std::chrono::seconds(280);
  return test::runProcess({"sh", "-c", cmd}, o);
}

std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(PipelineMultiprocess, TwoPipelinesOfTwoStagesLearnFashionMnist) {
  const std::string dir = test::makeTempDir();
  const std::string config = std::string(LOCKSTEP_SOURCE_DIR) + "/configs/fashion_convnet.yaml";
  auto r = lockstep(dir, 4, config,
                    "parallel.pipeline=2 parallel.microbatches=4 trainer.max_steps=40 trainer.log_every=20 "
                    "checkpoint.dir=ckpt monitor.dir=run monitor.trace_steps=3 optimizer.lr=0.003");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  // Each rank logs the checksum of its whole model object. A stage trains its own layers, and rank 0
  // also holds the last stage's after gathering the checkpoint, so the last stage's replicas (ranks 1
  // and 3, one per pipeline) are the ones to compare: DDP across the pipelines keeps them equal.
  const auto checksums = test::finalChecksums(r.err);
  ASSERT_EQ(checksums.size(), 4u) << r.err;
  EXPECT_EQ(checksums.at(1), checksums.at(3)) << r.err;
  EXPECT_NE(checksums.at(1), checksums.at(2)) << "stage 0's rank holds untrained last-stage layers";
  EXPECT_HAS(r.err, "pipeline of 2 stages x 4 micro-batches (1f1b)");
  EXPECT_HAS(r.err, "2 pipelines, each stage's gradients averaged by DDP");
  EXPECT_HAS(r.err, "global batch 256");  // 128 per pipeline x 2 pipelines
  EXPECT_HAS(r.err, "pipeline bubble: the busiest stage idle");
  auto pos = r.out.find("validation accuracy ");
  ASSERT_NE(pos, std::string::npos) << r.out;
  EXPECT_GT(std::stod(r.out.substr(pos + 20)), 50.0) << r.out;

  // Each stage's trace draws every micro-batch's forward and backward.
  for (int rank : {0, 1}) {
    std::string trace = readAll(dir + "/run/timeline/rank" + std::to_string(rank) + ".trace.json");
    for (const char* name : {"\"forward 0\"", "\"forward 3\"", "\"backward 0\"", "\"backward 3\""}) {
      EXPECT_HAS(trace, name);
    }
  }

  // The checkpoint is the unsplit model's: one worker continues it.
  auto unsplit = lockstep(dir, 1, config,
                          "checkpoint.resume=ckpt/step-000000040.ckpt checkpoint.dir=ckpt1 trainer.max_steps=42 "
                          "monitor.dir=off");
  ASSERT_EQ(unsplit.exitCode, 0) << unsplit.err;
  EXPECT_HAS(unsplit.err, "resumed from ckpt/step-000000040.ckpt: step 40");
}

TEST(PipelineMultiprocess, BadPipelineSettingsFailBeforeTraining) {
  const std::string dir = test::makeTempDir();
  const std::string fashion = std::string(LOCKSTEP_SOURCE_DIR) + "/configs/fashion_convnet.yaml";
  auto notDividing = lockstep(dir, 2, fashion, "parallel.pipeline=3 checkpoint.dir=off monitor.dir=off");
  EXPECT_NE(notDividing.exitCode, 0);
  EXPECT_HAS(notDividing.err, "parallel.pipeline 3 does not divide the 2 worker(s)");
  EXPECT_EQ(notDividing.err.find("step 1/"), std::string::npos) << notDividing.err;

  auto tooMany = lockstep(dir, 1, fashion, "parallel.pipeline=0 checkpoint.dir=off monitor.dir=off");
  EXPECT_NE(tooMany.exitCode, 0);
  EXPECT_HAS(tooMany.err, "parallel.pipeline must be at least 1");

  std::ofstream(dir + "/tiny.yaml") << test::tinyNamesConfig("  max_steps: 4\n", "");
  auto lstm = lockstep(dir, 2, dir + "/tiny.yaml", "parallel.pipeline=2 checkpoint.dir=off monitor.dir=off");
  EXPECT_NE(lstm.exitCode, 0);
  EXPECT_HAS(lstm.err, "parallel.pipeline 2: model.type charlstm cannot be split into pipeline stages");
}

}  // namespace
}  // namespace lockstep
