// nccl_communicator.cpp — the Communicator over LibTorch's c10d ProcessGroupNCCL (comm/nccl.h).
//
// NcclCommunicator takes tensors on its GPU only and hands each operation to
// c10d, which runs it on NCCL's stream after what the caller's stream queued.
// Its Work polls c10d's (a CUDA event query) from wait(), so the deadline is
// lockstep's: past it the process group is aborted and the communicator
// poisoned. waitOnStream() makes the caller's stream wait for NCCL's instead
// and hands the deadline to a DeadlineWatch thread. makeNcclCommunicator
// wraps it in device staging (comm/staging.h), so CPU tensors (metadata,
// checks, a CPU model's gradients) are accepted too. Operations that a
// decorator finishes with a Work of its own (the desync check) are waited for
// on the host.
#include "lockstep/comm/nccl.h"

#include <ATen/ATen.h>

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "comm/collective_args.h"
#include "comm/deadline_watch.h"
#include "comm/failure.h"
#include "comm/split_plan.h"
#include "comm/staging.h"
#include "comm/store/store_impl.h"
#include "comm/work_access.h"
#include "lockstep/common/device.h"
#include "lockstep/common/error.h"

#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace lockstep {

#ifdef USE_C10D_NCCL

bool ncclBackendBuilt() { return true; }

namespace {

using NcclPG = c10::intrusive_ptr<c10d::ProcessGroupNCCL>;
using C10Work = c10::intrusive_ptr<c10d::Work>;

/// NCCL's watchdog fires this long after lockstep's deadline, so the error is lockstep's.
constexpr std::chrono::seconds kWatchdogSlack{60};

c10d::ReduceOp toNcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return c10d::ReduceOp::SUM;
    case ReduceOp::kAvg: return c10d::ReduceOp::AVG;
    case ReduceOp::kMax: return c10d::ReduceOp::MAX;
    case ReduceOp::kMin: return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

/// Errors surface as the failed work's exception, which lockstep turns into a CommError, instead
/// of NCCL's watchdog tearing the process down. Set before the first process group reads it,
/// unless the user chose.
void preferErrorsOverTeardown() { ::setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0", /*overwrite=*/0); }

/// The first failure of a communicator and its groups' view of it: every later operation fails kAborted.
struct Poison {
  std::mutex mutex;
  bool failed = false;
  CommErrorInfo first;

  /// Keeps `info` as the first failure unless there was one.
  void record(const CommErrorInfo& info) {
    std::lock_guard<std::mutex> lock(mutex);
    if (failed) return;
    failed = true;
    first = info;
  }
};

struct NcclGroupContext {
  Store store;
  std::string prefix;  // of this communicator's keys in the store; a group's lie below
  std::string name;    // empty for the world
  std::vector<int> globalRanks;
  c10::Device device;
  std::chrono::milliseconds timeout;
};

NcclPG connect(const NcclGroupContext& context, int rank, int world) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = context.timeout + kWatchdogSlack;
  auto prefixed = context.store.withPrefix(context.prefix);
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(detail::StoreAccess::impl(prefixed)->store, rank, world, options);
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(NcclPG pg, int rank, int world, NcclGroupContext context)
      : pg_(std::move(pg)), rank_(rank), world_(world), args_(rank, world, "nccl"), context_(std::move(context)) {
    args_.setDevice(context_.device);
    args_.setGroup(context_.name, context_.globalRanks);
  }
  ~NcclCommunicator() override {
    watch_->stop();
    try {
      pg_->shutdown();
    } catch (...) {  // a communicator that failed may not shut down cleanly; it is going anyway
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return world_; }
  std::string backendName() const override { return "nccl"; }
  std::chrono::milliseconds defaultTimeout() const override { return context_.timeout; }
  std::vector<int> globalRanks() const override { return context_.globalRanks; }
  std::string groupName() const override { return context_.name; }

  WorkHandle allreduce(std::vector<at::Tensor>& tensors, ReduceOp op, const CollectiveOptions& o) override {
    CommErrorInfo info = args_.allreduce(tensors, op);
    return perDtype(std::move(info), o, tensors, /*copyBack=*/true,
                    [op](const NcclPG& pg, std::vector<at::Tensor>& wire) {
                      c10d::AllreduceOptions ao;
                      ao.reduceOp = toNcclOp(op);
                      return pg->allreduce(wire, ao);
                    });
  }

  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root, const CollectiveOptions& o) override {
    CommErrorInfo info = args_.broadcast(tensors, root);
    return perDtype(std::move(info), o, tensors, /*copyBack=*/rank_ != root,
                    [root](const NcclPG& pg, std::vector<at::Tensor>& wire) {
                      c10d::BroadcastOptions bo;
                      bo.rootRank = root;
                      return pg->broadcast(wire, bo);
                    });
  }

  WorkHandle allgather(const at::Tensor& input, at::Tensor& output, const CollectiveOptions& o) override {
    CommErrorInfo info = args_.allgather(input, output);
    at::Tensor in = input.view({-1});
    at::Tensor out = output.view({-1});
    return issue(
        std::move(info), o, [&] { return std::vector<C10Work>{pg_->_allgather_base(out, in)}; }, [in, out] {});
  }

  WorkHandle allgather(const at::Tensor& input, std::vector<at::Tensor>& outputs, const CollectiveOptions& o) override {
    CommErrorInfo info = args_.allgather(input, outputs);
    std::vector<std::vector<at::Tensor>> out{outputs};
    std::vector<at::Tensor> in{input};
    return issue(
        std::move(info), o, [&] { return std::vector<C10Work>{pg_->allgather(out, in)}; }, [in, out] {});
  }

  WorkHandle reduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op,
                           const CollectiveOptions& o) override {
    CommErrorInfo info = args_.reduceScatter(input, output, op);
    at::Tensor in = input.view({-1});
    at::Tensor out = output.view({-1});
    c10d::ReduceScatterOptions ro;
    ro.reduceOp = toNcclOp(op);
    return issue(
        std::move(info), o, [&] { return std::vector<C10Work>{pg_->_reduce_scatter_base(out, in, ro)}; }, [in, out] {});
  }

