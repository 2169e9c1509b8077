// sharded_impl.h — the state of a ShardedDataParallel: its buckets, reducer
// and piece optimizer (ShardedCore, sharded_core.h), and the all-gather of the
// updated parameters.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>

#include "ddp/sharded_core.h"
#include "lockstep/ddp/sharded_data_parallel.h"

namespace lockstep {

struct ShardedDataParallel::Impl : detail::ShardedCore {
  // sharded_data_parallel.cpp
  /// Copies the gradient into the bucket (a parameter alone in its bucket, without padding, lends it
  /// as the buffer) and frees the whole-size gradient.
  void stage(size_t param, size_t bucket, size_t slot) override;
  void land(size_t bucket, SyncStats& stats) override;
  void endStep(size_t bucket) override;
  void ensureBuffer(detail::ShardedBucket& bucket);
  void gatherParameters();
};

}  // namespace lockstep
