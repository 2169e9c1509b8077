// The local scheduler of sweep_runner.h: J trial processes at once, the
// journal rewritten after every change, signals stop every trial.
#include "sweep/sweep_runner.h"

#include <signal.h>

#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "common/posix_io.h"
#include "common/shell_text.h"
#include "lockstep/common/error.h"
#include "sweep/sampler.h"
#include "sweep/slurm.h"
#include "sweep/trial_launcher.h"
#include "sweep/trial_record.h"

namespace lockstep::sweep {

namespace fs = std::filesystem;

namespace {

volatile std::sig_atomic_t gStopSignal = 0;

extern "C" void onStopSignal(int sig) { gStopSignal = sig; }

/// SIGINT and SIGTERM set gStopSignal while it lives (no SA_RESTART: the loop's sleep wakes up).
class StopSignals {
 public:
  StopSignals() {
    gStopSignal = 0;
    struct sigaction sa {};
    sa.sa_handler = onStopSignal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &oldInt_);
    ::sigaction(SIGTERM, &sa, &oldTerm_);
  }
  ~StopSignals() {
    ::sigaction(SIGINT, &oldInt_, nullptr);
    ::sigaction(SIGTERM, &oldTerm_, nullptr);
  }

 private:
  struct sigaction oldInt_ {};
  struct sigaction oldTerm_ {};
};

std::string readText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// steps / steps per epoch from the trial's run.json (its run directory); -1 when unknown.
double epochsOf(const std::string& runDir, int64_t steps) {
  nlohmann::json run = nlohmann::json::parse(readText(runDir + "/run.json"), nullptr, false);
  if (run.is_discarded() || !run.contains("steps_per_epoch") || !run["steps_per_epoch"].is_number()) return -1;
  double perEpoch = run["steps_per_epoch"].get<double>();
  return perEpoch > 0 ? static_cast<double>(steps) / perEpoch : -1;
}

struct Running {
  std::unique_ptr<TrialHandle> handle;
  std::chrono::steady_clock::time_point start;
};

class SweepRun {
 public:
  SweepRun(const SweepSpec& spec, const SweepRunOptions& options)
      : spec_(spec), options_(options), sampler_(makeSampler(spec)),
        launcher_(options.scheduler == "slurm" ? makeSlurmLauncher() : makeLocalLauncher(options.lockstep)) {}

  int run();

 private:
  void prepareDirectory();
  bool mayStartNew() const;
  int64_t promotable() const;
  void startNew();
  void launch(int64_t index, bool fresh);
  void finishTrial(int64_t index, int exitCode);
  bool readResult(Trial& t, const std::string& resultPath);
  void stopAll();
  void writeFiles();
  void writeBest();
  void printSummary() const;
  std::vector<std::string> command(const Trial& t) const;
  std::string trialDir(const Trial& t) const { return (fs::path(options_.dir) / t.name()).string(); }

