#include "lockstep/monitor/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "lockstep/common/logging.h"

namespace lockstep {

namespace {

constexpr double kBarRedrawUs = 250e3;  // at most 4 redraws a second

}  // namespace

std::string formatDuration(double seconds) {
  auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
}

std::string formatProgress(const ProgressState& s) {
  std::string out;
  if (s.epochs > 0) out += fmt::format("epoch {}/{} ", s.epoch, s.epochs);
  double fraction = s.totalSteps > 0 ? std::clamp(static_cast<double>(s.step) / s.totalSteps, 0.0, 1.0) : 0.0;
  if (s.barWidth > 0 && s.totalSteps > 0) {
    auto filled = static_cast<int>(fraction * s.barWidth);
    out += "[" + std::string(static_cast<size_t>(filled), '#') +
           std::string(static_cast<size_t>(s.barWidth - filled), '.') + "] ";
  }
  out += fmt::format("step {}/{} {:.0f}%", s.step, s.totalSteps, std::floor(100 * fraction));
  if (s.etaSeconds >= 0) out += " ETA " + formatDuration(s.etaSeconds);
  if (s.samplesPerSecond > 0) out += fmt::format(" {:.0f} samples/s", s.samplesPerSecond);
  if (s.hasLoss) out += fmt::format(" loss {:.4f}", s.loss);
  return out;
}

ProgressReporter::ProgressReporter(ProgressMode mode, double intervalSeconds, int fd)
    : mode_(mode), intervalUs_(intervalSeconds * 1e6), fd_(fd) {
  if (mode_ == ProgressMode::kAuto) mode_ = ::isatty(fd_) ? ProgressMode::kBar : ProgressMode::kLines;
  if (mode_ == ProgressMode::kLines) state_.barWidth = 0;
}

void ProgressReporter::onFitStart(const FitInfo& info) {
  info_ = info;
  state_.epochs = info.epochs;
  state_.totalSteps = info.totalSteps;
  state_.step = info.startStep;
}

void ProgressReporter::onStepEnd(const StepRecord& r) {
  if (mode_ == ProgressMode::kOff) return;
  double endUs = r.startUs + r.durationUs;
  state_.step = r.step;
  state_.epoch = r.epoch + 1;
  if (!fromLog_) {
    state_.loss = r.loss;  // this rank's; replaced by the averaged loss at the first log
    state_.hasLoss = true;
  }
  if (firstStep_ < 0) {
    // Rates start after the first step, which carries the start-up cost.
    firstStep_ = r.step;
    firstStepEndUs_ = endUs;
  } else if (endUs > firstStepEndUs_) {
    double stepsPerSecond = static_cast<double>(r.step - firstStep_) / ((endUs - firstStepEndUs_) * 1e-6);
    state_.etaSeconds = static_cast<double>(state_.totalSteps - r.step) / stepsPerSecond;
    if (!fromLog_) state_.samplesPerSecond = stepsPerSecond * static_cast<double>(info_.globalBatch);
  }
  lastStepEndUs_ = endUs;
  show(endUs, false);
}

void ProgressReporter::onLog(const LogRecord& r) {
  fromLog_ = true;
  state_.loss = r.loss;
  state_.hasLoss = true;
  state_.samplesPerSecond = r.samplesPerSecond;
}

void ProgressReporter::onFitEnd(const FitResult& /*result*/) {
  if (mode_ == ProgressMode::kOff || firstStep_ < 0) return;
  state_.etaSeconds = 0;
  show(lastStepEndUs_, true);
}

void ProgressReporter::show(double nowUs, bool final) {
  double gap = mode_ == ProgressMode::kBar ? kBarRedrawUs : intervalUs_;
  if (!final && nowUs - lastShownUs_ < gap) return;
  lastShownUs_ = nowUs;
  std::string text = formatProgress(state_);
  if (mode_ == ProgressMode::kLines) {
    log::info(text);
    return;
  }
  // Clear to the end of the line, then return to its start, so that a log
  // line printed next overwrites the bar instead of being appended to it.
  std::string out = "\r" + text + "\033[K" + (final ? "\n" : "\r");
  ssize_t ignored = ::write(fd_, out.data(), out.size());
  (void)ignored;
}

}  // namespace lockstep
