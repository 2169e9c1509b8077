// lockstep/ddp/sharded_data_parallel.h — ZeRO stage 2: data parallelism with
// the gradients and the optimizer state split across the ranks.
//
//   lockstep::ShardedDataParallel zero(model, comm, makeOptimizer(opts, model->parameters()));
//   auto loss = lossOf(model->forward(x), y);
//   loss.backward();              // buckets are reduce-scattered while backward runs
//   zero.finishGradientSync();    // this rank now holds the average of its shard's gradients
//   zero.clipGradNorm(1.0);       // optional, over the whole model (collective)
//   zero.step();                  // updates its shard, then all-gathers the parameters
//
// Gradients are packed into buckets in reverse registration order, as
// DistributedDataParallel does (same bucket caps). Each bucket is one flat
// float32 buffer of c = ceil(n / N) * N elements for its n gradient elements,
// and rank r owns elements [r*c/N, (r+1)*c/N) of it: the bucket is
// reduce-scattered, not all-reduced, as soon as its last gradient is ready
// (overlapping the rest of backward), and each rank keeps only the average of
// its part. A parameter's gradient is copied into its bucket the moment
// autograd has accumulated it and is then freed (a parameter alone in its
// bucket, without padding, lends its gradient as the buffer), and a bucket
// buffer is freed once its reduce-scatter finished: between steps a rank
// holds 1/N of the gradients (its averaged parts, kept until the next
// synchronised backward starts), during backward the buffers of the buckets
// in flight.
//
// The optimizer is the one passed in, rebuilt over this rank's pieces of the
// parameters (a piece is the part of one parameter inside the rank's part of
// a bucket: a view of the parameter, so the update lands in it in place),
// with the same type and parameter groups; the groups' options (learning
// rates) are set on optimizer(). It keeps state for the pieces only, 1/N of
// the whole. After the update each bucket's parts are all-gathered, so every
// rank ends the step with the whole model. Elementwise updates (SGD, Adam,
// AdamW) of a piece are those of the whole parameter: at two ranks, without
// clipping, the parameters equal DistributedDataParallel's bit for bit.
//
// Checkpoints: saveState() writes exactly the entries saveOptimizerState()
// writes for the whole optimizer (optim/optimizer.h; each parameter's state
// assembled from the ranks' pieces on the writing rank), so a ZeRO-2
// checkpoint loads into a DDP or ZeRO-1 run and the other way round.
//
// noSync() accumulates whole local gradients until the next synchronised
// backward, as DDP does. Unused parameters: as DistributedDataParallel
// (an error naming them, or zeros with findUnusedParameters). Compression and
// comm hooks are not supported (Error). Construction is collective (the
// parameter check and rank 0's broadcast, as DistributedDataParallel); so are
// finishGradientSync(), clipGradNorm(), step(), saveState() and loadState().
// Not thread-safe. Parameters must be float32 tensors on one device, the CPU or a
// GPU (on Gloo or MPI the communicator stages GPU tensors through host memory).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/comm/communicator.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/ddp/sharded_gradient_sync.h"
#include "lockstep/optim/sharded_optimizer.h"

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace lockstep {

class TensorArchive;

class ShardedDataParallel final : public ShardedGradientSync {
 public:
  /// `optimizer` is over the module's parameters (any groups; SGD, Adam or
  /// AdamW); only its type, groups and options are kept.
  ShardedDataParallel(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Communicator> comm,
                      std::unique_ptr<torch::optim::Optimizer> optimizer, SyncOptions options = {});
  ~ShardedDataParallel() override;
  ShardedDataParallel(const ShardedDataParallel&) = delete;
  ShardedDataParallel& operator=(const ShardedDataParallel&) = delete;

  /// Waits for every bucket, launching late ones; this rank's pieces then hold
  /// their averaged gradients and the parameters' own .grad are undefined.
  void finishGradientSync() override;
  /// Steps the optimizer over this rank's pieces, then all-gathers the parameters.
  void step() override;
  /// Writes the whole optimizer's entries (not the model's: every rank holds it whole).
  void saveState(TensorArchive* archive) override;
  /// Restores the whole optimizer's state from `archive` and keeps this rank's pieces of it.
  void loadState(const TensorArchive& archive, bool report) override;

  int numBuckets() const;
  const std::vector<GradientPiece>& pieces() const;
  /// Bytes of the module's parameters: every rank holds them whole.
  int64_t parameterBytes() const override;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace lockstep
