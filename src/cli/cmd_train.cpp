// cmd_train.cpp — `lockstep train CONFIG.yaml [key=value ...]` and
// `lockstep generate --checkpoint FILE [-n 20] [--temperature 0.8]`: the
// pet-name generator end to end (names -> windows -> CharLstm -> Trainer).
#include <ATen/ATen.h>
#include <CLI/CLI.hpp>

#include <csignal>
#include <torch/nn/module.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>
#include <filesystem>
#include <random>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "cli/image_task.h"
#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/data/char_dataset.h"
#include "lockstep/data/image_dataset.h"
#include "lockstep/data/image_transforms.h"
#include "lockstep/data/names.h"
#include "lockstep/data/sampler.h"
#include "lockstep/models/char_lstm.h"
#include "lockstep/models/vision.h"
#include "lockstep/monitor/monitor.h"
#include "lockstep/rendezvous/init.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/config.h"
#include "lockstep/train/trainer.h"

namespace lockstep::cli {

namespace {

constexpr const char* kTrainUsage =
    "usage: lockstep train CONFIG.yaml [key.path=value ...] [--result-json PATH]   (docs/training.md)";
constexpr const char* kGenerateUsage =
    "usage: lockstep generate --checkpoint FILE [-n COUNT] [--temperature T] [--seed S] [--max-length L]";

TrainerOptions trainerOptions(const TrainConfig& c) {
  TrainerOptions o;
  o.epochs = c.trainer.epochs;
  o.maxSteps = c.trainer.maxSteps;
  o.batchSize = c.trainer.batchSize;
  o.accumulation = c.trainer.accumulation;
  o.clipGradNorm = c.trainer.clipGradNorm;
  o.seed = static_cast<uint64_t>(c.trainer.seed);
  o.logEvery = c.trainer.logEvery;
  o.validate = c.trainer.validate;
  o.loader.numWorkers = static_cast<int>(c.data.numWorkers);
  o.loader.prefetch = static_cast<int>(c.data.prefetch);
  o.optimizer = c.optimizer.type;
  o.lr = c.optimizer.lr;
  o.momentum = c.optimizer.momentum;
  o.weightDecay = c.optimizer.weightDecay;
  o.beta1 = c.optimizer.beta1;
  o.beta2 = c.optimizer.beta2;
  o.lrScaling.rule = parseLrScalingRule(c.lrScaling.rule, "lr_scaling.rule");
  o.lrScaling.baseBatch = c.lrScaling.baseBatch;
  o.lrScaling.warmupSteps = c.lrScaling.warmupSteps;
  o.bucketCapMb = c.ddp.bucketCapMb;
  o.firstBucketCapMb = c.ddp.firstBucketCapMb;
  o.findUnusedParameters = c.ddp.findUnusedParameters;
  o.broadcastBuffers = c.ddp.broadcastBuffers;
  o.compression = parseGradCompression(c.ddp.compression, "ddp.compression");
  o.checkpointDir = c.checkpoint.dir;
  o.checkpointEvery = c.checkpoint.every;
  o.keepLast = c.checkpoint.keepLast;
  o.resume = c.checkpoint.resume;
  return o;
}

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

std::vector<std::string> sampleNames(CharLstmImpl& model, const CharVocab& vocab, int64_t window, int64_t count,
                                     double temperature, int64_t maxLength, uint64_t seed) {
  at::Generator generator = at::detail::createCPUGenerator(seed);
  std::vector<std::string> out;
  for (int64_t i = 0; i < count; ++i) {
    auto indices = sampleSequence(model, window, CharVocab::kPadIndex, CharVocab::kStopIndex, temperature, maxLength,
                                  generator);
    out.push_back(capitalise(vocab.decode(indices)));
  }
  return out;
}

int trainNames(const TrainConfig& config, TrainerOptions options, Context& ctx) {
  const bool master = ctx.world.rank == 0;
  NamesOptions namesOptions;
  namesOptions.sources = config.data.sources;
  namesOptions.csvColumn = config.data.csvColumn;
  namesOptions.lowercase = true;
  std::vector<std::string> names = loadNames(namesOptions);
  // A fixed split of names (not windows): validation names are never trained on.
  auto order = globalOrder(static_cast<int64_t>(names.size()), true, options.seed, /*epoch=*/0);
  auto validationCount = static_cast<int64_t>(static_cast<double>(names.size()) * config.data.validationFraction);
  std::vector<std::string> trainNames, validationNames;
  for (size_t i = 0; i < order.size(); ++i) {
    (static_cast<int64_t>(i) < validationCount ? validationNames : trainNames).push_back(names[order[i]]);
  }
  CharVocab vocab = CharVocab::fromNames(names);
  CharWindows trainWindows = makeWindows(trainNames, vocab, static_cast<int>(config.model.window));
  TensorDataset trainSet(trainWindows.inputs, trainWindows.targets);
  std::unique_ptr<TensorDataset> validationSet;
  if (!validationNames.empty()) {
    CharWindows v = makeWindows(validationNames, vocab, static_cast<int>(config.model.window));
    validationSet = std::make_unique<TensorDataset>(v.inputs, v.targets);
  }
  if (master) {
    log::info(fmt::format("data: {} names from {} ({} for training, {} for validation), {} training windows of {}, "
                          "vocabulary {} symbols", names.size(), fmt::join(config.data.sources, ", "),
                          trainNames.size(), validationNames.size(), trainWindows.inputs.size(0), config.model.window,
                          vocab.size()));
  }

  at::manual_seed(options.seed);
  CharLstm model(CharLstmOptions{vocab.size(), config.model.hidden, config.model.layers});
  options.checkpointExtras = {{"task", "names"},
                              {"vocab", vocab.toString()},
                              {"model.hidden", std::to_string(config.model.hidden)},
                              {"model.layers", std::to_string(config.model.layers)},
                              {"model.window", std::to_string(config.model.window)},
                              {"config", toYaml(config)}};
  Trainer trainer(ctx.comm, options);
  LossFn loss = [](torch::nn::Module& m, const Batch& batch) {
    return charLstmLoss(static_cast<CharLstmImpl&>(m).forward(batch.inputs), batch.targets);
  };
  FitResult result = trainer.fit(model.ptr(), loss, trainSet, validationSet.get());

  if (master && config.generate.samples > 0) {
    model->eval();
    auto generated = sampleNames(*model, vocab, config.model.window, config.generate.samples,
                                 config.generate.temperature, 24, options.seed + 1);
    std::cout << fmt::format("generated names (temperature {}, after {} steps, train loss {:.3f}):\n",
                             config.generate.temperature, result.steps, result.lastTrainLoss);
    for (const auto& name : generated) std::cout << "  " << name << "\n";
    if (!result.lastCheckpoint.empty()) {
      std::cout << fmt::format("more: lockstep generate --checkpoint {} -n 20\n", result.lastCheckpoint);
    }
    std::cout << std::flush;
  }
  return kExitOk;
}

}  // namespace

/// The train and test (or val) image sets a config names.
std::pair<std::shared_ptr<ImageDataset>, std::shared_ptr<ImageDataset>> openImageSets(const TrainConfig::Data& d) {
  auto needRoot = [&](const char* what) {
    if (d.root.empty()) throw ConfigError(fmt::format("data.dataset {} needs data.root ({})", d.dataset, what));
    return d.root;
  };
  if (d.dataset == "fashion-mnist") {
    std::string root = d.root.empty() ? kDefaultFashionMnistRoot : d.root;
    return {openFashionMnist(root, true), openFashionMnist(root, false)};
  }
  if (d.dataset == "mnist") {
    std::string root = needRoot("the folder with train-images-idx3-ubyte[.gz] ...");
    return {openMnist(root, true), openMnist(root, false)};
  }
  if (d.dataset == "cifar10") {
    std::string root = needRoot("the folder with data_batch_1.bin ... test_batch.bin");
    return {openCifar10(root, true), openCifar10(root, false)};
  }
  std::string root = needRoot("a folder with train/<class>/<image> and optionally val/<class>/<image>");
  ImageFolderOptions o;
  o.resizeHeight = o.resizeWidth = d.imageSize;
  o.channels = d.channels;
  o.onBadImage = d.badImages == "skip" ? BadImagePolicy::kSkip : BadImagePolicy::kAbort;
  auto train = ImageFolderDataset::open(root + "/train", o);
  std::shared_ptr<ImageDataset> val;
  if (std::filesystem::is_directory(root + "/val")) val = ImageFolderDataset::open(root + "/val", o);
  return {train, val};
}

ImageTransformOptions transformsFor(const TrainConfig& config, bool train) {
  ImageTransformOptions t;
  auto [mean, std] = standardNormalisation(config.data.dataset);
  t.mean = config.data.mean.empty() ? mean : config.data.mean;
  t.std = config.data.std.empty() ? std : config.data.std;
  t.seed = static_cast<uint64_t>(config.trainer.seed);
  if (train) {
    t.randomFlip = config.data.randomFlip;
    t.cropPadding = config.data.cropPadding;
  }
  return t;
}

namespace {

int trainImages(const TrainConfig& config, TrainerOptions options, Context& ctx) {
  const bool master = ctx.world.rank == 0;
  auto [trainImages, testImages] = openImageSets(config.data);
  ImageShape shape = trainImages->shape();
  if (shape.height != shape.width) {
    throw ConfigError(fmt::format("images are {}x{}; the built-in models take square images (set data.image_size)",
                                  shape.height, shape.width));
  }
  ImageClassificationSet trainSet(trainImages, transformsFor(config, true));
  std::unique_ptr<ImageClassificationSet> testSet;
  if (testImages) testSet = std::make_unique<ImageClassificationSet>(testImages, transformsFor(config, false));
  if (master) {
    log::info(fmt::format("data: {}; validation: {}", trainImages->description(),
                          testImages ? testImages->description() : std::string("none")));
  }
  at::manual_seed(options.seed);
  auto model = makeImageModel(config.model.type, ImageModelOptions{shape.channels, shape.height,
                                                                   trainImages->numClasses(),
                                                                   config.model.hiddenSizes});
  if (master) {
    log::info(fmt::format("model: {} with {} parameters", config.model.type, countParameters(*model)));
  }
  options.checkpointExtras = {{"task", "images"},
                              {"model.type", config.model.type},
                              {"data.dataset", config.data.dataset},
                              {"num_classes", std::to_string(trainImages->numClasses())},
                              {"config", toYaml(config)}};
  Trainer trainer(ctx.comm, options);
  LossFn loss = [](torch::nn::Module& m, const Batch& batch) {
    return at::cross_entropy_loss(static_cast<ImageClassifierImpl&>(m).forward(batch.inputs), batch.targets);
  };
  CorrectFn correct = [](torch::nn::Module& m, const Batch& batch) {
    auto predicted = static_cast<ImageClassifierImpl&>(m).forward(batch.inputs).argmax(1);
    return predicted.eq(batch.targets).sum().item<int64_t>();
  };
  FitResult result = trainer.fit(model, loss, trainSet, testSet.get(), correct);
  if (master && result.lastValidationAccuracy >= 0) {
    std::cout << fmt::format("{} on {}: validation accuracy {:.2f}% after {} steps ({:.0f} s, {:.0f} samples/s)\n",
                             config.model.type, config.data.dataset, 100 * result.lastValidationAccuracy,
                             result.steps, result.seconds, result.samplesPerSecond)
              << std::flush;
  }
  return kExitOk;
}

/// Fault injection for the restart tests: LOCKSTEP_FAULT_KILL_AT_STEP=N makes rank
/// LOCKSTEP_FAULT_KILL_RANK (default 0) SIGKILL itself when step N ends, before
/// that step's checkpoint, in the first attempt only (LOCKSTEP_RESTART_COUNT 0).
class FaultKiller : public TrainerCallback {
 public:
  explicit FaultKiller(int64_t step) : step_(step) {}
  void onStepEnd(const StepRecord& record) override {
    if (record.step != step_) return;
    log::warn(fmt::format("fault injection: SIGKILL at the end of step {}", step_));
    ::raise(SIGKILL);
  }

