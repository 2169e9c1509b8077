// powersgd_hook.h — the PowerSGD comm hook (private; built by makeCommHook,
// options and algorithm in lockstep/ddp/comm_hook.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/ddp/comm_hook.h"

namespace lockstep::detail {

class PowerSgdHook final : public CommHook {
 public:
  explicit PowerSgdHook(PowerSgdOptions options);
  std::string name() const override;
  WorkHandle start(Communicator& comm, GradBucket& bucket) override;
  void finish(Communicator& comm, GradBucket& bucket) override;
  /// Bytes of the low-rank factors, error feedback and send buffers of every bucket.
  int64_t stateBytes() const override;
  /// Entries powersgd/bucketNNNN/{steps, q, error}: the step count and Q are the same on every
  /// rank (rank 0's are written); error is [world, elements], row r from rank r (sent while the
  /// writer writes it, after any other rank-to-writer entry of the checkpoint: its keys sort last).
  void saveState(const std::shared_ptr<Communicator>& comm, TensorArchive* archive) override;
  /// Restores the step counts and Qs, and this rank's error row when the world size is the
  /// checkpoint's (else error feedback starts from zero, with a warning); a bucket whose layout
  /// changed starts over.
  void loadState(const TensorArchive& archive, int rank, int world, bool report) override;

 private:
  /// A gradient compressed as an n x m matrix at rank r: offsets into P, Q and the error, and,
  /// from the bucket's first compressed step on, the views the steps work on.
  struct Matrix {
    size_t index;
    int64_t n, m, r;
    int64_t pOffset, qOffset, errorOffset;
    at::Tensor grad, p, q, error;  ///< n x m (the bucket's memory), n x r, m x r, n x m (undefined without feedback)
  };
  struct BucketState {
    bool planned = false;
    std::vector<Matrix> matrices;
    std::vector<size_t> plain;  ///< gradients averaged uncompressed (vectors, matrices that would not shrink)
    int64_t plainNumel = 0, pNumel = 0, qNumel = 0, errorNumel = 0;
    at::Tensor q;       ///< every matrix's Q, kept between steps (warm start)
    at::Tensor error;   ///< every matrix's input, then what compression lost
    at::Tensor pack;    ///< [uncompressed gradients | every matrix's P], the first allreduce
    int64_t steps = 0;  ///< synchronised steps this bucket has seen
    bool compressing = false;
    bool prepared = false;  ///< q, error and pack allocated (or restored) and the matrices' views made
  };
  /// What a checkpoint restored for a bucket, applied when the bucket is planned.
  struct Restored {
    int64_t steps = 0;
    at::Tensor q, error;
  };
  BucketState& stateOf(const GradBucket& bucket);
  void restore(int index, BucketState& s);
  void prepare(BucketState& s, const std::vector<at::Tensor>& grads);

  PowerSgdOptions options_;
  std::vector<BucketState> buckets_;
  std::vector<Restored> restored_;
  bool report_ = false;
};

}  // namespace lockstep::detail
