// fully_sharded_impl.h — the state of a FullyShardedDataParallel: its units
// (gather and free: fully_sharded_data_parallel.cpp; checkpoint entries:
// fully_sharded_state.cpp) and, from ShardedCore (sharded_core.h), their
// gradients' reduce-scatter and the optimizer over this rank's pieces of the shards.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "ddp/sharded_core.h"
#include "lockstep/ddp/fully_sharded_data_parallel.h"

namespace lockstep {

struct FullyShardedDataParallel::Impl : detail::ShardedCore {
  /// A unit's parameters; its gradients are bucket `u` of the same index (ShardedCore::buckets:
  /// parameters, offsets, elements, part), reduce-scattered in backward order, the last unit first.
  struct Unit {
    std::string name;
    at::Tensor whole;         ///< N * part; the parameters are views of it; storage only while gathered
    at::Tensor shard;         ///< this rank's part of `whole`, kept always; the pieces are views of it
    bool gathered = false;    ///< `whole` holds the parameters
    WorkHandle gathering;     ///< the all-gather in flight into `whole`
    int backwardPending = 0;  ///< gradients still to accumulate before the unit can be freed

    /// Gives `whole` its memory (contents undefined until written) or frees it; every view of it
    /// (the parameters, what autograd saved of them) follows.
    void allocate();
    void release();
  };

  std::weak_ptr<Impl> self;  ///< for the hooks
  std::vector<Layer> layers;
  std::vector<Unit> units;
  bool restored = false;  ///< restoreModule() ran: the parameters are the module's own again
  int64_t gathers = 0;

  // fully_sharded_data_parallel.cpp
  void buildUnits(const std::vector<std::vector<size_t>>& members);
  /// Starts gathering unit `u` (a unit without parameters, or a world of 1, is gathered at once).
  void launchGather(size_t u);
  void ensureGathered(size_t u);
  void free(size_t u);
  void freeAll();
  at::Tensor forward(const at::Tensor& input);
  void onAccumulated(size_t index);
  /// Frees the memory of units whose reduce-scatter has finished.
  void releaseFinished();
  void finish();

  // The reducer's bucket collective: gradients stay in .grad until the unit's last one arrived;
  // then the unit's memory takes them all (seal) and is reduce-scattered.
  void stage(size_t /*param*/, size_t /*bucket*/, size_t /*slot*/) override {}
  /// Copies the unit's gradients (zeros for those without) into `whole` and makes it the buffer.
  void seal(size_t u) override;
  WorkHandle launch(size_t u, SyncStats& stats) override;
  void land(size_t u, SyncStats& stats) override;
  void endStep(size_t u) override;

  // fully_sharded_state.cpp
  /// Collective: the model's and the optimizer's entries to rank 0's archive (non-null there only),
  /// each assembled from the ranks' shards when rank 0 writes it.
  void saveModelAndOptimizer(TensorArchive* archive);
  /// Checks every model entry of `archive`, then keeps this rank's shards of it and the buffers.
  void loadModel(const TensorArchive& archive);
};

/// The units of `module`'s trainable parameters `params` (registration order,
/// named `names`): one per layer, the parameters of its modules; every
/// parameter in exactly one (Error naming it otherwise). No layers: one unit of all.
std::vector<std::vector<size_t>> planUnits(const std::vector<at::Tensor>& params, const std::vector<std::string>& names,
                                           const std::vector<Layer>& layers);

}  // namespace lockstep