  WorkHandle barrier(const CollectiveOptions& o) override {
    CommErrorInfo info = args_.barrier();
    c10d::BarrierOptions bo;
    bo.device_ids = {context_.device.index()};
    return issue(std::move(info), o, [&] { return std::vector<C10Work>{pg_->barrier(bo)}; });
  }

  WorkHandle send(const at::Tensor& tensor, int dst, int tag, const CollectiveOptions& o) override {
    CommErrorInfo info = args_.send(tensor, dst, tag);
    std::vector<at::Tensor> wire{tensor.view({-1})};
    return issue(
        std::move(info), o,
        [&] { return tensor.numel() == 0 ? std::vector<C10Work>{} : std::vector<C10Work>{pg_->send(wire, dst, tag)}; },
        [wire] {});
  }

  WorkHandle recv(at::Tensor& tensor, int src, int tag, const CollectiveOptions& o) override {
    CommErrorInfo info = args_.recv(tensor, src, tag);
    std::vector<at::Tensor> wire{tensor.view({-1})};
    return issue(
        std::move(info), o,
        [&] { return tensor.numel() == 0 ? std::vector<C10Work>{} : std::vector<C10Work>{pg_->recv(wire, src, tag)}; },
        [wire] {});
  }

  std::shared_ptr<Communicator> split(int color, int key, const std::string& name) override;

 private:
  using Launch = std::function<C10Work(const NcclPG&, std::vector<at::Tensor>&)>;

  /// One c10d operation per dtype of `tensors` (a list fused into one buffer per dtype); the
  /// buffers are copied back into the list once every one finished, where `copyBack` says so.
  WorkHandle perDtype(CommErrorInfo info, const CollectiveOptions& o, const std::vector<at::Tensor>& tensors,
                      bool copyBack, const Launch& launch) {
    auto groups = std::make_shared<std::vector<std::pair<at::Tensor, std::vector<at::Tensor>>>>();
    for (auto& [dtype, group] : detail::groupByDtype(tensors)) {
      groups->emplace_back(group.size() == 1 ? group[0].view({-1}) : detail::flatten(group), group);
    }
    // The buffers stay alive until the operation finished, copied back or not.
    auto after = [groups, copyBack] {
      for (auto& [buffer, group] : *groups) {
        if (copyBack && group.size() > 1) detail::unflatten(buffer, group);
      }
    };
    return issue(
        std::move(info), o,
        [&] {
          std::vector<C10Work> works;
          for (auto& entry : *groups) {
            std::vector<at::Tensor> wire{entry.first};
            works.push_back(launch(pg_, wire));
          }
          return works;
        },
        after);
  }

