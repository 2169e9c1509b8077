// lockstep/train/recovery.h — data-parallel training taken up by a new generation of workers.
//
// After a worker is lost, the others form a new generation (rendezvous/membership.h) and each
// holds the strategy of the generation it lost, at the last step it completed: a survivor whose
// last gradient exchange completed before the loss is one step further than one whose exchange
// failed. recoverFromFurthest() brings every member to the furthest of those steps, so that no
// completed step is lost, and gives each a strategy over the new generation's communicator.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "lockstep/comm/communicator.h"
#include "lockstep/train/strategy.h"

namespace lockstep {

/// Builds a strategy over a communicator (as the Trainer does: model, options, a new optimizer).
using StrategyBuilder = std::function<std::unique_ptr<Strategy>(std::shared_ptr<Communicator>)>;

struct Recovery {
  std::unique_ptr<Strategy> strategy;  ///< built over the new communicator, the furthest state loaded, started
  int64_t step = 0;                    ///< the furthest completed step: training goes on with the one after it
  int source = 0;                      ///< the rank of the new generation whose state every member now holds
};

/// Collective over `next`, the new generation's communicator. Each member brings `lost`, its strategy
/// over the lost generation's communicator (null for a newcomer, or a member with nothing to give),
/// and the last step it completed with it (-1 for none). The members agree on the furthest step;
/// the first member at it saves its strategy's state and sends it to every member, `lost` ends (its
/// autograd hooks go with it), and each member builds a strategy over `next` with `build`, loads the
/// state and starts it. `lost` must keep its whole state on every rank and save it without its
/// communicator: ddp without pipeline stages or a compression hook's per-rank state (zero and
/// pipeline strategies keep part of theirs on the lost rank). Error when no member brings a strategy.
Recovery recoverFromFurthest(std::unique_ptr<Strategy> lost, int64_t completedStep, std::shared_ptr<Communicator> next,
                             const StrategyBuilder& build);

}  // namespace lockstep
