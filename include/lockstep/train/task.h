// lockstep/train/task.h — a workload `lockstep train` can run, by data.dataset.
//
// A Task turns a TrainConfig into what the Trainer needs (model, datasets,
// loss, optional accuracy, checkpoint extras) and may act on the result
// (the pet-name task samples names). Tasks live in a TaskRegistry the
// program owns and fills — the lockstep CLI with the built-in workloads
// (lockstep/workloads/tasks.h), a user's program with its own — keyed by the
// config's data.dataset; no global registry.
//
//   lockstep::TaskRegistry tasks;
//   tasks.add("my-sensors", [] { return std::make_unique<MySensorTask>(); });
//   lockstep::FitResult r = lockstep::trainTask(tasks, config, config.trainer, ctx.comm);
//
// build() runs on every rank and must give every rank the same datasets and
// model shape; it is called after at::manual_seed(config.trainer.seed), so a
// model initialised there is the same everywhere (DDP broadcasts rank 0's anyway).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/train/config.h"
#include "lockstep/train/trainer.h"

namespace lockstep {

/// What a Task gives the Trainer.
struct TaskParts {
  std::shared_ptr<torch::nn::Module> model;
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> validation;  ///< null: no validation
  LossFn loss;
  CorrectFn correct;  ///< null: no accuracy
  /// The model as a chain of layers, with the loss and accuracy of its output: what pipeline
  /// stages (parallel.pipeline > 1) split and ZeRO-3 gathers one layer at a time. When given, the
  /// Trainer trains the chain (`loss` and `correct` are then unused). Empty: the model is trained
  /// whole with `loss`, and cannot be split.
  std::vector<Layer> layers;
  OutputLossFn outputLoss;
  OutputCorrectFn outputCorrect;
  /// Stored in every checkpoint (what a reader needs to rebuild the model).
  std::vector<std::pair<std::string, std::string>> checkpointExtras;
};

class Task {
 public:
  virtual ~Task() = default;
  /// Loads the data and builds the model. Throws ConfigError for a config it cannot run.
  virtual TaskParts build(const TrainConfig& config, int rank) = 0;
  /// After fit() returned, on every rank (print on rank 0 only). Default: nothing.
  virtual void afterFit(const TrainConfig& /*config*/, const FitResult& /*result*/, int /*rank*/) {}
};

class TaskRegistry {
 public:
  using Factory = std::function<std::unique_ptr<Task>()>;
  /// Registers the task for data.dataset == `dataset`, replacing an earlier one.
  void add(const std::string& dataset, Factory factory);
  /// A new task for `dataset`; throws ConfigError naming data.dataset and the known ones.
  std::unique_ptr<Task> make(const std::string& dataset) const;
  std::vector<std::string> datasets() const;

 private:
  std::map<std::string, Factory> factories_;
};

/// Builds config.data.dataset's task, trains it with `options` (normally
/// config.trainer plus callbacks) and runs its afterFit. Collective.
FitResult trainTask(const TaskRegistry& tasks, const TrainConfig& config, TrainerOptions options,
                    std::shared_ptr<Communicator> comm);

}  // namespace lockstep