  /// Numbers the operation, starts it with `start` (unless the communicator failed before) and
  /// returns the Work that polls it; `after` (which also keeps the operation's tensors alive)
  /// runs once every c10d work finished.
  WorkHandle issue(CommErrorInfo info, const CollectiveOptions& o, const std::function<std::vector<C10Work>()>& start,
                   std::function<void()> after = {});

  NcclPG pg_;
  int rank_;
  int world_;
  detail::CollectiveArgs args_;
  NcclGroupContext context_;
  std::shared_ptr<Poison> poison_ = std::make_shared<Poison>();
  // Keeps the deadlines of the operations waited for on the stream only.
  std::shared_ptr<detail::DeadlineWatch> watch_ = std::make_shared<detail::DeadlineWatch>();
  uint64_t nextSequence_ = 1;
  int splits_ = 0;  // split() calls so far: the same on every rank, so it names the group's keys
};

/// The CommError of a failed c10d work or call.
std::exception_ptr failure(CommErrorInfo info, const std::exception_ptr& cause) {
  try {
    std::rethrow_exception(cause);
  } catch (const std::exception& e) { info.detail = detail::backendMessage(e); } catch (...) {
    info.detail = "an unknown error";
  }
  info.kind = CommErrorKind::kBackend;
  return std::make_exception_ptr(CommError(info));
}

/// What waitOnStream() runs for an NCCL work: the caller's current stream waits for `works`,
/// `after` (device copies) is queued behind that wait unless it ran already, and the work goes to
/// `watch`, which keeps its deadline. False (the host waits instead) when the communicator failed
/// before or c10d reports a failure.
std::function<bool()> streamWaitFor(std::vector<C10Work> works, std::function<void()> after,
                                    std::shared_ptr<std::atomic<bool>> afterTaken,
                                    std::shared_ptr<std::weak_ptr<Work>> self, CommErrorInfo info,
                                    std::shared_ptr<Poison> poison,
                                    const std::shared_ptr<detail::DeadlineWatch>& watch) {
  return
      [works = std::move(works), after = std::move(after), afterTaken = std::move(afterTaken), self = std::move(self),
       info = std::move(info), poison = std::move(poison), watch = std::weak_ptr<detail::DeadlineWatch>(watch)]() {
        {
          std::lock_guard<std::mutex> lock(poison->mutex);
          if (poison->failed) return false;
        }
        auto work = self->lock();
        auto watching = watch.lock();
        if (!work || !watching) return false;
        try {
          for (const auto& w : works) w->blockCurrentStream();  // the current stream waits for NCCL's
        } catch (...) {
          return false;  // wait() polls the failure and reports it
        }
        if (after && !afterTaken->exchange(true)) {
          try {
            after();  // device copies, queued behind the wait
          } catch (...) {
            poison->record(info);
            detail::completeWork(*work, failure(info, std::current_exception()));
            return false;
          }
        }
        watching->watch(work);
        return true;
      };
}

