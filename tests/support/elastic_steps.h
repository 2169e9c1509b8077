// What the elastic tests' workers share: a data-parallel step over one rank's weighted share of a
// fixed global batch (GlobalBatchPlan), and the launcher's membership options for a worker program.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <chrono>
#include <iostream>
#include <optional>
#include <string>

#include "lockstep/data/global_batches.h"
#include "lockstep/rendezvous/membership.h"
#include "lockstep/train/strategy.h"

namespace lockstep::test {

/// One optimizer step of `strategy` over the rows `share` picks of `x` and `y`, its mean loss
/// weighted by share.lossScale (gradients left undefined first, as the Trainer leaves them).
inline void trainShare(Strategy& strategy, torch::nn::Module& model, const at::Tensor& x, const at::Tensor& y,
                       const BatchShare& share) {
  for (auto& p : model.parameters()) p.mutable_grad() = at::Tensor();
  const at::Tensor rows = at::tensor(share.indices, at::kLong);
  Batch b;
  b.inputs = x.index_select(0, rows);
  b.targets = y.index_select(0, rows);
  MicroBatchHooks hooks;
  strategy.trainMicroBatch(b, share.lossScale, /*sync=*/true, hooks);
  strategy.finishGradientSync();
  strategy.step(/*clipGradNorm=*/0);
}

/// The membership options `lockstep run --min-np` gives its workers, with a join window of 2 s;
/// nullopt after telling stderr that `program` is not a worker of an elastic job.
inline std::optional<MembershipOptions> launcherMembershipOptions(const std::string& program) {
  auto options = elasticMembershipOptions(Environment::fromProcess());
  if (!options) {
    std::cerr << program << ": not an elastic job (no " << kMinMembersVar << ")\n";
    return std::nullopt;
  }
  options->joinWindow = std::chrono::seconds(2);
  return options;
}

}  // namespace lockstep::test
