// `lockstep sweep` as a user runs it, on the real Fashion-MNIST with tiny MLP trials: trials two
// at a time with a failing trial recorded and the sweep going on; kill -9 mid-way and --resume
// (no finished trial reruns, the final table equals an uninterrupted sweep's); SIGINT stops every
// trial; bad input is refused before anything starts.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lockstep/train/config.h"
#include "support/expect.h"
#include "support/subprocess.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

const std::string kBase = std::string(LOCKSTEP_SOURCE_DIR) + "/configs/mlp-bench.yaml";

using test::quote;
using test::readFile;

/// A spec over mlp-bench.yaml with tiny, deterministic trials.
std::string writeSpec(const std::string& dir, const std::string& steps, const std::string& rest,
                      const std::string& name = "spec.yaml") {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << "base: " << kBase << "\n"
                      << "overrides: {trainer.max_steps: " << steps
                      << ", trainer.validate: true, model.hidden_sizes: [32], trainer.batch_size: 32,"
                         " monitor.trace_steps: 0, monitor.system_interval: 0, checkpoint.every: 0}\n"
                      << rest;
  return path;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream s(text);
  for (std::string line; std::getline(s, line);) out.push_back(line);
  return out;
}

/// The rows of trials.csv (a failed trial's error spans several lines) without the seconds and
/// command columns, which differ between two equal sweeps; the rows here have no quoted commas.
std::string comparableTable(const std::string& csv) {
  auto split = [](const std::string& line) {
    std::vector<std::string> fields;
    std::stringstream s(line);
    for (std::string f; std::getline(s, f, ',');) fields.push_back(f);
    return fields;
  };
  auto all = lines(csv);
  auto header = split(all.at(0));
  auto column = [&](const std::string& name) {
    return static_cast<size_t>(std::find(header.begin(), header.end(), name) - header.begin());
  };
  const size_t seconds = column("seconds"), command = column("command");
  std::string out;
  for (const auto& line : all) {
    auto fields = split(line);
    for (size_t i = 0; i < fields.size() && i < command; ++i) out += i == seconds ? "," : fields[i] + ",";
    out += "\n";
  }
  return out;
}

size_t trialRows(const std::string& csv) {
  size_t n = 0;
  for (const auto& line : lines(csv)) n += line.rfind("trial-", 0) == 0;
  return n;
}

test::ProcessResult sweep(const std::string& args, int seconds = 240) {
  test::ProcessOptions o;
  o.timeout = std::chrono::seconds(seconds);
  return test::runProcess({"sh", "-c", quote(test::lockstepBin()) + " sweep " + args}, o);
}

TEST(SweepCli, RunsTrialsTwoAtATimeRecordsAFailureAndWritesTheBestConfig) {
  const std::string dir = test::makeTempDir();
  const std::string spec = writeSpec(dir, "40",
                                     "space:\n  optimizer.lr: {type: loguniform, low: 0.01, high: 0.1, points: 2}\n"
                                     "  data.root: ['', /nonexistent-fashion]\n"
                                     "objective: {metric: validation_accuracy, mode: max}\nalgorithm: grid\n");
  auto r = sweep(quote(spec) + " -j 2 --dir " + quote(dir + "/sw"));
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_HAS(r.out, "sweep " + dir + "/sw: 4 trials, 2 done, 2 failed");
  const std::string csv = readFile(dir + "/sw/trials.csv");
  ASSERT_EQ(trialRows(csv), 4u) << csv;
  EXPECT_HAS(csv, "\ntrial-0000,done,");
  EXPECT_HAS(csv, "\ntrial-0001,failed,,0.01,/nonexistent-fashion,");
  // The trial's last output lines name the missing data.
  EXPECT_HAS(csv, "/nonexistent-fashion/train-images-idx3-ubyte.gz not found");
  EXPECT_HAS(readFile(dir + "/sw/trials.jsonl"), "\"status\":\"failed\"");
  EXPECT_HAS(readFile(dir + "/sw/trials.jsonl"), "\"epochs\":0.0213");  // 40 steps of 1875 per epoch
  // Each trial's directory is a normal run directory.
  EXPECT_TRUE(fs::exists(dir + "/sw/trial-0002/run.json"));
  EXPECT_TRUE(fs::exists(dir + "/sw/trial-0002/metrics.jsonl"));
  // best.yaml is a config `lockstep train` loads, with the best trial's values.
  TrainConfig best = loadTrainConfig(dir + "/sw/best.yaml", {});
  EXPECT_EQ(best.trainer.maxSteps, 40);
  EXPECT_EQ(best.data.root, "");
  EXPECT_HAS(readFile(dir + "/sw/best.yaml"), "# best trial of the sweep");
  // Two trials ran at once: their runs overlap in time (the journal shows two running).
  EXPECT_HAS(r.out, "trial-0000 started");
  EXPECT_HAS(r.out, "trial-0001 started");
  auto firstDone = r.out.find(" done in ");
  auto secondStart = r.out.find("trial-0001 started");
  EXPECT_LT(secondStart, firstDone) << r.out;
}