  SweepSpec spec_;
  SweepRunOptions options_;
  std::unique_ptr<Sampler> sampler_;
  std::unique_ptr<TrialLauncher> launcher_;
  std::vector<Trial> trials_;
  std::deque<int64_t> reruns_;
  std::map<int64_t, Running> running_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

void SweepRun::prepareDirectory() {
  const fs::path dir(options_.dir);
  const std::string journal = (dir / "trials.jsonl").string();
  const std::string specCopy = (dir / "spec.yaml").string();
  const std::string specText = readText(spec_.file);
  if (!options_.resume) {
    if (fs::exists(journal)) {
      throw ConfigError(
          fmt::format("{} already holds a sweep: pass --resume to continue it, or another --dir", options_.dir));
    }
    detail::writeFileAtomically(specCopy, {specText}, detail::Durability::kProcessCrash);
    return;
  }
  if (!fs::exists(journal)) {
    throw ConfigError(fmt::format("--resume: {} holds no sweep (no trials.jsonl)", options_.dir));
  }
  if (fs::exists(specCopy) && readText(specCopy) != specText) {
    throw ConfigError(fmt::format("--resume: {} differs from the spec the sweep in {} started with ({})", spec_.file,
                                  options_.dir, specCopy));
  }
  trials_ = readTrialsJsonl(spec_, journal);
  for (auto& t : trials_) {
    if (t.status != TrialStatus::kRunning && t.status != TrialStatus::kStopped) continue;
    // A batch job of the dead sweep may still run and write into the trial's directory.
    if (!t.job.empty() && options_.scheduler == "slurm") cancelJob(t.job, "KILL");
    reruns_.push_back(t.index);
  }
  std::cout << fmt::format("sweep: resuming {}: {} trials recorded, {} to run again\n", options_.dir, trials_.size(),
                           reruns_.size());
}

bool SweepRun::mayStartNew() const {
  if (spec_.trials > 0 && static_cast<int64_t>(trials_.size()) >= spec_.trials) return false;
  if (spec_.seconds > 0) {
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (elapsed >= spec_.seconds) return false;
  }
  return true;
}

std::vector<std::string> SweepRun::command(const Trial& t) const {
  const std::string dir = trialDir(t);
  std::vector<std::string> argv = {options_.lockstep, "train", spec_.base};
  for (const auto& o : spec_.overrides) argv.push_back(o);
  for (const auto& o : spec_.space.overrides(t.point)) argv.push_back(o);
  argv.push_back("monitor.dir=" + dir);
  argv.push_back("checkpoint.dir=" + dir + "/checkpoints");
  if (spec_.asha.enabled) {  // a rung goes on from the previous rung's checkpoint
    argv.push_back("checkpoint.resume=auto");
    argv.push_back(fmt::format("{}={}", spec_.asha.resourceKey(), spec_.asha.rungs().at(t.rungs.size())));
  }
  argv.push_back("--result-json");
  argv.push_back(dir + "/result.json");
  return argv;
}

void SweepRun::startNew() {
  std::vector<Observation> finished;
  for (const auto& t : trials_) {
    if (t.measured()) {
      finished.push_back({t.point, spec_.maximize ? -t.objective : t.objective, static_cast<int64_t>(t.rungs.size())});
    }
  }
  Trial t;
  t.index = static_cast<int64_t>(trials_.size());
  t.point = sampler_->suggest(t.index, finished);
  trials_.push_back(std::move(t));
  launch(trials_.back().index, true);
}

/// A trial paused at rung k that ranks among the best 1/eta of every trial that finished rung k
/// (the highest such rung first); -1 when there is none.
int64_t SweepRun::promotable() const {
  if (!spec_.asha.enabled) return -1;
  const auto resources = spec_.asha.rungs();
  for (size_t k = resources.size() - 1; k-- > 0;) {
    std::vector<const Trial*> reached;
    for (const auto& t : trials_) {
      if (t.rungs.size() > k) reached.push_back(&t);
    }
    std::stable_sort(reached.begin(), reached.end(), [&](const Trial* a, const Trial* b) {
      return spec_.maximize ? a->rungs[k] > b->rungs[k] : a->rungs[k] < b->rungs[k];
    });
    const size_t top = reached.size() / static_cast<size_t>(spec_.asha.reductionFactor);
    for (size_t i = 0; i < top; ++i) {
      if (reached[i]->status == TrialStatus::kPaused && reached[i]->rungs.size() == k + 1) return reached[i]->index;
    }
  }
  return -1;
}

/// Runs trial `index`: from nothing (`fresh`: its directory is cleared), or on to its next rung
/// from its checkpoint.
void SweepRun::launch(int64_t index, bool fresh) {
  Trial& t = trials_[static_cast<size_t>(index)];
  if (fresh) {
    Trial blank;
    blank.index = t.index;
    blank.point = t.point;
    t = std::move(blank);
  }
  t.status = TrialStatus::kRunning;
  const std::string dir = trialDir(t);
  if (fresh) fs::remove_all(dir);
  fs::create_directories(dir);
  TrialLaunch l{command(t), dir, fs::path(options_.dir).filename().string() + "-" + t.name(),
                static_cast<int>(spec_.workersPerTrial), options_.threadsPerTrial};
  running_[index] = Running{launcher_->start(l, t.command), std::chrono::steady_clock::now()};
  t.job = running_[index].handle->job();
  std::string rung;
  if (spec_.asha.enabled) {
    rung = fmt::format(" (rung {}: {}={})", t.rungs.size(), spec_.asha.resourceKey(),
                       spec_.asha.rungs().at(t.rungs.size()));
  }
  std::cout << fmt::format("sweep: {} {}{}: {}\n", t.name(), t.rungs.empty() ? "started" : "promoted", rung,
                           fmt::join(spec_.space.overrides(t.point), " "));
  writeFiles();
}

bool SweepRun::readResult(Trial& t, const std::string& resultPath) {
  nlohmann::json r;
  try {
    r = nlohmann::json::parse(readText(resultPath));
  } catch (const nlohmann::json::exception& e) {
    t.status = TrialStatus::kFailed;
    t.error = fmt::format("exited 0 but wrote no readable {}: {}", resultPath, e.what());
    return false;
  }
  auto number = [&](const char* key) { return r.contains(key) && r[key].is_number() ? r[key].get<double>() : -1.0; };
  t.validationLoss = number("last_validation_loss");
  t.validationAccuracy = number("last_validation_accuracy");
  t.trainLoss = number("last_train_loss");
  t.steps = r.value("steps", int64_t{0});
  t.epochs = epochsOf(fs::path(resultPath).parent_path().string(), t.steps);
  double value = spec_.metric == Metric::kValidationLoss       ? t.validationLoss
                 : spec_.metric == Metric::kValidationAccuracy ? t.validationAccuracy
                                                               : t.trainLoss;
  if (value < 0 || !std::isfinite(value)) {
    t.status = TrialStatus::kFailed;
    t.error = fmt::format("the trial reported no {} ({})", toString(spec_.metric), resultPath);
    return false;
  }
  t.objective = value;
  return true;
}

void SweepRun::finishTrial(int64_t index, int exitCode) {
  Trial& t = trials_[static_cast<size_t>(index)];
  t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - running_[index].start).count();
  t.exitCode = exitCode;
  running_.erase(index);
  const std::string dir = trialDir(t);
  if (exitCode != 0) {
    t.status = TrialStatus::kFailed;
    t.error = fmt::format("exit code {}; last lines of {}/output.log:\n{}", exitCode, dir,
                          detail::lastLines(dir + "/output.log", 5));
  } else if (readResult(t, dir + "/result.json")) {
    t.status = TrialStatus::kDone;
    if (spec_.asha.enabled) {
      t.rungs.push_back(t.objective);
      if (t.rungs.size() < spec_.asha.rungs().size()) t.status = TrialStatus::kPaused;
    }
  } else {
    t.status = TrialStatus::kFailed;
  }
  if (t.measured()) {
    std::cout << fmt::format("sweep: {} {} after {:.1f} s: {} {}\n", t.name(), toString(t.status), t.seconds,
                             toString(spec_.metric), t.objective);
  } else {
    std::cout << fmt::format("sweep: {} failed after {:.1f} s: {}\n", t.name(), t.seconds, t.error);
  }
  writeFiles();
  writeBest();
}

void SweepRun::stopAll() {
  for (auto& [index, r] : running_) r.handle->terminate();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.stopGraceSeconds);
  while (std::chrono::steady_clock::now() < deadline) {
    bool all = true;
    for (auto& [index, r] : running_) all = r.handle->poll() && all;
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& [index, r] : running_) {
    Trial& t = trials_[static_cast<size_t>(index)];
    t.status = TrialStatus::kStopped;
    t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - r.start).count();
  }
  running_.clear();  // SIGKILLs whatever outlived the grace
  writeFiles();
}

