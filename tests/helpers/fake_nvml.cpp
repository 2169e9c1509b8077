// fake_nvml.cpp — a libnvidia-ml.so.1 for tests: the NVML calls lockstep's GPU probe makes
// (src/monitor/nvml_abi.h), answered with scripted values and scripted errors, so the probe's
// real path runs on a machine without a GPU or a driver.
//
// Devices: FAKE_NVML_DEVICES of them (default 2). Device i has the UUID "GPU-fake-<i>" and
// reports utilisation 30+i %, memory used (i+1) GiB of 80 GiB, power 100+i W, SM clock
// 1400+i MHz, temperature 40+i C (tests/monitor/check_fake_nvml.py expects exactly these).
// FAKE_NVML_FAIL: a comma-separated list of function names that return NVML_ERROR_UNKNOWN.
// FAKE_NVML_LOG: a file each process appends "<pid> init" / "<pid> shutdown" to.
// The environment is read at every call, so one process can change the script between probes.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

struct nvmlDevice_st;  // NVML's opaque device type; handles point into gDevices

namespace {

constexpr int kSuccess = 0;
constexpr int kInvalidArgument = 2;
constexpr int kNotFound = 6;
constexpr int kUnknown = 999;
constexpr unsigned long long kGib = 1ULL << 30;

// Device i's handle is the address of gDevices[i].
struct FakeDevice {
  unsigned index;
};
FakeDevice gDevices[16];

unsigned deviceCount() {
  const char* text = std::getenv("FAKE_NVML_DEVICES");
  const unsigned n = text != nullptr ? static_cast<unsigned>(std::strtoul(text, nullptr, 10)) : 2U;
  return n < 16 ? n : 16;
}

bool failing(const char* function) {
  const char* list = std::getenv("FAKE_NVML_FAIL");
  if (list == nullptr) return false;
  const std::string padded = std::string(",") + list + ",";
  return padded.find(std::string(",") + function + ",") != std::string::npos;
}

void logCall(const char* what) {
  const char* path = std::getenv("FAKE_NVML_LOG");
  if (path == nullptr) return;
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%d %s\n", static_cast<int>(::getpid()), what);
    std::fclose(f);
  }
}

nvmlDevice_st* handleOf(unsigned index) {
  gDevices[index].index = index;
  return reinterpret_cast<nvmlDevice_st*>(&gDevices[index]);
}

const FakeDevice* deviceOf(const nvmlDevice_st* handle) {
  for (const FakeDevice& d : gDevices) {
    if (reinterpret_cast<const nvmlDevice_st*>(&d) == handle) return d.index < deviceCount() ? &d : nullptr;
  }
  return nullptr;
}

}  // namespace

extern "C" {

struct FakeUtilization {
  unsigned int gpu, memory;
};
struct FakeMemory {
  unsigned long long total, free, used;
};

#define FAKE_NVML_ENTRY(name) \
  if (failing(#name)) return kUnknown

__attribute__((visibility("default"))) int nvmlInit_v2(void) {
  FAKE_NVML_ENTRY(nvmlInit_v2);
  logCall("init");
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlShutdown(void) {
  logCall("shutdown");
  FAKE_NVML_ENTRY(nvmlShutdown);
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetCount_v2(unsigned int* count) {
  FAKE_NVML_ENTRY(nvmlDeviceGetCount_v2);
  if (count == nullptr) return kInvalidArgument;
  *count = deviceCount();
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_st** device) {
  FAKE_NVML_ENTRY(nvmlDeviceGetHandleByIndex_v2);
  if (device == nullptr || index >= deviceCount()) return kInvalidArgument;
  *device = handleOf(index);
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_st** device) {
  FAKE_NVML_ENTRY(nvmlDeviceGetHandleByUUID);
  if (uuid == nullptr || device == nullptr) return kInvalidArgument;
  for (unsigned i = 0; i < deviceCount(); ++i) {
    if ("GPU-fake-" + std::to_string(i) == uuid) {
      *device = handleOf(i);
      return kSuccess;
    }
  }
  return kNotFound;
}

__attribute__((visibility("default"))) int nvmlDeviceGetIndex(nvmlDevice_st* device, unsigned int* index) {
  FAKE_NVML_ENTRY(nvmlDeviceGetIndex);
  const FakeDevice* d = deviceOf(device);
  if (d == nullptr || index == nullptr) return kInvalidArgument;
  *index = d->index;
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetUtilizationRates(nvmlDevice_st* device,
                                                                         FakeUtilization* utilization) {
  FAKE_NVML_ENTRY(nvmlDeviceGetUtilizationRates);
  const FakeDevice* d = deviceOf(device);
  if (d == nullptr || utilization == nullptr) return kInvalidArgument;
  *utilization = {30 + d->index, 10 + d->index};
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetMemoryInfo(nvmlDevice_st* device, FakeMemory* memory) {
  FAKE_NVML_ENTRY(nvmlDeviceGetMemoryInfo);
  const FakeDevice* d = deviceOf(device);
  if (d == nullptr || memory == nullptr) return kInvalidArgument;
  const unsigned long long used = (d->index + 1ULL) * kGib;
  *memory = {80 * kGib, 80 * kGib - used, used};
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetPowerUsage(nvmlDevice_st* device, unsigned int* milliwatts) {
  FAKE_NVML_ENTRY(nvmlDeviceGetPowerUsage);
  const FakeDevice* d = deviceOf(device);
  if (d == nullptr || milliwatts == nullptr) return kInvalidArgument;
  *milliwatts = (100 + d->index) * 1000;
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetClockInfo(nvmlDevice_st* device, int type, unsigned int* mhz) {
  FAKE_NVML_ENTRY(nvmlDeviceGetClockInfo);
  const FakeDevice* d = deviceOf(device);
  if (d == nullptr || mhz == nullptr || type != 1) return kInvalidArgument;  // 1: NVML_CLOCK_SM
  *mhz = 1400 + d->index;
  return kSuccess;
}

__attribute__((visibility("default"))) int nvmlDeviceGetTemperature(nvmlDevice_st* device, int sensor,
                                                                    unsigned int* celsius) {
  FAKE_NVML_ENTRY(nvmlDeviceGetTemperature);
  const FakeDevice* d = deviceOf(device);
  if (d == nullptr || celsius == nullptr || sensor != 0) return kInvalidArgument;  // 0: NVML_TEMPERATURE_GPU
  *celsius = 40 + d->index;
  return kSuccess;
}

}  // extern "C"
