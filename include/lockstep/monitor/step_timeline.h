// lockstep/monitor/step_timeline.h — where each step's time went, per rank.
//
// phases/rank<R>.jsonl: one line per optimizer step (milliseconds per phase,
// the union of the gradient buckets' launch→done intervals, the bucket count);
// buffered and written at every log and at fit end, not per step.
// timeline/rank<R>.trace.json: the first `traceSteps` steps in Chrome's trace
// event format (Perfetto, chrome://tracing): pid = rank, tid 0 the step and
// its phases, tid 1 one slice per gradient bucket. Timestamps are whole
// microseconds since the Unix epoch, so the files of several ranks of one
// machine line up when opened together; slices of a thread nest or follow
// each other exactly, as viewers require. The file is written as soon as the
// steps are recorded (a run that crashes later still has it) and at fit end.
// With the worker's system samples (drawSystemSamples), the trace also holds
// counter tracks from them: "cpu %", "memory MiB", and with a GPU "gpu %" and
// "gpu memory MiB".
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/train/callbacks.h"

namespace lockstep {

namespace detail {
class AppendFile;
class SystemSamples;
}  // namespace detail

/// One value of counter tracks in a Chrome trace: at `unixTime`, counter `name` has `values`.
struct TraceCounter {
  std::string name;
  double unixTime = 0;
  std::vector<std::pair<std::string, double>> values;
};

/// The union of [launchUs, doneUs] over `buckets`, in microseconds.
double bucketUnionUs(const std::vector<BucketSpan>& buckets);

/// The Chrome trace JSON of `steps` on rank `rank`, with `counters` as counter events (exposed
/// for tests).
std::string chromeTraceJson(const std::vector<StepRecord>& steps, int rank, double unixTimeAtOrigin,
                            const std::vector<TraceCounter>& counters = {});

class StepTimeline : public TrainerCallback {
 public:
  /// Creates dir/phases (and dir/timeline when traceSteps != 0) and opens
  /// phases/rank<R>.jsonl for appending. Throws Error naming the path.
  StepTimeline(const std::string& dir, int rank, int64_t traceSteps);
  ~StepTimeline() override;

  void onFitStart(const FitInfo& info) override;
  void onStepEnd(const StepRecord& record) override;
  void onLog(const LogRecord& record) override;
  void onFitEnd(const FitResult& result) override;

  const std::string& tracePath() const { return tracePath_; }
  /// Draws `samples` (the worker's SystemMonitor::samples()) from 2 s before the first traced
  /// step on as counter tracks.
  void drawSystemSamples(std::shared_ptr<const detail::SystemSamples> samples) { samples_ = std::move(samples); }

 private:
  void writeTrace();

  int rank_;
  int64_t traceSteps_;
  std::string tracePath_;
  FitInfo info_;
  std::unique_ptr<detail::AppendFile> phases_;
  std::vector<StepRecord> traced_;
  std::shared_ptr<const detail::SystemSamples> samples_;
  bool traceWritten_ = false;
  bool warned_ = false;
};

}  // namespace lockstep
