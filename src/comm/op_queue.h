// op_queue.h — runs a communicator's operations one at a time, in order, on a
// background thread, and turns failures into a poisoned state.
//
// Why a queue of our own: ranks must issue collectives in the same order, and
// composite operations (reduce-scatter over all-to-all, bf16 allreduce) are
// several backend calls; running everything on one thread keeps the order
// identical on every rank whatever the caller does between submissions. It is
// also where deadlines are enforced, so a stuck backend cannot hang a caller.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "lockstep/comm/comm_error.h"
#include "lockstep/comm/work.h"

namespace lockstep::detail {

class OpQueue {
 public:
  /// `rank`/`worldSize` go into the errors this queue makes itself.
  OpQueue(int rank, int worldSize);
  /// Joins the thread; if an operation is stuck in the backend (after a
  /// failure), detaches it instead so destruction never hangs.
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  /// Enqueues `body` as operation `info.op`. `body` runs on the queue thread
  /// and throws CommError (or anything, reported as kBackend) on failure.
  WorkHandle submit(CommErrorInfo info, std::chrono::milliseconds timeout,
                    std::function<void()> body);

  /// The first failure, or null.
  std::exception_ptr failure() const;

 private:
  struct Task {
    WorkHandle work;
    CommErrorInfo info;
    std::function<void()> body;
  };
  struct State {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<Task> tasks;
    bool stop = false;
    bool busy = false;
    std::exception_ptr failure;  // first failure: poisons everything after it
    CommErrorInfo failureInfo;
  };

  static void run(std::shared_ptr<State> state);
  static std::exception_ptr poison(State& state, const CommErrorInfo& info, std::exception_ptr error);

  int rank_;
  int worldSize_;
  uint64_t nextSequence_ = 1;
  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace lockstep::detail
