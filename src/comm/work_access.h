// work_access.h — the backend side of a Work: only backends finish one, so
// Work::complete is private to everyone else.
#pragma once

#include <exception>
#include <functional>
#include <mutex>
#include <utility>

#include "lockstep/comm/work.h"

namespace lockstep::detail {

struct WorkAccess {
  static void complete(Work& work, std::exception_ptr error) { work.complete(std::move(error)); }
  static void setStreamWait(Work& work, std::function<bool()> streamWait) { work.streamWait_ = std::move(streamWait); }
  static void setPoll(Work& work, std::function<void(Work::Clock::time_point)> poll) { work.poll_ = std::move(poll); }
  static bool finishBy(Work& work, Work::Clock::time_point until) { return work.finishBy(until); }
  static void setCompletedAt(Work& work, Work::Clock::time_point at) {
    std::lock_guard<std::mutex> lock(work.mutex_);
    work.completedAt_ = at;
  }
};

/// Marks `work` finished; `error` is null on success.
inline void completeWork(Work& work, std::exception_ptr error) { WorkAccess::complete(work, std::move(error)); }

/// Makes `work`'s waitOnStream() call `streamWait` (before anyone waits on it): true when the
/// caller's current stream now waits for the operation, false to wait on the host instead.
inline void setStreamWait(Work& work, std::function<bool()> streamWait) {
  WorkAccess::setStreamWait(work, std::move(streamWait));
}

/// Makes `work` a polled one (before anyone waits on it) whose poll may block until the time it
/// is given: wait() gives the deadline, test() the present.
inline void setPoll(Work& work, std::function<void(Work::Clock::time_point)> poll) {
  WorkAccess::setPoll(work, std::move(poll));
}

/// Makes a finished `work` say the backend completed it at `at` (a wrapper's work, its inner one's time).
inline void setCompletedAt(Work& work, Work::Clock::time_point at) { WorkAccess::setCompletedAt(work, at); }

/// Waits for `work` until it is done or `until` passed (polling a polled backend); past its
/// deadline fails it as wait() would. Returns whether it is done.
inline bool finishBy(Work& work, Work::Clock::time_point until) { return WorkAccess::finishBy(work, until); }

}  // namespace lockstep::detail
