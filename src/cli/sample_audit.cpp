// `lockstep samples DIR`'s audit of trainer.sample_log's files (sample_audit.h).
//
// Which steps a run kept: a generation (of an attempt) trains from the step it goes on from; the
// next one says how far its predecessor's state got (the step it goes on from), and the last one
// keeps what its members completed. A step started beyond that was trained again by the next
// generation; each kept step must hold every rank's share of the global batch.
#include "cli/sample_audit.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "lockstep/common/error.h"

namespace lockstep::cli {

namespace {

using json = nlohmann::json;
using GenKey = std::pair<int64_t, int64_t>;  // (attempt, generation)

struct RunFacts {
  int64_t samples = -1;
  int64_t globalBatch = 0;
  int64_t stepsPerEpoch = 0;
  int64_t totalSteps = 0;
  int64_t accumulation = 1;
  bool operator==(const RunFacts& o) const {
    return samples == o.samples && globalBatch == o.globalBatch && stepsPerEpoch == o.stepsPerEpoch &&
           totalSteps == o.totalSteps && accumulation == o.accumulation;
  }
};

struct StepFeed {
  int64_t epoch = -1;
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> shares;  // (rank, micro) -> ids
};

struct Generation {
  int64_t from = -1;
  int64_t world = 0;
  std::map<int64_t, StepFeed> feeds;
  std::set<int64_t> done;
};

struct Log {
  RunFacts run;
  std::map<GenKey, Generation> gens;
  std::vector<std::string> problems;
};

int64_t need(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_number_integer()) {
    throw ConfigError(fmt::format("{}: no integer \"{}\" in {}", where, key, j.dump()));
  }
  return j[key].get<int64_t>();
}

GenKey keyOf(const json& j, const std::string& where) { return {need(j, "attempt", where), need(j, "gen", where)}; }

void readRun(const json& j, const std::string& where, Log& log) {
  const RunFacts r{need(j, "samples", where), need(j, "global_batch", where), need(j, "steps_per_epoch", where),
                   need(j, "total_steps", where), need(j, "accumulation", where)};
  if (r.stepsPerEpoch <= 0 || r.accumulation <= 0 || r.globalBatch <= 0) {
    throw ConfigError(fmt::format("{}: steps_per_epoch, accumulation and global_batch must be positive", where));
  }
  if (log.run.samples < 0) {
    log.run = r;
  } else if (!(r == log.run)) {
    throw ConfigError(fmt::format(
        "{}: a run of {} samples, global batch {}, {} steps; the files before it are of {} samples, global "
        "batch {}, {} steps: one directory per run",
        where, r.samples, r.globalBatch, r.totalSteps, log.run.samples, log.run.globalBatch, log.run.totalSteps));
  }
}

void readGeneration(const json& j, const std::string& where, Log& log) {
  const GenKey k = keyOf(j, where);
  Generation& g = log.gens[k];
  const int64_t from = need(j, "from", where);
  const int64_t world = need(j, "world", where);
  if (g.from >= 0 && (g.from != from || g.world != world)) {
    log.problems.push_back(
        fmt::format("{}: generation {} of attempt {} goes on from step {} with {} worker(s); "
                    "another file says from step {} with {}",
                    where, k.second, k.first, from, world, g.from, g.world));
  }
  g.from = from;
  g.world = world;
}

void readMicro(const json& j, const std::string& where, Log& log) {
  const GenKey k = keyOf(j, where);
  const int64_t step = need(j, "step", where);
  StepFeed& feed = log.gens[k].feeds[step];
  feed.epoch = need(j, "epoch", where);
  if (!j.contains("ids") || !j["ids"].is_array()) throw ConfigError(fmt::format("{}: no \"ids\" array", where));
  const auto ids = j["ids"].get<std::vector<int64_t>>();
  const std::pair<int64_t, int64_t> share{need(j, "rank", where), need(j, "micro", where)};
  auto [it, inserted] = feed.shares.emplace(share, ids);
  if (!inserted && it->second != ids) {
    log.problems.push_back(fmt::format("{}: rank {} fed micro-batch {} of step {} twice with other samples", where,
                                       share.first, share.second, step));
  }
}

void readFile(const std::filesystem::path& path, Log& log) {
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("cannot read {}", path.string()));
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string where = fmt::format("{}:{}", path.string(), number);
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      if (in.eof()) break;  // a last line without its newline: a process killed while writing it
      throw ConfigError(fmt::format("{}: not a line of trainer.sample_log: {}", where, line.substr(0, 120)));
    }
    const std::string kind = j.value("kind", "");
    if (kind == "run") {
      readRun(j, where, log);
    } else if (kind == "generation") {
      readGeneration(j, where, log);
    } else if (kind == "micro") {
      readMicro(j, where, log);
    } else if (kind == "done") {
      log.gens[keyOf(j, where)].done.insert(need(j, "step", where));
    } else {
      throw ConfigError(fmt::format("{}: unknown kind '{}'", where, kind));
    }
  }
}

