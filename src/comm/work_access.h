// work_access.h — the backend side of a Work: only backends finish one, so
// Work::complete is private to everyone else.
#pragma once

#include <exception>
#include <utility>

#include "lockstep/comm/work.h"

namespace lockstep::detail {

struct WorkAccess {
  static void complete(Work& work, std::exception_ptr error) { work.complete(std::move(error)); }
};

/// Marks `work` finished; `error` is null on success.
inline void completeWork(Work& work, std::exception_ptr error) { WorkAccess::complete(work, std::move(error)); }

}  // namespace lockstep::detail
