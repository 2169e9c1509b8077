#include "lockstep/optim/lr_scaling.h"

#include <cmath>

#include "lockstep/common/error.h"

namespace lockstep {

const char* toString(LrScalingRule rule) {
  switch (rule) {
    case LrScalingRule::kNone: return "none";
    case LrScalingRule::kLinear: return "linear";
    case LrScalingRule::kSqrt: return "sqrt";
    case LrScalingRule::kPow23: return "pow2/3";
  }
  return "?";
}

LrScalingRule parseLrScalingRule(const std::string& text, const std::string& what) {
  if (text == "none") return LrScalingRule::kNone;
  if (text == "linear") return LrScalingRule::kLinear;
  if (text == "sqrt") return LrScalingRule::kSqrt;
  if (text == "pow2/3") return LrScalingRule::kPow23;
  throw ConfigError(what + "='" + text + "' is not a scaling rule; expected none, linear, sqrt or pow2/3");
}

double scaledLearningRate(double baseLr, int64_t globalBatch, const LrScalingOptions& o) {
  LOCKSTEP_CHECK(globalBatch > 0, "global batch must be positive, got ", globalBatch);
  LOCKSTEP_CHECK(o.baseBatch > 0, "base batch must be positive, got ", o.baseBatch);
  double k = static_cast<double>(globalBatch) / static_cast<double>(o.baseBatch);
  switch (o.rule) {
    case LrScalingRule::kNone: return baseLr;
    case LrScalingRule::kLinear: return baseLr * k;
    case LrScalingRule::kSqrt: return baseLr * std::sqrt(k);
    case LrScalingRule::kPow23: return baseLr * std::pow(k, 2.0 / 3.0);
  }
  return baseLr;
}

double learningRateAt(int64_t step, double baseLr, int64_t globalBatch, const LrScalingOptions& o) {
  double target = scaledLearningRate(baseLr, globalBatch, o);
  if (o.warmupSteps <= 0 || step >= o.warmupSteps) return target;
  double fraction = static_cast<double>(step + 1) / static_cast<double>(o.warmupSteps);
  return baseLr + (target - baseLr) * fraction;
}

}  // namespace lockstep
