// lockstep/ddp/fully_sharded_data_parallel.h — ZeRO stage 3: data parallelism
// with the parameters, gradients and optimizer state all split across the ranks.
//
//   std::vector<lockstep::Layer> layers = model->layers();   // the units
//   lockstep::FullyShardedDataParallel zero(model, layers, comm, makeOptimizer(opts, model->parameters()));
//   auto loss = lossOf(zero.forward(x), y);   // each unit gathered just before its layer runs
//   loss.backward();                          // ... and again for its backward; gradients reduce-scattered
//   zero.finishGradientSync();
//   zero.clipGradNorm(1.0);                   // optional, over the whole model (collective)
//   zero.step();                              // updates this rank's shard; nothing is gathered
//
// Units. The parameters are grouped into units: one per layer of the chain
// given (the parameters of its modules), or, with no layers, one unit holding
// every parameter. A unit's parameters are one flat float32 buffer of
// c = ceil(n / N) * N elements, and rank r keeps elements [r*c/N, (r+1)*c/N)
// of it — its shard — at all times; the module's parameter tensors are views
// of the unit's whole buffer, whose memory exists only while the unit is
// gathered (its storage is resized to zero in between, so every view of it,
// including those autograd saved, is released with it).
//
// A step. forward() runs the layers in order; before a layer runs its unit is
// all-gathered (the next unit's all-gather is launched meanwhile: prefetch),
// and after it ran the unit is freed again (the last one stays for backward).
// A hook on each layer's output gathers the unit again when backward reaches
// it (prefetching the unit before it), and when autograd has accumulated all
// of a unit's gradients the unit is freed and — unless noSync() — its
// gradients are reduce-scattered (average) into this rank's shard of them,
// overlapping the rest of backward. With no layers, gatherAll() before the
// forward gathers the one unit and backward frees it.
//
// Between steps a rank holds its shards of the parameters, of the averaged
// gradients and of the optimizer state: 16Ψ/N bytes for Adam in float32. The
// optimizer is the one passed in rebuilt over this rank's pieces of its shards
// (same type — SGD, Adam or AdamW — groups and options; optimizer()). The
// update lands in the shards, so at two ranks without clipping the parameters
// equal DistributedDataParallel's bit for bit, as ZeRO-2's do.
//
// Checkpoints: saveState() writes the model's entries ("model/<name>", every
// parameter whole, assembled on rank 0 while it writes, and the buffers) and the
// whole optimizer's entries (optim/optimizer.h), as a DDP run writes them;
// loadState() takes either back. Buffers (BatchNorm statistics) are not
// sharded: every rank holds them (and, with broadcastBuffers, gets rank 0's).
//
// Construction and finishGradientSync(), clipGradNorm(), step(), saveState(),
// forward(), gatherAll() and restoreModule() are collective. Not thread-safe. Parameters must
// be contiguous float32 tensors on the CPU or one GPU, each in one unit; compression and comm
// hooks are not supported (Error). Unused parameters: as DistributedDataParallel;
// with findUnusedParameters a unit gathered for a micro-batch stays gathered
// until finishGradientSync() (whether all of its gradients arrive differs between
// ranks, and the all-gathers must not), so noSync() accumulation holds it longer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/comm/communicator.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/ddp/sharded_gradient_sync.h"
#include "lockstep/nn/layer.h"

namespace at {
class Tensor;
}
namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace lockstep {

class TensorArchive;

class FullyShardedDataParallel final : public ShardedGradientSync {
 public:
  /// `layers` is the module as a chain (the units, in order) or empty (one
  /// unit); `optimizer` is over the module's parameters (any groups; SGD, Adam
  /// or AdamW); only its type, groups and options are kept.
  FullyShardedDataParallel(std::shared_ptr<torch::nn::Module> module, std::vector<Layer> layers,
                           std::shared_ptr<Communicator> comm, std::unique_ptr<torch::optim::Optimizer> optimizer,
                           SyncOptions options = {});
  ~FullyShardedDataParallel() override;
  FullyShardedDataParallel(const FullyShardedDataParallel&) = delete;
  FullyShardedDataParallel& operator=(const FullyShardedDataParallel&) = delete;

  /// The chain's output for `input`, each unit gathered around its layer (needs layers).
  at::Tensor forward(const at::Tensor& input);
  /// Gathers every unit; they stay until backward accumulated their gradients
  /// or release() (for a forward that is not the chain: the one-unit form).
  void gatherAll();
  /// Frees every gathered unit (after a forward without backward: validation).
  void release();
  /// Collective, at the end of training: gives every parameter of the module its whole value as a
  /// tensor of its own on every rank, as before construction. The object cannot train after it.
  /// (Destroyed without it, it leaves the parameters empty: their values live in the shards.)
  void restoreModule();

  /// Waits for every unit's reduce-scatter; this rank's pieces then hold their
  /// averaged gradients and the parameters' own .grad are undefined.
  void finishGradientSync() override;
  /// Steps the optimizer over this rank's pieces (the shards change in place; nothing is gathered).
  void step() override;
  /// Writes the model's entries ("model/<name>", every parameter whole, and the buffers) and the
  /// whole optimizer's, as a DDP run writes them.
  void saveState(TensorArchive* archive) override;
  /// Restores the model and the optimizer from `archive` (a DDP or sharded run's), keeping this rank's shards.
  void loadState(const TensorArchive& archive, bool report) override;

  int numUnits() const;
  /// Bytes of parameters this rank holds now: its shards plus the gathered units.
  int64_t parameterBytes() const override;
  /// All-gathers so far (forward, backward, checkpoints).
  int64_t gathers() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace lockstep
