// The sweep's parts without processes: spec checks (each bad input a ConfigError naming the spec
// and the key), grid and random points, the TPE against random search on a synthetic objective,
// and the journal's round trip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

#include "lockstep/common/error.h"
#include "support/expect.h"
#include "support/subprocess.h"
#include "sweep/sampler.h"
#include "sweep/sweep_spec.h"
#include "sweep/trial_record.h"

namespace lockstep::sweep {
namespace {

const std::string kBase = std::string(LOCKSTEP_SOURCE_DIR) + "/configs/mlp-bench.yaml";

std::string writeSpec(const std::string& body) {
  const std::string path = test::makeTempDir() + "/spec.yaml";
  std::ofstream(path) << "base: " << kBase << "\n" << body;
  return path;
}

const char* kGoodSpec =
    "overrides: {trainer.validate: true}\n"
    "space:\n"
    "  optimizer.lr: {type: loguniform, low: 1.0e-4, high: 0.1}\n"
    "  trainer.batch_size: [16, 32, 64]\n"
    "  model.hidden_sizes: {type: choice, values: [[64], [128, 64]]}\n"
    "  optimizer.momentum: {type: uniform, low: 0.5, high: 0.99}\n"
    "  trainer.max_steps: {type: int, low: 10, high: 20}\n"
    "objective: {metric: validation_accuracy, mode: max}\n"
    "budget: {trials: 8}\n"
    "algorithm: tpe\n"
    "seed: 3\n";

std::string specError(const std::string& body) {
  try {
    loadSweepSpec(writeSpec(body));
  } catch (const ConfigError& e) { return e.what(); }
  return "(no error)";
}

TEST(SweepSpec, ReadsEveryPartOfAGoodSpec) {
  SweepSpec s = loadSweepSpec(writeSpec(kGoodSpec));
  ASSERT_EQ(s.space.params.size(), 5u);
  EXPECT_EQ(s.space.params[0].key, "optimizer.lr");
  EXPECT_EQ(s.space.params[0].kind, ParamKind::kLogUniform);
  EXPECT_EQ(s.space.params[1].kind, ParamKind::kChoice);  // a plain list is a choice
  EXPECT_EQ(s.space.params[2].values, (std::vector<std::string>{"[64]", "[128, 64]"}));
  EXPECT_EQ(s.metric, Metric::kValidationAccuracy);
  EXPECT_TRUE(s.maximize);
  EXPECT_EQ(s.trials, 8);
  EXPECT_EQ(s.algorithm, Algorithm::kTpe);
  EXPECT_EQ(s.seed, 3u);
  EXPECT_EQ(s.overrides, (std::vector<std::string>{"trainer.validate=true"}));
}

TEST(SweepSpec, EachBadInputIsAnErrorNamingTheKey) {
  const std::string objective = "objective: {metric: train_loss, mode: min}\nbudget: {trials: 2}\n";
  EXPECT_HAS(specError("space: {optimizer.lrr: [0.1]}\n" + objective), "space.optimizer.lrr: unknown config key");
  EXPECT_HAS(specError("space: {optimizer.lr: {type: uniform, low: 0.1, high: 0.01}}\n" + objective),
             "space.optimizer.lr: empty or inverted range [0.1, 0.01]");
  EXPECT_HAS(specError("space: {optimizer.lr: {type: uniform, low: 0.1, high: 0.1}}\n" + objective),
             "empty or inverted range");
  EXPECT_HAS(specError("space: {optimizer.lr: {type: loguniform, low: 0, high: 0.1}}\n" + objective),
             "space.optimizer.lr: a log-scale range needs low > 0");
  EXPECT_HAS(specError("space: {optimizer.lr: {type: normal, low: 0, high: 0.1}}\n" + objective),
             "space.optimizer.lr.type: expected one of choice | uniform | loguniform | int, got 'normal'");
  EXPECT_HAS(specError("space: {trainer.batch_size: [16, big]}\n" + objective),
             "space.trainer.batch_size: command line: key 'trainer.batch_size' expects");
  EXPECT_HAS(specError("space: {trainer.batch_size: []}\n" + objective), "a choice needs at least one value");
  EXPECT_HAS(specError("space: {monitor.dir: [a, b]}\n" + objective), "the sweep sets this key for each trial");
  EXPECT_HAS(specError("space: {optimizer.lr: [0.1]}\nobjective: {metric: accuracy, mode: max}\n"),
             "objective.metric: expected one of validation_loss | validation_accuracy | train_loss");
  // mlp-bench.yaml sets trainer.validate: false, so its trials never report a validation metric.
  EXPECT_HAS(specError("space: {optimizer.lr: [0.1]}\nobjective: {metric: validation_loss, mode: min}\n"
                       "budget: {trials: 2}\n"),
             "objective.metric: validation_loss needs trainer.validate: true");
  EXPECT_HAS(specError("overrides: {data.dataset: names, trainer.validate: true}\nspace: {optimizer.lr: [0.1]}\n"
                       "objective: {metric: validation_accuracy, mode: max}\nbudget: {trials: 2}\n"),
             "the names task reports no accuracy");
  EXPECT_HAS(specError("space: {optimizer.lr: {type: uniform, low: 0.01, high: 0.1}}\n"
                       "objective: {metric: train_loss, mode: min}\n"),
             "budget: random and tpe sweeps need budget.trials or budget.seconds");
  EXPECT_HAS(specError("space: {optimizer.lr: {type: uniform, low: 0.01, high: 0.1}}\nalgorithm: grid\n" + objective),
             "space.optimizer.lr: grid search needs a choice, an int, or points: N on a range");
  EXPECT_HAS(specError("space: {optimizer.lr: [0.1]}\nbudgett: 3\n" + objective), "budgett: unknown key");
  EXPECT_HAS(specError("space: {optimizer.lr: [0.1]}\nworkers_per_trial: 0\n" + objective),
             "workers_per_trial: expected an integer in [1, 4096], got '0'");
  EXPECT_HAS(specError("space: {}\n" + objective), "space: expected a mapping of config keys");
  const std::string missing = test::makeTempDir() + "/spec.yaml";
  std::ofstream(missing) << "base: nowhere.yaml\nspace: {optimizer.lr: [0.1]}\n" << objective;
  try {
    loadSweepSpec(missing);
    ADD_FAILURE() << "a missing base config was accepted";
  } catch (const ConfigError& e) { EXPECT_HAS(std::string(e.what()), "base: no such config file"); }
}

TEST(SweepSpec, EarlyStoppingRungsAndItsErrors) {
  const std::string rest =
      "space: {optimizer.lr: [0.1]}\nobjective: {metric: train_loss, mode: min}\nbudget: {trials: 2}\n";
  SweepSpec s = loadSweepSpec(writeSpec(rest + "early_stop: {type: asha, resource: steps, min_resource: 2, "
                                               "max_resource: 10}\n"));
  EXPECT_TRUE(s.asha.enabled);
  EXPECT_EQ(s.asha.rungs(), (std::vector<int64_t>{2, 6, 10}));
  EXPECT_EQ(std::string(s.asha.resourceKey()), "trainer.max_steps");
  AshaOptions a;
  a.minResource = 1, a.maxResource = 9, a.reductionFactor = 3;
  EXPECT_EQ(a.rungs(), (std::vector<int64_t>{1, 3, 9}));
  EXPECT_HAS(specError(rest + "early_stop: {type: asha, resource: steps, min_resource: 5, max_resource: 5}\n"),
             "early_stop: max_resource (5) must be above min_resource (5)");
  EXPECT_HAS(specError(rest + "early_stop: {type: asha, resource: steps, max_resource: 9, reduction_factor: 1}\n"),
             "early_stop.reduction_factor: expected an integer in [2, 1000]");
  // mlp-bench.yaml stops at trainer.max_steps: 30, before any epoch ends.
  EXPECT_HAS(specError(rest + "early_stop: {type: asha, resource: epochs, max_resource: 9}\n"),
             "early_stop.resource: epochs, but the base config's trainer.max_steps (30) would end trials first");
  EXPECT_HAS(specError("space: {trainer.max_steps: [10, 20]}\nobjective: {metric: train_loss, mode: min}\n"
                       "budget: {trials: 2}\nearly_stop: {type: asha, resource: steps, max_resource: 9}\n"),
             "space.trainer.max_steps: early_stop sets this key for each rung");
  EXPECT_HAS(specError(rest + "early_stop: {type: hyperband, max_resource: 9}\n"),
             "early_stop.type: expected one of asha");
}

TEST(SweepSampling, GridVisitsEveryPointOnceInSpecOrder) {
  SweepSpec s =
      loadSweepSpec(writeSpec("space:\n  trainer.batch_size: [16, 32, 64]\n  optimizer.lr: {type: loguniform, low: "
                              "0.001, high: 0.1, points: 3}\n"
                              "  trainer.max_steps: {type: int, low: 1, high: 2}\n"
                              "objective: {metric: train_loss, mode: min}\nalgorithm: grid\n"));
  ASSERT_EQ(s.gridSize(), 18);
  EXPECT_EQ(s.trials, 18);  // the grid's size when the budget gives none
  std::set<std::vector<std::string>> seen;
  for (int64_t i = 0; i < 18; ++i) seen.insert(s.space.overrides(gridPoint(s.space, i)));
  EXPECT_EQ(seen.size(), 18u);
  EXPECT_EQ(s.space.overrides(gridPoint(s.space, 0)),
            (std::vector<std::string>{"trainer.batch_size=16", "optimizer.lr=0.001", "trainer.max_steps=1"}));
  EXPECT_EQ(s.space.overrides(gridPoint(s.space, 3)),
            (std::vector<std::string>{"trainer.batch_size=16", "optimizer.lr=0.01", "trainer.max_steps=2"}));
}

TEST(SweepSampling, RandomPointsDependOnlyOnSeedAndIndexAndCoverTheRange) {
  SweepSpec s = loadSweepSpec(writeSpec(kGoodSpec));
  EXPECT_EQ(randomPoint(s.space, 3, 5), randomPoint(s.space, 3, 5));
  EXPECT_NE(randomPoint(s.space, 3, 5), randomPoint(s.space, 3, 6));
  EXPECT_NE(randomPoint(s.space, 4, 5), randomPoint(s.space, 3, 5));
  std::set<double> steps;
  std::vector<double> lrs;
  for (int64_t i = 0; i < 2000; ++i) {
    Point p = randomPoint(s.space, 1, i);
    lrs.push_back(p[0]);
    steps.insert(p[4]);
    ASSERT_GE(p[0], 1e-4);
    ASSERT_LE(p[0], 0.1);
    ASSERT_GE(p[3], 0.5);
    ASSERT_LE(p[3], 0.99);
  }
  EXPECT_EQ(steps, (std::set<double>{10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}));  // every integer, ends included
  std::sort(lrs.begin(), lrs.end());
  // Log-uniform: the median sits near the geometric mean of the bounds (~0.0032), not the midpoint (0.05).
  EXPECT_NEAR(std::log10(lrs[1000]), std::log10(std::sqrt(1e-4 * 0.1)), 0.15);
}

/// Branin on [-5, 10] x [0, 15]: minimum 0.397887 at three points.
double branin(double x, double y) {
  const double pi = 3.14159265358979323846;
  double a = y - 5.1 / (4 * pi * pi) * x * x + 5 / pi * x - 6;
  return a * a + 10 * (1 - 1 / (8 * pi)) * std::cos(x) + 10;
}

double bestOf(const SearchSpace& space, const TpeOptions& tpe, uint64_t seed, bool useTpe, int trials) {
  std::vector<Observation> finished;
  double best = 1e300;
  for (int i = 0; i < trials; ++i) {
    Point p = useTpe ? tpePoint(space, tpe, seed, i, finished) : randomPoint(space, seed, i);
    double loss = branin(p[0], p[1]);
    finished.push_back({p, loss});
    best = std::min(best, loss);
  }
  return best;
}

TEST(SweepSampling, TpeIsDeterministicAndBeatsRandomSearchOnBranin) {
  SearchSpace space;
  space.params.push_back(Param{"x", ParamKind::kUniform, {}, -5, 10});
  space.params.push_back(Param{"y", ParamKind::kUniform, {}, 0, 15});
  TpeOptions tpe;
  std::vector<Observation> some = {{{1.0, 2.0}, 3.0}, {{4.0, 5.0}, 1.0}};
  tpe.startupTrials = 2;
  EXPECT_EQ(tpePoint(space, tpe, 7, 2, some), tpePoint(space, tpe, 7, 2, some));
  for (bool multivariate : {true, false}) {
    tpe = TpeOptions{};
    tpe.multivariate = multivariate;
    std::vector<double> tpeBest, randomBest;
    for (uint64_t seed = 0; seed < 31; ++seed) {
      tpeBest.push_back(bestOf(space, tpe, seed, true, 60));
      randomBest.push_back(bestOf(space, tpe, seed, false, 60));
    }
    std::sort(tpeBest.begin(), tpeBest.end());
    std::sort(randomBest.begin(), randomBest.end());
    EXPECT_LT(tpeBest[15], 0.8 * randomBest[15])
        << "median best of 31 seeds, 60 trials each; multivariate " << multivariate;
    EXPECT_LT(tpeBest[15], 0.7) << "multivariate " << multivariate;
  }
}

TEST(SweepSampling, TpeDrawsChoicesFromTheGoodTrials) {
  SearchSpace space;
  space.params.push_back(Param{"c", ParamKind::kChoice, {"a", "b", "c", "d"}});
  std::vector<Observation> finished;
  for (int i = 0; i < 40; ++i) finished.push_back({{static_cast<double>(i % 4)}, i % 4 == 2 ? 0.0 : 1.0});
  int picked = 0;
  for (int64_t i = 40; i < 60; ++i) picked += tpePoint(space, TpeOptions{}, 1, i, finished)[0] == 2.0;
  EXPECT_GE(picked, 18) << "the value every good trial had";
}

TEST(SweepRecords, TheJournalReadsBackToTheSameTrials) {
  SweepSpec s = loadSweepSpec(writeSpec(kGoodSpec));
  std::vector<Trial> trials(3);
  for (int64_t i = 0; i < 3; ++i) {
    trials[i].index = i;
    trials[i].point = randomPoint(s.space, 9, i);
    trials[i].command = "lockstep run -np 1 -- lockstep train 'x y'";
  }
  trials[0].status = TrialStatus::kDone;
  trials[0].objective = 0.8125;
  trials[0].validationAccuracy = 0.8125;
  trials[0].steps = 12;
  trials[1].status = TrialStatus::kFailed;
  trials[1].exitCode = 1;
  trials[1].error = "exit code 1; last lines:\n\"no data\", sorry";
  const std::string path = test::makeTempDir() + "/trials.jsonl";
  std::ofstream(path) << trialsJsonl(s, trials);
  auto back = readTrialsJsonl(s, path);
  ASSERT_EQ(back.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back[i].point, trials[i].point) << i;
    EXPECT_EQ(back[i].status, trials[i].status) << i;
    EXPECT_EQ(back[i].error, trials[i].error) << i;
  }
  EXPECT_EQ(back[0].objective, 0.8125);
  EXPECT_EQ(trialsCsv(s, back), trialsCsv(s, trials));
  const std::string csv = trialsCsv(s, trials);
  EXPECT_HAS(csv, "trial,status,objective,optimizer.lr,trainer.batch_size,model.hidden_sizes,optimizer.momentum,");
  EXPECT_HAS(csv, "\"exit code 1; last lines:\n\"\"no data\"\", sorry\"");  // quoted as CSV
  // A journal from another space is refused, naming the file and line.
  SweepSpec other =
      loadSweepSpec(writeSpec("space: {optimizer.lr: [0.5]}\nobjective: {metric: train_loss, mode: min}\n"
                              "budget: {trials: 2}\n"));
  try {
    readTrialsJsonl(other, path);
    ADD_FAILURE() << "a journal of another space was accepted";
  } catch (const ConfigError& e) { EXPECT_HAS(std::string(e.what()), path + ":1: "); }
}

}  // namespace
}  // namespace lockstep::sweep
