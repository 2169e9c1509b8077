// bench/memory.cpp — `lockstep bench memory CONFIG --np 1,2[,...]`: what each
// strategy holds per rank, measured, next to the theory.
//
// For each world size k and each strategy s it runs
//   lockstep run -np k --threads T -- lockstep train CONFIG [overrides] strategy.type=s
//       trainer.max_steps=N trainer.validate=false checkpoint.dir=off checkpoint.resume=none
//       monitor.dir=off generate.samples=0 --result-json TMP/npK-s.json
// and reads back every rank's memory (trainer.h: RankMemory): parameter,
// gradient and optimizer-state bytes counted from the tensors, communication
// buffers, the forward+backward peak from the counting allocator
// (common/tensor_memory.h) and peak RSS. The theory column is the model state
// the strategy keeps per rank, derived from the same run's ddp row (P
// parameters, G gradients, O optimizer state bytes): ddp P+G+O; zero1
// P+G+O/k; zero2 P+(G+O)/k; zero3 (P+G+O)/k — for fp32 Adam 16Ψ, 8Ψ+8Ψ/k,
// 4Ψ+12Ψ/k, 16Ψ/k.
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "cli/bench/child_runs.h"
#include "cli/commands.h"
#include "cli/parse_args.h"
#include "lockstep/common/env.h"
#include "lockstep/common/error.h"
#include "lockstep/rendezvous/init.h"
#include "lockstep/train/config.h"

