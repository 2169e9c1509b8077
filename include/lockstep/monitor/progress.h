// lockstep/monitor/progress.h — rank 0's progress bar.
//
//   epoch 2/15 [#####...............] step 801/7035 11% ETA 5m12s 3012 samples/s loss 0.4123
//
// On a terminal the line is redrawn in place ('\r') at most 4 times a second;
// otherwise (a file, a pipe, `lockstep run`'s prefixed output) a plain log
// line is printed at most every `interval` seconds. Rates and the ETA come
// from the steps' own times, not from the clock at the call.
#pragma once

#include <cstdint>
#include <string>

#include "lockstep/monitor/monitor.h"
#include "lockstep/train/callbacks.h"

namespace lockstep {

struct ProgressState {
  int64_t epoch = 0;   ///< 1-based
  int64_t epochs = 0;  ///< 0: not shown
  int64_t step = 0;
  int64_t totalSteps = 0;
  double samplesPerSecond = 0;  ///< 0: not known yet
  double etaSeconds = -1;       ///< < 0: not known yet
  double loss = 0;
  bool hasLoss = false;
  int barWidth = 20;  ///< 0: no bar
};
/// The progress text (no newline, no '\r').
std::string formatProgress(const ProgressState& state);
/// "45s", "1m23s", "2h05m".
std::string formatDuration(double seconds);

class ProgressReporter : public TrainerCallback {
 public:
  /// `mode` kAuto picks kBar when `fd` is a terminal. Bars are written to
  /// `fd`; lines go through the logger.
  ProgressReporter(ProgressMode mode, double intervalSeconds, int fd = 2);

  void onFitStart(const FitInfo& info) override;
  void onStepEnd(const StepRecord& record) override;
  void onLog(const LogRecord& record) override;
  void onFitEnd(const FitResult& result) override;

  ProgressMode mode() const { return mode_; }

 private:
  void show(double nowUs, bool final);

  ProgressMode mode_;
  double intervalUs_;
  int fd_;
  FitInfo info_;
  ProgressState state_;
  int64_t firstStep_ = -1;  ///< the first step this session saw, and when it ended
  double firstStepEndUs_ = 0;
  double lastStepEndUs_ = 0;
  double lastShownUs_ = -1e18;
  bool fromLog_ = false;  ///< the rate comes from the last LogRecord
};

}  // namespace lockstep
