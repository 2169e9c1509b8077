// The pet-name generator as a Task: names -> character windows -> CharLstm,
// and names sampled from the trained model at the end.
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>

#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/data/names.h"
#include "lockstep/data/sampler.h"
#include "lockstep/workloads/tasks.h"
#include "workloads/builtin_tasks.h"

namespace lockstep {

namespace {

class NamesTask final : public Task {
 public:
  TaskParts build(const TrainConfig& config, int rank) override {
    if (config.model.type != "charlstm") {
      throw ConfigError(fmt::format("data.dataset names trains model.type charlstm, not '{}'", config.model.type));
    }
    NamesOptions namesOptions;
    namesOptions.sources = config.data.sources;
    namesOptions.csvColumn = config.data.csvColumn;
    namesOptions.lowercase = true;
    std::vector<std::string> names = loadNames(namesOptions);
    // A fixed split of names (not windows): validation names are never trained on.
    auto order = globalOrder(static_cast<int64_t>(names.size()), true, config.trainer.seed, /*epoch=*/0);
    auto validationCount = static_cast<int64_t>(static_cast<double>(names.size()) * config.data.validationFraction);
    std::vector<std::string> trainNames, validationNames;
    for (size_t i = 0; i < order.size(); ++i) {
      (static_cast<int64_t>(i) < validationCount ? validationNames : trainNames).push_back(names[order[i]]);
    }
    vocab_ = CharVocab::fromNames(names);
    const int window = static_cast<int>(config.model.window);
    CharWindows trainWindows = makeWindows(trainNames, vocab_, window);
    TaskParts parts;
    parts.train = std::make_shared<TensorDataset>(trainWindows.inputs, trainWindows.targets);
    if (!validationNames.empty()) {
      CharWindows v = makeWindows(validationNames, vocab_, window);
      parts.validation = std::make_shared<TensorDataset>(v.inputs, v.targets);
    }
    if (rank == 0) {
      log::info(
          fmt::format("data: {} names from {} ({} for training, {} for validation), {} training windows of {}, "
                      "vocabulary {} symbols",
                      names.size(), fmt::join(config.data.sources, ", "), trainNames.size(), validationNames.size(),
                      trainWindows.inputs.size(0), window, vocab_.size()));
    }
    model_ = CharLstm(
        CharLstmOptions{vocab_.size(), config.model.hidden, config.model.layers, config.model.checkpointSegments});
    parts.model = model_.ptr();
    parts.loss = [](torch::nn::Module& m, const Batch& batch) {
      return charLstmLoss(static_cast<CharLstmImpl&>(m).forward(batch.inputs), batch.targets);
    };
    parts.checkpointExtras = {{"task", "names"},
                              {"vocab", vocab_.toString()},
                              {"model.hidden", std::to_string(config.model.hidden)},
                              {"model.layers", std::to_string(config.model.layers)},
                              {"model.window", std::to_string(config.model.window)},
                              {"config", toYaml(config)}};
    return parts;
  }

  void afterFit(const TrainConfig& config, const FitResult& result, int rank) override {
    if (rank != 0 || config.generate.samples <= 0) return;
    model_->eval();
    auto generated = sampleNames(*model_, vocab_, config.model.window, config.generate.samples,
                                 config.generate.temperature, 24, config.trainer.seed + 1);
    std::cout << fmt::format("generated names (temperature {}, after {} steps, train loss {:.3f}):\n",
                             config.generate.temperature, result.steps, result.lastTrainLoss);
    for (const auto& name : generated) std::cout << "  " << name << "\n";
    if (!result.lastCheckpoint.empty()) {
      std::cout << fmt::format("more: lockstep generate --checkpoint {} -n 20\n", result.lastCheckpoint);
    }
    std::cout << std::flush;
  }

 private:
  CharVocab vocab_;
  CharLstm model_{nullptr};
};

}  // namespace

std::vector<std::string> sampleNames(CharLstmImpl& model, const CharVocab& vocab, int64_t window, int64_t count,
                                     double temperature, int64_t maxLength, uint64_t seed) {
  // One character of one name per step: work too small to share, so more intra-op threads only
  // meet at oneDNN's barriers (on a busy machine, seconds per name). One thread, restored after.
  struct OneThread {
    int before = at::get_num_threads();
    OneThread() { at::set_num_threads(1); }
    ~OneThread() { at::set_num_threads(before); }
  } oneThread;
  at::Generator generator = at::detail::createCPUGenerator(seed);
  std::vector<std::string> out;
  for (int64_t i = 0; i < count; ++i) {
    auto indices =
        sampleSequence(model, window, CharVocab::kPadIndex, CharVocab::kStopIndex, temperature, maxLength, generator);
    out.push_back(capitalise(vocab.decode(indices)));
  }
  return out;
}

namespace detail {
void addNamesTask(TaskRegistry& tasks) {
  tasks.add("names", [] { return std::make_unique<NamesTask>(); });
}
}  // namespace detail

}  // namespace lockstep
