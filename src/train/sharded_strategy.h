// sharded_strategy.h — what the ZeRO-2 and ZeRO-3 strategies share: the
// optimizer and the update are the front's (ShardedGradientSync), and so is
// the memory each rank holds. Private to train/.
#pragma once

#include <memory>
#include <string>

#include "lockstep/ddp/sharded_gradient_sync.h"
#include "train/synced_strategy.h"

namespace torch::nn {
class Module;
}

namespace lockstep::detail {

class ShardedStrategy : public SyncedStrategy {
 public:
  ShardedStrategy(std::shared_ptr<ShardedGradientSync> zero, LayeredModel model, std::shared_ptr<Communicator> comm,
                  const StrategyOptions& options);

  void step(double clipGradNorm) override;
  RankMemory memory() const override;

 protected:
  /// "<what> over N rank(s), this one <verb> E of T elements".
  std::string shardSummary(const std::string& what, const std::string& verb) const;

  std::shared_ptr<ShardedGradientSync> zero_;
  std::shared_ptr<Communicator> comm_;

 private:
  GradientSync* gradientSync() const override { return zero_.get(); }
};

}  // namespace lockstep::detail
