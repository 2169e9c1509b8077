#include "lockstep/comm/communicator.h"

#include "lockstep/common/error.h"

namespace lockstep {

#ifndef LOCKSTEP_WITH_MPI
bool mpiBackendBuilt() { return false; }

std::shared_ptr<Communicator> makeMpiCommunicator(const MpiOptions&) {
  throw ConfigError(
      "this lockstep was built without the MPI backend: install libopenmpi-dev "
      "(scripts/setup.sh does) and rebuild, or use the gloo backend");
}
#endif

const char* toString(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

Work::Work(std::string description, Clock::time_point deadline, std::function<std::exception_ptr()> onTimeout)
    : description_(std::move(description)), deadline_(deadline), onTimeout_(std::move(onTimeout)) {}

Work::Work(std::string description, Clock::time_point deadline, std::function<std::exception_ptr()> onTimeout,
           std::function<void()> poll)
    : description_(std::move(description)), deadline_(deadline), onTimeout_(std::move(onTimeout)),
      poll_(std::move(poll)) {}

void Work::wait() {
  if (poll_) {
    while (!isCompleted() && Clock::now() < deadline_) poll_();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (!cv_.wait_until(lock, deadline_, [this] { return done_; })) expire(lock);
  if (error_) std::rethrow_exception(error_);
}

void Work::waitOnStream() {
  if (streamWait_ && !(isCompleted() && !isSuccess()) && streamWait_()) return;
  wait();
}

bool Work::test() {
  if (poll_ && !isCompleted()) poll_();
  std::unique_lock<std::mutex> lock(mutex_);
  if (!done_ && Clock::now() >= deadline_) expire(lock);
  return done_;
}

void Work::expire(std::unique_lock<std::mutex>& lock) {
  // Deadline passed: the backend is still inside the operation. Record the
  // timeout as this work's result so every later wait() sees the same error.
  if (done_) return;
  if (expiring_) {  // another thread is failing it: its error is the one to see
    cv_.wait(lock, [this] { return done_; });
    return;
  }
  expiring_ = true;
  auto onTimeout = std::move(onTimeout_);
  onTimeout_ = nullptr;
  lock.unlock();
  std::exception_ptr timeoutError = onTimeout ? onTimeout() : nullptr;
  lock.lock();
  if (!done_) {
    done_ = true;
    completedAt_ = Clock::now();
    error_ = timeoutError;
  }
  cv_.notify_all();
}

bool Work::isCompleted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

bool Work::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_ && !error_;
}

Work::Clock::time_point Work::completedAt() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completedAt_;
}

void Work::complete(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return;  // already failed by its deadline
    done_ = true;
    completedAt_ = Clock::now();
    error_ = std::move(error);
  }
  cv_.notify_all();
}

}  // namespace lockstep
