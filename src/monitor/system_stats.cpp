#include "lockstep/monitor/system_stats.h"

#include <time.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "common/worker_thread.h"
#include "lockstep/monitor/tensorboard.h"
#include "monitor/gpu_probe.h"
#include "monitor/run_files.h"
#include "monitor/system_sample.h"

namespace lockstep {

namespace {

/// The number after "Key:" in /proc/self/status ("VmRSS:  1234 kB" gives 1234), or -1.
int64_t statusField(const std::string& status, const std::string& key) {
  auto at = status.find("\n" + key + ":");
  if (at == std::string::npos) return -1;
  return std::strtoll(status.c_str() + at + key.size() + 2, nullptr, 10);
}

}  // namespace

namespace detail {

std::string systemLine(const SystemSample& s, int rank, int pid) {
  std::string line =
      fmt::format("{{\"time\":{:.6f},\"rank\":{},\"pid\":{},\"cpu_percent\":{:.2f},\"rss_bytes\":{},\"threads\":{}",
                  s.time, rank, pid, s.cpuPercent, s.rssBytes, s.threads);
  if (s.gpu) line += gpuFields(*s.gpu);
  return line + "}\n";
}

std::vector<std::pair<std::string, double>> systemScalars(const SystemSample& s) {
  std::vector<std::pair<std::string, double>> out{{"system/cpu_percent", s.cpuPercent},
                                                  {"system/rss_mib", static_cast<double>(s.rssBytes) / kMib},
                                                  {"system/threads", static_cast<double>(s.threads)}};
  if (!s.gpu) return out;
  const GpuSample& g = *s.gpu;
  if (g.utilPercent >= 0) out.emplace_back("gpu/util_percent", g.utilPercent);
  if (g.memBytes >= 0) out.emplace_back("gpu/mem_used_mib", static_cast<double>(g.memBytes) / kMib);
  if (g.memBytes >= 0 && g.memTotalBytes > 0) {
    out.emplace_back("gpu/mem_used_percent",
                     100.0 * static_cast<double>(g.memBytes) / static_cast<double>(g.memTotalBytes));
  }
  if (g.powerWatts >= 0) out.emplace_back("gpu/power_watts", g.powerWatts);
  if (g.smClockMhz >= 0) out.emplace_back("gpu/sm_clock_mhz", g.smClockMhz);
  if (g.temperatureC >= 0) out.emplace_back("gpu/temp_c", g.temperatureC);
  return out;
}

}  // namespace detail

ProcessStats readProcessStats() {
  ProcessStats stats;
  // CPU time of all threads: the kernel's counter behind utime + stime of
  // /proc/self/stat, read with nanosecond resolution instead of clock ticks.
  timespec cpu{};
  if (::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu) == 0) {
    stats.cpuSeconds = static_cast<double>(cpu.tv_sec) + static_cast<double>(cpu.tv_nsec) * 1e-9;
  }
  std::ifstream in("/proc/self/status");
  std::string status = "\n" + std::string(std::istreambuf_iterator<char>(in), {});
  int64_t rssKb = statusField(status, "VmRSS");
  if (rssKb >= 0) stats.rssBytes = rssKb * 1024;
  int64_t threads = statusField(status, "Threads");
  if (threads >= 0) stats.threads = threads;
  return stats;
}

SystemMonitor::SystemMonitor(const std::string& dir, int rank, double intervalSeconds, int localRank, bool tensorboard)
    : rank_(rank), interval_(intervalSeconds), file_(std::make_unique<detail::AppendFile>()),
      samples_(std::make_shared<detail::SystemSamples>()) {
  auto sub = std::filesystem::path(dir) / "system";
  detail::createDirectories(sub.string());
  file_->open((sub / fmt::format("rank{}.jsonl", rank)).string());
  if (tensorboard) tensorboard_ = std::make_unique<TensorBoardWriter>((sub / fmt::format("rank{}", rank)).string());
  gpu_ = std::make_unique<detail::GpuProbe>(localRank);
  lastWall_ = detail::unixNow();
  lastCpu_ = readProcessStats().cpuSeconds;
  thread_ = detail::startThread([this] { run(); });
}

SystemMonitor::~SystemMonitor() { stop(); }

void SystemMonitor::onStepEnd(const StepRecord& record) { step_ = record.step; }

std::shared_ptr<const detail::SystemSamples> SystemMonitor::samples() const { return samples_; }

void SystemMonitor::onFitEnd(const FitResult& /*result*/) { stop(); }

void SystemMonitor::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  sample();
}

void SystemMonitor::run() {
  auto period = std::chrono::duration<double>(interval_);
  auto next = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(period);
    if (cv_.wait_until(lock, next, [this] { return stopping_; })) return;
    lock.unlock();
    sample();
    lock.lock();
  }
}

void SystemMonitor::sample() {
  double wall = detail::unixNow();
  ProcessStats stats = readProcessStats();
  double elapsed = wall - lastWall_;
  if (elapsed < 1e-3) return;  // the final sample right after a periodic one
  detail::SystemSample s{wall, 100.0 * (stats.cpuSeconds - lastCpu_) / elapsed, stats.rssBytes, stats.threads,
                         gpu_->sample()};
  lastWall_ = wall;
  lastCpu_ = stats.cpuSeconds;
  file_->writeLine(detail::systemLine(s, rank_, ::getpid()));
  samples_->add(s);
  if (tensorboard_) {
    for (const auto& [tag, value] : detail::systemScalars(s)) tensorboard_->addScalar(tag, step_, value, wall);
    tensorboard_->flush();
  }
}

}  // namespace lockstep
