// What every Strategy shares: the model description (strategy.h), the names of
// the strategies and the factory that picks one (strategies.h).
#include "lockstep/train/strategy.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <fmt/format.h>

#include <optional>

#include "lockstep/comm/archive_transfer.h"
#include "lockstep/common/enum_names.h"
#include "lockstep/common/error.h"
#include "lockstep/common/tensor_archive.h"
#include "train/strategies.h"

namespace lockstep {

namespace {

constexpr EnumName<StrategyType> kStrategyNames[] = {{StrategyType::kDdp, "ddp"},
                                                     {StrategyType::kZero1, "zero1"},
                                                     {StrategyType::kZero2, "zero2"},
                                                     {StrategyType::kZero3, "zero3"}};

/// ConfigError for what `options` cannot combine, before anything is built or broadcast.
void checkStrategyOptions(const StrategyOptions& options) {
  const bool pipeline = options.pipeline.stages > 1;
  if (options.precision == Precision::kFp16 && (options.type != StrategyType::kDdp || pipeline)) {
    throw ConfigError(
        fmt::format("precision fp16 scales the loss with strategy ddp only, not with {}; use "
                    "precision bf16 there",
                    options.type != StrategyType::kDdp ? toString(options.type) : "parallel.pipeline"));
  }
  if (pipeline && options.type != StrategyType::kDdp) {
    throw ConfigError(
        fmt::format("strategy.type {} cannot be combined with parallel.pipeline {}: the pipelines "
                    "average each stage's gradients with ddp",
                    toString(options.type), options.pipeline.stages));
  }
}

}  // namespace

const char* toString(StrategyType type) { return enumName(kStrategyNames, type); }

StrategyType parseStrategyType(const std::string& text, const std::string& what) {
  return parseEnum(kStrategyNames, text, what);
}

LayeredModel wholeModel(std::shared_ptr<torch::nn::Module> module, LossFn loss, CorrectFn correct) {
  LOCKSTEP_CHECK(module != nullptr && loss != nullptr, "wholeModel needs a module and a loss function");
  LayeredModel model;
  torch::nn::Module* m = module.get();  // the description owns the module and outlives its functions' calls
  model.model = std::move(module);
  model.loss = [m, fn = std::move(loss)](const at::Tensor&, const Batch& b) { return fn(*m, b); };
  if (correct) model.correct = [m, fn = std::move(correct)](const at::Tensor&, const Batch& b) { return fn(*m, b); };
  return model;
}

at::Tensor runChain(const LayeredModel& model, const at::Tensor& inputs) {
  at::Tensor y = inputs;
  for (const auto& layer : model.layers) y = layer.forward(y);
  return y;
}

at::Tensor MicroBatchHooks::forwardDone(const at::Tensor& loss) { return loss; }

std::unique_ptr<Strategy> makeStrategy(LayeredModel model, std::shared_ptr<Communicator> comm, StrategyOptions options,
                                       std::unique_ptr<torch::optim::Optimizer> optimizer) {
  LOCKSTEP_CHECK(model.model != nullptr && comm != nullptr && optimizer != nullptr,
                 "makeStrategy needs a model, a communicator and an optimizer");
  checkStrategyOptions(options);
  if (options.pipeline.stages > 1) {
    return detail::makePipelineStrategy(std::move(model), std::move(comm), options, std::move(optimizer));
  }
  switch (options.type) {
    case StrategyType::kDdp:
    case StrategyType::kZero1:
      return detail::makeDdpStrategy(std::move(model), std::move(comm), options, std::move(optimizer),
                                     options.type == StrategyType::kZero1);
    case StrategyType::kZero2:
      return detail::makeZero2Strategy(std::move(model), std::move(comm), options, std::move(optimizer));
    case StrategyType::kZero3:
      return detail::makeZero3Strategy(std::move(model), std::move(comm), options, std::move(optimizer));
  }
  throw InternalError("makeStrategy: strategy type " + std::to_string(static_cast<int>(options.type)));
}

TensorArchive strategyState(Strategy& strategy, Communicator& comm) {
  std::optional<TensorArchive> written;
  if (comm.rank() == 0) written.emplace("strategy state");
  strategy.saveState(written ? &*written : nullptr);
  return broadcastArchive(comm, written ? &*written : nullptr, 0, "strategy state");
}

}  // namespace lockstep
