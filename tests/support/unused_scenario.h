// unused_scenario.h — the custom loop a user writes with parameters that are
// unused on some steps and on some ranks, trained data-parallel and, in the
// same process, as one process over the global batch (the reference).
//
// The model is a trunk and three heads: `a` is used always, `b` on even steps
// in the first (noSync) micro-batch only, `c` every third step on rank 0 only
// (the reference applies it to rank 0's rows of the global batch). Each step
// zero_grad()s with LibTorch's default (gradients set to none), accumulates
// two micro-batches (the first under noSync()) and steps a stateful optimizer,
// which skips a parameter without a gradient: so does the reference.
#pragma once

#include <memory>
#include <string>

#include "lockstep/comm/communicator.h"

namespace lockstep::test {

enum class UnusedFront { kDdp, kZero2, kZero3 };

struct UnusedScenario {
  UnusedFront front = UnusedFront::kDdp;
  std::string optimizer = "sgd";  ///< sgd (momentum 0.9) or adamw (weight decay 0.1)
  int steps = 12;
  int batch = 4;                ///< rows per rank and micro-batch
  double bucketCapMb = 0.0001;  ///< small: a bucket per parameter or two
};

struct UnusedResult {
  double maxRelativeDifference = 0;  ///< over parameters: max |ours - reference| / max |reference|
  std::string worst;                 ///< the parameter where it is largest
};

/// Trains the scenario on this rank (collective over `comm`) and the reference; compares them.
UnusedResult runUnusedScenario(const std::shared_ptr<Communicator>& comm, const UnusedScenario& scenario);

}  // namespace lockstep::test
