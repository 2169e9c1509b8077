// lockstep/data/loader.h — batches decoded ahead of the trainer by worker threads.
//
// start(plan, epoch) hands the loader the batches of an epoch in order (lists
// of sample indices, from the DistributedSampler); next() returns them in that
// order. With numWorkers > 0, that many threads compute batches ahead, at
// most `prefetch` batches beyond the one the trainer consumes (a bounded
// queue: memory stays bounded however slow the trainer is). With numWorkers 0,
// next() computes each batch itself. The result does not depend on the
// number of workers: every batch is a pure function of its indices and the
// epoch. A worker's exception is rethrown by the next() that needs its batch.
// start() again abandons what is still queued from the previous plan.
// next() and start() are called from one thread (the trainer's).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "lockstep/data/dataset.h"

namespace lockstep {

struct LoaderOptions {
  int numWorkers = 2;
  int prefetch = 4;  ///< batches ready or in progress ahead of the consumer
  /// Where next() delivers batches. Off the CPU, the thread that makes a batch pins it
  /// (page-locked host memory) and starts its copy without waiting for it, on the device's
  /// default stream, where the consumer's work on the batch runs after it.
  c10::Device device = c10::kCPU;
};

/// `batch` on `device`: off the CPU its tensors are pinned and their copies started without
/// blocking, on the device's current stream; on the CPU (or already there) as it is.
Batch onDevice(Batch batch, c10::Device device);

class DataLoader {
 public:
  DataLoader(const Dataset& dataset, LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  void start(std::vector<std::vector<int64_t>> plan, int64_t epoch);
  /// The next batch of the plan; throws lockstep::Error past its end.
  Batch next();
  /// Seconds next() spent waiting for a batch not ready yet (the data stall), since construction.
  double waitSeconds() const;
  int64_t batchesServed() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace lockstep
