// The per-worker system sampler against this very process: plausible memory
// and thread counts, and a thread spinning on the CPU shows in cpu_percent.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "lockstep/monitor/system_stats.h"
#include "monitor/gpu_probe.h"
#include "monitor/run_dir.h"
#include "monitor/system_sample.h"
#include "support/subprocess.h"

namespace lockstep {
namespace {

void spin(std::chrono::milliseconds howLong) {
  auto until = std::chrono::steady_clock::now() + howLong;
  volatile uint64_t sink = 0;
  while (std::chrono::steady_clock::now() < until) sink = sink + 1;
}

TEST(SystemStats, ProcessFiguresArePlausible) {
  auto before = readProcessStats();
  EXPECT_GT(before.rssBytes, 1 << 20);
  EXPECT_GE(before.threads, 1);
  std::thread extra([] { std::this_thread::sleep_for(std::chrono::milliseconds(200)); });
  EXPECT_GE(readProcessStats().threads, before.threads + 1);
  extra.join();
  spin(std::chrono::milliseconds(50));
  EXPECT_GT(readProcessStats().cpuSeconds, before.cpuSeconds + 0.02);
}

TEST(SystemStats, SamplerLinesShowABusyThread) {
  std::string dir = test::makeTempDir();
  // The GPU fields come from the suite's scripted NVML (tests/helpers/fake_nvml.cpp), device 1.
  ::setenv("LOCKSTEP_NVML_LIBRARY", LOCKSTEP_FAKE_NVML, 1);
  ::setenv("CUDA_VISIBLE_DEVICES", "1", 1);
  {
    SystemMonitor monitor(dir, 2, 0.1);
    std::this_thread::sleep_for(std::chrono::milliseconds(350));  // idle
    std::thread busy([] { spin(std::chrono::milliseconds(700)); });
    busy.join();
    monitor.stop();
  }
  auto lines = test::readJsonLines(dir + "/system/rank2.jsonl");
  ASSERT_GE(lines.size(), 6u);
  double idleMax = 0, busyMax = 0;
  double previousTime = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto& l = lines[i];
    EXPECT_EQ(l["rank"], 2);
    EXPECT_EQ(l["pid"], ::getpid());
    EXPECT_GT(l["rss_bytes"].get<int64_t>(), 1 << 20);
    // The test and the sampler; stop() writes the last line after the sampler thread ended.
    EXPECT_GE(l["threads"].get<int>(), i + 1 < lines.size() ? 2 : 1) << "line " << i;
    EXPECT_GT(l["time"].get<double>(), previousTime);
    previousTime = l["time"];
    EXPECT_EQ(l.value("gpu_index", -1), 1) << l.dump();
    EXPECT_EQ(l.value("gpu_util", -1.0), 31.0) << l.dump();
    EXPECT_EQ(l.value("gpu_mem_bytes", int64_t{-1}), int64_t{2} << 30) << l.dump();
    double cpu = l["cpu_percent"];
    EXPECT_GE(cpu, 0);
    EXPECT_LE(cpu, 100.0 * std::thread::hardware_concurrency() + 20);
    (i < 2 ? idleMax : busyMax) = std::max(i < 2 ? idleMax : busyMax, cpu);
  }
  EXPECT_LT(idleMax, 50) << "an idle process";
  EXPECT_GT(busyMax, 50) << "one spinning thread should read near 100%";
}

TEST(GpuProbe, SampleFieldsLeaveOutWhatTheDeviceDoesNotReport) {
  detail::GpuSample s;
  EXPECT_EQ(detail::gpuFields(s), "");
  s.index = 1;
  s.utilPercent = 87;
  s.memBytes = 3 << 20;
  s.memTotalBytes = int64_t{80} << 30;
  s.powerWatts = 312.25;
  s.smClockMhz = 1980;
  EXPECT_EQ(detail::gpuFields(s),
            ",\"gpu_index\":1,\"gpu_util\":87.0,\"gpu_mem_bytes\":3145728,\"gpu_mem_total_bytes\":85899345920,"
            "\"gpu_power_watts\":312.2,\"gpu_sm_clock_mhz\":1980");
  s.temperatureC = 41;
  auto line = nlohmann::json::parse("{\"time\":1" + detail::gpuFields(s) + "}");
  EXPECT_EQ(line["gpu_temp_c"], 41);
}

TEST(GpuProbe, EachWorkerWatchesTheGpuCudaGivesIt) {
  using detail::gpuFor;
  EXPECT_EQ(gpuFor(3, nullptr, 4)->index, 3);
  EXPECT_EQ(gpuFor(5, nullptr, 4)->index, 1);  // more workers than GPUs share them, as pickDevice does
  EXPECT_FALSE(gpuFor(0, nullptr, 0).has_value());
  EXPECT_EQ(gpuFor(1, "6,2", 8)->index, 2);
  EXPECT_EQ(gpuFor(2, "6,2", 8)->index, 6);
  EXPECT_EQ(gpuFor(0, "GPU-8d3f2c1a-0000,3", 8)->uuid, "GPU-8d3f2c1a-0000");
  EXPECT_EQ(gpuFor(1, "5,-1,7", 8)->index, 5);  // CUDA stops at the first invalid entry
  EXPECT_FALSE(gpuFor(0, "", 8).has_value());
  EXPECT_FALSE(gpuFor(0, "-1", 8).has_value());
  EXPECT_FALSE(gpuFor(0, "x", 8).has_value());
}

// What TensorBoard gets of a sample: CPU, memory and threads always; of the GPU what it reports.
TEST(SystemStats, TensorBoardScalarsOfASample) {
  detail::SystemSample s{1700000000.5, 150, int64_t{512} << 20, 12, std::nullopt};
  using Scalars = std::vector<std::pair<std::string, double>>;
  EXPECT_EQ(detail::systemScalars(s),
            (Scalars{{"system/cpu_percent", 150}, {"system/rss_mib", 512}, {"system/threads", 12}}));
  detail::GpuSample gpu;
  gpu.utilPercent = 87;
  gpu.memBytes = int64_t{20} << 30;
  gpu.memTotalBytes = int64_t{80} << 30;
  gpu.temperatureC = 41;
  s.gpu = gpu;
  EXPECT_EQ(detail::systemScalars(s), (Scalars{{"system/cpu_percent", 150},
                                               {"system/rss_mib", 512},
                                               {"system/threads", 12},
                                               {"gpu/util_percent", 87},
                                               {"gpu/mem_used_mib", 20480},
                                               {"gpu/mem_used_percent", 25},
                                               {"gpu/temp_c", 41}}));
  EXPECT_EQ(detail::systemLine(s, 3, 77),
            "{\"time\":1700000000.500000,\"rank\":3,\"pid\":77,\"cpu_percent\":150.00,\"rss_bytes\":536870912,"
            "\"threads\":12" +
                detail::gpuFields(gpu) + "}\n");
}

}  // namespace
}  // namespace lockstep
