#include "comm/op_queue.h"

#include <fmt/format.h>

#include "lockstep/common/logging.h"

namespace lockstep::detail {

OpQueue::OpQueue(int rank, int worldSize)
    : rank_(rank), worldSize_(worldSize), state_(std::make_shared<State>()) {
  thread_ = std::thread(&OpQueue::run, state_);
}

OpQueue::~OpQueue() {
  bool stuck = false;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stop = true;
    stuck = state_->busy && state_->failure != nullptr;
  }
  state_->cv.notify_all();
  if (stuck) {
    // The thread owns a reference to the state and to everything its task
    // captured, so letting it finish (or be torn down at exit) is safe.
    thread_.detach();
  } else {
    thread_.join();
  }
}

std::exception_ptr OpQueue::poison(State& state, const CommErrorInfo& info, std::exception_ptr error) {
  // Caller holds state.mutex.
  if (!state.failure) {
    state.failure = error;
    state.failureInfo = info;
  }
  return state.failure;
}

std::exception_ptr OpQueue::failure() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->failure;
}

WorkHandle OpQueue::submit(CommErrorInfo info, std::chrono::milliseconds timeout,
                           std::function<void()> body) {
  info.rank = rank_;
  info.worldSize = worldSize_;
  info.sequence = nextSequence_++;
  info.timeoutMs = timeout.count();
  std::weak_ptr<State> weakState = state_;
  auto onTimeout = [weakState, info]() -> std::exception_ptr {
    CommErrorInfo timedOut = info;
    timedOut.kind = CommErrorKind::kTimeout;
    if (timedOut.worldSize == 2 && timedOut.peer < 0) timedOut.peer = 1 - timedOut.rank;
    timedOut.detail = "the operation did not complete in time; a peer may have died, hung, or "
                      "called a different collective";
    auto error = std::make_exception_ptr(CommError(timedOut));
    if (auto state = weakState.lock()) {
      std::lock_guard<std::mutex> lock(state->mutex);
      poison(*state, timedOut, error);
    }
    log::error(CommError(timedOut).what());
    return error;
  };
  auto work = std::make_shared<Work>(fmt::format("{} #{}", info.op, info.sequence),
                                     Work::Clock::now() + timeout, std::move(onTimeout));
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->tasks.push_back(Task{work, std::move(info), std::move(body)});
  }
  state_->cv.notify_one();
  return work;
}

void OpQueue::run(std::shared_ptr<State> state) {
  for (;;) {
    Task task;
    std::exception_ptr failure;
    CommErrorInfo failureInfo;
    {
      std::unique_lock<std::mutex> lock(state->mutex);
      state->cv.wait(lock, [&] { return state->stop || !state->tasks.empty(); });
      if (state->tasks.empty()) return;  // stop requested and nothing left
      task = std::move(state->tasks.front());
      state->tasks.pop_front();
      failure = state->failure;
      failureInfo = state->failureInfo;
      state->busy = failure == nullptr;
    }
    if (failure) {
      CommErrorInfo aborted = task.info;
      aborted.kind = CommErrorKind::kAborted;
      aborted.detail = fmt::format("the communicator is unusable since operation #{} ({}) failed: {}",
                                   failureInfo.sequence, failureInfo.op, toString(failureInfo.kind));
      task.work->complete(std::make_exception_ptr(CommError(aborted)));
      continue;
    }
    std::exception_ptr error;
    try {
      task.body();
    } catch (const CommError& e) {
      error = std::current_exception();
      if (e.kind() != CommErrorKind::kInvalidArgument) {
        std::lock_guard<std::mutex> lock(state->mutex);
        poison(*state, e.info(), error);
      }
    } catch (const std::exception& e) {
      CommErrorInfo info = task.info;
      info.kind = CommErrorKind::kBackend;
      info.detail = e.what();
      error = std::make_exception_ptr(CommError(info));
      std::lock_guard<std::mutex> lock(state->mutex);
      poison(*state, info, error);
    }
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      state->busy = false;
    }
    task.work->complete(error);
  }
}

}  // namespace lockstep::detail
