#include "comm/op_queue.h"

#include "comm/failure.h"
#include "comm/work_access.h"
#include "common/worker_thread.h"

#include <c10/core/GradMode.h>

#include <fmt/format.h>

namespace lockstep::detail {

OpQueue::OpQueue(int rank, int worldSize) : rank_(rank), worldSize_(worldSize), state_(std::make_shared<State>()) {
  issuer_ = detail::startThread(&OpQueue::runIssuer, state_);
  finisher_ = detail::startThread(&OpQueue::runFinisher, state_);
}

OpQueue::~OpQueue() {
  bool stuck = false;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stop = true;
    stuck = state_->busy > 0 && state_->failure != nullptr;
  }
  state_->cv.notify_all();
  // The threads own references to the state and to whatever their tasks
  // captured, so letting a stuck one finish on its own (or die at exit) is safe.
  for (auto* t : {&issuer_, &finisher_}) {
    if (stuck)
      t->detach();
    else
      t->join();
  }
}

std::exception_ptr OpQueue::abortedError(const State& state, CommErrorInfo info) {
  return detail::abortedError(std::move(info), state.failureInfo);
}

void OpQueue::poisonLocked(State& state, const CommErrorInfo& info, std::exception_ptr error) {
  if (state.failure) return;
  state.failure = std::move(error);
  state.failureInfo = info;
  for (auto& task : state.tasks) detail::completeWork(*task.work, abortedError(state, task.info));
  state.tasks.clear();
}

WorkHandle OpQueue::submit(CommErrorInfo info, std::chrono::milliseconds timeout, std::function<void()> body) {
  return submitIssued(std::move(info), timeout, [body = std::move(body)]() -> std::function<void()> {
    body();
    return {};
  });
}

WorkHandle OpQueue::submitIssued(CommErrorInfo info, std::chrono::milliseconds timeout, Body body) {
  info.rank = rank_;
  info.worldSize = worldSize_;
  info.sequence = nextSequence_++;
  info.timeoutMs = timeout.count();
  std::weak_ptr<State> weakState = state_;
  auto onTimeout = [weakState, info]() -> std::exception_ptr {
    CommError timedOut = timeoutError(info);
    auto error = std::make_exception_ptr(timedOut);
    if (auto state = weakState.lock()) {
      std::lock_guard<std::mutex> lock(state->mutex);
      poisonLocked(*state, timedOut.info(), error);
    }
    return error;
  };
  auto work = std::make_shared<Work>(fmt::format("{} #{}", info.op, info.sequence), Work::Clock::now() + timeout,
                                     std::move(onTimeout));
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->failure) {
      // Fail at once: the ranks are no longer known to be in step.
      detail::completeWork(*work, abortedError(*state_, info));
      return work;
    }
    state_->tasks.push_back(Task{work, std::move(info), std::move(body), {}});
  }
  state_->cv.notify_all();
  return work;
}

bool OpQueue::guarded(State& state, Task& task, const std::function<void()>& fn) {
  std::exception_ptr error;
  try {
    fn();
    return true;
  } catch (const CommError& e) {
    CommErrorInfo failed = e.info();
    error = std::current_exception();
    if (failed.sequence == 0) {
      // Bodies build their errors before the queue numbered the operation.
      failed.sequence = task.info.sequence;
      failed.timeoutMs = task.info.timeoutMs;
      error = std::make_exception_ptr(CommError(failed));
    }
    if (failed.kind != CommErrorKind::kInvalidArgument) {
      std::lock_guard<std::mutex> lock(state.mutex);
      poisonLocked(state, failed, error);
    }
  } catch (const std::exception& e) {
    CommErrorInfo info = task.info;
    info.kind = CommErrorKind::kBackend;
    info.detail = e.what();
    error = std::make_exception_ptr(CommError(info));
    std::lock_guard<std::mutex> lock(state.mutex);
    poisonLocked(state, info, error);
  }
  detail::completeWork(*task.work, error);
  return false;
}

void OpQueue::runIssuer(std::shared_ptr<State> state) {
  c10::GradMode::set_enabled(false);  // communication is never part of an autograd graph
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(state->mutex);
      state->cv.wait(lock, [&] { return state->stop || !state->tasks.empty(); });
      if (state->tasks.empty()) return;  // stop requested and nothing left
      task = std::move(state->tasks.front());
      state->tasks.pop_front();
      ++state->busy;
    }
    bool ok = guarded(*state, task, [&] { task.finisher = task.body(); });
    std::lock_guard<std::mutex> lock(state->mutex);
    --state->busy;
    state->cv.notify_all();  // the finisher may be waiting for busy == 0 to stop
    if (!ok) continue;
    if (task.finisher) {
      state->finishing.push_back(std::move(task));
    } else {
      detail::completeWork(*task.work, nullptr);
    }
  }
}

void OpQueue::runFinisher(std::shared_ptr<State> state) {
  c10::GradMode::set_enabled(false);
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(state->mutex);
      state->cv.wait(
          lock, [&] { return (state->stop && state->tasks.empty() && state->busy == 0) || !state->finishing.empty(); });
      if (state->finishing.empty()) return;
      task = std::move(state->finishing.front());
      state->finishing.pop_front();
      ++state->busy;
    }
    bool ok = guarded(*state, task, task.finisher);
    if (ok) detail::completeWork(*task.work, nullptr);
    std::lock_guard<std::mutex> lock(state->mutex);
    --state->busy;
    state->cv.notify_all();
  }
}

}  // namespace lockstep::detail
