// deadline_watch.cpp — src/comm/deadline_watch.h.
#include "comm/deadline_watch.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "comm/work_access.h"
#include "common/worker_thread.h"
#include "lockstep/common/logging.h"

namespace lockstep::detail {

DeadlineWatch::DeadlineWatch(std::chrono::milliseconds period) : period_(period) {}

DeadlineWatch::~DeadlineWatch() { stop(); }

void DeadlineWatch::watch(WorkHandle work) {
  if (!work || work->isCompleted()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) return;
  works_.push_back(std::move(work));
  if (!thread_.joinable()) thread_ = detail::startThread([this] { run(); });
}

size_t DeadlineWatch::watching() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return works_.size();
}

void DeadlineWatch::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DeadlineWatch::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    std::vector<WorkHandle> polling = works_;
    lock.unlock();
    // test() may call a backend's timeout handler (an abort): never under the lock.
    for (const auto& work : polling) {
      try {
        if (!work->test() || work->isSuccess()) continue;
      } catch (...) {  // a backend's poll must not end this thread: the work fails with it
        completeWork(*work, std::current_exception());
      }
      // Nobody waits for it on the host: say so now, in case no later operation comes to report it.
      log::warn(
          fmt::format("{} failed or passed its deadline while the device waited for it; the "
                      "communicator's next operation fails naming it",
                      work->description()));
    }
    lock.lock();
    works_.erase(std::remove_if(works_.begin(), works_.end(), [](const WorkHandle& w) { return w->isCompleted(); }),
                 works_.end());
    cv_.wait_for(lock, period_, [this] { return stopping_; });
  }
}

}  // namespace lockstep::detail
