// The GPU probe's real path (dlopen, the NVML calls, the device CUDA gives the worker) against
// the fake libnvidia-ml.so.1 the suite builds (tests/helpers/fake_nvml.cpp): scripted values come
// back as the sample's fields; a library that is absent or fails gives no sample and no error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "monitor/gpu_probe.h"
#include "support/subprocess.h"

namespace lockstep {
namespace {

/// Sets environment variables for one scope and puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(std::map<std::string, std::string> values) {
    for (const auto& [name, value] : values) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old != nullptr ? std::optional<std::string>(old) : std::nullopt;
      ::setenv(name.c_str(), value.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, old] : saved_) {
      if (old) {
        ::setenv(name.c_str(), old->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

std::optional<detail::GpuSample> probe(std::map<std::string, std::string> env, int localRank = 0) {
  env.emplace("LOCKSTEP_NVML_LIBRARY", LOCKSTEP_FAKE_NVML);
  ScopedEnv scoped(env);
  return detail::GpuProbe(localRank).sample();
}

TEST(FakeNvml, TheProbeReportsWhatTheLibraryScripts) {
  auto s = probe({{"CUDA_VISIBLE_DEVICES", "1"}});
  ASSERT_TRUE(s.has_value()) << "the probe found no GPU through " << LOCKSTEP_FAKE_NVML;
  EXPECT_EQ(s->index, 1);
  EXPECT_EQ(s->utilPercent, 31);
  EXPECT_EQ(s->memBytes, int64_t{2} << 30);
  EXPECT_EQ(s->memTotalBytes, int64_t{80} << 30);
  EXPECT_EQ(s->powerWatts, 101);
  EXPECT_EQ(s->smClockMhz, 1401);
  EXPECT_EQ(s->temperatureC, 41);
}

TEST(FakeNvml, EachWorkerFindsItsDeviceByIndexOrUuid) {
  EXPECT_EQ(probe({{"CUDA_VISIBLE_DEVICES", "1,0"}}, 0)->index, 1);
  EXPECT_EQ(probe({{"CUDA_VISIBLE_DEVICES", "1,0"}}, 1)->index, 0);
  EXPECT_EQ(probe({{"CUDA_VISIBLE_DEVICES", "GPU-fake-1,GPU-fake-0"}}, 0)->index, 1);
  EXPECT_EQ(probe({{"CUDA_VISIBLE_DEVICES", "GPU-fake-1,GPU-fake-0"}}, 1)->index, 0);
  EXPECT_FALSE(probe({{"FAKE_NVML_DEVICES", "4"}, {"CUDA_VISIBLE_DEVICES", ""}}, 0).has_value()) << "all hidden";
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(probe({{"FAKE_NVML_DEVICES", "4"}}, 3)->index, 3) << "unset: local rank";
  EXPECT_EQ(probe({{"FAKE_NVML_DEVICES", "4"}}, 5)->index, 1) << "more workers than GPUs share them";
  EXPECT_FALSE(probe({{"CUDA_VISIBLE_DEVICES", "GPU-other"}}).has_value()) << "a UUID NVML does not know";
  EXPECT_FALSE(probe({{"CUDA_VISIBLE_DEVICES", "7"}}).has_value()) << "an index beyond the count";
}

TEST(FakeNvml, ALibraryThatIsAbsentOrFailsGivesNoSample) {
  EXPECT_FALSE(probe({{"LOCKSTEP_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"}}).has_value());
  for (const char* call : {"nvmlInit_v2", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2"}) {
    EXPECT_FALSE(probe({{"CUDA_VISIBLE_DEVICES", "0"}, {"FAKE_NVML_FAIL", call}}).has_value()) << call;
  }
  EXPECT_FALSE(
      probe({{"CUDA_VISIBLE_DEVICES", "GPU-fake-0"}, {"FAKE_NVML_FAIL", "nvmlDeviceGetHandleByUUID"}}).has_value());
  // Utilisation and memory make a sample; the rest are fields a device may not report.
  for (const char* call : {"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo"}) {
    EXPECT_FALSE(probe({{"CUDA_VISIBLE_DEVICES", "0"}, {"FAKE_NVML_FAIL", call}}).has_value()) << call;
  }
  auto partial = probe({{"CUDA_VISIBLE_DEVICES", "0"},
                        {"FAKE_NVML_FAIL", "nvmlDeviceGetPowerUsage,nvmlDeviceGetClockInfo,nvmlDeviceGetIndex"}});
  ASSERT_TRUE(partial.has_value());
  EXPECT_EQ(partial->utilPercent, 30);
  EXPECT_EQ(partial->temperatureC, 40);
  EXPECT_LT(partial->powerWatts, 0);
  EXPECT_LT(partial->smClockMhz, 0);
  EXPECT_LT(partial->index, 0);
  EXPECT_EQ(detail::gpuFields(*partial),
            ",\"gpu_util\":30.0,\"gpu_mem_bytes\":1073741824,"
            "\"gpu_mem_total_bytes\":85899345920,\"gpu_temp_c\":40");
}

TEST(FakeNvml, EveryInitIsShutDown) {
  const std::string log = test::makeTempDir() + "/calls";
  probe({{"CUDA_VISIBLE_DEVICES", "0"}, {"FAKE_NVML_LOG", log}});
  probe({{"CUDA_VISIBLE_DEVICES", "7"}, {"FAKE_NVML_LOG", log}});  // initialised, no such device
  std::ifstream in(log);
  int inits = 0, shutdowns = 0;
  std::string pid, call;
  while (in >> pid >> call) (call == "init" ? inits : shutdowns) += 1;
  EXPECT_EQ(inits, 2);
  EXPECT_EQ(shutdowns, 2);
}

}  // namespace
}  // namespace lockstep
