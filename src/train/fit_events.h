// fit_events.h — what a fit() run tells its callbacks (callbacks.h), the same way for the
// synchronous loop (FitRun) and for async_ps (AsyncPsRun): every time relative to one origin,
// every record filled in one place. Private to train/.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "lockstep/train/callbacks.h"

namespace lockstep::detail {

class FitEvents {
 public:
  using Clock = std::chrono::steady_clock;

  /// `callbacks` must outlive this object (TrainerOptions::callbacks).
  explicit FitEvents(const std::vector<std::shared_ptr<TrainerCallback>>& callbacks);

  Clock::time_point origin() const { return origin_; }
  /// Whether any callback listens: the step timer then records every step's spans.
  bool listening() const { return !callbacks_.empty(); }
  double sinceOrigin(Clock::time_point t) const {
    return std::chrono::duration<double, std::micro>(t - origin_).count();
  }

  /// onFitStart, with info's origin and wall-clock time at the origin filled in.
  void fitStart(FitInfo info) const;
  /// onStepEnd with `record` (the step timer's) completed by the loop's fields.
  void stepEnd(StepRecord& record, int64_t step, int64_t epoch, double loss, double lr) const;
  /// onLog with `record` timed at `at`.
  void log(LogRecord record, Clock::time_point at) const;
  /// onValidation at `step` of `epoch` with the result's validation figures, timed now.
  void validation(int64_t step, int64_t epoch, double loss, double accuracy) const;
  /// onGeneration with `record` timed now.
  void generation(GenerationRecord record) const;
  void fitEnd(const FitResult& result) const;

 private:
  const Clock::time_point origin_ = Clock::now();
  const double unixTimeAtOrigin_ =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::vector<std::shared_ptr<TrainerCallback>>& callbacks_;
};

}  // namespace lockstep::detail
