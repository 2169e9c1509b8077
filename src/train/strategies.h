// strategies.h — the Strategy implementations makeStrategy() (strategy.cpp) chooses from.
// Each is collective: every rank builds it at the same point. Private to train/.
#pragma once

#include <memory>

#include "lockstep/train/strategy.h"

namespace lockstep::detail {

/// ddp, or zero1 with `shardOptimizer` (ddp_strategy.cpp).
std::unique_ptr<Strategy> makeDdpStrategy(LayeredModel model, std::shared_ptr<Communicator> comm,
                                          const StrategyOptions& options,
                                          std::unique_ptr<torch::optim::Optimizer> optimizer, bool shardOptimizer);
/// ZeRO-2 (sharded_strategy.cpp).
std::unique_ptr<Strategy> makeZero2Strategy(LayeredModel model, std::shared_ptr<Communicator> comm,
                                            const StrategyOptions& options,
                                            std::unique_ptr<torch::optim::Optimizer> optimizer);
/// ZeRO-3 (fully_sharded_strategy.cpp): the model's layers are its units, or the whole module
/// when it has none.
std::unique_ptr<Strategy> makeZero3Strategy(LayeredModel model, std::shared_ptr<Communicator> comm,
                                            const StrategyOptions& options,
                                            std::unique_ptr<torch::optim::Optimizer> optimizer);
/// Pipeline stages with DDP across pipelines (pipeline_strategy.cpp).
std::unique_ptr<Strategy> makePipelineStrategy(LayeredModel model, std::shared_ptr<Communicator> comm,
                                               const StrategyOptions& options,
                                               std::unique_ptr<torch::optim::Optimizer> optimizer);

}  // namespace lockstep::detail