WorkHandle NcclCommunicator::issue(CommErrorInfo info, const CollectiveOptions& o,
                                   const std::function<std::vector<C10Work>()>& start, std::function<void()> after) {
  const auto timeout = o.timeout.count() > 0 ? std::min(o.timeout, context_.timeout) : context_.timeout;
  info.sequence = nextSequence_++;
  info.timeoutMs = timeout.count();
  const std::string description = fmt::format("{} #{}", info.op, info.sequence);
  {
    std::lock_guard<std::mutex> lock(poison_->mutex);
    if (poison_->failed) {
      auto work = std::make_shared<Work>(description, Work::Clock::now(), nullptr);
      detail::completeWork(*work, detail::abortedError(info, poison_->first));
      return work;
    }
  }
  std::vector<C10Work> works;
  try {
    works = start();
  } catch (...) {
    auto work = std::make_shared<Work>(description, Work::Clock::now(), nullptr);
    auto error = failure(info, std::current_exception());
    poison_->record(info);
    detail::completeWork(*work, error);
    return work;
  }
  auto self = std::make_shared<std::weak_ptr<Work>>();
  // `after` runs once: on the host once polled complete, or queued behind a stream wait.
  auto afterTaken = std::make_shared<std::atomic<bool>>(false);
  auto poll = [works, after, afterTaken, self, info, poisonState = poison_]() {
    auto work = self->lock();
    if (!work) return;
    std::exception_ptr error;
    try {
      for (const auto& w : works) {
        if (!w->isCompleted()) {
          std::this_thread::yield();
          return;
        }
      }
    } catch (...) {  // c10d rethrows a CUDA error of the device from its poll
      error = failure(info, std::current_exception());
    }
    for (const auto& w : works) {
      if (!error && w->exception()) error = failure(info, w->exception());
    }
    if (!error && after && !afterTaken->exchange(true)) {
      try {
        after();
      } catch (...) { error = failure(info, std::current_exception()); }
    }
    if (error) poisonState->record(info);
    detail::completeWork(*work, error);
  };
  auto onTimeout = [pg = pg_, info, poisonState = poison_]() -> std::exception_ptr {
    CommError timedOut = detail::timeoutError(info, "the NCCL communicators were aborted");
    poisonState->record(timedOut.info());
    try {
      pg->abort();
    } catch (...) {  // aborting is the last resort; the timeout is the error to report
    }
    return std::make_exception_ptr(timedOut);
  };
  auto work = std::make_shared<Work>(description, Work::Clock::now() + timeout, onTimeout, poll);
  *self = work;
  detail::setStreamWait(*work, streamWaitFor(works, after, afterTaken, self, info, poison_, watch_));
  return work;
}

std::shared_ptr<Communicator> NcclCommunicator::split(int color, int key, const std::string& name) {
  // The plan is an all-gather of host integers: through a device-staging view of this communicator.
  std::shared_ptr<Communicator> unowned(std::shared_ptr<Communicator>{}, this);
  auto staged = detail::withDeviceStaging(unowned, context_.device);
  detail::SplitPlan plan = detail::planSplit(*staged, color, key);
  const int index = splits_++;
  if (color < 0) return nullptr;
  NcclGroupContext child{context_.store,
                         fmt::format("{}/split{}/color{}", context_.prefix, index, color),
                         detail::groupName(name, color),
                         {},
                         context_.device,
                         context_.timeout};
  for (int member : plan.members) child.globalRanks.push_back(context_.globalRanks[static_cast<size_t>(member)]);
  const int size = static_cast<int>(plan.members.size());
  NcclPG pg = connect(child, plan.rank, size);
  return std::make_shared<NcclCommunicator>(std::move(pg), plan.rank, size, std::move(child));
}

}  // namespace

std::shared_ptr<Communicator> makeNcclCommunicator(const Store& store, const NcclOptions& o) {
  detail::checkMembership(o.rank, o.worldSize, o.timeout);
  const int visible = visibleCudaDevices();
  if (o.deviceIndex < 0 || o.deviceIndex >= visible) {
    throw ConfigError(
        fmt::format("backend nccl: rank {} wants cuda:{}, but {} CUDA device(s) are visible to it "
                    "({}); use the gloo backend",
                    o.rank, o.deviceIndex, visible, describeCudaVisibleDevices()));
  }
  preferErrorsOverTeardown();
  const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(o.deviceIndex));
  NcclGroupContext world{store, "lockstep/nccl", "", {}, device, o.timeout};
  for (int r = 0; r < o.worldSize; ++r) world.globalRanks.push_back(r);
  NcclPG pg = connect(world, o.rank, o.worldSize);
  auto raw = std::make_shared<NcclCommunicator>(std::move(pg), o.rank, o.worldSize, std::move(world));
  return detail::withDeviceStaging(std::move(raw), device);
}

#else  // a LibTorch without c10d's NCCL

bool ncclBackendBuilt() { return false; }

std::shared_ptr<Communicator> makeNcclCommunicator(const Store&, const NcclOptions&) {
  throw ConfigError("backend nccl: this lockstep was built against a LibTorch without NCCL; use the gloo backend");
}

#endif

}  // namespace lockstep
