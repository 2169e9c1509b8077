// op_queue.h — runs a communicator's operations one at a time, in order, on a
// background thread, and turns failures into a poisoned state.
//
// Why a queue of our own: ranks must issue collectives in the same order, and
// composite operations (reduce-scatter over all-to-all, bf16 allreduce) are
// several backend calls; running everything on one thread keeps the order
// identical on every rank whatever the caller does between submissions. It is
// also where deadlines are enforced, so a stuck backend cannot hang a caller.
//
// Point-to-point operations are only *issued* in order: their body returns a
// finisher that waits for completion on a second thread, so a send and the
// matching recv posted after it on the peer never wait for each other.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "lockstep/comm/work.h"
#include "lockstep/common/comm_error.h"

namespace lockstep::detail {

class OpQueue {
 public:
  /// Runs on the queue thread; returns a finisher to run on the completion
  /// thread, or an empty function when the operation is already complete.
  using Body = std::function<std::function<void()>()>;

  OpQueue(int rank, int worldSize);
  /// Joins the threads; if an operation is stuck in the backend after a
  /// failure, detaches them instead so destruction never hangs.
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  /// Enqueues a blocking operation: `body` throws CommError (or anything,
  /// reported as kBackend) on failure.
  WorkHandle submit(CommErrorInfo info, std::chrono::milliseconds timeout, std::function<void()> body);
  /// Enqueues an operation issued in order and completed by its finisher.
  WorkHandle submitIssued(CommErrorInfo info, std::chrono::milliseconds timeout, Body body);

 private:
  struct Task {
    WorkHandle work;
    CommErrorInfo info;
    Body body;
    std::function<void()> finisher;
  };
  struct State {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<Task> tasks;      // waiting to be issued
    std::deque<Task> finishing;  // issued, waiting for completion
    bool stop = false;
    int busy = 0;                // threads inside a backend call
    std::exception_ptr failure;  // first failure: poisons everything after it
    CommErrorInfo failureInfo;
  };

  static void runIssuer(std::shared_ptr<State> state);
  static void runFinisher(std::shared_ptr<State> state);
  /// Runs `fn` for `task`; returns true on success. On failure completes the work and poisons.
  static bool guarded(State& state, Task& task, const std::function<void()>& fn);
  /// Records the first failure and fails every queued task. Caller holds state.mutex.
  static void poisonLocked(State& state, const CommErrorInfo& info, std::exception_ptr error);
  static std::exception_ptr abortedError(const State& state, CommErrorInfo info);

  int rank_;
  int worldSize_;
  uint64_t nextSequence_ = 1;
  std::shared_ptr<State> state_;
  std::thread issuer_;
  std::thread finisher_;
};

}  // namespace lockstep::detail
