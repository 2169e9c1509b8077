// lockstep/data/dataset.h — what the Trainer and the loader read batches from.
//
// A Dataset hands out whole batches: batch(indices, epoch) returns the
// samples `indices` (inputs stacked along dim 0, targets likewise), with any
// augmentation a pure function of (seed, epoch, sample index), so that the
// same batch is the same on every call whatever thread or rank computes it.
// batch() must be thread-safe: DataLoader calls it from worker threads.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace lockstep {

struct Batch {
  at::Tensor inputs;
  at::Tensor targets;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Batch batch(const std::vector<int64_t>& indices, int64_t epoch) const = 0;
};

/// Rows of two in-memory tensors (inputs [N, ...], targets [N, ...]); no augmentation.
class TensorDataset : public Dataset {
 public:
  TensorDataset(at::Tensor inputs, at::Tensor targets);
  int64_t size() const override;
  Batch batch(const std::vector<int64_t>& indices, int64_t epoch) const override;

 private:
  at::Tensor inputs_;
  at::Tensor targets_;
};

}  // namespace lockstep
