// lockstep/data/sampler.h — which samples each rank trains on, epoch by epoch.
//
// Contract (the semantics of PyTorch's torch.utils.data.DistributedSampler):
// - With shuffle, the WHOLE index [0, datasetSize) is permuted by a
//   Fisher-Yates shuffle driven by std::mt19937_64 seeded with seed + epoch.
//   The shuffle is written out here (not std::shuffle), so the order is the
//   same with every standard library. Without shuffle the order is 0..n-1.
// - That global order is then made divisible by worldSize: with dropLast its
//   tail is dropped; without, it is padded by repeating its own first entries
//   (cyclically when the padding is longer than the dataset).
// - Rank r takes positions r, r + worldSize, r + 2*worldSize, ... of it.
//   Every rank thus gets numSamples() indices; the ranks are disjoint except
//   for the padding; and the permutation does not depend on worldSize, so the
//   lists of N ranks interleave into the list of one.
// - Every rank must use the same datasetSize, seed, shuffle and dropLast and
//   call setEpoch(e) with the same e before each epoch, or the shards overlap.
// - Invalid options, batch sizes or batch indices throw lockstep::Error naming
//   the field.
// - Threads: the const methods keep no caches, so any number of threads may
//   call them at once; setEpoch (the only mutator) must not overlap them —
//   call it between epochs, before the loader is started on the new plan.
#pragma once

#include <cstdint>
#include <vector>

namespace lockstep {

struct SamplerOptions {
  int64_t datasetSize = 0;  ///< samples in the whole dataset, >= 0
  int rank = 0;             ///< this rank, in [0, worldSize)
  int worldSize = 1;        ///< number of ranks, >= 1
  bool shuffle = true;      ///< permute the whole index every epoch
  uint64_t seed = 0;        ///< the permutation of epoch e uses seed + e
  bool dropLast = false;    ///< drop the tail (true) or pad with repeats (false)
};

class DistributedSampler {
 public:
  /// Validates `options` and prepares epoch 0.
  explicit DistributedSampler(SamplerOptions options);

  /// Selects the epoch whose permutation indices() returns; call it with the
  /// same value on every rank before each epoch. Recomputes the indices (O(n)).
  void setEpoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  /// This rank's sample indices for the current epoch, in training order.
  const std::vector<int64_t>& indices() const { return indices_; }
  /// Samples per rank (the same on every rank).
  int64_t numSamples() const { return numSamples_; }
  /// Samples over all ranks: numSamples() * worldSize.
  int64_t totalSize() const { return numSamples_ * options_.worldSize; }

  /// Batches of `batchSize` this rank runs per epoch; with dropLastBatch a
  /// final partial batch is not counted. batchSize must be >= 1.
  int64_t numBatches(int64_t batchSize, bool dropLastBatch) const;
  /// Indices of batch `batchIndex`: indices()[batchIndex*batchSize, ...), the
  /// last one possibly shorter. batchIndex must be in [0, numBatches(batchSize, false)).
  std::vector<int64_t> batch(int64_t batchIndex, int64_t batchSize) const;

  const SamplerOptions& options() const { return options_; }

 private:
  SamplerOptions options_;
  int64_t epoch_ = 0;
  int64_t numSamples_ = 0;
  std::vector<int64_t> indices_;
};

/// The global order of epoch `epoch` before padding and sharding: a
/// permutation of [0, datasetSize) (or the identity without shuffle).
/// Exposed so tests and tools can check a rank's list against it.
std::vector<int64_t> globalOrder(int64_t datasetSize, bool shuffle, uint64_t seed, int64_t epoch);

}  // namespace lockstep
