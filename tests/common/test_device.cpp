#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "lockstep/common/device.h"
#include "lockstep/common/error.h"

namespace lockstep {
namespace {

TEST(Device, ParsesTheThreeChoices) {
  EXPECT_EQ(parseDeviceChoice("auto", "device"), DeviceChoice::kAuto);
  EXPECT_EQ(parseDeviceChoice("CPU", "device"), DeviceChoice::kCpu);
  EXPECT_EQ(parseDeviceChoice("cuda", "device"), DeviceChoice::kCuda);
  EXPECT_STREQ(toString(DeviceChoice::kCuda), "cuda");
  try {
    parseDeviceChoice("gpu0", "device");
    FAIL() << "gpu0 parsed";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("device 'gpu0' is unknown; expected auto, cpu or cuda"), std::string::npos)
        << e.what();
  }
}

TEST(Device, EachWorkerTakesTheGpuOfItsLocalRank) {
  EXPECT_EQ(pickDevice(DeviceChoice::kCuda, 0, 4), c10::Device(c10::kCUDA, 0));
  EXPECT_EQ(pickDevice(DeviceChoice::kAuto, 3, 4), c10::Device(c10::kCUDA, 3));
  EXPECT_EQ(pickDevice(DeviceChoice::kAuto, 5, 4), c10::Device(c10::kCUDA, 1));  // more workers than GPUs: shared
  EXPECT_EQ(pickDevice(DeviceChoice::kCpu, 1, 4), c10::Device(c10::kCPU));
  EXPECT_EQ(pickDevice(DeviceChoice::kAuto, 1, 0), c10::Device(c10::kCPU));
}

TEST(Device, CudaWithoutAVisibleGpuNamesTheKey) {
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  try {
    pickDevice(DeviceChoice::kCuda, 0, 0, "device");
    FAIL() << "cuda picked with no device";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("device: cuda, but no CUDA device is visible to this process "
                                         "(CUDA_VISIBLE_DEVICES is ''); use device: auto or cpu"),
              std::string::npos)
        << e.what();
  }
  // Hiding every GPU hides them from the CUDA runtime too: auto falls back to the CPU.
  EXPECT_EQ(visibleCudaDevices(), 0);
  EXPECT_EQ(pickDevice(DeviceChoice::kAuto, 0), c10::Device(c10::kCPU));
  EXPECT_THROW(pickDevice(DeviceChoice::kCuda, 0), ConfigError);
}

}  // namespace
}  // namespace lockstep
