// strategies.h — the Strategy implementations makeStrategy() chooses from.
#pragma once

#include <memory>

#include "lockstep/train/strategy.h"
#include "lockstep/train/trainer.h"

namespace lockstep::detail {

/// ZeRO-2 (sharded_strategy.cpp). Collective: every rank builds it at the same point.
std::unique_ptr<Strategy> makeZero2Strategy(std::shared_ptr<torch::nn::Module> model,
                                            std::shared_ptr<Communicator> comm, DdpOptions options,
                                            std::unique_ptr<torch::optim::Optimizer> optimizer);

/// ZeRO-3 (fully_sharded_strategy.cpp): the strategy, and the calls of the model the Trainer makes
/// instead of its own, which gather the parameters around each use.
struct Zero3Parts {
  std::unique_ptr<Strategy> strategy;
  LossFn loss;
  CorrectFn correct;  ///< null when the model has none
};
/// Units: `layered`'s layers (its loss and accuracy on their output), or, null, the whole model
/// (`loss` and `correct` the model's). Collective: every rank builds it at the same point.
Zero3Parts makeZero3Strategy(std::shared_ptr<torch::nn::Module> model, const LayeredModel* layered, LossFn loss,
                             CorrectFn correct, std::shared_ptr<Communicator> comm, DdpOptions options,
                             std::unique_ptr<torch::optim::Optimizer> optimizer);

}  // namespace lockstep::detail
