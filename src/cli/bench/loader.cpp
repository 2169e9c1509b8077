// bench/loader.cpp — `lockstep bench loader CONFIG [key=value ...] [--batches N]`:
// is the loader fast enough? Measures the loader alone (num_workers threads
// decoding and augmenting) and the trainer's consumption rate (forward +
// backward + optimizer step of the config's model on ready-made batches, no
// data loading), and prints both with their ratio.
#include <ATen/ATen.h>
#include <torch/optim/adam.h>

#include <fmt/format.h>

#include <chrono>
#include <iostream>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "lockstep/common/error.h"
#include "lockstep/data/loader.h"
#include "lockstep/data/sampler.h"
#include "lockstep/models/vision.h"
#include "lockstep/rendezvous/init.h"
#include "lockstep/workloads/tasks.h"

namespace lockstep::cli {

int benchLoader(const std::vector<std::string>& args) {
  std::vector<std::string> words;
  int64_t batches = 50;
  CLI::App app{"The image loader alone against the trainer's consumption (docs/performance.md)",
               "lockstep bench loader"};
  app.add_option("CONFIG.yaml key.path=value", words, "a training config, then overrides of its keys");
  app.add_option("--batches", batches, "batches to time")->check(CLI::Range(int64_t(1), int64_t(1000000)));
  if (auto exit =
          parseArgs(app, args, "bench loader", "usage: lockstep bench loader CONFIG [key=value ...] [--batches N]")) {
    return *exit;
  }
  auto [file, overrides] = splitConfigArgs(words);
  TrainConfig config = loadTrainConfig(file, overrides);
  if (config.data.dataset == "names") {
    throw ConfigError("lockstep bench loader measures image pipelines; " + file + " trains on names");
  }
  Context ctx = init({}, Environment::fromProcess());
  auto [trainImages, testImages] = openImageSets(config.data);
  ImageClassificationSet set(trainImages, transformsFor(config, true));
  DistributedSampler sampler(SamplerOptions{set.size(), 0, 1, true, config.trainer.seed, false});
  int64_t available = sampler.numBatches(config.trainer.batchSize, true);
  batches = std::min(batches, available);
  std::vector<std::vector<int64_t>> plan;
  for (int64_t b = 0; b < batches; ++b) plan.push_back(sampler.batch(b, config.trainer.batchSize));

  LoaderOptions loaderOptions = config.trainer.loader;
  std::vector<Batch> kept;
  double loaderSeconds = 0;
  {
    DataLoader loader(set, loaderOptions);
    auto start = std::chrono::steady_clock::now();
    loader.start(plan, 0);
    for (int64_t b = 0; b < batches; ++b) {
      Batch batch = loader.next();
      if (kept.size() < 4) kept.push_back(batch);
    }
    loaderSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  double loaderRate = static_cast<double>(batches * config.trainer.batchSize) / loaderSeconds;

  ImageShape shape = trainImages->shape();
  at::manual_seed(0);
  ImageModelOptions modelOptions{shape.channels, shape.height, trainImages->numClasses(), config.model.hiddenSizes};
  auto model = makeImageModel(config.model.type, modelOptions);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  int64_t steps = std::max<int64_t>(5, std::min<int64_t>(batches, 20));
  auto trainStep = [&](const Batch& batch) {
    optimizer.zero_grad();
    at::cross_entropy_loss(model->forward(batch.inputs), batch.targets).backward();
    optimizer.step();
  };
  trainStep(kept[0]);  // warm-up
  auto start = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < steps; ++s) trainStep(kept[static_cast<size_t>(s) % kept.size()]);
  double trainSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double trainRate = static_cast<double>(steps * config.trainer.batchSize) / trainSeconds;

  std::cout << fmt::format("loader: {} ({}), batch {}, {} worker thread(s), prefetch {}\n", config.data.dataset,
                           trainImages->description(), config.trainer.batchSize, loaderOptions.numWorkers,
                           loaderOptions.prefetch);
  std::cout << fmt::format("  loader alone      : {:8.0f} samples/s ({} batches)\n", loaderRate, batches);
  std::cout << fmt::format("  trainer ({:>8}) : {:8.0f} samples/s ({} steps of forward+backward+Adam, {} thread(s))\n",
                           config.model.type, trainRate, steps, ctx.numThreads);
  std::cout << fmt::format("  loader / trainer  : {:8.2f}x {}\n", loaderRate / trainRate,
                           loaderRate > trainRate ? "(the loader keeps ahead)" : "(the loader is the bottleneck)");
  return kExitOk;
}

}  // namespace lockstep::cli