/// Trials with their rung objectives, from trials.jsonl.
std::vector<nlohmann::json> journal(const std::string& path) {
  std::vector<nlohmann::json> out;
  for (const auto& line : lines(readFile(path))) out.push_back(nlohmann::json::parse(line));
  return out;
}

/// 9 trials of 20, 60 and 180 steps under ASHA.
std::string ashaSpec(const std::string& dir, int seed) {
  return writeSpec(dir, "20",
                   "space:\n  optimizer.lr: {type: loguniform, low: 0.0005, high: 0.5}\n"
                   "objective: {metric: validation_loss, mode: min}\nbudget: {trials: 9}\nseed: " +
                       std::to_string(seed) +
                       "\nearly_stop: {type: asha, resource: steps, min_resource: 20, max_resource: 180, "
                       "reduction_factor: 3}\n");
}

/// `lockstep sweep SPEC -j 1 --threads 1 --dir CUT` (output in CUT.log), SIGKILLed as soon as the
/// shell test `condition` holds; its result (exit code 137 when killed).
test::ProcessResult killSweepWhen(const std::string& spec, const std::string& cut, const std::string& condition) {
  const std::string script = quote(test::lockstepBin()) + " sweep " + quote(spec) + " -j 1 --threads 1 --dir " +
                             quote(cut) + " > " + quote(cut + ".log") + " 2>&1 & pid=$!; until " + condition +
                             "; do sleep 0.05; done; kill -9 $pid; wait $pid";
  test::ProcessOptions o;
  o.timeout = std::chrono::seconds(240);
  return test::runProcess({"sh", "-c", script}, o);
}

TEST(SweepCli, AshaPromotesTheBestThirdOfEachRungAndResumesTheirCheckpoints) {
  const std::string dir = test::makeTempDir();
  const std::string spec = ashaSpec(dir, 5);
  auto r = sweep(quote(spec) + " -j 2 --threads 1 --dir " + quote(dir + "/sw"));
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  auto trials = journal(dir + "/sw/trials.jsonl");
  ASSERT_EQ(trials.size(), 9u);
  // Rank each rung's finishers; the best third of every rung went on to the next.
  for (size_t rung = 0; rung < 2; ++rung) {
    std::vector<std::pair<double, size_t>> reached;
    for (size_t i = 0; i < trials.size(); ++i) {
      if (trials[i]["rungs"].size() > rung) reached.push_back({trials[i]["rungs"][rung]["objective"].get<double>(), i});
    }
    std::sort(reached.begin(), reached.end());
    ASSERT_GE(reached.size(), 3u) << "rung " << rung << ": " << readFile(dir + "/sw/trials.jsonl");
    for (size_t k = 0; k < reached.size() / 3; ++k) {
      EXPECT_GT(trials[reached[k].second]["rungs"].size(), rung + 1) << "rung " << rung << " rank " << k;
    }
  }
  int done = 0;
  for (const auto& t : trials) {
    const std::string status = t["status"];
    EXPECT_TRUE(status == "done" || status == "pruned") << t.dump();
    if (status != "done") continue;
    ++done;
    EXPECT_EQ(t["rungs"].size(), 3u);
    EXPECT_EQ(t["steps"], 180);
    EXPECT_EQ(t["rungs"][2]["resource"], 180);
    // Its last rung went on from the 60-step checkpoint, and ends where one uninterrupted run ends.
    const std::string name = t["name"];
    EXPECT_HAS(readFile(dir + "/sw/" + name + "/output.log"), "resumed from");
    auto whole = test::runProcess({test::lockstepBin(), "run", "-np", "1", "--threads", "1", "--", test::lockstepBin(),
                                   "train", kBase, "trainer.max_steps=180", "trainer.validate=true",
                                   "model.hidden_sizes=[32]", "trainer.batch_size=32",
                                   "optimizer.lr=" + fmt::format("{}", t["params"]["optimizer.lr"].get<double>()),
                                   "monitor.dir=off", "checkpoint.dir=off", "--result-json", dir + "/whole.json"});
    ASSERT_EQ(whole.exitCode, 0) << whole.err;
    auto result = nlohmann::json::parse(readFile(dir + "/whole.json"));
    EXPECT_EQ(result["last_validation_loss"].get<double>(), t["objective"].get<double>());
  }
  EXPECT_GE(done, 1);
  EXPECT_HAS(readFile(dir + "/sw/best.yaml"), "max_steps: 180");
  EXPECT_HAS(r.out, "pruned");
}

