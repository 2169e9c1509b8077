// lockstep/common/device.h — which device a worker trains on (config key `device`).
//
//   c10::Device d = lockstep::pickDevice(lockstep::DeviceChoice::kAuto, world.localRank);
//   model->to(d);
//
//   auto   CUDA when this process sees a CUDA device, else the CPU
//   cpu    the CPU
//   cuda   a CUDA device; ConfigError naming the key when none is visible
//
// A worker takes cuda:(localRank mod visible devices), as torchrun's workers take
// cuda:LOCAL_RANK: one worker per GPU when the launcher starts as many workers as
// GPUs (`lockstep run -np gpu`); more workers than GPUs share them round robin
// (NCCL refuses that; the other backends stage CUDA tensors through host memory).
// "Visible" is what the CUDA runtime reports, CUDA_VISIBLE_DEVICES applied.
#pragma once

#include <c10/core/Device.h>

#include <string>

namespace lockstep {

enum class DeviceChoice { kAuto, kCpu, kCuda };
const char* toString(DeviceChoice choice);
/// auto, cpu or cuda (any case); ConfigError naming `what` and the allowed values otherwise.
DeviceChoice parseDeviceChoice(const std::string& text, const std::string& what);

/// CUDA devices this process sees (CUDA_VISIBLE_DEVICES applied); 0 without a driver or GPU.
int visibleCudaDevices();
/// "CUDA_VISIBLE_DEVICES is '0,1'" or "CUDA_VISIBLE_DEVICES is unset", for errors about GPUs.
std::string describeCudaVisibleDevices();

/// The device `choice` resolves to for the worker of `localRank` when `visibleDevices` CUDA
/// devices are visible; ConfigError naming `what` for cuda with none visible.
c10::Device pickDevice(DeviceChoice choice, int localRank, int visibleDevices, const std::string& what = "device");
/// The same, with visibleCudaDevices().
c10::Device pickDevice(DeviceChoice choice, int localRank, const std::string& what = "device");

/// The device this worker computes on. init() sets it (resolvePlacement,
/// rendezvous/placement.h), and so does the Trainer for the device it trains on.
/// setWorkerDevice makes it current in the calling thread, and every thread lockstep starts
/// makes it current before it runs, so that no thread of this worker opens a CUDA context on
/// another GPU. The CPU by default.
void setWorkerDevice(c10::Device device);
c10::Device workerDevice();
/// Makes `device` current in the calling thread (a CUDA device: as cudaSetDevice; the CPU:
/// nothing). Any device type with a LibTorch device guard works.
void useDevice(c10::Device device);

}  // namespace lockstep
