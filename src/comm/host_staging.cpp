// Device tensors through host buffers (comm/host_staging.h), and host tensors through device
// buffers for a backend that takes only device memory (comm/staging.h).
#include "lockstep/comm/host_staging.h"

#include <ATen/ATen.h>

#include <atomic>
#include <utility>

#include "comm/forwarding.h"
#include "comm/staging.h"
#include "comm/work_access.h"
#include "lockstep/common/error.h"

namespace lockstep {

namespace {

/// What one staged operation keeps alive until its wait(): the host tensors the inner operation
/// works on, and the (caller's tensor, host buffer) pairs copied back once it finished.
struct Staged {
  std::vector<at::Tensor> host;
  at::Tensor in;
  at::Tensor out;
  std::vector<std::pair<at::Tensor, at::Tensor>> back;
  std::atomic<bool> copying{false};  // one poller copies back and completes
};

class StagingCommunicator final : public detail::ForwardingCommunicator {
 public:
  StagingCommunicator(std::shared_ptr<Communicator> inner, c10::Device target, StagePredicate stage)
      : ForwardingCommunicator(std::move(inner)), target_(target), stage_(std::move(stage)) {}

  WorkHandle allreduce(std::vector<at::Tensor>& tensors, ReduceOp op, const CollectiveOptions& o) override {
    if (!anyStaged(tensors)) return inner_->allreduce(tensors, op, o);
    auto s = stageInPlace(tensors);
    return after(inner_->allreduce(s->host, op, o), s);
  }

  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root, const CollectiveOptions& o) override {
    if (!anyStaged(tensors)) return inner_->broadcast(tensors, root, o);
    auto s = stageInPlace(tensors);
    return after(inner_->broadcast(s->host, root, o), s);
  }

  WorkHandle allgather(const at::Tensor& input, at::Tensor& output, const CollectiveOptions& o) override {
    if (!stage_(input) && !stage_(output)) return inner_->allgather(input, output, o);
    auto s = std::make_shared<Staged>();
    s->in = hostCopy(input);  // a copy also where `input` is a chunk of `output`: the two stay apart here
    s->out = receiveInto(output, *s);
    return after(inner_->allgather(s->in, s->out, o), s);
  }

  WorkHandle allgather(const at::Tensor& input, std::vector<at::Tensor>& outputs, const CollectiveOptions& o) override {
    if (!stage_(input) && !anyStaged(outputs)) return inner_->allgather(input, outputs, o);
    auto s = std::make_shared<Staged>();
    s->in = stage_(input) ? hostCopy(input) : input;
    for (const auto& t : outputs) s->host.push_back(stage_(t) ? receiveInto(t, *s) : t);
    return after(inner_->allgather(s->in, s->host, o), s);
  }

  WorkHandle reduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op,
                           const CollectiveOptions& o) override {
    if (!stage_(input) && !stage_(output)) return inner_->reduceScatter(input, output, op, o);
    auto s = std::make_shared<Staged>();
    s->in = stage_(input) ? hostCopy(input) : input;
    s->out = stage_(output) ? receiveInto(output, *s) : output;
    return after(inner_->reduceScatter(s->in, s->out, op, o), s);
  }

  WorkHandle barrier(const CollectiveOptions& o) override { return inner_->barrier(o); }

  WorkHandle send(const at::Tensor& tensor, int dst, int tag, const CollectiveOptions& o) override {
    if (!stage_(tensor)) return inner_->send(tensor, dst, tag, o);
    auto s = std::make_shared<Staged>();
    s->in = hostCopy(tensor);
    return after(inner_->send(s->in, dst, tag, o), s);
  }

  WorkHandle recv(at::Tensor& tensor, int src, int tag, const CollectiveOptions& o) override {
    if (!stage_(tensor)) return inner_->recv(tensor, src, tag, o);
    auto s = std::make_shared<Staged>();
    s->out = receiveInto(tensor, *s);
    return after(inner_->recv(s->out, src, tag, o), s);
  }

