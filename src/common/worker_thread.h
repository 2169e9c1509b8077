// worker_thread.h — the threads lockstep starts, each on the worker's device (internal).
//
// CUDA keeps a current device per thread, and a thread that never sets one works on device 0:
// on a node of several GPUs, every rank's helper threads would open a context on GPU 0 the
// first time they touch CUDA (an event query, a pinned buffer, a stream wait). Every thread of
// the library starts through startThread(), which makes the worker's device (setWorkerDevice,
// lockstep/common/device.h) current in it first; tests/layers/check_threads.py keeps it so.
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <thread>
#include <utility>

#include "lockstep/common/device.h"

namespace lockstep::detail {

/// A thread running `body(args...)` with `device` current (the CPU: nothing to set).
template <typename F, typename... Args>
std::thread startThreadOn(c10::Device device, F&& body, Args&&... args) {
  return std::thread(
      [device](auto&& f, auto&&... a) {
        useDevice(device);
        std::invoke(std::forward<decltype(f)>(f), std::forward<decltype(a)>(a)...);
      },
      std::forward<F>(body), std::forward<Args>(args)...);
}

/// A thread running `body(args...)` with the worker's device current.
template <typename F, typename... Args>
std::thread startThread(F&& body, Args&&... args) {
  return startThreadOn(workerDevice(), std::forward<F>(body), std::forward<Args>(args)...);
}

}  // namespace lockstep::detail
