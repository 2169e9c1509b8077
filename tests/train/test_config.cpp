#include <gtest/gtest.h>

#include <fstream>

#include "lockstep/common/error.h"
#include "lockstep/optim/lr_scaling.h"
#include "lockstep/train/config.h"
#include "support/subprocess.h"

namespace lockstep {
namespace {

std::string writeConfig(const std::string& text) {
  std::string path = test::makeTempDir() + "/c.yaml";
  std::ofstream(path) << text;
  return path;
}

void expectConfigError(const std::string& file, const std::vector<std::string>& overrides, const std::string& needle) {
  try {
    loadTrainConfig(file, overrides);
    ADD_FAILURE() << "expected a ConfigError containing: " << needle;
  } catch (const ConfigError& e) { EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what(); }
}

TEST(TrainConfig, FileThenOverrides) {
  auto path = writeConfig(
      "trainer:\n  batch_size: 64\n  epochs: 3\noptimizer:\n  type: sgd\n  lr: 0.5\n"
      "data:\n  sources: [a.csv, faker]\n  csv_column: Name\n");
  auto c = loadTrainConfig(path, {"trainer.batch_size=8", "ddp.compression=bf16", "data.sources=[x.txt]",
                                  "trainer.validate=false", "strategy.type=zero1"});
  EXPECT_EQ(c.trainer.batchSize, 8);
  EXPECT_EQ(c.trainer.epochs, 3);
  EXPECT_EQ(c.trainer.optimizer.type, OptimizerType::kSgd);
  EXPECT_DOUBLE_EQ(c.trainer.optimizer.lr, 0.5);
  EXPECT_EQ(c.trainer.ddp.compression, GradCompression::kBf16);
  EXPECT_EQ(c.trainer.strategy, StrategyType::kZero1);
  auto p = loadTrainConfig(path, {"ddp.compression=powersgd", "ddp.powersgd_rank=2", "ddp.powersgd_start_step=0",
                                  "ddp.powersgd_warm_start=false"});
  EXPECT_EQ(p.trainer.ddp.compression, GradCompression::kPowerSgd);
  EXPECT_EQ(p.trainer.ddp.powerSgd.rank, 2);
  EXPECT_EQ(p.trainer.ddp.powerSgd.startStep, 0);
  EXPECT_FALSE(p.trainer.ddp.powerSgd.warmStart);
  EXPECT_TRUE(p.trainer.ddp.powerSgd.errorFeedback);
  EXPECT_EQ(c.data.sources, std::vector<std::string>{"x.txt"});
  EXPECT_EQ(c.data.csvColumn, "Name");
  EXPECT_FALSE(c.trainer.validate);
  EXPECT_EQ(c.model.hidden, 128);  // untouched default
}

TEST(TrainConfig, ResolvedYamlLoadsBackToTheSameValues) {
  auto c = loadTrainConfig("", {"trainer.batch_size=8", "optimizer.lr=0.25"});
  auto again = loadTrainConfig(writeConfig(toYaml(c)), {});
  EXPECT_EQ(toYaml(again), toYaml(c));
  EXPECT_EQ(again.trainer.batchSize, 8);
}

TEST(TrainConfig, TheScheduleIsApartFromTheStrategy) {
  EXPECT_EQ(loadTrainConfig("", {}).trainer.schedule, Schedule::kSync);
  auto c = loadTrainConfig("", {"schedule.type=async_ps", "strategy.type=zero1"});
  EXPECT_EQ(c.trainer.schedule, Schedule::kAsyncPs);
  EXPECT_EQ(c.trainer.strategy, StrategyType::kZero1);
  // The schedule's old spelling, for one release: the schedule, the strategy left as it was.
  auto old = loadTrainConfig("", {"strategy.type=async_ps"});
  EXPECT_EQ(old.trainer.schedule, Schedule::kAsyncPs);
  EXPECT_EQ(old.trainer.strategy, StrategyType::kDdp);
  EXPECT_NE(toYaml(c).find("schedule:\n  type: async_ps"), std::string::npos) << toYaml(c);
}

TEST(TrainConfig, UnknownKeysAndWrongTypesNameThePath) {
  auto typo = writeConfig("trainer:\n  batchsize: 64\n");
  expectConfigError(typo, {}, typo + ": unknown key 'trainer.batchsize'; known keys here: trainer.epochs");
  auto section = writeConfig("trainr:\n  epochs: 1\n");
  expectConfigError(section, {}, "unknown key 'trainr'");
  auto wrongType = writeConfig("trainer:\n  batch_size: lots\n");
  expectConfigError(wrongType, {}, "key 'trainer.batch_size' expects an integer, got 'lots'");
  expectConfigError("", {"optimizer.lr=fast"}, "command line: key 'optimizer.lr' expects a number, got 'fast'");
  expectConfigError("", {"optimizer.learning_rate=1"}, "command line: unknown key 'optimizer.learning_rate'");
  expectConfigError("", {"trainer.batch_size"}, "must look like key.path=value");
  expectConfigError("", {"trainer.batch_size=0"}, "trainer.batch_size must be positive, got 0");
  expectConfigError("", {"optimizer.type=lion"}, "optimizer.type 'lion' is unknown");
  expectConfigError("", {"strategy.type=zero9"},
                    "strategy.type 'zero9' is unknown; expected ddp, zero1, zero2 or zero3");
  expectConfigError("", {"schedule.type=local"}, "schedule.type 'local' is unknown; expected sync or async_ps");
  expectConfigError("", {"trainer.validate=maybe"}, "expects true or false");
  expectConfigError("", {"ddp.compression=powersdg"},
                    "ddp.compression 'powersdg' is unknown; expected none, fp16, bf16 or powersgd");
  expectConfigError("", {"ddp.compression=powersgd", "ddp.powersgd_rank=0"},
                    "ddp.powersgd_rank must be at least 1, got 0");
  expectConfigError("", {"ddp.powersgd_start_step=-1"}, "ddp.powersgd_start_step must be 0 or more");
  auto broken = writeConfig("trainer: [unclosed\n");
  expectConfigError(broken, {}, broken + ": invalid YAML at line");
  expectConfigError("/no/such/config.yaml", {}, "cannot read config file /no/such/config.yaml");
}

TEST(LrScaling, RuleValuesAndWarmup) {
  LrScalingOptions o;
  o.baseBatch = 256;
  o.rule = LrScalingRule::kNone;
  EXPECT_DOUBLE_EQ(scaledLearningRate(0.1, 1024, o), 0.1);
  o.rule = LrScalingRule::kLinear;
  EXPECT_DOUBLE_EQ(scaledLearningRate(0.1, 1024, o), 0.4);
  o.rule = LrScalingRule::kSqrt;
  EXPECT_DOUBLE_EQ(scaledLearningRate(0.1, 1024, o), 0.2);
  o.rule = LrScalingRule::kPow23;
  EXPECT_NEAR(scaledLearningRate(0.1, 2048, o), 0.4, 1e-12);  // 8^(2/3) = 4
  o.rule = LrScalingRule::kLinear;
  o.warmupSteps = 4;
  EXPECT_DOUBLE_EQ(learningRateAt(0, 0.1, 1024, o), 0.1 + 0.3 * 0.25);
  EXPECT_DOUBLE_EQ(learningRateAt(1, 0.1, 1024, o), 0.1 + 0.3 * 0.5);
  EXPECT_DOUBLE_EQ(learningRateAt(3, 0.1, 1024, o), 0.4);
  EXPECT_DOUBLE_EQ(learningRateAt(100, 0.1, 1024, o), 0.4);
  EXPECT_EQ(parseLrScalingRule("pow2/3", "x"), LrScalingRule::kPow23);
  EXPECT_THROW(parseLrScalingRule("cube", "lr_scaling.rule"), ConfigError);
  o.baseBatch = 0;
  EXPECT_THROW(scaledLearningRate(0.1, 1024, o), Error);
}

}  // namespace
}  // namespace lockstep