TEST(SweepCli, AKilledSweepResumesWithoutRerunningFinishedTrialsAndEndsAsAnUninterruptedOne) {
  const std::string dir = test::makeTempDir();
  const std::string spec = writeSpec(dir, "60",
                                     "space:\n  optimizer.lr: {type: loguniform, low: 0.001, high: 0.3}\n"
                                     "  optimizer.momentum: {type: uniform, low: 0.0, high: 0.95}\n"
                                     "objective: {metric: validation_loss, mode: min}\nbudget: {trials: 5}\n"
                                     "algorithm: tpe\ntpe: {startup_trials: 2}\nseed: 11\n");
  auto whole = sweep(quote(spec) + " -j 1 --threads 1 --dir " + quote(dir + "/whole"));
  ASSERT_EQ(whole.exitCode, 0) << whole.out << whole.err;
  // The same sweep, SIGKILLed once two trials are done and the third is recorded as running (waiting
  // for the second alone raced with the journal's record of the third).
  const std::string cut = dir + "/cut";
  const std::string journalPath = quote(cut + "/trials.jsonl");
  auto killed = killSweepWhen(spec, cut,
                              "[ \"$(grep -o '\"status\":\"done\"' " + journalPath +
                                  " 2>/dev/null | wc -l)\" -ge 2 ] && grep -q '\"status\":\"running\"' " + journalPath);
  ASSERT_EQ(killed.exitCode, 128 + 9) << killed.err;
  const std::string journal = readFile(cut + "/trials.jsonl");
  EXPECT_HAS(journal, "\"status\":\"running\"");
  const auto doneLog = fs::last_write_time(cut + "/trial-0000/output.log");
  auto resumed = sweep(quote(spec) + " -j 1 --threads 1 --dir " + quote(cut) + " --resume");
  ASSERT_EQ(resumed.exitCode, 0) << resumed.out << resumed.err;
  EXPECT_HAS(resumed.out, "to run again");
  EXPECT_EQ(resumed.out.find("trial-0000 started"), std::string::npos) << resumed.out;
  EXPECT_EQ(resumed.out.find("trial-0001 started"), std::string::npos) << resumed.out;
  EXPECT_HAS(resumed.out, "trial-0002 started");
  EXPECT_EQ(fs::last_write_time(cut + "/trial-0000/output.log"), doneLog);
  EXPECT_EQ(comparableTable(readFile(cut + "/trials.csv")), comparableTable(readFile(dir + "/whole/trials.csv")));
  EXPECT_EQ(readFile(cut + "/best.yaml").substr(readFile(cut + "/best.yaml").find('\n')),
            readFile(dir + "/whole/best.yaml").substr(readFile(dir + "/whole/best.yaml").find('\n')));
  // Resuming without --resume is refused; so is a changed spec.
  auto again = sweep(quote(spec) + " --dir " + quote(cut));
  EXPECT_EQ(again.exitCode, 2);
  EXPECT_HAS(again.err, "already holds a sweep: pass --resume");
  std::ofstream(spec, std::ios::app) << "# changed\n";
  auto changed = sweep(quote(spec) + " --dir " + quote(cut) + " --resume");
  EXPECT_EQ(changed.exitCode, 2);
  EXPECT_HAS(changed.err, "differs from the spec the sweep in");
}

TEST(SweepCli, AKilledAshaSweepResumesItsPausedAndPromotedTrials) {
  const std::string dir = test::makeTempDir();
  const std::string spec = ashaSpec(dir, 8);
  auto whole = sweep(quote(spec) + " -j 1 --threads 1 --dir " + quote(dir + "/whole"));
  ASSERT_EQ(whole.exitCode, 0) << whole.out << whole.err;
  // SIGKILL once the first promotion runs: paused trials wait in the journal, one is mid-rung.
  const std::string cut = dir + "/cut";
  auto killed = killSweepWhen(spec, cut, "grep -q ' promoted ' " + quote(cut + ".log") + " 2>/dev/null");
  ASSERT_EQ(killed.exitCode, 128 + 9) << killed.err;
  EXPECT_HAS(readFile(cut + "/trials.jsonl"), "\"status\":\"paused\"");
  auto resumed = sweep(quote(spec) + " -j 1 --threads 1 --dir " + quote(cut) + " --resume");
  ASSERT_EQ(resumed.exitCode, 0) << resumed.out << resumed.err;
  EXPECT_EQ(comparableTable(readFile(cut + "/trials.csv")), comparableTable(readFile(dir + "/whole/trials.csv")));
}

