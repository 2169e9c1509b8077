// gpu_probe.h — GPU utilisation and memory through NVML (internal).
//
// Compiled with NVML only when CMake found nvml.h (LOCKSTEP_HAVE_NVML); even
// then the driver's libnvidia-ml.so.1 is opened at run time, so a build made
// on a CUDA machine still runs on one without a driver. Without either,
// sample() returns nothing and the system files carry no GPU fields.
#pragma once

#include <cstdint>
#include <optional>

namespace lockstep::detail {

struct GpuSample {
  double utilPercent = 0;  ///< nvmlDeviceGetUtilizationRates().gpu
  int64_t memBytes = 0;    ///< device memory in use (all processes)
};

class GpuProbe {
 public:
  /// Watches device `localRank % deviceCount`.
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
