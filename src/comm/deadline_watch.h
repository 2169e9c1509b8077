// deadline_watch.h — keeps the deadlines of operations nobody waits for on the host.
//
// A Work that the caller's CUDA stream waits for (Work::waitOnStream over nccl) finishes on the
// device while the host goes on. DeadlineWatch polls such works on a thread of its own, so one
// that is late still fails by its deadline — its onTimeout aborts the backend and poisons the
// communicator, whose next operation names it — instead of hanging the next read of a result.
// Private to comm/.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "lockstep/comm/work.h"

namespace lockstep::detail {

class DeadlineWatch {
 public:
  explicit DeadlineWatch(std::chrono::milliseconds period = std::chrono::milliseconds(20));
  ~DeadlineWatch();
  DeadlineWatch(const DeadlineWatch&) = delete;
  DeadlineWatch& operator=(const DeadlineWatch&) = delete;

  /// Polls `work` (Work::test) until it completed or failed by its deadline. Starts the thread
  /// on first use.
  void watch(WorkHandle work);
  /// Works not yet completed.
  size_t watching() const;
  /// Stops the thread; works still watched are left to whoever holds them. Idempotent.
  void stop();

 private:
  void run();

  std::chrono::milliseconds period_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<WorkHandle> works_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace lockstep::detail
