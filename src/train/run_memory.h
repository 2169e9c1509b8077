// run_memory.h — the memory figures of one fit() run (FitResult::memory): the peak tensor
// bytes of a step's forward and backward, and the process's peak resident set measured apart
// while checkpoints are saved. Private to train/.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lockstep/train/strategy.h"

namespace lockstep::detail {

class RunMemory {
 public:
  /// The run's device: on a GPU the step figures are the CUDA caching allocator's.
  explicit RunMemory(c10::Device device = c10::kCPU) : cudaDevice_(device.is_cuda() ? device.index() : -1) {}

  /// Around a step's forward and backward: the tensor bytes allocated above the step's start
  /// (on a GPU the allocator's; on the CPU when tensor memory is tracked: common/tensor_memory.h).
  void beginCompute();
  void endCompute();
  /// On a GPU, the most bytes the allocator held since the last beginCompute() (the step's
  /// peak, when called at its end); -1 on the CPU.
  int64_t deviceStepPeak() const;

  /// Runs `save` (a checkpoint) with the resident-set peak reset before and after it, so the
  /// training's and the saving's peaks are measured apart; returns "; peak RSS while saving ...,
  /// training's ..." for the log line, or "" where the kernel cannot reset the peak.
  std::string whileSaving(const std::function<void()>& save);

  /// Collective: `mine` (the strategy's figures) with this rank's peaks, gathered from every rank
  /// in rank order; rank 0 (`report`) logs its own.
  std::vector<RankMemory> gather(Communicator& comm, RankMemory mine, bool report) const;

 private:
  int cudaDevice_;  // -1: the CPU
  bool tracking_ = false;
  int64_t liveAtStart_ = 0;
  int64_t stepPeakBytes_ = -1;   // max over steps of forward+backward tensor bytes, when tracked
  int64_t peakRss_ = 0;          // the largest VmHWM before each reset (checkpoints measure their own peak)
  int64_t trainingPeakRss_ = 0;  // the same, outside checkpoint saving
};

}  // namespace lockstep::detail
