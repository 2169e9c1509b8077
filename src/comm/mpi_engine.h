// mpi_engine.h — what an MPI communicator shares with its progress thread,
// its communication thread and its Works: the outstanding requests, the
// queue of blocking calls, and the first failure. Internal to src/comm
// (mpi_communicator.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/failure.h"
#include "comm/mpi_runtime.h"
#include "comm/work_access.h"
#include "lockstep/comm/work.h"
#include "lockstep/common/comm_error.h"

namespace lockstep::detail {

/// One submitted operation: its MPI requests and what to do once they completed.
struct Pending {
  WorkHandle work;
  CommErrorInfo info;
  std::vector<MPI_Request> requests;
  std::function<void()> finish;     ///< local work after the transfer (copy-out, division)
  std::vector<at::Tensor> buffers;  ///< what MPI reads and writes: alive until the requests completed
};

/// Shared by the communicator, its progress thread and its Works (which hold it weakly).
struct Engine {
  MPI_Comm comm = MPI_COMM_NULL;
  std::deque<std::shared_ptr<Pending>> pending;  // guarded by the runtime mutex
  std::exception_ptr failure;                    // guarded by the runtime mutex
  CommErrorInfo failureInfo;
  // The progress thread's sleep/wake state.
  std::mutex wakeMutex;
  std::condition_variable wake;
  bool stop = false;
  std::atomic<uint64_t> submitted{0};  ///< operations handed to MPI or the queue so far

  std::exception_ptr abortedError(CommErrorInfo info) const {
    return detail::abortedError(std::move(info), failureInfo);
  }

  /// Records the first failure and fails every outstanding operation. Caller holds the runtime mutex.
  void poisonLocked(const CommErrorInfo& info, std::exception_ptr error) {
    if (failure) return;
    failure = std::move(error);
    failureInfo = info;
    MpiRuntime::get().markFailed();
    for (auto& p : pending) {
      if (p->info.sequence != info.sequence) detail::completeWork(*p->work, abortedError(p->info));
    }
    pending.clear();
  }

  /// Tests every outstanding operation once and completes those that finished.
  /// Returns whether any is still outstanding.
  bool poll() {
    std::vector<std::shared_ptr<Pending>> finished;
    bool outstanding = false;
    {
      // A blocking call on the communication thread may hold the lock for long:
      // never wait for it here, so waiters keep checking their deadlines.
      std::unique_lock<std::mutex> lock(MpiRuntime::get().mutex(), std::try_to_lock);
      if (!lock.owns_lock()) {
        std::this_thread::yield();
        return true;
      }
      if (MpiRuntime::get().finalized()) return false;
      for (auto it = pending.begin(); it != pending.end();) {
        int flag = 0;
        int rc =
            MPI_Testall(static_cast<int>((*it)->requests.size()), (*it)->requests.data(), &flag, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
          auto failed = *it;
          CommErrorInfo info = failed->info;
          info.kind = CommErrorKind::kBackend;
          info.detail = mpiErrorText(rc);
          auto error = std::make_exception_ptr(CommError(info));
          poisonLocked(info, error);
          detail::completeWork(*failed->work, error);
          return false;
        }
        if (flag) {
          finished.push_back(*it);
          it = pending.erase(it);
        } else {
          ++it;
        }
      }
      outstanding = !pending.empty();
    }
    for (auto& p : finished) complete(*p);
    return outstanding;
  }

  /// Runs the operation's local finishing work and completes its Work.
  static void complete(Pending& p) {
    try {
      if (p.finish) {
        c10::AutoGradMode noGrad(false);
        p.finish();
      }
      detail::completeWork(*p.work, nullptr);
    } catch (const std::exception& e) {
      CommErrorInfo info = p.info;
      info.kind = CommErrorKind::kBackend;
      info.detail = e.what();
      detail::completeWork(*p.work, std::make_exception_ptr(CommError(info)));
    }
  }

  // ---- the communication thread (blocking calls and what queues behind them) ----
  struct Queued {
    std::shared_ptr<Pending> pending;
    std::function<int(std::vector<MPI_Request>&)> issue;  ///< non-blocking issue, or
    std::function<int()> blocking;                        ///< a blocking call
  };
  std::mutex queueMutex;
  std::condition_variable queueCv;
  std::deque<Queued> queued;
  bool commBusy = false;  ///< the thread is working through `queued`; new operations must queue too
  bool queueStop = false;

  void runQueue() {
    c10::GradMode::set_enabled(false);
    std::unique_lock<std::mutex> qlock(queueMutex);
    for (;;) {
      queueCv.wait(qlock, [&] { return queueStop || !queued.empty(); });
      if (queued.empty()) return;
      Queued item = std::move(queued.front());
      queued.pop_front();
      commBusy = true;
      qlock.unlock();
      bool done = false;
      {
        std::lock_guard<std::mutex> lock(MpiRuntime::get().mutex());
        Pending& p = *item.pending;
        int rc = MPI_SUCCESS;
        if (failure) {
          detail::completeWork(*p.work, abortedError(p.info));
        } else {
          rc = item.blocking ? item.blocking() : item.issue(p.requests);
          if (rc != MPI_SUCCESS) {
            CommErrorInfo info = p.info;
            info.kind = CommErrorKind::kBackend;
            info.detail = mpiErrorText(rc);
            auto error = std::make_exception_ptr(CommError(info));
            poisonLocked(info, error);
            detail::completeWork(*p.work, error);
          } else if (item.blocking || p.requests.empty()) {
            done = true;
          } else {
            pending.push_back(item.pending);
          }
        }
      }
      if (done) complete(*item.pending);
      qlock.lock();
      if (queued.empty()) commBusy = false;
    }
  }
};

}  // namespace lockstep::detail
