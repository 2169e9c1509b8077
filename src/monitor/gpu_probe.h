// gpu_probe.h — the GPU of one worker through NVML (internal).
//
// Always built (NVML's interface is declared in monitor/nvml_abi.h); the
// driver's libnvidia-ml.so.1 is opened at run time, so the build runs on
// machines without a driver. Where it does not load or names no GPU of the
// worker, sample() returns nothing and the system files carry no GPU fields.
//
// The worker's GPU is the one CUDA gives it (common/device.h: cuda:(localRank
// mod visible devices)): CUDA_VISIBLE_DEVICES's entry for it, an NVML index or
// a UUID, else NVML index localRank mod devices. NVML numbers devices in PCI
// order; CUDA does too under CUDA_DEVICE_ORDER=PCI_BUS_ID, and on machines
// whose GPUs are all alike the orders agree anyway.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace lockstep::detail {

/// One reading; a field the device does not report is negative and left out of the line.
struct GpuSample {
  int index = -1;           ///< NVML index of the device
  double utilPercent = -1;  ///< nvmlDeviceGetUtilizationRates().gpu: time a kernel ran, last period
  int64_t memBytes = -1;    ///< device memory in use (all processes)
  int64_t memTotalBytes = -1;
  double powerWatts = -1;
  double smClockMhz = -1;
  double temperatureC = -1;
};

/// The sample's fields of a system/rank<R>.jsonl line: `,"gpu_index":0,"gpu_util":51.0,...`
/// (a leading comma each; the negative ones left out).
std::string gpuFields(const GpuSample& sample);

/// Which device the worker of `localRank` watches: an NVML index or a UUID ("GPU-…") from
/// `visible` (CUDA_VISIBLE_DEVICES, null when unset), or localRank mod `devices`. nullopt when
/// CUDA_VISIBLE_DEVICES hides every device (empty, or "-1"/"none" first).
struct GpuRef {
  int index = -1;    ///< >= 0: by NVML index
  std::string uuid;  ///< else by UUID
};
std::optional<GpuRef> gpuFor(int localRank, const char* visible, unsigned devices);

/// The NVML library the probe opens: $LOCKSTEP_NVML_LIBRARY when set (a path, or a name the
/// loader searches for), else the driver's "libnvidia-ml.so.1".
const char* nvmlLibrary();

/// The worker's GPU through NVML, opened at run time; no library, no device or a failing
/// call gives no sample, never an error.
class GpuProbe {
 public:
  explicit GpuProbe(int localRank);
  ~GpuProbe();
  GpuProbe(const GpuProbe&) = delete;
  GpuProbe& operator=(const GpuProbe&) = delete;

  std::optional<GpuSample> sample();

 private:
  struct Impl;
  Impl* impl_ = nullptr;  ///< null: no NVML
};

}  // namespace lockstep::detail
