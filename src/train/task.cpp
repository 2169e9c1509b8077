#include "lockstep/train/task.h"

#include <ATen/ATen.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "lockstep/common/error.h"

namespace lockstep {

void TaskRegistry::add(const std::string& dataset, Factory factory) {
  LOCKSTEP_CHECK(!dataset.empty() && factory, "TaskRegistry::add needs a dataset name and a factory");
  factories_[dataset] = std::move(factory);
}

std::unique_ptr<Task> TaskRegistry::make(const std::string& dataset) const {
  auto it = factories_.find(dataset);
  if (it == factories_.end()) {
    throw ConfigError(fmt::format("data.dataset '{}' is unknown; expected {}", dataset, fmt::join(datasets(), ", ")));
  }
  auto task = it->second();
  LOCKSTEP_CHECK(task != nullptr, "the task factory for data.dataset '", dataset, "' returned no task");
  return task;
}

std::vector<std::string> TaskRegistry::datasets() const {
  std::vector<std::string> names;
  for (const auto& entry : factories_) names.push_back(entry.first);
  return names;
}

FitResult trainTask(const TaskRegistry& tasks, const TrainConfig& config, TrainerOptions options,
                    std::shared_ptr<Communicator> comm) {
  LOCKSTEP_CHECK(comm != nullptr, "trainTask needs a communicator");
  const int rank = comm->rank();
  auto task = tasks.make(config.data.dataset);
  at::manual_seed(config.trainer.seed);
  TaskParts parts = task->build(config, rank);
  LOCKSTEP_CHECK(parts.model && parts.train && parts.loss, "the task of data.dataset '", config.data.dataset,
                 "' gave no model, training set or loss");
  auto& extras = options.checkpoint.extras;
  extras.insert(extras.end(), parts.checkpointExtras.begin(), parts.checkpointExtras.end());
  Trainer trainer(std::move(comm), std::move(options));
  trainer.injectFaults(config.testing);
  FitResult result;
  const bool zero3Units = config.trainer.strategy == StrategyType::kZero3 && !parts.layers.empty() && parts.outputLoss;
  if (config.trainer.pipeline.stages > 1 || zero3Units) {
    if (parts.layers.empty() || !parts.outputLoss) {
      throw ConfigError(fmt::format(
          "parallel.pipeline {}: model.type {} cannot be split into pipeline stages (it is not offered as a chain of "
          "layers; the image models are)",
          config.trainer.pipeline.stages, config.model.type));
    }
    LayeredModel layered{parts.model, parts.layers, parts.outputLoss, parts.outputCorrect};
    result = trainer.fit(layered, *parts.train, parts.validation.get());
  } else {
    result = trainer.fit(parts.model, parts.loss, *parts.train, parts.validation.get(), parts.correct);
  }
  task->afterFit(config, result, rank);
  return result;
}

}  // namespace lockstep
