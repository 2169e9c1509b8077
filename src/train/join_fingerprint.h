// join_fingerprint.h — what a newcomer to an elastic run must share with the running job before
// it joins: the plan of the steps and the model's shape. Private to train/.
#pragma once

#include <cstdint>
#include <string>

#include "lockstep/train/trainer.h"

namespace torch::nn {
class Module;
}

namespace lockstep::detail {

/// One line per fact a newcomer must share with the members: the global batch, the training set's
/// size, the steps, the seed, the optimizer and its settings, every parameter's name and shape.
std::string joinFingerprint(const TrainerOptions& o, const torch::nn::Module& model, int64_t globalBatch,
                            int64_t trainingSamples, int64_t totalSteps);

/// ConfigError naming the first line where `mine` (this newcomer's) and `job`'s (the members')
/// differ, and that it does not join; nothing when they are the same.
void checkJoinFingerprint(const std::string& mine, const std::string& job);

}  // namespace lockstep::detail
