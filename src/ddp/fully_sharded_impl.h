// fully_sharded_impl.h — the state of a FullyShardedDataParallel: its units
// (gather, free, gradient reduce-scatter: fully_sharded_data_parallel.cpp;
// checkpoint entries: fully_sharded_state.cpp) and, from PieceOptimizer
// (piece_optimizer.h), the optimizer over this rank's pieces of the shards.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/ddp/fully_sharded_data_parallel.h"
#include "optim/piece_optimizer.h"

namespace lockstep {

struct FullyShardedDataParallel::Impl : detail::PieceOptimizer {
  struct Unit {
    std::string name;
    std::vector<size_t> params;    ///< parameter indices
    std::vector<int64_t> offsets;  ///< of each, in the flat unit
    int64_t elements = 0;          ///< parameter elements (before padding)
    int64_t part = 0;              ///< elements of each rank's shard: ceil(elements / N)
    at::Tensor whole;              ///< N * part; the parameters are views of it; storage only while gathered
    at::Tensor shard;              ///< this rank's part of `whole`, kept always; the pieces are views of it
    bool gathered = false;         ///< `whole` holds the parameters
    WorkHandle gathering;          ///< the all-gather in flight into `whole`
    int backwardPending = 0;       ///< gradients still to accumulate before the unit can be freed
    // Gradient sync (synchronised backward only).
    at::Tensor buffer;  ///< `whole` lent to the reduce-scatter: the unit's gradients, from its last one to the end
    at::Tensor output;  ///< this rank's part, averaged; its pieces' gradients are views of it
    int pending = 0;
    bool ready = false;
    WorkHandle work;
    std::chrono::steady_clock::time_point launched;

    /// Gives `whole` its memory (contents undefined until written) or frees it; every view of it
    /// (the parameters, what autograd saved of them) follows.
    void allocate();
    void release();
  };

  std::weak_ptr<Impl> self;  ///< for the hooks
  std::shared_ptr<torch::nn::Module> module;
  std::vector<PipelineLayer> layers;
  DdpOptions options;
  std::vector<Unit> units;
  std::vector<std::pair<size_t, size_t>> slotOf;  ///< param -> (unit, slot)

  std::vector<bool> arrived;
  size_t nextToLaunch = 0;  ///< reduce-scatters launch in backward order: units.size() - 1 down to 0
  bool anyArrived = false;
  bool syncEnabled = true;
  bool restored = false;  ///< restoreModule() ran: the parameters are the module's own again
  int64_t gathers = 0;
  DdpStats stats;
  std::vector<BucketTiming> lastTimings;

  // fully_sharded_data_parallel.cpp
  void buildUnits(const std::vector<std::vector<size_t>>& members);
  /// Starts gathering unit `u` (a unit without parameters, or a world of 1, is gathered at once).
  void launchGather(size_t u);
  void ensureGathered(size_t u);
  void free(size_t u);
  void freeAll();
  at::Tensor forward(const at::Tensor& input);
  void onAccumulated(size_t index);
  /// Copies the unit's gradients (zeros for those without) into `whole` and makes it the buffer.
  void packGradients(Unit& unit);
  /// Frees the memory of units whose reduce-scatter has finished.
  void releaseFinished();
  void launchReady(bool duringBackward);
  void finish();
  void reset();

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
                                           const std::vector<PipelineLayer>& layers);

}  // namespace lockstep
