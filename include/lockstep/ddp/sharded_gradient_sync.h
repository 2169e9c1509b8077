// lockstep/ddp/sharded_gradient_sync.h — what ShardedDataParallel (ZeRO-2) and
// FullyShardedDataParallel (ZeRO-3) have in common: each rank owns pieces of
// the parameters, keeps the averaged gradients and the optimizer state of its
// pieces only, and updates them itself.
//
//   lockstep::ShardedGradientSync& zero = zero2;   // or a ZeRO-3 object
//   lossOf(batch).backward();                      // buckets reduce-scattered while backward runs
//   zero.finishGradientSync();                     // this rank's pieces hold their averaged gradients
//   zero.clipGradNorm(1.0);                        // optional, over the whole model (collective)
//   zero.step();                                   // updates this rank's pieces
//
// finishGradientSync(), clipGradNorm(), step(), saveState() and loadState() are collective.
#pragma once

#include <cstdint>

#include "lockstep/ddp/gradient_sync.h"

namespace torch::optim {
class Optimizer;
}

namespace lockstep {

class TensorArchive;

namespace detail {
struct ShardedCore;
}

class ShardedGradientSync : public GradientSync {
 public:
  /// Scales the pieces' gradients so the norm over the whole model is at most
  /// maxNorm (as torch::nn::utils::clip_grad_norm_); returns the norm before.
  double clipGradNorm(double maxNorm);
  /// Steps the optimizer over this rank's pieces (and brings the parameters
  /// where the front keeps them: ZeRO-2 all-gathers them).
  virtual void step() = 0;
  /// The optimizer over this rank's pieces: same type and groups as the one given.
  torch::optim::Optimizer& optimizer();
  /// Collective. `archive` is non-null on rank 0 only, which receives the
  /// whole optimizer's entries (ZeRO-3: and the model's), each assembled from
  /// the ranks' pieces only when rank 0 writes the archive, one tensor at a
  /// time; the other ranks return once rank 0 has, so rank 0 must write it (once).
  virtual void saveState(TensorArchive* archive) = 0;
  /// Restores what saveState() wrote (or a DDP run's checkpoint), keeping this
  /// rank's pieces; checks it all first. Every rank passes the same archive.
  virtual void loadState(const TensorArchive& archive, bool report) = 0;

  /// Parameter elements this rank updates.
  int64_t ownedElements() const;
  /// Bytes of parameters this rank holds now.
  virtual int64_t parameterBytes() const = 0;
  /// Bytes of the gradients this rank holds now: its pieces', and .grad accumulated under noSync().
  int64_t gradientBytes() const final;
  /// Bytes of optimizer state this rank holds now.
  int64_t stateBytes() const;
  /// Bytes of bucket buffers alive now (0 between steps).
  int64_t bufferBytes() const final;

 protected:
  ShardedGradientSync() = default;
  /// The pieces, buckets and optimizer; set by the front's constructor, owned by the front.
  detail::ShardedCore* core_ = nullptr;
};

}  // namespace lockstep
