// A communicator whose waits end when its group is given up (lockstep/comm/abandonable.h).
#include "lockstep/comm/abandonable.h"

#include <ATen/ATen.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <utility>

#include "comm/forwarding.h"
#include "comm/work_access.h"
#include "lockstep/comm/comm_error.h"

namespace lockstep {

namespace {

class AbandonableCommunicator final : public detail::ForwardingCommunicator {
 public:
  AbandonableCommunicator(std::shared_ptr<Communicator> inner, std::function<bool()> abandoned, std::string why,
                          std::chrono::milliseconds period)
      : ForwardingCommunicator(std::move(inner)), abandoned_(std::move(abandoned)), why_(std::move(why)),
        period_(period) {}

  std::shared_ptr<Communicator> split(int color, int key, const std::string& name) override {
    auto group = inner_->split(color, key, name);
    return group ? withAbandonment(std::move(group), abandoned_, why_, period_) : nullptr;
  }
  WorkHandle allreduce(std::vector<at::Tensor>& tensors, ReduceOp op, const CollectiveOptions& options) override {
    return watched(inner_->allreduce(tensors, op, options));
  }
  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root, const CollectiveOptions& options) override {
    return watched(inner_->broadcast(tensors, root, options));
  }
  WorkHandle allgather(const at::Tensor& input, at::Tensor& output, const CollectiveOptions& options) override {
    return watched(inner_->allgather(input, output, options));
  }
  WorkHandle allgather(const at::Tensor& input, std::vector<at::Tensor>& outputs,
                       const CollectiveOptions& options) override {
    return watched(inner_->allgather(input, outputs, options));
  }
  WorkHandle reduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op,
                           const CollectiveOptions& options) override {
    return watched(inner_->reduceScatter(input, output, op, options));
  }
  WorkHandle barrier(const CollectiveOptions& options) override { return watched(inner_->barrier(options)); }
  WorkHandle send(const at::Tensor& tensor, int dst, int tag, const CollectiveOptions& options) override {
    return watched(inner_->send(tensor, dst, tag, options));
  }
  WorkHandle recv(at::Tensor& tensor, int src, int tag, const CollectiveOptions& options) override {
    return watched(inner_->recv(tensor, src, tag, options));
  }

 private:
  /// A work that finishes as `inner` does, or fails once the group is abandoned while it waits.
  /// `abandoned` is asked at most once a period, and only of a work older than a period: a test()
  /// of one that completes in time never asks.
  WorkHandle watched(WorkHandle inner) {
    auto outer = std::make_shared<Work>(inner->description(), Work::Clock::time_point::max(), nullptr);
    std::weak_ptr<Work> self = outer;
    auto nextCheck = std::make_shared<std::atomic<int64_t>>((Work::Clock::now() + period_).time_since_epoch().count());
    detail::setPoll(*outer, [inner, self, nextCheck, abandoned = abandoned_, why = why_, period = period_,
                             rank = rank(), size = size()](Work::Clock::time_point until) {
      auto work = self.lock();
      if (!work || work->isCompleted()) return;
      if (detail::finishBy(*inner, std::min(until, Work::Clock::now() + period))) {
        std::exception_ptr error;
        try {
          inner->wait();
        } catch (...) { error = std::current_exception(); }
        detail::completeWork(*work, error);
        detail::setCompletedAt(*work, inner->completedAt());  // the backend's time, for the timelines
        return;
      }
      const int64_t now = Work::Clock::now().time_since_epoch().count();
      int64_t due = nextCheck->load();
      if (now < due || !nextCheck->compare_exchange_strong(due, now + Work::Clock::duration(period).count())) return;
      if (!abandoned()) return;
      CommErrorInfo info;
      info.kind = CommErrorKind::kAborted;
      info.op = inner->description();
      info.rank = rank;
      info.worldSize = size;
      info.detail = fmt::format("given up: {}", why);
      detail::completeWork(*work, std::make_exception_ptr(CommError(info)));
    });
    return outer;
  }

  std::function<bool()> abandoned_;
  std::string why_;
  std::chrono::milliseconds period_;
};

}  // namespace

std::shared_ptr<Communicator> withAbandonment(std::shared_ptr<Communicator> inner, std::function<bool()> abandoned,
                                              std::string why, std::chrono::milliseconds period) {
  return std::make_shared<AbandonableCommunicator>(std::move(inner), std::move(abandoned), std::move(why), period);
}

}  // namespace lockstep