struct Kept {
  GenKey gen;
  const StepFeed* feed = nullptr;
  int64_t world = 0;
};

/// The step each generation kept (a later generation's replaces an earlier one's: a restart from an
/// older checkpoint), counting what was trained again.
std::map<int64_t, Kept> keptSteps(const Log& log, SampleAudit& a) {
  std::map<int64_t, Kept> kept;
  for (auto it = log.gens.begin(); it != log.gens.end(); ++it) {
    const Generation& g = it->second;
    if (g.from < 0) {
      a.problems.push_back(
          fmt::format("generation {} of attempt {}: steps but no generation line", it->first.second, it->first.first));
      continue;
    }
    auto next = std::next(it);
    while (next != log.gens.end() && next->second.from < 0) ++next;
    const int64_t last = next != log.gens.end() ? next->second.from : (g.done.empty() ? g.from : *g.done.rbegin());
    for (const auto& [step, feed] : g.feeds) {
      if (step <= g.from) {
        a.problems.push_back(fmt::format("generation {} of attempt {} goes on from step {} but trains step {} again",
                                         it->first.second, it->first.first, g.from, step));
        continue;
      }
      if (step > last) {
        ++a.redoneSteps;
        if (g.done.count(step) != 0) ++a.rolledBackSteps;
        continue;
      }
      if (kept.count(step) != 0) ++a.rolledBackSteps;
      kept[step] = Kept{it->first, &feed, g.world};
    }
  }
  return kept;
}

/// Every rank's share of kept step `step` counted into its epoch's samples.
void countStep(int64_t step, const Kept& k, const RunFacts& run, std::map<int64_t, std::map<int64_t, int>>& counts,
               SampleAudit& a) {
  const std::string where =
      fmt::format("step {} (generation {} of attempt {}, {} worker(s))", step, k.gen.second, k.gen.first, k.world);
  const int64_t epoch = (step - 1) / run.stepsPerEpoch;
  if (k.feed->epoch != epoch) {
    a.problems.push_back(
        fmt::format("{}: logged in epoch {}, step {} is of epoch {}", where, k.feed->epoch + 1, step, epoch + 1));
  }
  int64_t samples = 0;
  for (int64_t rank = 0; rank < k.world; ++rank) {
    for (int64_t micro = 0; micro < run.accumulation; ++micro) {
      const auto share = k.feed->shares.find({rank, micro});
      if (share == k.feed->shares.end()) {
        a.problems.push_back(fmt::format("{}: rank {}'s micro-batch {} is not in the log", where, rank, micro));
        continue;
      }
      for (int64_t id : share->second) {
        if (id < 0 || id >= run.samples) {
          a.problems.push_back(
              fmt::format("{}: rank {} trained sample {}, outside 0..{}", where, rank, id, run.samples - 1));
        }
        ++counts[epoch][id];
        ++samples;
      }
    }
  }
  if (samples != run.globalBatch) {
    a.problems.push_back(fmt::format("{}: {} samples, the global batch is {}", where, samples, run.globalBatch));
  }
}

