// lockstep/ddp/comm_hook.h — how a bucket of gradients is averaged across ranks.
//
// A CommHook turns one flat float32 bucket into its average over the ranks.
// start() runs on the backward thread right after the bucket's last gradient
// arrived and must only launch asynchronous work; finish() runs in
// DistributedDataParallel::finishGradientSync() after that work completed and
// leaves the average in bucket.buffer (it may communicate again, blocking).
// Built-in hooks: plain allreduce; fp16/bf16 compression (the bucket travels
// in 2-byte floats, halving the bytes on the wire; arithmetic after
// decompression is float32); PowerSGD (each gradient matrix travels as two
// low-rank factors, with error feedback; powersgd_hook.cpp, docs/ddp.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/comm/communicator.h"

namespace lockstep {

class TensorArchive;

struct GradBucket {
  int index = 0;
  at::Tensor* buffer = nullptr;  ///< flat float32 gradients of the bucket, averaged in place (see acceptsLentGradients)
  at::Tensor* scratch = nullptr;  ///< a tensor the hook may keep between start() and finish()
  /// The bucket's gradients as views of *buffer, shaped like their parameters, in bucket order.
  const std::vector<at::Tensor>* gradients = nullptr;
  /// Bytes the hook handed to collectives for this bucket; the hook adds to it
  /// (DistributedDataParallel sums it into SyncStats::bytesSent).
  int64_t bytesSent = 0;
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::string name() const = 0;
  virtual WorkHandle start(Communicator& comm, GradBucket& bucket) = 0;
  virtual void finish(Communicator& comm, GradBucket& bucket) = 0;
  /// Bytes of tensors the hook keeps between steps (memory reports).
  virtual int64_t stateBytes() const { return 0; }
  /// True when start() and finish() take the bucket's tensors afresh each step
  /// (they keep no views of them): DistributedDataParallel may then hand a
  /// bucket that holds one parameter that parameter's own gradient, instead of
  /// copying it into a buffer of its own. Default false: the buffers stay put.
  virtual bool acceptsLentGradients() const { return false; }
  /// Adds the state the hook keeps between steps to a checkpoint. Collective
  /// over `comm`: every rank calls it; `archive` is null on all but rank 0, the
  /// writer, whose archive must be written once before the others' calls return.
  /// Default: nothing to keep.
  virtual void saveState(const std::shared_ptr<Communicator>& comm, TensorArchive* archive) {
    (void)comm;
    (void)archive;
  }
  /// Takes back this rank's part of what saveState wrote, before the first step
  /// (`report`: log what could not be restored, rank 0). Default: nothing.
  virtual void loadState(const TensorArchive& archive, int rank, int world, bool report) {
    (void)archive;
    (void)rank;
    (void)world;
    (void)report;
  }
};

enum class GradCompression { kNone, kFp16, kBf16, kPowerSgd };
const char* toString(GradCompression c);
/// "none", "fp16", "bf16", "powersgd" -> GradCompression; throws ConfigError naming `what`.
GradCompression parseGradCompression(const std::string& text, const std::string& what);

/// PowerSGD (Vogels, Karimireddy, Jaggi 2019): each gradient of two or more
/// dimensions, viewed as an n x m matrix M (first dimension by the rest), is
/// averaged as P Q^T with P = orthogonalize(sum M Q) (n x r) and Q = mean M^T P
/// (m x r): two allreduces of (n + m) r floats instead of one of n m. Vectors
/// (biases, norms) and matrices where (n + m) r x minCompressionRate >= n m go
/// uncompressed, in the first allreduce. Every rank ends with the same average.
struct PowerSgdOptions {
  int rank = 4;             ///< r, the approximation rank (min(n, m) at most per matrix)
  int64_t startStep = 100;  ///< synchronised steps of plain allreduce before compressing
  double minCompressionRate = 2.0;
  bool errorFeedback = true;  ///< add what compression lost last step to this step's gradient
  bool warmStart = true;      ///< start each step's power iteration from the last step's Q
  uint64_t seed = 0;          ///< Q's random start, the same on every rank
};

/// The hook for `compression`; `powerSgd` is read for kPowerSgd only. Each
/// DistributedDataParallel needs its own hook (PowerSGD keeps state per bucket).
std::shared_ptr<CommHook> makeCommHook(GradCompression compression, const PowerSgdOptions& powerSgd = {});
/// Throws ConfigError naming the ddp.powersgd_* key that is out of range.
void validatePowerSgdOptions(const PowerSgdOptions& options);

}  // namespace lockstep