void SweepRun::writeFiles() {
  const fs::path dir(options_.dir);
  detail::writeFileAtomically((dir / "trials.jsonl").string(), {trialsJsonl(spec_, trials_)},
                              detail::Durability::kProcessCrash);
  detail::writeFileAtomically((dir / "trials.csv").string(), {trialsCsv(spec_, trials_)},
                              detail::Durability::kProcessCrash);
}

/// best.yaml, after a trial ended (a start or a stop changes no trial's result).
void SweepRun::writeBest() {
  const Trial* best = nullptr;
  for (const auto& t : trials_) {
    if (t.measured() && (!best || better(spec_, t, *best))) best = &t;
  }
  if (best) {
    detail::writeFileAtomically((fs::path(options_.dir) / "best.yaml").string(), {bestYaml(spec_, *best)},
                                detail::Durability::kProcessCrash);
  }
}

void SweepRun::printSummary() const {
  std::vector<const Trial*> done;
  std::map<TrialStatus, int64_t> count;
  for (const auto& t : trials_) {
    if (t.measured()) done.push_back(&t);
    ++count[t.status];
  }
  std::stable_sort(done.begin(), done.end(), [&](const Trial* a, const Trial* b) { return better(spec_, *a, *b); });
  std::string pruned = spec_.asha.enabled ? fmt::format(", {} pruned", count[TrialStatus::kPruned]) : "";
  std::cout << fmt::format("sweep {}: {} trials, {} done{}, {} failed ({}/trials.csv)\n", options_.dir, trials_.size(),
                           count[TrialStatus::kDone], pruned, count[TrialStatus::kFailed], options_.dir);
  const auto resources = spec_.asha.rungs();
  for (size_t i = 0; i < done.size() && i < 10; ++i) {
    const Trial& t = *done[i];
    std::string resource;
    if (spec_.asha.enabled) {
      resource = fmt::format(" {:>6} {}", resources.at(t.rungs.size() - 1), spec_.asha.epochs ? "epochs" : "steps");
    }
    std::cout << fmt::format("  {}{} {} {:<10}{} {:6.1f} s  {}\n", i == 0 ? "best " : "     ", t.name(),
                             toString(spec_.metric), fmt::format("{:.6g}", t.objective), resource, t.seconds,
                             fmt::join(spec_.space.overrides(t.point), " "));
  }
  if (!done.empty()) std::cout << fmt::format("  best config: {}/best.yaml\n", options_.dir);
}

