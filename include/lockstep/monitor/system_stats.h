// lockstep/monitor/system_stats.h — per-worker CPU, memory and thread samples.
//
// A background thread appends one line per interval to system/rank<R>.jsonl:
// {"time","rank","pid","cpu_percent","rss_bytes","threads"}, plus the
// worker's GPU — "gpu_index", "gpu_util" (%), "gpu_mem_bytes",
// "gpu_mem_total_bytes", "gpu_power_watts", "gpu_sm_clock_mhz", "gpu_temp_c",
// each where the device reports it — where the driver's libnvidia-ml loads at
// run time. cpu_percent is
// process CPU time over wall time, so two busy threads read 200. With
// `tensorboard`, the same figures go to TensorBoard as scalars of the run
// system/rank<R> (an event file in that folder), at the last finished step.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "lockstep/train/callbacks.h"

namespace lockstep {

class TensorBoardWriter;

namespace detail {
class AppendFile;
class GpuProbe;
class SystemSamples;
}  // namespace detail

struct ProcessStats {
  double cpuSeconds = 0;  ///< user + system CPU time of the whole process
  int64_t rssBytes = 0;   ///< resident set (VmRSS of /proc/self/status)
  int64_t threads = 0;    ///< Threads of /proc/self/status
};
/// This process's figures now (Linux /proc; zeros where unavailable).
ProcessStats readProcessStats();

class SystemMonitor : public TrainerCallback {
 public:
  /// Opens dir/system/rank<R>.jsonl (appending; throws Error naming it) and
  /// starts sampling every `intervalSeconds` (> 0).
  SystemMonitor(const std::string& dir, int rank, double intervalSeconds, int localRank = 0, bool tensorboard = false);
  /// Stops the thread (after one last sample).
  ~SystemMonitor() override;

  /// The step the next samples are filed under in TensorBoard.
  void onStepEnd(const StepRecord& record) override;
  /// Stops sampling: the run is over.
  void onFitEnd(const FitResult& result) override;
  void stop();
  /// The latest samples, for the step timeline's counters (monitor/system_sample.h).
  std::shared_ptr<const detail::SystemSamples> samples() const;

 private:
  void run();
  void sample();

  int rank_;
  double interval_;
  std::unique_ptr<detail::AppendFile> file_;
  std::unique_ptr<detail::GpuProbe> gpu_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  std::shared_ptr<detail::SystemSamples> samples_;
  std::atomic<int64_t> step_{0};
  double lastWall_ = 0;
  double lastCpu_ = 0;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace lockstep
