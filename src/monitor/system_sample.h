// system_sample.h — one sample of a worker's system figures, and what is made of it (internal):
// the system/rank<R>.jsonl line, the TensorBoard scalars, the Chrome trace counters.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "monitor/gpu_probe.h"

namespace lockstep::detail {

/// Bytes in a MiB, the unit of the memory figures in TensorBoard and the trace.
constexpr double kMib = 1024.0 * 1024.0;

struct SystemSample {
  double time = 0;  ///< Unix seconds
  double cpuPercent = 0;
  int64_t rssBytes = 0;
  int64_t threads = 0;
  std::optional<GpuSample> gpu;
};

/// The system/rank<R>.jsonl line of `s` (with its newline).
std::string systemLine(const SystemSample& s, int rank, int pid);

/// TensorBoard's scalars of `s`, tag and value: system/cpu_percent, system/rss_mib,
/// system/threads, and with a GPU gpu/util_percent, gpu/mem_used_mib, gpu/mem_used_percent,
/// gpu/power_watts, gpu/sm_clock_mhz, gpu/temp_c (those the device reports).
std::vector<std::pair<std::string, double>> systemScalars(const SystemSample& s);

/// The latest samples of one worker, shared by its sampler (which adds) and its step timeline
/// (which draws them as counters). Thread-safe; keeps the last `capacity`.
class SystemSamples {
 public:
  explicit SystemSamples(size_t capacity = 4096) : capacity_(capacity) {}
  void add(const SystemSample& s) {
    std::lock_guard<std::mutex> lock(mutex_);
    samples_.push_back(s);
    if (samples_.size() > capacity_) samples_.pop_front();
  }
  /// The samples taken at `from` (Unix seconds) or later, oldest first.
  std::vector<SystemSample> since(double from) const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<SystemSample> out;
    for (const auto& s : samples_) {
      if (s.time >= from) out.push_back(s);
    }
    return out;
  }

 private:
  size_t capacity_;
  mutable std::mutex mutex_;
  std::deque<SystemSample> samples_;
};

}  // namespace lockstep::detail
