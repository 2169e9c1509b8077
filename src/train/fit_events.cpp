// fit_events.cpp — src/train/fit_events.h.
#include "train/fit_events.h"

namespace lockstep::detail {

FitEvents::FitEvents(const std::vector<std::shared_ptr<TrainerCallback>>& callbacks) : callbacks_(callbacks) {}

void FitEvents::fitStart(FitInfo info) const {
  info.origin = origin_;
  info.unixTimeAtOrigin = unixTimeAtOrigin_;
  for (const auto& c : callbacks_) c->onFitStart(info);
}

void FitEvents::stepEnd(StepRecord& record, int64_t step, int64_t epoch, double loss, double lr) const {
  if (callbacks_.empty()) return;
  record.step = step;
  record.epoch = epoch;
  record.loss = loss;
  record.lr = lr;
  for (const auto& c : callbacks_) c->onStepEnd(record);
}

void FitEvents::log(LogRecord record, Clock::time_point at) const {
  record.timeUs = sinceOrigin(at);
  for (const auto& c : callbacks_) c->onLog(record);
}

void FitEvents::validation(int64_t step, int64_t epoch, double loss, double accuracy) const {
  const ValidationRecord record{step, epoch, loss, accuracy, sinceOrigin(Clock::now())};
  for (const auto& c : callbacks_) c->onValidation(record);
}

void FitEvents::generation(GenerationRecord record) const {
  record.timeUs = sinceOrigin(Clock::now());
  for (const auto& c : callbacks_) c->onGeneration(record);
}

void FitEvents::fitEnd(const FitResult& result) const {
  for (const auto& c : callbacks_) c->onFitEnd(result);
}

}  // namespace lockstep::detail
