// nvml_abi.h — the part of NVML's C interface the GPU probe uses
// (gpu_probe.cpp), declared here so that the probe is always built: no
// nvml.h is needed at build time, and the driver's libnvidia-ml.so.1 is
// dlopen()ed at run time. NVML keeps these signatures, types and values
// stable across driver releases (its ABI promise; the _v2 names are the ones
// its own header maps the plain names to).
#pragma once

namespace lockstep::detail {

extern "C" {

typedef struct nvmlDevice_st* nvmlDevice_t;
typedef enum nvmlReturn_enum { NVML_SUCCESS = 0 } nvmlReturn_t;
typedef enum nvmlClockType_enum { NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2 } nvmlClockType_t;
typedef enum nvmlTemperatureSensors_enum { NVML_TEMPERATURE_GPU = 0 } nvmlTemperatureSensors_t;
typedef struct nvmlUtilization_st {
  unsigned int gpu;     ///< percent of the last sample period a kernel ran
  unsigned int memory;  ///< percent of it device memory was read or written
} nvmlUtilization_t;
typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

// Declared for their types only (decltype of the symbols dlsym() finds); never linked.
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory);
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* milliwatts);
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int* mhz);
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor, unsigned int* celsius);

}  // extern "C"

}  // namespace lockstep::detail
