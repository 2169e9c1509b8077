#include "lockstep/train/task.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "lockstep/common/checksum.h"
#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/train/elastic.h"

namespace lockstep {

namespace {

/// CRC-32C of the bytes of `model`'s parameters, in order, as float32 on the CPU.
uint32_t parameterChecksum(torch::nn::Module& model, size_t* tensors) {
  uint32_t crc = 0;
  *tensors = 0;
  for (const auto& p : model.parameters()) {
    const at::Tensor host = p.detach().to(at::kCPU, at::kFloat).contiguous();
    crc = crc32c(host.data_ptr(), static_cast<size_t>(host.nbytes()), crc);
    ++*tensors;
  }
  return crc;
}

}  // namespace

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
  // A newcomer to an elastic run is in a world of its own until it joins: its slot's rank speaks for it.
  const int rank = options.elastic ? options.elastic->rank : comm->rank();
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
  if (parts.layers.empty() || !parts.outputLoss) {
    if (config.trainer.pipeline.stages > 1) {
      throw ConfigError(fmt::format(
          "parallel.pipeline {}: model.type {} cannot be split into pipeline stages (it is not offered as a chain of "
          "layers; the image models are)",
          config.trainer.pipeline.stages, config.model.type));
    }
    result = trainer.fit(parts.model, parts.loss, *parts.train, parts.validation.get(), parts.correct);
  } else {
    LayeredModel layered{parts.model, parts.layers, parts.outputLoss, parts.outputCorrect};
    result = trainer.fit(layered, *parts.train, parts.validation.get());
  }
  // Every rank, so that a test (or a user) can compare the replicas a run ended with.
  size_t tensors = 0;
  const uint32_t checksum = parameterChecksum(*parts.model, &tensors);
  log::info(fmt::format("final parameters of this rank's model: crc32c {:08x} over {} tensors", checksum, tensors));
  // A worker that left does not sample; a newcomer of an elastic run is not rank 0 at the end.
  if (result.leftAfterStep < 0) task->afterFit(config, result, result.rank);
  return result;
}

}  // namespace lockstep
