// Every thread lockstep starts works on the worker's device. A thread's current device is
// observed through a device guard that records it per thread (c10's FakeGuardImpl, registered
// for the PrivateUse1 device type), so the CUDA rule is checked without a GPU:
// tests/layers/check_threads.py keeps every thread of the library on startThread().
#include <c10/core/impl/FakeGuardImpl.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>

#include "comm/op_queue.h"
#include "common/worker_thread.h"
#include "lockstep/common/device.h"
#include "lockstep/common/error.h"
#include "lockstep/rendezvous/init.h"

namespace lockstep {
namespace {

using FakeGuard = c10::impl::FakeGuardImpl<c10::DeviceType::PrivateUse1>;
C10_REGISTER_GUARD_IMPL(PrivateUse1, FakeGuard);

const c10::Device kThird(c10::DeviceType::PrivateUse1, 3);

/// Sets the worker device for one test and puts the CPU back.
struct WorkerDeviceScope {
  explicit WorkerDeviceScope(c10::Device device) { setWorkerDevice(device); }
  ~WorkerDeviceScope() {
    setWorkerDevice(c10::kCPU);
    FakeGuard::setDeviceIndex(0);
  }
};

/// The current PrivateUse1 device of a new thread that `start` starts with `body`.
template <typename Start>
int deviceInThread(Start start) {
  std::promise<int> seen;
  std::thread t = start([&] { seen.set_value(FakeGuard::getDeviceIndex()); });
  t.join();
  return seen.get_future().get();
}

TEST(WorkerThread, ANewThreadStartsOnTheWorkersDevice) {
  EXPECT_EQ(workerDevice(), c10::Device(c10::kCPU));
  ASSERT_EQ(deviceInThread([](auto body) { return std::thread(body); }), 0) << "a plain thread starts on device 0";
  WorkerDeviceScope scope(kThird);
  EXPECT_EQ(workerDevice(), kThird);
  EXPECT_EQ(FakeGuard::getDeviceIndex(), 3) << "setWorkerDevice makes it current in the caller";
  EXPECT_EQ(deviceInThread([](auto body) { return std::thread(body); }), 0) << "a plain thread does not inherit it";
  EXPECT_EQ(deviceInThread([](auto body) { return detail::startThread(body); }), 3);
  const c10::Device first(c10::DeviceType::PrivateUse1, 1);
  EXPECT_EQ(deviceInThread([&](auto body) { return detail::startThreadOn(first, body); }), 1);
}

TEST(WorkerThread, TheCommunicatorQueueIssuesAndFinishesOnTheWorkersDevice) {
  WorkerDeviceScope scope(kThird);
  detail::OpQueue queue(0, 1);
  std::atomic<int> issuedOn{-1}, finishedOn{-1};
  auto work = queue.submitIssued(CommErrorInfo{}, std::chrono::seconds(10), [&] {
    issuedOn = FakeGuard::getDeviceIndex();
    return std::function<void()>([&] { finishedOn = FakeGuard::getDeviceIndex(); });
  });
  work->wait();
  EXPECT_EQ(issuedOn, 3);
  EXPECT_EQ(finishedOn, 3);
}

TEST(WorkerThread, InitSetsTheWorkersDevice) {
  InitOptions options;
  options.backend = "gloo";
  options.device = DeviceChoice::kCpu;
  Context ctx = init(options, Environment({}));
  EXPECT_EQ(workerDevice(), c10::Device(c10::kCPU));
  if (visibleCudaDevices() == 0) {
    options.device = DeviceChoice::kCuda;
    try {
      init(options, Environment({}));
      ADD_FAILURE() << "device cuda without a GPU should stop init";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("device: cuda, but no CUDA device is visible"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace lockstep
