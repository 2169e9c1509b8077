// lockstep/comm/work.h — the handle of an asynchronous collective.
//
// A Work is returned by every Communicator operation. wait() blocks until the
// operation finished and rethrows its CommError, or throws kTimeout once the
// operation's deadline passed. Tensors handed to the operation must stay alive
// and untouched until wait() returned. Work is thread-safe.
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
  /// `onTimeout` is called (once, outside the lock) when a wait() hits the
  /// deadline; it returns the exception to throw and poisons the communicator.
  Work(std::string description, Clock::time_point deadline, std::function<std::exception_ptr()> onTimeout);
  /// A backend that progresses only when polled (MPI) passes `poll`: wait()
  /// calls it on the waiting thread, over and over, until the work completed
  /// or the deadline passed. One call must return promptly.
  Work(std::string description, Clock::time_point deadline, std::function<std::exception_ptr()> onTimeout,
       std::function<void()> poll);

  /// Blocks until done; throws CommError on failure or timeout.
  void wait();
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

  std::string description_;
  Clock::time_point deadline_;
  std::function<std::exception_ptr()> onTimeout_;
  std::function<void()> poll_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  Clock::time_point completedAt_{};
  std::exception_ptr error_;
};

using WorkHandle = std::shared_ptr<Work>;

}  // namespace lockstep
