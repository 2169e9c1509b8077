// step_timer.h — where each optimizer step's time goes.
//
// Consecutive clock reads split a step into phases (callbacks.h) that tile it:
// beginStep() marks the start, each endPhase(p) charges the time since the
// previous mark to p. endStep() adds the step's communication, the union of
// its messages' [launch, completion] intervals, fills the StepRecord the
// callbacks see (when recording) and accumulates the run's totals. The first
// step of a run warms up and is not timed. The StepRecord is the host's
// timeline. The run's phase totals are too on the CPU, where that is the
// device's; on a GPU they come from CUDA events (step_marks.h), except for
// pipeline steps, whose phases come from the stage's own op timings.
// Training thread only.
#pragma once

#include <array>
#include <chrono>
#include <vector>

#include "lockstep/train/callbacks.h"
#include "lockstep/train/trainer.h"
#include "train/step_marks.h"

namespace lockstep::detail {

class StepTimer {
 public:
  using Clock = std::chrono::steady_clock;

  /// Times are reported relative to `origin`; `record`: fill StepRecord's spans; `device`: where the steps run.
  StepTimer(Clock::time_point origin, bool record, const c10::Device& device)
      : origin_(origin), recording_(record), marks_(device) {}

  double sinceOrigin(Clock::time_point t) const {
    return std::chrono::duration<double, std::micro>(t - origin_).count();
  }

  void beginStep();
  void endPhase(Phase phase);
  /// Charges a pipeline's trainBatch, which ran from the last mark to now: each op's
  /// receive wait to comm wait, its compute to forward or backward, the rest (sends,
  /// the loss broadcast) to comm wait; adds the stage's span and compute to the bubble.
  void endPipelineBatch(const PipelineTimings& timings);
  /// Closes the step: its communication from `timings`, the record's step fields
  /// other than step/epoch/loss/lr (the caller's), and the run's totals.
  void endStep(const std::vector<BucketTiming>& timings);

  /// This step's record (valid after endStep, until the next beginStep).
  StepRecord& record() { return record_; }

  /// Timed steps so far (the first step excluded); -1 before the first step ended.
  int64_t timedSteps() const { return timedSteps_; }
  /// Seconds from the end of the first step to the end of the last.
  double timedSeconds() const;
  /// The run's averages; the *Max fields are maxima over ranks (collective when world > 1).
  /// Waits for the device to pass the last step's marks.
  StepBreakdown breakdown(Communicator& comm);

 private:
  void addBucketProfile(const std::vector<BucketTiming>& timings);

  Clock::time_point origin_;
  bool recording_;
  StepMarks marks_;            // on a GPU: the phases on the device's timeline
  bool pipelineStep_ = false;  // this step's phases came from endPipelineBatch
  StepRecord record_;
  Clock::time_point mark_;
  Clock::time_point stepStart_;
  Clock::time_point backwardStart_;                 // this step's last backward phase
  std::array<double, kPhaseCount> phaseUs_{};       // this step
  std::array<double, kPhaseCount> phaseTotalUs_{};  // timed steps
  double stepTotalUs_ = 0;
  double commTotalUs_ = 0;
  double pipelineUs_ = 0, pipelineComputeUs_ = 0;            // this step
  double pipelineTotalUs_ = 0, pipelineComputeTotalUs_ = 0;  // timed steps
  int buckets_ = 0;
  int64_t bucketBytes_ = 0;
  std::vector<BucketProfile> bucketTotals_;  // timed steps: sums of ready and service times
  int64_t profiledSteps_ = 0;                // timed steps that fed bucketTotals_
  int64_t timedSteps_ = -1;
  Clock::time_point timedStart_;
  Clock::time_point timedEnd_;
};

}  // namespace lockstep::detail
