// sharded_impl.h — the state of a ShardedDataParallel: its buckets and, from
// PieceOptimizer (piece_optimizer.h), the optimizer over this rank's pieces.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/optim/optimizer.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/ddp/sharded_data_parallel.h"
#include "optim/piece_optimizer.h"

namespace lockstep {

struct ShardedDataParallel::Impl : detail::PieceOptimizer {
  struct Bucket {
    std::vector<size_t> params;    ///< module parameter indices
    std::vector<int64_t> offsets;  ///< of each, in the flat bucket
    int64_t elements = 0;          ///< gradient elements (before padding)
    int64_t part = 0;              ///< elements of each rank's part: ceil(elements / N)
    at::Tensor buffer;             ///< N * part; alive from the first gradient to the end of the reduce-scatter
    at::Tensor output;             ///< this rank's part, averaged; its pieces' gradients are views of it
    int pending = 0;
    bool ready = false;
    WorkHandle work;
    std::chrono::steady_clock::time_point launched;
  };

  std::shared_ptr<torch::nn::Module> module;
  DdpOptions options;
  std::vector<Bucket> buckets;
  std::vector<std::pair<size_t, size_t>> slotOf;  ///< param -> (bucket, slot)

  std::vector<bool> arrived;
  size_t nextToLaunch = 0;
  bool anyArrived = false;
  bool syncEnabled = true;
  DdpStats stats;
  std::vector<BucketTiming> lastTimings;

  // sharded_data_parallel.cpp
  void onAccumulated(size_t index);
  void ensureBuffer(Bucket& bucket);
  void launchReady(bool duringBackward);
  void finish();
  void reset();
  void gatherParameters();
};

}  // namespace lockstep
