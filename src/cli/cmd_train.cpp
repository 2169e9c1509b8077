// cmd_train.cpp — `lockstep train CONFIG.yaml [key=value ...]` (the config's
// task from the built-in workloads, with monitoring and fault injection) and
// `lockstep generate --checkpoint FILE [-n 20] [--temperature 0.8]`.
#include <ATen/ATen.h>
#include <CLI/CLI.hpp>

#include <torch/nn/module.h>
#include <csignal>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <iostream>
#include <random>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "lockstep/common/device.h"
#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/common/tensor_memory.h"
#include "lockstep/models/char_lstm.h"
#include "lockstep/monitor/monitor.h"
#include "lockstep/rendezvous/init.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/config.h"
#include "lockstep/train/elastic.h"
#include "lockstep/train/task.h"
#include "lockstep/train/trainer.h"
#include "lockstep/workloads/tasks.h"

namespace lockstep::cli {

namespace {

constexpr const char* kTrainUsage =
    "usage: lockstep train CONFIG.yaml [key.path=value ...] [--result-json PATH]   (docs/training.md)";
constexpr const char* kGenerateUsage =
    "usage: lockstep generate --checkpoint FILE [-n COUNT] [--temperature T] [--seed S] [--max-length L]";

/// The run directory writers of this rank (docs/monitoring.md); config.monitor.dir is already resolved.
MonitorOptions monitorOptions(const TrainConfig& c, const WorldInfo& world) {
  MonitorOptions m;
  m.dir = c.monitor.dir;
  m.rank = world.rank;
  m.worldSize = world.worldSize;
  m.localRank = world.localRank;
  m.configText = toYaml(c);
  m.systemInterval = c.monitor.systemInterval;
  m.traceSteps = c.monitor.traceSteps;
  m.progress = parseProgressMode(c.monitor.progress, "monitor.progress");
  m.progressInterval = c.monitor.progressInterval;
  return m;
}

std::string extra(const CheckpointInfo& info, const std::string& key, const std::string& path) {
  for (const auto& [k, v] : info.extras) {
    if (k == key) return v;
  }
  throw CheckpointError(fmt::format("checkpoint {} has no '{}' entry; was it written by `lockstep train`?", path, key));
}

/// Fault injection for the restart and elastic tests: LOCKSTEP_FAULT_KILL_AT_STEP=N makes rank
/// LOCKSTEP_FAULT_KILL_RANK (default 0) SIGKILL itself when step N ends, before that step's
/// checkpoint, in the first attempt only (LOCKSTEP_RESTART_COUNT 0) and not in a newcomer to an elastic
/// job; LOCKSTEP_FAULT_SIGNAL=TERM
/// sends SIGTERM instead (a preemption).
class FaultKiller : public TrainerCallback {
 public:
  FaultKiller(int64_t step, int signal) : step_(step), signal_(signal) {}
  void onStepEnd(const StepRecord& record) override {
    if (record.step != step_) return;
    log::warn(
        fmt::format("fault injection: {} at the end of step {}", signal_ == SIGTERM ? "SIGTERM" : "SIGKILL", step_));
    ::raise(signal_);
  }

