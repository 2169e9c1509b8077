// lockstep/monitor/metrics_writer.h — rank 0's run-level files.
//
// run.json (status, progress; rewritten atomically at fit start, every log
// and fit end), config.yaml, metrics.jsonl and metrics.csv (one row per log
// window and per validation, appended and flushed row by row) and the
// TensorBoard event file. Field names: docs/monitoring.md.
//
// Threads: none of its own. Like every TrainerCallback it is called from the
// training thread only, and is not safe to call from two threads at once.
#pragma once

#include <memory>
#include <string>

#include "lockstep/train/callbacks.h"
#include "lockstep/train/strategy.h"

namespace lockstep {

namespace detail {
class AppendFile;
}
class TensorBoardWriter;

class MetricsWriter : public TrainerCallback {
 public:
  /// Creates `dir`, writes config.yaml and opens the metrics files (appending).
  /// Throws Error naming the path that cannot be written. `standby` (an elastic run's rank
  /// other than 0): writes nothing until a new generation makes this rank 0 (onGeneration),
  /// then takes the run's files over from the lost rank 0.
  MetricsWriter(const std::string& dir, const std::string& runName, const std::string& configText,
                bool tensorboard = true, bool standby = false);
  /// Marks run.json "failed" when fit started but never ended (an exception unwound it).
  ~MetricsWriter() override;

  void onFitStart(const FitInfo& info) override;
  void onStepEnd(const StepRecord& record) override;
  void onLog(const LogRecord& record) override;
  void onValidation(const ValidationRecord& record) override;
  void onGeneration(const GenerationRecord& record) override;
  void onFitEnd(const FitResult& result) override;

 private:
  void open();
  void writeRunJson(const char* status);
  double unixTime(double timeUs) const { return info_.unixTimeAtOrigin + timeUs * 1e-6; }

  std::string dir_;
  std::string runName_;
  std::string hostname_;
  std::string configText_;
  bool tensorboard_ = true;
  bool standby_ = false;
  FitInfo info_;
  double startTime_ = 0;
  int64_t step_ = 0;
  bool started_ = false;
  bool ended_ = false;
  bool warned_ = false;
  std::vector<RankMemory> memory_;             ///< every rank's, from the FitResult; run.json "memory" once finished
  std::vector<GenerationRecord> generations_;  ///< an elastic run's; run.json "generations"
  std::vector<int64_t> staleness_;             ///< async_ps: updates by staleness; run.json "ps" once finished
  std::vector<double> psWaitSeconds_;
  int64_t maxStaleness_ = -1;  ///< async_ps: the largest staleness any server applied
  std::unique_ptr<detail::AppendFile> jsonl_;
  std::unique_ptr<detail::AppendFile> csv_;
  std::unique_ptr<TensorBoardWriter> events_;
};

}  // namespace lockstep
