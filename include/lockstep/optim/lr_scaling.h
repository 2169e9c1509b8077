// lockstep/optim/lr_scaling.h — learning rate for a bigger global batch.
//
// With N workers of batch b the optimizer sees a global batch N·b. The rules
// scale the base learning rate (tuned for `baseBatch`) by the ratio
// k = globalBatch / baseBatch:
//   none: lr       linear: lr·k (Goyal et al., "Accurate, large minibatch SGD")
//   sqrt: lr·√k    pow2/3: lr·k^(2/3)
// and a linear warmup ramps from the base lr to the scaled lr over
// warmupSteps optimizer steps (Goyal et al.'s gradual warmup).
#pragma once

#include <cstdint>
#include <string>

namespace lockstep {

enum class LrScalingRule { kNone, kLinear, kSqrt, kPow23 };
const char* toString(LrScalingRule rule);
/// "none", "linear", "sqrt", "pow2/3" -> rule; throws ConfigError naming `what`.
LrScalingRule parseLrScalingRule(const std::string& text, const std::string& what);

struct LrScalingOptions {
  LrScalingRule rule = LrScalingRule::kLinear;
  /// 0: the Trainer takes one worker's batch per update (so one worker keeps the base lr); the
  /// functions below need it > 0 (Error otherwise).
  int64_t baseBatch = 0;
  int64_t warmupSteps = 0;
};

/// The scaled (post-warmup) learning rate.
double scaledLearningRate(double baseLr, int64_t globalBatch, const LrScalingOptions& options);
/// The learning rate at optimizer step `step` (0-based), warmup included.
double learningRateAt(int64_t step, double baseLr, int64_t globalBatch, const LrScalingOptions& options);

}  // namespace lockstep