 private:
  int64_t step_;
  int signal_;
};

std::shared_ptr<TrainerCallback> makeFaultKiller(const Environment& env, int rank) {
  auto step = env.getInt("LOCKSTEP_FAULT_KILL_AT_STEP", 1);
  if (!step) return nullptr;
  if (env.getInt("LOCKSTEP_FAULT_KILL_RANK", 0).value_or(0) != rank) return nullptr;
  if (env.get(kNewcomerVar).value_or("") == "1") return nullptr;  // the one taking the killed worker's slot
  if (env.getInt(env::kRestartCount, 0).value_or(0) != 0) return nullptr;
  const std::string signal = env.get("LOCKSTEP_FAULT_SIGNAL").value_or("KILL");
  if (signal != "KILL" && signal != "TERM") {
    throw ConfigError(fmt::format("LOCKSTEP_FAULT_SIGNAL={}: expected KILL or TERM", signal));
  }
  return std::make_shared<FaultKiller>(*step, signal == "TERM" ? SIGTERM : SIGKILL);
}

int train(const std::string& configFile, const std::vector<std::string>& overrides, const std::string& resultJson) {
  TrainConfig config = loadTrainConfig(configFile, overrides);
  // Count tensor bytes from the start: the result's forward+backward peak (bench memory).
  trackTensorMemory();
  InitOptions initOptions;
  initOptions.device = config.trainer.device;  // no GPU for `device: cuda`: an error before any file
  Context ctx = init(initOptions);
  if (config.monitor.dir.empty()) config.monitor.dir = defaultRunDir(configFile);
  std::string& checkpointDir = config.trainer.checkpoint.dir;
  if (checkpointDir.empty()) checkpointDir = defaultRunDir(configFile) + "/checkpoints";
  if (monitorDisabled(checkpointDir)) checkpointDir.clear();
  TrainerOptions options = config.trainer;
  options.localRank = ctx.world.localRank;
  options.elastic = elasticTraining(ctx, Environment::fromProcess());
  if (!monitorDisabled(config.monitor.dir)) {
    MonitorOptions monitor = monitorOptions(config, ctx.world);
    monitor.elastic = options.elastic != nullptr;
    monitor.newcomer = options.elastic && options.elastic->newcomer;
    auto monitors = makeMonitorCallbacks(monitor);
    options.callbacks.insert(options.callbacks.end(), monitors.begin(), monitors.end());
  }
  if (!resultJson.empty()) options.callbacks.push_back(makeResultJsonWriter(resultJson, ctx.numThreads));
  if (auto crash = Environment::fromProcess().getInt("LOCKSTEP_FAULT_CRASH_AFTER_STEP", 0)) {
    config.testing.crashAfterStep = *crash;
  }
  if (auto killer = makeFaultKiller(Environment::fromProcess(), ctx.world.rank)) options.callbacks.push_back(killer);
  TaskRegistry tasks;
  addBuiltinTasks(tasks);
  trainTask(tasks, config, std::move(options), ctx.comm);
  return kExitOk;
}

}  // namespace

int trainCommand(const std::vector<std::string>& args) {
  std::vector<std::string> words;
  std::string resultJson;
  CLI::App app{"Train the task of a config (docs/training.md)", "lockstep train"};
  app.add_option("CONFIG.yaml key.path=value", words, "a config file, then overrides of its keys");
  app.add_option("--result-json", resultJson, "write rank 0's result as one JSON object to this file")
      ->check([](const std::string& path) -> std::string {
        auto folder = std::filesystem::path(path).parent_path();
        if (!path.empty() && (folder.empty() || std::filesystem::is_directory(folder))) return "";
        return fmt::format("--result-json '{}': expected a file path in an existing directory", path);
      });
  app.footer("keys: " + fmt::format("{}", fmt::join(trainConfigKeys(), ", ")));
  if (auto exit = parseArgs(app, args, "train", kTrainUsage)) return *exit;
  try {
    ConfigArgs config = splitConfigArgs(words);
    return train(config.file, config.overrides, resultJson);
  } catch (const ConfigError& e) {
    std::cerr << "lockstep train: error: " << e.what() << "\n" << kTrainUsage << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "lockstep train: " << e.what() << "\n";
    return kExitFailure;
  }
}

int generateCommand(const std::vector<std::string>& args) {
  std::string checkpoint;
  int64_t count = 20;
  double temperature = 0.8;
  int64_t maxLength = 24;
  int64_t seed = -1;
  CLI::App app{"Sample names from a trained pet-name checkpoint", "lockstep generate"};
  app.add_option("--checkpoint", checkpoint, "a checkpoint written by lockstep train")->required();
  app.add_option("-n,--count", count, "how many names")->check(CLI::Range(int64_t(1), int64_t(100000)));
  app.add_option("--temperature", temperature, "sampling temperature (lower: safer names)")
      ->check(CLI::Range(1e-3, 100.0));
  app.add_option("--max-length", maxLength, "longest name")->check(CLI::Range(int64_t(1), int64_t(1000)));
  app.add_option("--seed", seed, "random seed (default: a random one)");
  if (auto exit = parseArgs(app, args, "generate", kGenerateUsage)) return *exit;
  try {
    CheckpointInfo info = readCheckpointInfo(checkpoint);
    for (const auto& [k, v] : info.extras) {
      if (k == "task" && v != "names") {
        throw Error(fmt::format("{} is a checkpoint of an image model, not of the pet-name generator", checkpoint));
      }
    }
    CharVocab vocab = CharVocab::fromString(extra(info, "vocab", checkpoint));
    int64_t hidden = std::stoll(extra(info, "model.hidden", checkpoint));
    int64_t layers = std::stoll(extra(info, "model.layers", checkpoint));
    int64_t window = std::stoll(extra(info, "model.window", checkpoint));
    CharLstm model(CharLstmOptions{vocab.size(), hidden, layers});
    loadModelFromCheckpoint(checkpoint, *model);
    model->eval();
    uint64_t s = seed >= 0 ? static_cast<uint64_t>(seed) : std::random_device{}();
    for (const auto& name : sampleNames(*model, vocab, window, count, temperature, maxLength, s)) {
      std::cout << name << "\n";
    }
    return kExitOk;
  } catch (const std::exception& e) {
    std::cerr << "lockstep generate: error: " << e.what() << "\n";
    return kExitFailure;
  }
}

}  // namespace lockstep::cli
