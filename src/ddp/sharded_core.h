// sharded_core.h — what ZeRO-2 (ShardedDataParallel) and ZeRO-3
// (FullyShardedDataParallel) share: the optimizer over this rank's pieces
// (PieceOptimizer), and buckets reduce-scattered by the GradientReducer into
// this rank's part of each, whose pieces then get their averaged gradients.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <vector>

#include "ddp/gradient_reducer.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "optim/piece_optimizer.h"

namespace torch::nn {
class Module;
}

namespace lockstep::detail {

/// A bucket reduce-scattered into this rank's part (ZeRO-2's buckets, ZeRO-3's units' gradients).
struct ShardedBucket {
  std::vector<size_t> params;    ///< parameter indices
  std::vector<int64_t> offsets;  ///< of each, in the flat bucket
  int64_t elements = 0;          ///< gradient elements (before padding)
  int64_t part = 0;              ///< elements of each rank's part: ceil(elements / N)
  at::Tensor buffer;             ///< N * part gradients, from the first staged to the end of the reduce-scatter
  at::Tensor output;             ///< this rank's part, averaged; its pieces' gradients are views of it
};

struct ShardedCore : PieceOptimizer, BucketCollective {
  std::shared_ptr<torch::nn::Module> module;
  SyncOptions options;
  std::vector<ShardedBucket> buckets;
  std::unique_ptr<GradientReducer> reducer;
  std::vector<bool> usedByNoRank;  ///< parameters no rank used in the step being finished: their pieces get no gradient

  /// What both fronts' constructors do first: check the arguments (Error naming `front`, and
  /// `stage` for options ZeRO does not take), keep them and collect the module's parameters.
  void setUp(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Communicator> comm,
             const torch::optim::Optimizer* optimizer, const SyncOptions& options, const char* front,
             const char* stage);
  /// One bucket per group of `members` (parameter indices), in order; also PieceOptimizer::plan.
  void buildBuckets(const std::vector<std::vector<size_t>>& members);
  /// The reducer over the buckets (launched last first when `reversed`), its hooks calling `onAccumulated`.
  void startReducer(bool reversed, std::function<void(size_t)> onAccumulated);
  /// Copies parameter `param`'s .grad into `slice` (zeros when it has none: unused) and frees the .grad.
  void takeGradient(size_t param, const at::Tensor& slice);
  /// Zeros the padding of `flat`, a bucket-sized buffer, past the bucket's elements.
  void zeroPadding(const ShardedBucket& bucket, const at::Tensor& flat) const;
  /// finishGradientSync() of ZeRO-2 and ZeRO-3: the reducer's finish, then each of this rank's pieces
  /// gets its averaged gradient, a view of its bucket's part, or none when no rank used its parameter
  /// (the optimizer skips it, as it skips a parameter without a gradient). False (nothing done) while
  /// sync is off.
  bool finishSync();

  void startStep() override;
  void settleUnused(size_t param, bool usedByAnyRank) override { usedByNoRank[param] = !usedByAnyRank; }
  WorkHandle launch(size_t bucket, SyncStats& stats) override;
  int64_t bucketBytes(size_t bucket) const override { return buckets[bucket].elements * 4; }

  /// Bytes of the averaged parts held now, and of what noSync() accumulated in .grad.
  int64_t gradientBytes() const;
  /// Bytes of bucket buffers alive now.
  int64_t bufferBytes() const;
};

}  // namespace lockstep::detail
