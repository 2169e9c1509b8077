// work_access.h — the backend side of a Work: only backends finish one, so
// Work::complete is private to everyone else.
#pragma once

#include <exception>
#include <functional>
#include <utility>

#include "lockstep/comm/work.h"

namespace lockstep::detail {

struct WorkAccess {
  static void complete(Work& work, std::exception_ptr error) { work.complete(std::move(error)); }
  static void setStreamWait(Work& work, std::function<bool()> streamWait) { work.streamWait_ = std::move(streamWait); }
};

/// Marks `work` finished; `error` is null on success.
inline void completeWork(Work& work, std::exception_ptr error) { WorkAccess::complete(work, std::move(error)); }

/// Makes `work`'s waitOnStream() call `streamWait` (before anyone waits on it): true when the
/// caller's current stream now waits for the operation, false to wait on the host instead.
inline void setStreamWait(Work& work, std::function<bool()> streamWait) {
  WorkAccess::setStreamWait(work, std::move(streamWait));
}

}  // namespace lockstep::detail
