#include "monitor/gpu_probe.h"

#ifdef LOCKSTEP_HAVE_NVML
#include <dlfcn.h>
#include <nvml.h>

#include <fmt/format.h>

#include "lockstep/common/logging.h"
#endif

namespace lockstep::detail {

#ifdef LOCKSTEP_HAVE_NVML

struct GpuProbe::Impl {
  void* library = nullptr;
  nvmlDevice_t device{};
  decltype(&nvmlShutdown) shutdown = nullptr;
  decltype(&nvmlDeviceGetUtilizationRates) utilization = nullptr;
  decltype(&nvmlDeviceGetMemoryInfo) memory = nullptr;
};

GpuProbe::GpuProbe(int localRank) {
  void* library = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) return;  // no driver: no GPU fields
  auto symbol = [&](const char* name) { return ::dlsym(library, name); };
  auto init = reinterpret_cast<decltype(&nvmlInit_v2)>(symbol("nvmlInit_v2"));
  auto count = reinterpret_cast<decltype(&nvmlDeviceGetCount_v2)>(symbol("nvmlDeviceGetCount_v2"));
  auto byIndex = reinterpret_cast<decltype(&nvmlDeviceGetHandleByIndex_v2)>(symbol("nvmlDeviceGetHandleByIndex_v2"));
  auto impl = new Impl;
  impl->library = library;
  impl->shutdown = reinterpret_cast<decltype(&nvmlShutdown)>(symbol("nvmlShutdown"));
  impl->utilization =
      reinterpret_cast<decltype(&nvmlDeviceGetUtilizationRates)>(symbol("nvmlDeviceGetUtilizationRates"));
  impl->memory = reinterpret_cast<decltype(&nvmlDeviceGetMemoryInfo)>(symbol("nvmlDeviceGetMemoryInfo"));
  unsigned int devices = 0;
  bool ok = init && count && byIndex && impl->shutdown && impl->utilization && impl->memory && init() == NVML_SUCCESS;
  bool initialised = ok;
  ok = ok && count(&devices) == NVML_SUCCESS && devices > 0 &&
       byIndex(static_cast<unsigned int>(localRank) % devices, &impl->device) == NVML_SUCCESS;
  if (!ok) {
    if (initialised) impl->shutdown();
    ::dlclose(library);
    delete impl;
    log::debug("monitor: NVML found but no GPU answered; system samples carry no GPU fields");
    return;
  }
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
  return GpuSample{static_cast<double>(utilization.gpu), static_cast<int64_t>(memory.used)};
}

#else  // no NVML in this build

struct GpuProbe::Impl {};
GpuProbe::GpuProbe(int /*localRank*/) {}
GpuProbe::~GpuProbe() = default;
std::optional<GpuSample> GpuProbe::sample() { return std::nullopt; }

#endif

}  // namespace lockstep::detail