 private:
  int64_t step_;
};

std::shared_ptr<TrainerCallback> makeFaultKiller(const Environment& env, int rank) {
  auto step = env.getInt("LOCKSTEP_FAULT_KILL_AT_STEP", 1);
  if (!step) return nullptr;
  if (env.getInt("LOCKSTEP_FAULT_KILL_RANK", 0).value_or(0) != rank) return nullptr;
  if (env.getInt(env::kRestartCount, 0).value_or(0) != 0) return nullptr;
  return std::make_shared<FaultKiller>(*step);
}

int train(const std::string& configFile, const std::vector<std::string>& overrides, const std::string& resultJson) {
  TrainConfig config = loadTrainConfig(configFile, overrides);
  TrainerOptions options = trainerOptions(config);
  Context ctx = init();
  if (config.monitor.dir.empty()) config.monitor.dir = defaultRunDir(configFile);
  if (!monitorDisabled(config.monitor.dir)) {
    auto monitors = makeMonitorCallbacks(monitorOptions(config, ctx.world));
    options.callbacks.insert(options.callbacks.end(), monitors.begin(), monitors.end());
  }
  if (!resultJson.empty()) options.callbacks.push_back(makeResultJsonWriter(resultJson, ctx.numThreads));
  if (auto crash = Environment::fromProcess().getInt("LOCKSTEP_FAULT_CRASH_AFTER_STEP", 0)) {
    options.crashAfterStep = *crash;
  }
  if (auto killer = makeFaultKiller(Environment::fromProcess(), ctx.world.rank)) options.callbacks.push_back(killer);
  if (config.data.dataset == "names") return trainNames(config, options, ctx);
  return trainImages(config, options, ctx);
}

}  // namespace

int trainCommand(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "-h" || args[0] == "--help")) {
    std::cout << kTrainUsage << "\nkeys: " << fmt::format("{}", fmt::join(trainConfigKeys(), ", ")) << "\n";
    return kExitOk;
  }
  std::string file;
  std::vector<std::string> overrides;
  std::string resultJson;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--result-json" || a.rfind("--result-json=", 0) == 0) {
      if (a == "--result-json" && i + 1 == args.size()) {
        std::cerr << "lockstep train: error: --result-json needs a file path\n" << kTrainUsage << "\n";
        return kExitUsage;
      }
      resultJson = a == "--result-json" ? args[++i] : a.substr(std::string("--result-json=").size());
      auto folder = std::filesystem::path(resultJson).parent_path();
      if (resultJson.empty() || (!folder.empty() && !std::filesystem::is_directory(folder))) {
        std::cerr << "lockstep train: error: --result-json '" << resultJson
                  << "': expected a file path in an existing directory\n" << kTrainUsage << "\n";
        return kExitUsage;
      }
    } else if (a.find('=') != std::string::npos) {
      overrides.push_back(a);
    } else if (file.empty() && !a.empty() && a[0] != '-') {
      file = a;
    } else {
      std::cerr << "lockstep train: error: unexpected argument '" << a << "'\n" << kTrainUsage << "\n";
      return kExitUsage;
    }
  }
  try {
    return train(file, overrides, resultJson);
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
