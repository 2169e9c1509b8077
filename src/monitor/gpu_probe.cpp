#include "monitor/gpu_probe.h"

#include <fmt/format.h>

#include <cstdlib>
#include <vector>

#include <dlfcn.h>

#include "lockstep/common/logging.h"
#include "monitor/nvml_abi.h"

namespace lockstep::detail {

std::string gpuFields(const GpuSample& s) {
  std::string out;
  if (s.index >= 0) out += fmt::format(",\"gpu_index\":{}", s.index);
  if (s.utilPercent >= 0) out += fmt::format(",\"gpu_util\":{:.1f}", s.utilPercent);
  if (s.memBytes >= 0) out += fmt::format(",\"gpu_mem_bytes\":{}", s.memBytes);
  if (s.memTotalBytes >= 0) out += fmt::format(",\"gpu_mem_total_bytes\":{}", s.memTotalBytes);
  if (s.powerWatts >= 0) out += fmt::format(",\"gpu_power_watts\":{:.1f}", s.powerWatts);
  if (s.smClockMhz >= 0) out += fmt::format(",\"gpu_sm_clock_mhz\":{:.0f}", s.smClockMhz);
  if (s.temperatureC >= 0) out += fmt::format(",\"gpu_temp_c\":{:.0f}", s.temperatureC);
  return out;
}

std::optional<GpuRef> gpuFor(int localRank, const char* visible, unsigned devices) {
  if (visible == nullptr) {
    if (devices == 0) return std::nullopt;
    return GpuRef{static_cast<int>(static_cast<unsigned>(localRank) % devices), {}};
  }
  // CUDA reads the list up to the first entry it cannot use.
  std::vector<std::string> entries;
  std::string text(visible);
  for (size_t start = 0; start <= text.size();) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string entry = text.substr(start, end - start);
    if (entry.empty() || entry == "-1" || entry == "none" || entry == "NoDevFiles") break;
    entries.push_back(entry);
    start = end + 1;
  }
  if (entries.empty()) return std::nullopt;
  const std::string& mine = entries[static_cast<size_t>(localRank) % entries.size()];
  if (mine.rfind("GPU-", 0) == 0 || mine.rfind("MIG-", 0) == 0) return GpuRef{-1, mine};
  char* end = nullptr;
  const long index = std::strtol(mine.c_str(), &end, 10);
  if (end == mine.c_str() || *end != '\0' || index < 0) return std::nullopt;
  return GpuRef{static_cast<int>(index), {}};
}

struct GpuProbe::Impl {
  void* library = nullptr;
  nvmlDevice_t device{};
  int index = -1;
  decltype(&nvmlShutdown) shutdown = nullptr;
  decltype(&nvmlDeviceGetUtilizationRates) utilization = nullptr;
  decltype(&nvmlDeviceGetMemoryInfo) memory = nullptr;
  decltype(&nvmlDeviceGetPowerUsage) power = nullptr;  // optional, as the three below
  decltype(&nvmlDeviceGetClockInfo) clock = nullptr;
  decltype(&nvmlDeviceGetTemperature) temperature = nullptr;
  decltype(&nvmlDeviceGetIndex) indexOf = nullptr;
};

namespace {

template <typename F>
F symbolOf(void* library, const char* name) {
  return reinterpret_cast<F>(::dlsym(library, name));
}

/// The handle of the worker's device; false when NVML cannot name it.
bool openDevice(void* library, int localRank, nvmlDevice_t* device) {
  auto count = symbolOf<decltype(&nvmlDeviceGetCount_v2)>(library, "nvmlDeviceGetCount_v2");
  auto byIndex = symbolOf<decltype(&nvmlDeviceGetHandleByIndex_v2)>(library, "nvmlDeviceGetHandleByIndex_v2");
  auto byUuid = symbolOf<decltype(&nvmlDeviceGetHandleByUUID)>(library, "nvmlDeviceGetHandleByUUID");
  unsigned int devices = 0;
  if (!count || !byIndex || count(&devices) != NVML_SUCCESS) return false;
  auto ref = gpuFor(localRank, std::getenv("CUDA_VISIBLE_DEVICES"), devices);
  if (!ref) return false;
  if (ref->index >= 0) {
    return static_cast<unsigned>(ref->index) < devices &&
           byIndex(static_cast<unsigned>(ref->index), device) == NVML_SUCCESS;
  }
  return byUuid && byUuid(ref->uuid.c_str(), device) == NVML_SUCCESS;
}

}  // namespace