/// Per epoch: its kept steps against the ones it has, and how often each sample was trained.
void auditEpochs(const std::map<int64_t, Kept>& kept, const RunFacts& run,
                 const std::map<int64_t, std::map<int64_t, int>>& counts, SampleAudit& a) {
  const int64_t epochs = a.lastStep == 0 ? 0 : (a.lastStep - 1) / run.stepsPerEpoch + 1;
  for (int64_t e = 0; e < epochs; ++e) {
    EpochAudit ea;
    ea.epoch = e;
    ea.expectedSteps = std::min(run.stepsPerEpoch, a.lastStep - e * run.stepsPerEpoch);
    std::vector<int64_t> missing;
    for (int64_t s = e * run.stepsPerEpoch + 1; s <= e * run.stepsPerEpoch + ea.expectedSteps; ++s) {
      if (kept.count(s) != 0) {
        ++ea.steps;
      } else {
        missing.push_back(s);
      }
    }
    if (!missing.empty()) {
      a.problems.push_back(
          fmt::format("epoch {}: {} step(s) kept by no generation: {}", e + 1, missing.size(),
                      fmt::join(missing.begin(), missing.begin() + std::min<size_t>(missing.size(), 8), ", ")));
    }
    std::vector<int64_t> doubled;
    const auto found = counts.find(e);
    if (found != counts.end()) {
      for (const auto& [id, n] : found->second) {
        if (n == 1) ++ea.trainedOnce;
        if (n > 1) doubled.push_back(id);
      }
    }
    ea.doubled = static_cast<int64_t>(doubled.size());
    ea.leftOut = run.samples - ea.expectedSteps * run.globalBatch;
    if (!doubled.empty()) {
      a.problems.push_back(
          fmt::format("epoch {}: {} sample(s) trained more than once, among them {}", e + 1, doubled.size(),
                      fmt::join(doubled.begin(), doubled.begin() + std::min<size_t>(doubled.size(), 8), ", ")));
    }
    a.epochs.push_back(ea);
  }
}

}  // namespace

SampleAudit auditSampleLog(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("samples-", 0) == 0 && entry.path().extension() == ".jsonl") files.push_back(entry.path());
  }
  if (ec) throw ConfigError(fmt::format("cannot read the sample log directory {}: {}", dir, ec.message()));
  if (files.empty()) throw ConfigError(fmt::format("{} holds no samples-*.jsonl: not a trainer.sample_log", dir));
  std::sort(files.begin(), files.end());
  Log log;
  for (const auto& f : files) readFile(f, log);
  if (log.run.samples < 0) throw ConfigError(fmt::format("{}: no run line in any file", dir));
  SampleAudit a;
  a.files = static_cast<int>(files.size());
  a.problems = log.problems;
  a.totalSteps = log.run.totalSteps;
  a.stepsPerEpoch = log.run.stepsPerEpoch;
  for (const auto& [key, g] : log.gens) a.generations += g.from >= 0 ? 1 : 0;
  const auto kept = keptSteps(log, a);
  a.keptSteps = static_cast<int64_t>(kept.size());
  a.lastStep = kept.empty() ? 0 : kept.rbegin()->first;
  std::map<int64_t, std::map<int64_t, int>> counts;  // epoch -> sample -> times trained
  for (const auto& [step, k] : kept) countStep(step, k, log.run, counts, a);
  auditEpochs(kept, log.run, counts, a);
  return a;
}

std::string formatSampleAudit(const SampleAudit& a) {
  std::string text = fmt::format("{} file(s), {} generation(s); {} step(s) kept, the last step {} of {}\n", a.files,
                                 a.generations, a.keptSteps, a.lastStep, a.totalSteps);
  for (const auto& e : a.epochs) {
    const bool whole = e.expectedSteps == a.stepsPerEpoch;
    text += fmt::format(
        "epoch {}: {} of {} step(s), {} sample(s) trained once, {} more than once, {} in none of "
        "its steps ({})\n",
        e.epoch + 1, e.steps, e.expectedSteps, e.trainedOnce, e.doubled, e.leftOut,
        whole ? "the last partial global batch" : "the run ended inside the epoch");
  }
  text += fmt::format(
      "steps trained again after a generation change: {} (of them completed by a member and lost "
      "with it: {})\n",
      a.redoneSteps, a.rolledBackSteps);
  if (a.ok()) return text + "OK: every sample of each epoch was trained exactly once in the steps the run kept\n";
  text += fmt::format("FAILED: {} problem(s)\n", a.problems.size());
  for (const auto& p : a.problems) text += "  " + p + "\n";
  return text;
}

std::string sampleAuditJson(const SampleAudit& a) {
  json epochs = json::array();
  for (const auto& e : a.epochs) {
    epochs.push_back({{"epoch", e.epoch + 1},
                      {"steps", e.steps},
                      {"expected_steps", e.expectedSteps},
                      {"trained_once", e.trainedOnce},
                      {"trained_more_than_once", e.doubled},
                      {"left_out", e.leftOut}});
  }
  const json j{{"ok", a.ok()},
               {"files", a.files},
               {"generations", a.generations},
               {"kept_steps", a.keptSteps},
               {"last_step", a.lastStep},
               {"total_steps", a.totalSteps},
               {"redone_steps", a.redoneSteps},
               {"rolled_back_steps", a.rolledBackSteps},
               {"epochs", epochs},
               {"problems", a.problems}};
  return j.dump();
}

}  // namespace lockstep::cli
