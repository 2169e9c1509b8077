// sharded_gradient_sync.cpp — lockstep/ddp/sharded_gradient_sync.h.
#include "lockstep/ddp/sharded_gradient_sync.h"

#include "ddp/sharded_core.h"
#include "lockstep/optim/optimizer.h"

namespace lockstep {

double ShardedGradientSync::clipGradNorm(double maxNorm) { return core_->clipGradNorm(maxNorm); }
torch::optim::Optimizer& ShardedGradientSync::optimizer() { return *core_->optimizer; }
int64_t ShardedGradientSync::ownedElements() const { return core_->ownedElements(); }
int64_t ShardedGradientSync::gradientBytes() const { return core_->gradientBytes(); }
int64_t ShardedGradientSync::stateBytes() const { return optimizerStateBytes(*core_->optimizer); }
int64_t ShardedGradientSync::bufferBytes() const { return core_->bufferBytes(); }

}  // namespace lockstep
