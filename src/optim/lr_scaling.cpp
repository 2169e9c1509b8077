#include "lockstep/optim/lr_scaling.h"

#include <cmath>

#include "lockstep/common/enum_names.h"
#include "lockstep/common/error.h"

namespace lockstep {

namespace {
constexpr EnumName<LrScalingRule> kRuleNames[] = {{LrScalingRule::kNone, "none"},
                                                  {LrScalingRule::kLinear, "linear"},
                                                  {LrScalingRule::kSqrt, "sqrt"},
                                                  {LrScalingRule::kPow23, "pow2/3"}};
}  // namespace

const char* toString(LrScalingRule rule) { return enumName(kRuleNames, rule); }

LrScalingRule parseLrScalingRule(const std::string& text, const std::string& what) {
  return parseEnum(kRuleNames, text, what);
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
