// Phase marks on the host clock or as CUDA events (step_marks.h).
#include "train/step_marks.h"

#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>

namespace lockstep::detail {

namespace {

/// At most this many closed steps wait for their events; past it collect() waits for the oldest.
constexpr size_t kMaxClosedSteps = 8;

}  // namespace

struct StepMarks::Event {
  c10::cuda::CUDAEvent cuda{cudaEventDefault};  // timing on: the default flags turn it off
};

StepMarks::StepMarks(const c10::Device& device) : device_(device) {}

StepMarks::~StepMarks() = default;

StepMarks::Stamp StepMarks::stamp(Phase phase, Clock::time_point now) {
  Stamp s{phase, now, nullptr};
  if (!onDevice()) return s;
  if (spare_.empty()) {
    s.event = std::make_shared<Event>();
  } else {
    s.event = std::move(spare_.back());
    spare_.pop_back();
  }
  s.event->cuda.record(c10::cuda::getCurrentCUDAStream(device_.index()));
  return s;
}

void StepMarks::begin(Clock::time_point now) {
  recycle(open_);
  open_.stamps.push_back(stamp(Phase::kDataWait, now));
}

void StepMarks::mark(Phase phase, Clock::time_point now) {
  if (!open_.stamps.empty()) open_.stamps.push_back(stamp(phase, now));
}

void StepMarks::end(bool timed) {
  if (open_.stamps.size() < 2) return discard();
  open_.timed = timed;
  closed_.push_back(std::move(open_));
  open_ = Step{};
  collect(/*waitForAll=*/false);  // waits only for what is past kMaxClosedSteps
}

void StepMarks::discard() { recycle(open_); }

bool StepMarks::passed(const Step& step) const { return !onDevice() || step.stamps.back().event->cuda.query(); }

void StepMarks::collect(bool waitForAll) {
  while (!closed_.empty()) {
    Step& step = closed_.front();
    if (!passed(step) && !waitForAll && closed_.size() <= kMaxClosedSteps) break;
    if (step.timed) add(step);
    recycle(step);
    closed_.pop_front();
  }
}

/// Adds a step's phases, the spans between consecutive marks, once the device passed them.
void StepMarks::add(const Step& step) {
  if (onDevice()) {  // at once for a step that passed
    for (const auto& s : step.stamps) s.event->cuda.synchronize();
  }
  for (size_t i = 1; i < step.stamps.size(); ++i) {
    const Stamp& from = step.stamps[i - 1];
    const Stamp& to = step.stamps[i];
    double us = 0;
    if (onDevice()) {
      us = 1e3 * static_cast<double>(from.event->cuda.elapsed_time(to.event->cuda));
    } else {
      us = std::chrono::duration<double, std::micro>(to.host - from.host).count();
    }
    phaseTotalUs_[static_cast<size_t>(to.phase)] += us;
    stepTotalUs_ += us;
  }
  ++collectedSteps_;
}

void StepMarks::recycle(Step& step) {
  for (auto& s : step.stamps) {
    if (s.event) spare_.push_back(std::move(s.event));
  }
  step.stamps.clear();
  step.timed = false;
}

}  // namespace lockstep::detail