TEST(SweepCli, ATimeBudgetStopsStartingTrials) {
  const std::string dir = test::makeTempDir();
  const std::string spec = writeSpec(dir, "20",
                                     "space:\n  optimizer.lr: {type: loguniform, low: 0.001, high: 0.3}\n"
                                     "objective: {metric: train_loss, mode: min}\nbudget: {seconds: 2}\n");
  auto r = sweep(quote(spec) + " --dir " + quote(dir + "/sw"));
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  auto rows = lines(readFile(dir + "/sw/trials.jsonl"));
  EXPECT_GE(rows.size(), 1u);
  EXPECT_LE(rows.size(), 8u) << "trials of about a second each, none started after 2 s";
  EXPECT_EQ(readFile(dir + "/sw/trials.jsonl").find("\"status\":\"running\""), std::string::npos);
  EXPECT_HAS(r.out, "trials of " + spec);
  EXPECT_LT(r.seconds, 15.0);
}

TEST(SweepCli, SigintStopsEveryRunningTrial) {
  const std::string dir = test::makeTempDir();
  const std::string spec = writeSpec(dir, "1000000",
                                     "space:\n  optimizer.lr: [0.01, 0.02]\n"
                                     "objective: {metric: train_loss, mode: min}\nalgorithm: grid\n");
  const std::string script = quote(test::lockstepBin()) + " sweep " + quote(spec) + " -j 2 --dir " +
                             quote(dir + "/sw") + " > " + quote(dir + "/out.txt") +
                             " 2>&1 & pid=$!; "
                             "until grep -q 'trial-0001 started' " +
                             quote(dir + "/out.txt") +
                             " 2>/dev/null; do sleep 0.05; done; "
                             "sleep 1; kill -INT $pid; wait $pid; echo exit=$?; "
                             "sleep 0.5; pgrep -f " +
                             quote(dir + "/[s]w/trial-") + " || echo no-trial-left";
  test::ProcessOptions o;
  o.timeout = std::chrono::seconds(120);
  auto r = test::runProcess({"sh", "-c", script}, o);
  EXPECT_HAS(r.out, "exit=130");
  EXPECT_HAS(r.out, "no-trial-left");
  EXPECT_HAS(readFile(dir + "/out.txt"), "stopping 2 running trial(s)");
  const std::string journal = readFile(dir + "/sw/trials.jsonl");
  EXPECT_EQ(lines(journal).size(), 2u);
  EXPECT_EQ(journal.find("\"status\":\"running\""), std::string::npos) << journal;
  EXPECT_HAS(journal, "\"status\":\"stopped\"");
}

TEST(SweepCli, BadInputIsRefusedBeforeAnythingStarts) {
  const std::string dir = test::makeTempDir();
  const std::string good = writeSpec(dir, "10",
                                     "space: {optimizer.lr: [0.01]}\n"
                                     "objective: {metric: train_loss, mode: min}\nalgorithm: grid\n");
  auto zero = sweep(quote(good) + " -j 0 --dir " + quote(dir + "/a"));
  EXPECT_EQ(zero.exitCode, 2);
  EXPECT_HAS(zero.err, "-j 0: expected at least 1 trial at once");
  EXPECT_FALSE(fs::exists(dir + "/a"));
  const std::string bad = writeSpec(dir, "10",
                                    "space: {optimizer.lr: {type: loguniform, low: -1, high: 1}}\n"
                                    "objective: {metric: train_loss, mode: min}\nbudget: {trials: 1}\n",
                                    "bad.yaml");
  auto r = sweep(quote(bad) + " --dir " + quote(dir + "/b"));
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_HAS(r.err, "lockstep sweep: error: " + bad + ": space.optimizer.lr: a log-scale range needs low > 0");
  EXPECT_FALSE(fs::exists(dir + "/b"));
  auto none = sweep(quote(good) + " --dir " + quote(dir + "/c") + " --resume");
  EXPECT_EQ(none.exitCode, 2);
  EXPECT_HAS(none.err, "--resume: " + dir + "/c holds no sweep");
}

}  // namespace
}  // namespace lockstep
