// strategies.h — the Strategy implementations makeStrategy() chooses from.
#pragma once

#include <memory>

#include "lockstep/train/strategy.h"

namespace lockstep::detail {

/// ZeRO-2 (sharded_strategy.cpp). Collective: every rank builds it at the same point.
std::unique_ptr<Strategy> makeZero2Strategy(std::shared_ptr<torch::nn::Module> model,
                                            std::shared_ptr<Communicator> comm, DdpOptions options,
                                            std::unique_ptr<torch::optim::Optimizer> optimizer);

}  // namespace lockstep::detail
