// step_marks.h — each phase's time on the timeline of the device that runs it.
//
// The step breakdown (StepTimer) splits a step into phases at marks. On the CPU
// a mark is the host clock at the call. On a CUDA device the host only queues
// work, so a host clock would charge a phase with the time to launch its
// kernels and the next phase that reads a value back with everything queued
// before it; there a mark is an event recorded on the worker's current stream,
// passed when the device reaches it, and a phase is the device's time between
// two marks: its kernels, or the stream standing idle while the host fetched a
// batch or a collective held it. Events are read without stopping the host:
// end() keeps a step until its last event has passed (the next step's loss read
// usually waits past it), collect() adds the steps that have passed, and
// collect(true) waits for the rest. StepTimer uses it on a GPU only (its own
// clock reads are the CPU's timeline); on the CPU the same queue runs on host
// time points, which is how its tests drive it. Training thread only.
#pragma once

#include <c10/core/Device.h>

#include <array>
#include <chrono>
#include <deque>
#include <memory>
#include <vector>

#include "lockstep/train/callbacks.h"

namespace lockstep::detail {

class StepMarks {
 public:
  using Clock = std::chrono::steady_clock;

  /// `device`: a CUDA device marks with events on its current stream; any other with the host clock.
  explicit StepMarks(const c10::Device& device);
  ~StepMarks();
  StepMarks(const StepMarks&) = delete;
  StepMarks& operator=(const StepMarks&) = delete;

  /// Whether marks are device events (true) or host clock reads.
  bool onDevice() const { return device_.is_cuda(); }

  /// The step's first mark; `now` is the host clock, used when marking on the host.
  void begin(Clock::time_point now);
  /// The end of `phase`, the span since the previous mark; phases may repeat within a step.
  void mark(Phase phase, Clock::time_point now);
  /// Closes the step. A timed step's phases are added to the totals once its marks have passed.
  void end(bool timed);
  /// Drops the open step (its phases were accounted elsewhere).
  void discard();
  /// Adds the closed steps whose marks have passed; `waitForAll`: waits for every closed step first.
  void collect(bool waitForAll);

  /// Sums over the timed steps collected so far, in microseconds.
  const std::array<double, kPhaseCount>& phaseTotalUs() const { return phaseTotalUs_; }
  double stepTotalUs() const { return stepTotalUs_; }
  int64_t collectedSteps() const { return collectedSteps_; }

 private:
  struct Event;  // a CUDA event with timing (step_marks.cpp)
  struct Stamp {
    Phase phase = Phase::kDataWait;  // the phase this mark ends (unused for the first)
    Clock::time_point host;
    std::shared_ptr<Event> event;
  };
  struct Step {
    std::vector<Stamp> stamps;
    bool timed = false;
  };

  Stamp stamp(Phase phase, Clock::time_point now);
  bool passed(const Step& step) const;
  void add(const Step& step);
  void recycle(Step& step);

  c10::Device device_;
  Step open_;
  std::deque<Step> closed_;
  std::vector<std::shared_ptr<Event>> spare_;  // recorded events no step holds, for reuse
  std::array<double, kPhaseCount> phaseTotalUs_{};
  double stepTotalUs_ = 0;
  int64_t collectedSteps_ = 0;
};

}  // namespace lockstep::detail
