// lockstep/comm/work.h — the handle of an asynchronous collective.
//
// A Work is returned by every Communicator operation. wait() blocks until the
// operation finished and rethrows its CommError, or throws kTimeout once the
// operation's deadline passed. Tensors handed to the operation must stay alive
// and untouched until wait() returned, or, after waitOnStream(), may be used by
// work queued on the caller's stream. waitOnStream() is the device-side wait:
// for a backend whose operations run on a CUDA stream (nccl) it orders the
// caller's later GPU work after the operation without blocking the host.
// Work is thread-safe: wait(), test() and a backend's watch thread may poll
// and expire one work at the same time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace lockstep {

namespace detail {
struct WorkAccess;
}

class Work {
 public:
  using Clock = std::chrono::steady_clock;
  /// `onTimeout` is called (once, outside the lock) when a wait() or test() finds the
  /// deadline passed; it returns the exception to throw and poisons the communicator.
  Work(std::string description, Clock::time_point deadline, std::function<std::exception_ptr()> onTimeout);
  /// A backend that progresses only when polled (MPI) passes `poll`: wait()
  /// calls it over and over until the work completed or the deadline passed,
  /// test() once. One call must return promptly; calls may come from several
  /// threads at once.
  Work(std::string description, Clock::time_point deadline, std::function<std::exception_ptr()> onTimeout,
       std::function<void()> poll);

  /// Blocks until done; throws CommError on failure or timeout.
  void wait();
  /// Orders the calling thread's later device work after this operation. Where the backend's
  /// operation runs on a device stream (nccl), the current CUDA stream waits for it and the host
  /// goes on at once: the operation's tensors may then be used by work queued on that stream, and
  /// its deadline is kept by the backend, which fails the communicator's next operation
  /// (kAborted, naming this one) when it is late or fails. Everywhere else, and for an operation
  /// that already failed: wait().
  void waitOnStream();
  /// Polls the operation once (a polled backend); past the deadline fails it as wait() would.
  /// Returns isCompleted(). Never blocks for long.
  bool test();
  /// True once the operation finished, successfully or not.
  bool isCompleted() const;
  /// True when finished without error.
  bool isSuccess() const;
  const std::string& description() const { return description_; }
  /// When the backend completed the operation (successfully or not); the
  /// default time point while it has not. Used for timelines.
  Clock::time_point completedAt() const;

 private:
  friend struct detail::WorkAccess;  // the backends (src/comm/work_access.h)
  /// Marks the work finished; `error` is null on success.
  void complete(std::exception_ptr error);
  /// Past the deadline and not done: fails the work with onTimeout's error.
  void expire(std::unique_lock<std::mutex>& lock);
  /// Polls and waits until done or `until` (at most the deadline); past the deadline expires.
  /// Returns whether done.
  bool finishBy(Clock::time_point until);

  std::string description_;
  Clock::time_point deadline_;
  std::function<std::exception_ptr()> onTimeout_;
  std::function<void(Clock::time_point)> poll_;  // may block until its argument
  std::function<bool()> streamWait_;             // true: the stream waits; false: wait() on the host
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  bool expiring_ = false;  // a thread is calling onTimeout
  Clock::time_point completedAt_{};
  std::exception_ptr error_;
};

using WorkHandle = std::shared_ptr<Work>;

}  // namespace lockstep
