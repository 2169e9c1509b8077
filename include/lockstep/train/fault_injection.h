// lockstep/train/fault_injection.h — faults the Trainer makes on purpose, for
// tests and benchmarks only: a worker killed after a checkpoint (restarts), a
// straggler (the parameter server's staleness, the step breakdown's max over
// ranks), an overflowing gradient (the loss scaler's skipped step). A program that trains never sets them; `lockstep
// train` takes them from config testing.* and LOCKSTEP_FAULT_CRASH_AFTER_STEP.
//
//   lockstep::Trainer trainer(comm, options);
//   trainer.injectFaults({.slowRank = 2, .slowFactor = 4});
#pragma once

#include <cstdint>

namespace lockstep {

struct FaultInjection {
  /// SIGKILL this process right after the checkpoint of this optimizer step was written (0: never).
  int64_t crashAfterStep = 0;
  /// The rank slowRank (-1: none) sleeps after each step's backward for (slowFactor - 1) x the
  /// time the step took so far (data, forward, backward), so it computes slowFactor times slower.
  int64_t slowRank = -1;
  double slowFactor = 2;
  /// Rank infGradientRank writes an inf into its first gradient after the backward of optimizer
  /// step infGradientStep (0: never): under precision fp16 every rank skips that one step.
  int64_t infGradientStep = 0;
  int64_t infGradientRank = 0;
};

}  // namespace lockstep
