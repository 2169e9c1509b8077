#include "lockstep/comm/communicator.h"

#include <algorithm>

#include "lockstep/common/enum_names.h"
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

namespace {
constexpr EnumName<Backend> kBackendNames[] = {
    {Backend::kGloo, "gloo"}, {Backend::kMpi, "mpi"}, {Backend::kNccl, "nccl"}};
}  // namespace

const char* toString(Backend backend) { return enumName(kBackendNames, backend); }
Backend parseBackend(const std::string& text, const std::string& what) { return parseEnum(kBackendNames, text, what); }
Backend Communicator::backend() const { return parseBackend(backendName(), "Communicator::backendName()"); }

Work::Work(std::string description, Clock::time_point deadline, std::function<std::exception_ptr()> onTimeout)
    : description_(std::move(description)), deadline_(deadline), onTimeout_(std::move(onTimeout)) {}

Work::Work(std::string description, Clock::time_point deadline, std::function<std::exception_ptr()> onTimeout,
           std::function<void()> poll)
    : description_(std::move(description)), deadline_(deadline), onTimeout_(std::move(onTimeout)) {
  if (poll) poll_ = [poll = std::move(poll)](Clock::time_point) { poll(); };
}

void Work::wait() {
  finishBy(deadline_);
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_) std::rethrow_exception(error_);
}

void Work::waitOnStream() {
  if (streamWait_ && !(isCompleted() && !isSuccess()) && streamWait_()) return;
  wait();
}

bool Work::test() { return finishBy(Clock::now()); }

bool Work::finishBy(Clock::time_point until) {
  until = std::min(until, deadline_);
  if (poll_) {
    while (!isCompleted()) {
      poll_(until);
      if (Clock::now() >= until) break;
    }
  }
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait_until(lock, until, [this] { return done_; });
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
  std::exception_ptr timeoutError;
  try {  // whatever the handler does, the work ends failed and its waiters wake
    timeoutError = onTimeout ? onTimeout() : nullptr;
  } catch (...) { timeoutError = std::current_exception(); }
  if (!timeoutError) timeoutError = std::make_exception_ptr(Error(description_ + " did not finish by its deadline"));
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