const char* nvmlLibrary() {
  const char* path = std::getenv("LOCKSTEP_NVML_LIBRARY");
  return path != nullptr && *path != '\0' ? path : "libnvidia-ml.so.1";
}

GpuProbe::GpuProbe(int localRank) {
  void* library = ::dlopen(nvmlLibrary(), RTLD_NOW | RTLD_LOCAL);
  if (!library) {  // no driver: no GPU fields
    log::debug(fmt::format("monitor: no NVML ({}); system samples carry no GPU fields", ::dlerror()));
    return;
  }
  auto init = symbolOf<decltype(&nvmlInit_v2)>(library, "nvmlInit_v2");
  auto impl = new Impl;
  impl->library = library;
  impl->shutdown = symbolOf<decltype(&nvmlShutdown)>(library, "nvmlShutdown");
  impl->utilization = symbolOf<decltype(&nvmlDeviceGetUtilizationRates)>(library, "nvmlDeviceGetUtilizationRates");
  impl->memory = symbolOf<decltype(&nvmlDeviceGetMemoryInfo)>(library, "nvmlDeviceGetMemoryInfo");
  impl->power = symbolOf<decltype(&nvmlDeviceGetPowerUsage)>(library, "nvmlDeviceGetPowerUsage");
  impl->clock = symbolOf<decltype(&nvmlDeviceGetClockInfo)>(library, "nvmlDeviceGetClockInfo");
  impl->temperature = symbolOf<decltype(&nvmlDeviceGetTemperature)>(library, "nvmlDeviceGetTemperature");
  impl->indexOf = symbolOf<decltype(&nvmlDeviceGetIndex)>(library, "nvmlDeviceGetIndex");
  const bool initialised = init && impl->shutdown && impl->utilization && impl->memory && init() == NVML_SUCCESS;
  if (!initialised || !openDevice(library, localRank, &impl->device)) {
    if (initialised) impl->shutdown();
    ::dlclose(library);
    delete impl;
    log::debug("monitor: NVML found but no GPU of this worker answered; system samples carry no GPU fields");
    return;
  }
  unsigned int index = 0;
  if (impl->indexOf && impl->indexOf(impl->device, &index) == NVML_SUCCESS) impl->index = static_cast<int>(index);
  impl_ = impl;
}

GpuProbe::~GpuProbe() {
  if (!impl_) return;
  impl_->shutdown();
  ::dlclose(impl_->library);
  delete impl_;
}

std::optional<GpuSample> GpuProbe::sample() {
  if (!impl_) return std::nullopt;
  nvmlUtilization_t utilization{};
  nvmlMemory_t memory{};
  if (impl_->utilization(impl_->device, &utilization) != NVML_SUCCESS ||
      impl_->memory(impl_->device, &memory) != NVML_SUCCESS) {
    return std::nullopt;
  }
  GpuSample s;
  s.index = impl_->index;
  s.utilPercent = static_cast<double>(utilization.gpu);
  s.memBytes = static_cast<int64_t>(memory.used);
  s.memTotalBytes = static_cast<int64_t>(memory.total);
  unsigned int value = 0;
  if (impl_->power && impl_->power(impl_->device, &value) == NVML_SUCCESS) s.powerWatts = value / 1000.0;
  if (impl_->clock && impl_->clock(impl_->device, NVML_CLOCK_SM, &value) == NVML_SUCCESS) s.smClockMhz = value;
  if (impl_->temperature && impl_->temperature(impl_->device, NVML_TEMPERATURE_GPU, &value) == NVML_SUCCESS) {
    s.temperatureC = value;
  }
  return s;
}

}  // namespace lockstep::detail