namespace lockstep::cli {

namespace {

constexpr const char* kMemoryUsage =
    "usage: lockstep bench memory CONFIG.yaml --np 1,2[,...] [--strategies ddp,zero1,zero2,zero3] [--steps N] "
    "[--json]\n"
    "                             [key=value ...]";

struct MemoryOptions {
  std::string config;
  std::vector<int> worldSizes;
  std::vector<std::string> strategies{"ddp", "zero1", "zero2", "zero3"};
  int64_t steps = 3;
  bool json = false;
  std::vector<std::string> overrides;
};

struct RankRow {
  int rank = 0;
  int64_t parameters = 0, gradients = 0, optimizer = 0, commBuffers = 0, stepPeak = -1, peakRss = 0;
  int64_t modelState() const { return parameters + gradients + optimizer; }
};

struct Run {
  int np = 0;
  std::string strategy;
  std::vector<RankRow> ranks;
  double theory = -1;  ///< model state per rank / ddp's, from the ddp run at the same np; -1 unknown
};

std::optional<int> parseMemoryArgs(const std::vector<std::string>& args, MemoryOptions& o) {
  CLI::App app{
      "Runs `lockstep run -np K -- lockstep train CONFIG strategy.type=S` for each K and S and prints the "
      "bytes each rank holds",
      "lockstep bench memory"};
  std::vector<std::string> words;
  std::string np, strategies;
  app.add_option("CONFIG.yaml key.path=value", words, "a training config, then overrides of its keys");
  auto* npOption = app.add_option("-n,--np", np, "the world sizes, comma-separated (e.g. 1,2,4)");
  app.add_option("--strategies", strategies, "strategy.type values, comma-separated (default ddp,zero1,zero2,zero3)");
  app.add_option("--steps", o.steps, "training steps per run (default 3)")
      ->check(CLI::Range(int64_t(1), int64_t(1000000)));
  app.add_flag("--json", o.json, "print one JSON document (on the last line) instead of the table");
  std::vector<std::string> spelled;
  for (const auto& a : args) spelled.push_back(a == "-np" ? "--np" : a);
  if (auto exit = parseArgs(app, spelled, "bench memory", kMemoryUsage)) return exit;
  if (npOption->count() == 0) throw ConfigError("missing --np, the world sizes to measure (e.g. --np 1,2)");
  o.worldSizes = parseWorldSizes(np);
  if (!strategies.empty()) {
    o.strategies.clear();
    size_t start = 0;
    while (true) {
      size_t comma = strategies.find(',', start);
      std::string s = strategies.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (s == "async_ps") {
        throw ConfigError(
            "--strategies 'async_ps': bench memory measures the strategies of the sync schedule (ddp, zero1, "
            "zero2, zero3); a parameter server's memory is its slice of the parameters and optimizer");
      }
      const StrategyType type = parseStrategyType(s, "--strategies");
      o.strategies.push_back(toString(type));  // checked, canonical spelling
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  auto [file, overrides] = splitConfigArgs(words);
  if (file.empty()) throw ConfigError("missing CONFIG.yaml");
  o.config = file;
  o.overrides = overrides;
  return std::nullopt;
}

std::vector<RankRow> readRanks(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("{} exited 0 but wrote no {}", what, path));
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    std::vector<RankRow> rows;
    for (const auto& m : j.at("memory").at("ranks")) {
      RankRow r;
      r.rank = m.at("rank").get<int>();
      r.parameters = m.at("parameter_bytes").get<int64_t>();
      r.gradients = m.at("gradient_bytes").get<int64_t>();
      r.optimizer = m.at("optimizer_bytes").get<int64_t>();
      r.commBuffers = m.at("comm_buffer_bytes").get<int64_t>();
      r.stepPeak = m.at("step_peak_bytes").is_null() ? -1 : m.at("step_peak_bytes").get<int64_t>();
      r.peakRss = m.at("peak_rss_bytes").get<int64_t>();
      rows.push_back(r);
    }
    return rows;
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{} (written by {}) has no memory figures: {}", path, what, e.what()));
  }
}

Run runOne(const MemoryOptions& o, int np, const std::string& strategy, int threads, const std::string& scratch) {
  const std::string tag = fmt::format("np{}-{}", np, strategy);
  TrainChild child;
  child.workers = np;
  child.threads = threads;
  child.config = o.config;
  child.overrides = o.overrides;
  child.extra = {"strategy.type=" + strategy, "trainer.max_steps=" + std::to_string(o.steps)};
  child.resultPath = scratch + "/" + tag + ".json";
  child.logPath = scratch + "/" + tag + ".log";
  const std::string what = fmt::format("the {} run with {} worker(s)", strategy, np);
  runTrainChild(child, "bench memory", what);
  return Run{np, strategy, readRanks(child.resultPath, what)};
}

/// Rank 0 of the ddp run at `np`, the reference of the ratios; null when ddp was not measured there.
const RankRow* ddpAt(const std::vector<Run>& runs, int np) {
  for (const Run& r : runs) {
    if (r.np == np && r.strategy == "ddp" && !r.ranks.empty()) return &r.ranks[0];
  }
  return nullptr;
}

/// The theory column: each strategy's model state per rank over ddp's, from the ddp run's P, G, O.
void fillTheory(std::vector<Run>& runs) {
  for (Run& run : runs) {
    const RankRow* ddp = ddpAt(runs, run.np);
    if (ddp == nullptr) continue;
    const RankRow& d = *ddp;
    const auto p = static_cast<double>(d.parameters), g = static_cast<double>(d.gradients),
               opt = static_cast<double>(d.optimizer), n = static_cast<double>(run.np);
    const double whole = p + g + opt;
    if (whole <= 0) continue;
    if (run.strategy == "ddp") run.theory = 1;
    if (run.strategy == "zero1") run.theory = (p + g + opt / n) / whole;
    if (run.strategy == "zero2") run.theory = (p + (g + opt) / n) / whole;
    if (run.strategy == "zero3") run.theory = 1 / n;
  }
}

double ratioToDdp(const std::vector<Run>& runs, const Run& run, const RankRow& rank) {
  const RankRow* ddp = ddpAt(runs, run.np);
  if (ddp == nullptr || ddp->modelState() <= 0) return -1;
  return static_cast<double>(rank.modelState()) / static_cast<double>(ddp->modelState());
}

std::string mb(int64_t bytes) { return bytes < 0 ? std::string("-") : fmt::format("{:.2f}", bytes / 1e6); }
std::string ratio(double r) { return r < 0 ? std::string("-") : fmt::format("{:.3f}", r); }

void printTable(const MemoryOptions& o, const std::vector<Run>& runs) {
  std::cout << fmt::format("memory per rank of {} (MB = 10^6 bytes, after {} step(s))\n", o.config, o.steps);
  std::cout << fmt::format("{:>3} {:>8} {:>4} | {:>9} {:>9} {:>9} {:>11} {:>7} {:>7} | {:>9} {:>12} {:>9}\n", "np",
                           "strategy", "rank", "params", "grads", "optimizer", "model state", "vs ddp", "theory",
                           "comm bufs", "fwd+bwd peak", "peak RSS");
  for (const Run& run : runs) {
    for (const RankRow& r : run.ranks) {
      std::cout << fmt::format("{:>3} {:>8} {:>4} | {:>9} {:>9} {:>9} {:>11} {:>7} {:>7} | {:>9} {:>12} {:>9}\n",
                               run.np, run.strategy, r.rank, mb(r.parameters), mb(r.gradients), mb(r.optimizer),
                               mb(r.modelState()), ratio(ratioToDdp(runs, run, r)), ratio(run.theory),
                               mb(r.commBuffers), mb(r.stepPeak), mb(r.peakRss));
    }
  }
  std::cout << "model state = parameters + gradients + optimizer state, counted from the tensors; theory = the "
               "strategy's share of ddp's model state (P+G+O/N for zero1, P+(G+O)/N for zero2, (P+G+O)/N for "
               "zero3); fwd+bwd peak = tensor bytes allocated above the step's start during forward and backward "
               "(activations, temporaries, the new gradients)\n";
}

void printJson(const MemoryOptions& o, const std::vector<Run>& runs) {
  nlohmann::json list = nlohmann::json::array();
  for (const Run& run : runs) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const RankRow& r : run.ranks) {
      const double vsDdp = ratioToDdp(runs, run, r);
      ranks.push_back({{"rank", r.rank},
                       {"parameter_bytes", r.parameters},
                       {"gradient_bytes", r.gradients},
                       {"optimizer_bytes", r.optimizer},
                       {"model_state_bytes", r.modelState()},
                       {"model_state_vs_ddp", vsDdp < 0 ? nlohmann::json(nullptr) : nlohmann::json(vsDdp)},
                       {"comm_buffer_bytes", r.commBuffers},
                       {"step_peak_bytes", r.stepPeak < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.stepPeak)},
                       {"peak_rss_bytes", r.peakRss}});
    }
    list.push_back({{"np", run.np},
                    {"strategy", run.strategy},
                    {"theory_vs_ddp", run.theory < 0 ? nlohmann::json(nullptr) : nlohmann::json(run.theory)},
                    {"ranks", ranks}});
  }
  nlohmann::json doc = {
      {"benchmark", "memory"}, {"config", o.config}, {"steps", o.steps}, {"overrides", o.overrides}, {"runs", list}};
  std::cout << doc.dump() << "\n";  // one line: the last line of the output is the document
}

}  // namespace

int benchMemory(const std::vector<std::string>& args) {
  MemoryOptions o;
  try {
    if (auto exit = parseMemoryArgs(args, o)) return *exit;
    std::vector<std::string> all = o.overrides;
    all.push_back("trainer.max_steps=" + std::to_string(o.steps));
    loadTrainConfig(o.config, all);  // a bad config or key fails here, before any run
  } catch (const ConfigError& e) {
    std::cerr << "lockstep bench memory: error: " << e.what() << "\n" << kMemoryUsage << "\n";
    return kExitUsage;
  }
  const int cores = workerThreads(Environment({}), 1);
  std::vector<Run> runs;
  std::string scratch;
  try {
    scratch = makeScratchDir("lockstep-memory");
    for (int np : o.worldSizes) {
      for (const auto& s : o.strategies) runs.push_back(runOne(o, np, s, std::max(1, cores / np), scratch));
    }
  } catch (const Error& e) {
    std::cerr << "lockstep bench memory: " << e.what() << "\n";
    return kExitFailure;
  }
  fillTheory(runs);
  if (o.json) {
    printJson(o, runs);
  } else {
    printTable(o, runs);
  }
  std::filesystem::remove_all(scratch);
  return kExitOk;
}

}  // namespace lockstep::cli