  std::shared_ptr<Communicator> split(int color, int key, const std::string& name) override {
    auto group = inner_->split(color, key, name);
    return group ? std::make_shared<StagingCommunicator>(std::move(group), target_, stage_) : nullptr;
  }

 private:
  /// A tensor shaped like `t` on the target device; on the host, page-locked when `t` is a CUDA
  /// tensor (the copies then run at the bus's speed and may be asynchronous).
  at::Tensor bufferFor(const at::Tensor& t) const {
    if (!target_.is_cpu()) return at::empty(t.sizes(), t.options().device(target_));
    return at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(t.is_cuda()));
  }

  at::Tensor hostCopy(const at::Tensor& t) const { return bufferFor(t).copy_(t); }

  bool anyStaged(const std::vector<at::Tensor>& tensors) const {
    for (const auto& t : tensors) {
      if (stage_(t)) return true;
    }
    return false;
  }

  /// Host copies of the tensors to stage (the others as they are), each copied back after.
  std::shared_ptr<Staged> stageInPlace(const std::vector<at::Tensor>& tensors) const {
    auto s = std::make_shared<Staged>();
    for (const auto& t : tensors) {
      if (!stage_(t)) {
        s->host.push_back(t);
        continue;
      }
      s->host.push_back(hostCopy(t));
      s->back.emplace_back(t, s->host.back());
    }
    return s;
  }

  /// A buffer for `t` to receive into, copied into `t` after the operation.
  at::Tensor receiveInto(const at::Tensor& t, Staged& s) const {
    at::Tensor buffer = bufferFor(t);
    s.back.emplace_back(t, buffer);
    return buffer;
  }

  /// A Work whose wait() waits for `inner`, then copies the results back; the inner operation's
  /// error or timeout is its error.
  WorkHandle after(WorkHandle inner, std::shared_ptr<Staged> staged) const {
    auto self = std::make_shared<std::weak_ptr<Work>>();
    const auto deadline = Work::Clock::now() + inner_->defaultTimeout() + std::chrono::seconds(10);
    auto poll = [inner, staged, self](Work::Clock::time_point until) {
      auto work = self->lock();
      if (!work || !detail::finishBy(*inner, until)) return;  // test() passes the present: no wait
      if (staged->copying.exchange(true)) return;             // another thread is finishing it
      std::exception_ptr error;
      try {
        inner->wait();  // done: rethrows its error
        for (auto& [dst, src] : staged->back) dst.copy_(src);
      } catch (...) { error = std::current_exception(); }
      detail::completeWork(*work, error);
    };
    auto onTimeout = [description = inner->description()] {
      return std::make_exception_ptr(Error("staging: " + description + " did not finish by its deadline"));
    };
    auto work = std::make_shared<Work>(inner->description(), deadline, onTimeout);
    detail::setPoll(*work, std::move(poll));
    *self = work;
    return work;
  }

  c10::Device target_;
  StagePredicate stage_;
};

}  // namespace

std::shared_ptr<Communicator> withHostStaging(std::shared_ptr<Communicator> inner, StagePredicate stage) {
  LOCKSTEP_CHECK(inner != nullptr, "withHostStaging needs a communicator");
  if (!stage) stage = [](const at::Tensor& t) { return t.defined() && !t.is_cpu(); };
  return std::make_shared<StagingCommunicator>(std::move(inner), c10::Device(c10::kCPU), std::move(stage));
}

namespace detail {

std::shared_ptr<Communicator> withDeviceStaging(std::shared_ptr<Communicator> inner, c10::Device device) {
  LOCKSTEP_CHECK(inner != nullptr, "withDeviceStaging needs a communicator");
  auto stage = [device](const at::Tensor& t) { return t.defined() && t.device() != device; };
  return std::make_shared<StagingCommunicator>(std::move(inner), device, std::move(stage));
}

}  // namespace detail

}  // namespace lockstep