int SweepRun::run() {
  fs::create_directories(options_.dir);
  prepareDirectory();
  std::cout << fmt::format("sweep: {} trials of {} on {}, {} at once, {} thread(s) per worker\n",
                           spec_.trials > 0 ? std::to_string(spec_.trials) : "unbounded", spec_.file,
                           launcher_->describe(), options_.jobs, options_.threadsPerTrial);
  StopSignals signals;
  while (true) {
    std::vector<int64_t> ended;
    for (auto& [index, r] : running_) {
      if (r.handle->poll()) ended.push_back(index);
    }
    for (int64_t index : ended) finishTrial(index, running_.at(index).handle->exitCode());
    if (gStopSignal != 0) {
      int sig = gStopSignal;
      std::cout << fmt::format("sweep: {} received: stopping {} running trial(s)\n", strsignal(sig), running_.size());
      stopAll();
      printSummary();
      return 128 + sig;
    }
    while (static_cast<int64_t>(running_.size()) < options_.jobs) {
      if (!reruns_.empty()) {
        const int64_t index = reruns_.front();
        reruns_.pop_front();
        launch(index, trials_[static_cast<size_t>(index)].rungs.empty());
      } else if (int64_t index = promotable(); index >= 0) {
        launch(index, false);
      } else if (mayStartNew()) {
        startNew();
      } else {
        break;
      }
    }
    if (running_.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& t : trials_) {
    if (t.status == TrialStatus::kPaused) t.status = TrialStatus::kPruned;  // never promoted
  }
  writeFiles();
  printSummary();
  return 0;
}

}  // namespace

std::string defaultSweepDir(const std::string& specPath) {
  return (fs::path("runs") / fs::path(specPath).stem()).string();
}

int runSweep(const SweepSpec& spec, const SweepRunOptions& options) {
  SweepRunOptions o = options;
  if (o.jobs < 1) throw ConfigError(fmt::format("-j {}: expected at least 1 trial at once", o.jobs));
  if (o.threadsPerTrial <= 0) {
    int64_t cores = std::max(1u, std::thread::hardware_concurrency());
    o.threadsPerTrial = static_cast<int>(std::max<int64_t>(1, cores / (o.jobs * spec.workersPerTrial)));
  }
  SweepRun run(spec, o);
  return run.run();
}

}  // namespace lockstep::sweep
