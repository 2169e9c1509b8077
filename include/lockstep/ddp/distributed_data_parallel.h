// lockstep/ddp/distributed_data_parallel.h — DistributedDataParallel for a LibTorch module.
//
//   lockstep::DistributedDataParallel ddp(model, comm, {});
//   auto loss = lossOf(model->forward(x), y);
//   loss.backward();              // buckets are allreduced while backward runs
//   ddp.finishGradientSync();     // waits; every .grad now holds the average over ranks
//   optimizer.step();
//
// Construction (collective: every rank must construct at the same point)
// checks that all ranks hold the same parameters (names, shapes, dtypes,
// order; a mismatch throws lockstep::Error naming the first differing
// parameter on each side) and broadcasts rank 0's parameters and buffers.
//
// Gradients are packed into buckets of at most bucketCapMb, in reverse
// registration order (the order backward produces them). A bucket's
// allreduce is launched from an autograd hook as soon as its last gradient
// is ready, so communication overlaps the rest of backward; buckets are
// always launched in the same order on every rank. finishGradientSync()
// must follow every synchronised backward.
//
// Each parameter's .grad becomes a view of its bucket slot when its gradient
// is first synchronised (one float32 copy of the model, not two): the
// average lands in .grad with no copy back, and a zero_grad() that fills
// zeros lets the next backward accumulate straight into the bucket. A .grad
// reset to undefined (zero_grad(true)) gets autograd's new gradient, which is
// copied in once and bound again — or, for a parameter alone in its bucket
// and a hook that allows it (CommHook::acceptsLentGradients), becomes the
// bucket itself. Keep no reference to a .grad across steps.
//
// Inside a noSync() scope backward only accumulates local gradients; the
// first synchronised backward after it averages the accumulated sum.
// Parameters that get no gradient in a step are an error (naming them)
// unless findUnusedParameters. Then the ranks agree, after the buckets, which
// parameters each used in the step (noSync micro-batches included; one small
// allreduce per step): a parameter some rank used is averaged as usual, a rank
// that did not use it contributing what its .grad holds (zeros when none); a
// parameter no rank used keeps its .grad exactly as it was (none stays none),
// so a stateful optimizer skips it, as in one process.
//
// Not thread-safe; one backward at a time. Parameters are float32, all on one device.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/comm/communicator.h"
#include "lockstep/ddp/comm_hook.h"
#include "lockstep/ddp/gradient_sync.h"

namespace torch::nn {
class Module;
}

namespace lockstep {

/// How a gradient front averages: DistributedDataParallel, ZeRO-2 and ZeRO-3 (its buckets, whether
/// unused parameters are looked for), and the Trainer's strategies through them. Compression and
/// comm hooks are DistributedDataParallel's only: ZeRO-2 and ZeRO-3 refuse them (Error).
struct SyncOptions {
  double bucketCapMb = 25.0;
  /// The first bucket (the last layers, whose gradients backward produces
  /// first) is capped at min(this, bucketCapMb), so communication starts early
  /// in backward even when the whole model would fit in one bucket.
  double firstBucketCapMb = 1.0;
  bool findUnusedParameters = false;
  bool broadcastBuffers =
      true;  ///< re-broadcast rank 0's buffers after each sync (BatchNorm statistics), as PyTorch's DDP does
  bool checkConsistency = true;  ///< exchange the parameter fingerprint at construction
  GradCompression compression = GradCompression::kNone;
  PowerSgdOptions powerSgd;        ///< read when compression is kPowerSgd
  std::shared_ptr<CommHook> hook;  ///< overrides `compression` when set
};
using DdpOptions [[deprecated("renamed lockstep::SyncOptions")]] = SyncOptions;

class DistributedDataParallel final : public GradientSync {
 public:
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Communicator> comm,
                          SyncOptions options = {});
  ~DistributedDataParallel() override;
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  /// Waits for every bucket, launching late ones; writes the averages into .grad.
  void finishGradientSync() override;

  int numBuckets() const;
  /// Bytes of the gradients: the buckets (every .grad is a view of one after
  /// a sync) and any .grad that is not such a view (a world of one, or a
  /// gradient that replaced the view since).
  int64_t gradientBytes() const override;
  /// Bytes held besides the gradients: compression scratch and the comm hook's state.
  int64_t bufferBytes() const override;
  /// Parameter names of each bucket, in bucket order (tests, logs).
  std::vector<std::vector<std::string>> bucketLayout() const;
  Communicator& comm();
  torch::nn::Module& module();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

/// One line per parameter, then per buffer ("parameter name dtype[shape]", "buffer name
/// dtype[shape]"): the fingerprint ranks compare.
std::vector<std::string> parameterSignature(const torch::nn::Module& module);

/// Broadcasts rank 0's parameters and buffers into every rank's module.
void broadcastModule(torch::nn::Module& module, Communicator& comm);

/// Checks that every rank holds the same parameters; throws lockstep::Error naming
/// the first difference (collective).
void checkModuleConsistency(const torch::nn::Module& module, Communicator& comm);

}  // namespace lockstep
