// sharded_impl.h — the state of a ShardedDataParallel, shared by its two
// source files: gradient sync and update (sharded_data_parallel.cpp) and the
// optimizer over the pieces with its checkpoint entries (sharded_state.cpp).
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/optim/optimizer.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/ddp/sharded_data_parallel.h"

namespace lockstep {

struct ShardedDataParallel::Impl {
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
  std::shared_ptr<Communicator> comm;
  DdpOptions options;
  std::vector<at::Tensor> params;  ///< trainable parameters, registration order
  std::vector<std::string> names;
  std::vector<int64_t> numels;
  std::vector<Bucket> buckets;
  std::vector<std::pair<size_t, size_t>> slotOf;  ///< param -> (bucket, slot)
  std::vector<GradientPiece> pieces;              ///< this rank's
  std::vector<at::Tensor> pieceViews;             ///< flat views of the parameters, one per piece

  // The optimizer over the pieces, and how its parameters map to the whole
  // optimizer's (checkpoint positions).
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::vector<size_t> optimizerParams;  ///< whole optimizer position -> module parameter index
  std::vector<int64_t> groupSizes;      ///< parameters per group of the whole optimizer

  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  std::vector<uintptr_t> hookKeys;
  std::vector<bool> arrived;
  size_t nextToLaunch = 0;
  bool anyArrived = false;
  bool syncEnabled = true;
  DdpStats stats;
  std::vector<BucketTiming> lastTimings;

  int rank() const { return comm->rank(); }
  int world() const { return comm->size(); }

  // sharded_data_parallel.cpp
  void onAccumulated(size_t index);
  void ensureBuffer(Bucket& bucket);
  void launchReady(bool duringBackward);
  void finish();
  void reset();
  void gatherParameters();

  // sharded_state.cpp
  /// Rebuilds `whole` (over the module's parameters) over this rank's pieces.
  void buildOptimizer(torch::optim::Optimizer& whole);
  /// Position in the whole optimizer of each of `rank`'s pieces, in the
  /// pieces optimizer's order, with the piece.
  std::vector<std::pair<size_t, GradientPiece>> optimizerOrder(int rank) const;
  void save(TensorArchive* archive);
  void load(const TensorArchive& archive, bool report);
};

}  // namespace lockstep
