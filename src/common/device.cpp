// The device choice of common/device.h.
#include "lockstep/common/device.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>

#include <fmt/format.h>

#include <cstdlib>
#include <mutex>

#include "lockstep/common/enum_names.h"
#include "lockstep/common/error.h"

namespace lockstep {

namespace {
constexpr EnumName<DeviceChoice> kDeviceNames[] = {
    {DeviceChoice::kAuto, "auto"}, {DeviceChoice::kCpu, "cpu"}, {DeviceChoice::kCuda, "cuda"}};

std::mutex gWorkerDeviceMutex;
c10::Device gWorkerDevice{c10::kCPU};
}  // namespace

const char* toString(DeviceChoice choice) { return enumName(kDeviceNames, choice); }

DeviceChoice parseDeviceChoice(const std::string& text, const std::string& what) {
  return parseEnum(kDeviceNames, text, what);
}

int visibleCudaDevices() { return static_cast<int>(torch::cuda::device_count()); }

std::string describeCudaVisibleDevices() {
  const char* mask = std::getenv("CUDA_VISIBLE_DEVICES");
  return mask ? fmt::format("CUDA_VISIBLE_DEVICES is '{}'", mask) : std::string("CUDA_VISIBLE_DEVICES is unset");
}

c10::Device pickDevice(DeviceChoice choice, int localRank, int visibleDevices, const std::string& what) {
  LOCKSTEP_CHECK(localRank >= 0, "pickDevice: local rank ", localRank, " is negative");
  if (choice == DeviceChoice::kCpu || (choice == DeviceChoice::kAuto && visibleDevices == 0)) return c10::kCPU;
  if (visibleDevices == 0) {
    throw ConfigError(fmt::format("{}: cuda, but no CUDA device is visible to this process ({}); use {}: auto or cpu",
                                  what, describeCudaVisibleDevices(), what));
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(localRank % visibleDevices));
}

c10::Device pickDevice(DeviceChoice choice, int localRank, const std::string& what) {
  // The CPU needs no question to the CUDA runtime.
  return pickDevice(choice, localRank, choice == DeviceChoice::kCpu ? 0 : visibleCudaDevices(), what);
}

void useDevice(c10::Device device) {
  if (device.is_cpu()) return;
  c10::impl::getDeviceGuardImpl(device.type())->setDevice(device);
}

void setWorkerDevice(c10::Device device) {
  {
    std::lock_guard<std::mutex> lock(gWorkerDeviceMutex);
    gWorkerDevice = device;
  }
  useDevice(device);
}

c10::Device workerDevice() {
  std::lock_guard<std::mutex> lock(gWorkerDeviceMutex);
  return gWorkerDevice;
}

}  // namespace lockstep
