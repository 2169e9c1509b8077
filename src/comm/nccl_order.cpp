// nccl_order.cpp — comm/nccl_order.h.
#include "lockstep/comm/nccl_order.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "comm/collective_args.h"
#include "comm/forwarding.h"
#include "comm/work_access.h"
#include "common/worker_thread.h"
#include "lockstep/common/error.h"

namespace lockstep::detail {

namespace {

using Clock = Work::Clock;

/// The outcome of one operation, shared by the thread that runs it and its Work.
struct Outcome {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;

  void finish(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
      error = std::move(e);
    }
    cv.notify_all();
  }
  bool waitUntil(Clock::time_point until) {
    std::unique_lock<std::mutex> lock(mutex);
    return cv.wait_until(lock, until, [this] { return done; });
  }
};

/// A Work that completes only inside wait(): test() passes the present to the poll, which then
/// reports nothing, as NCCL's operations are done for the caller only once it waited.
WorkHandle completedOnWait(const std::string& description, std::chrono::milliseconds timeout,
                           std::function<bool(Clock::time_point)> finishedBy,
                           std::function<std::exception_ptr()> result) {
  auto self = std::make_shared<std::weak_ptr<Work>>();
  auto claimed = std::make_shared<std::atomic<bool>>(false);
  auto poll = [self, claimed, finishedBy, result](Clock::time_point until) {
    auto work = self->lock();
    if (!work || until <= Clock::now() || !finishedBy(until)) return;
    if (claimed->exchange(true)) return;
    completeWork(*work, result());
  };
  auto onTimeout = [description] {
    return std::make_exception_ptr(Error("NCCL order: " + description + " did not finish by its deadline"));
  };
  auto work = std::make_shared<Work>(description, Clock::now() + timeout, onTimeout);
  setPoll(*work, std::move(poll));
  *self = work;
  return work;
}

/// One point-to-point operation of a pair.
struct P2pOp {
  bool isSend = false;
  at::Tensor tensor;
  int tag = 0;
  uint64_t number = 0;  ///< 1-based, per direction of the pair
  CommErrorInfo info;
  std::shared_ptr<Outcome> outcome;
};

/// What a receive announces of itself: its tag, elements and dtype.
std::string signature(const P2pOp& op) {
  return fmt::format("tag {}, {} x {}", op.tag, op.tensor.numel(), c10::toString(op.tensor.scalar_type()));
}

std::string describe(const P2pOp& op, int peer) {
  return fmt::format("{} #{} {} rank {} ({})", op.isSend ? "send" : "receive", op.number, op.isSend ? "to" : "from",
                     peer, signature(op));
}

std::vector<uint8_t> bytesOf(const std::string& text) { return {text.begin(), text.end()}; }
std::string textOf(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

/// What every pair of one wrapped communicator shares.
struct Shared {
  explicit Shared(Store s) : store(std::move(s)) {}

  std::shared_ptr<Communicator> data;  ///< a copy of the group: the pairs' payloads, tagged by number
  std::mutex dataMutex;                ///< one submission to `data` at a time
  Store store;
  NcclOrderOptions options;
  int rank = 0;
  std::atomic<bool> stopping{false};

  std::string headKey(int from, int to) const { return fmt::format("head/{}-{}", from, to); }
  std::string readyKey(int src, int dst, uint64_t number) const {
    return fmt::format("ready/{}-{}/{}", src, dst, number);
  }
  /// What `peer` is doing with this rank, as it last said.
  std::string peerHead(int peer) {
    auto head = store.tryGet(headKey(peer, rank));
    return head ? textOf(*head) : "nothing issued with this rank yet";
  }
};

/// This rank's operations with one peer, run one at a time in issue order on a thread.
class PairStream {
 public:
  PairStream(std::shared_ptr<Shared> shared, int peer) : shared_(std::move(shared)), peer_(peer) {
    thread_ = startThread([this] { run(); });
  }
  ~PairStream() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  PairStream(const PairStream&) = delete;
  PairStream& operator=(const PairStream&) = delete;

  void push(P2pOp op) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      op.number = op.isSend ? ++sends_ : ++receives_;
      queue_.push_back(std::move(op));
    }
    cv_.notify_all();
  }

 private:
  void run() {
    for (;;) {
      P2pOp op;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        op = std::move(queue_.front());
        queue_.pop_front();
      }
      const std::string what = describe(op, peer_);
      std::exception_ptr error = failure_;
      if (!error) {
        try {
          shared_->store.set(shared_->headKey(shared_->rank, peer_), bytesOf("at " + what));
          op.isSend ? runSend(op) : runReceive(op);
          shared_->store.set(shared_->headKey(shared_->rank, peer_), bytesOf("done with " + what));
        } catch (...) {
          error = failure_ = std::current_exception();  // later operations of the pair fail with it
        }
      }
      op.outcome->finish(error);
    }
  }

  /// Waits until the peer's matching receive is posted, checks that it matches, then sends.
  void runSend(P2pOp& op) {
    const auto limit = Clock::now() + shared_->options.stallLimit;
    const std::string key = shared_->readyKey(shared_->rank, peer_, op.number);
    auto pause = std::chrono::microseconds(200);
    std::optional<std::vector<uint8_t>> ready;
    while (!(ready = shared_->store.tryGet(key))) {
      if (shared_->stopping) fail(op, CommErrorKind::kAborted, "the communicator closed before the peer answered");
      if (Clock::now() > limit) stalled(op, fmt::format("rank {} to post its receive #{}", peer_, op.number));
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(5));
    }
    if (textOf(*ready) != signature(op)) {
      fail(op, CommErrorKind::kDesync,
           fmt::format("NCCL pairs the k-th send of a pair with its k-th receive whatever their tags; {} met rank "
                       "{}'s receive #{} ({}), which Gloo would not have paired with it",
                       describe(op, peer_), peer_, op.number, textOf(*ready)));
    }
    WorkHandle work;
    {
      std::lock_guard<std::mutex> lock(shared_->dataMutex);
      work = shared_->data->send(op.tensor, peer_, dataTag(op));
    }
    finishData(op, *work, limit);
  }

  /// Posts the receive, then says so to the peer, whose send waits for that.
  void runReceive(P2pOp& op) {
    const auto limit = Clock::now() + shared_->options.stallLimit;
    WorkHandle work;
    {
      std::lock_guard<std::mutex> lock(shared_->dataMutex);
      work = shared_->data->recv(op.tensor, peer_, dataTag(op));
    }
    shared_->store.set(shared_->readyKey(peer_, shared_->rank, op.number), bytesOf(signature(op)));
    finishData(op, *work, limit);
  }

  void finishData(P2pOp& op, Work& work, Clock::time_point limit) {
    while (!finishBy(work, std::min(limit, Clock::now() + std::chrono::milliseconds(50)))) {
      if (shared_->stopping) fail(op, CommErrorKind::kAborted, "the communicator closed during the transfer");
      if (Clock::now() > limit)
        stalled(op, fmt::format("rank {}'s matching {} #{}", peer_, op.isSend ? "receive" : "send", op.number));
    }
    work.wait();  // rethrows the transfer's error
  }

  static int dataTag(const P2pOp& op) { return static_cast<int>(op.number % (1U << 29)); }

  [[noreturn]] void stalled(const P2pOp& op, const std::string& waitingFor) {
    fail(op, CommErrorKind::kTimeout,
         fmt::format("NCCL order: {} waited {} ms for {}; rank {} is at: {}. NCCL runs the sends and receives of a "
                     "pair in the order each rank issued them, and a send completes only once its receive is "
                     "posted: on NCCL this order deadlocks",
                     describe(op, peer_), shared_->options.stallLimit.count(), waitingFor, peer_,
                     shared_->peerHead(peer_)));
  }

  [[noreturn]] static void fail(const P2pOp& op, CommErrorKind kind, const std::string& why) {
    CommErrorInfo info = op.info;
    info.kind = kind;
    info.detail = why;
    throw CommError(info);
  }

  std::shared_ptr<Shared> shared_;
  int peer_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<P2pOp> queue_;
  bool stop_ = false;
  uint64_t sends_ = 0;
  uint64_t receives_ = 0;
  std::exception_ptr failure_;  // the engine thread's own
  std::thread thread_;
};

class NcclOrderCommunicator final : public ForwardingCommunicator {
 public:
  NcclOrderCommunicator(std::shared_ptr<Communicator> inner, Store store, NcclOrderOptions options)
      : ForwardingCommunicator(std::move(inner)), shared_(std::make_shared<Shared>(std::move(store))) {
    shared_->options = options;
    shared_->rank = inner_->rank();
    if (inner_->size() > 1) shared_->data = inner_->split(0, inner_->rank(), "ncclorder-data");
    LOCKSTEP_CHECK(inner_->size() == 1 || shared_->data != nullptr, "NCCL order: the ", inner_->backendName(),
                   " communicator returned no copy of its group");
  }
  ~NcclOrderCommunicator() override {
    shared_->stopping = true;
    std::lock_guard<std::mutex> lock(mutex_);
    pairs_.clear();  // joins the pair threads
  }

  WorkHandle allreduce(std::vector<at::Tensor>& tensors, ReduceOp op, const CollectiveOptions& o) override {
    return gated(o, [&] { return inner_->allreduce(tensors, op, o); });
  }
  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root, const CollectiveOptions& o) override {
    return gated(o, [&] { return inner_->broadcast(tensors, root, o); });
  }
  WorkHandle allgather(const at::Tensor& input, at::Tensor& output, const CollectiveOptions& o) override {
    return gated(o, [&] { return inner_->allgather(input, output, o); });
  }
  WorkHandle allgather(const at::Tensor& input, std::vector<at::Tensor>& outputs, const CollectiveOptions& o) override {
    return gated(o, [&] { return inner_->allgather(input, outputs, o); });
  }
  WorkHandle reduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op,
                           const CollectiveOptions& o) override {
    return gated(o, [&] { return inner_->reduceScatter(input, output, op, o); });
  }
  WorkHandle barrier(const CollectiveOptions& o) override {
    return gated(o, [&] { return inner_->barrier(o); });
  }

  WorkHandle send(const at::Tensor& tensor, int dst, int tag, const CollectiveOptions& o) override {
    CommErrorInfo info = CollectiveArgs(rank(), size(), backendName()).send(tensor, dst, tag);
    return pointToPoint(true, tensor, dst, tag, std::move(info), o);
  }
  WorkHandle recv(at::Tensor& tensor, int src, int tag, const CollectiveOptions& o) override {
    CommErrorInfo info = CollectiveArgs(rank(), size(), backendName()).recv(tensor, src, tag);
    return pointToPoint(false, tensor, src, tag, std::move(info), o);
  }

  std::shared_ptr<Communicator> split(int color, int key, const std::string& name) override {
    const int index = splits_++;
    auto group = inner_->split(color, key, name);
    if (!group) return nullptr;
    return std::make_shared<NcclOrderCommunicator>(
        std::move(group), shared_->store.withPrefix(fmt::format("split{}-color{}", index, color)), shared_->options);
  }

 private:
  std::chrono::milliseconds timeoutOf(const CollectiveOptions& o) const {
    return o.timeout.count() > 0 ? std::min(o.timeout, defaultTimeout()) : defaultTimeout();
  }

  /// The collective of `submit`, in the backend's order, complete only once waited for.
  template <typename Submit>
  WorkHandle gated(const CollectiveOptions& o, Submit submit) {
    WorkHandle inner;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      inner = submit();
    }
    return completedOnWait(
        inner->description(), timeoutOf(o) + std::chrono::seconds(5),
        [inner](Clock::time_point until) { return finishBy(*inner, until); },
        [inner]() -> std::exception_ptr {
          try {
            inner->wait();
            return nullptr;
          } catch (...) { return std::current_exception(); }
        });
  }

  WorkHandle pointToPoint(bool isSend, const at::Tensor& tensor, int peer, int tag, CommErrorInfo info,
                          const CollectiveOptions& o) {
    auto outcome = std::make_shared<Outcome>();
    const std::string what = info.op;
    if (tensor.numel() == 0) {
      outcome->finish(nullptr);  // nothing to move: complete at once, as the backends do
    } else {
      P2pOp op{isSend, tensor, tag, 0, std::move(info), outcome};
      std::lock_guard<std::mutex> lock(mutex_);
      auto& pair = pairs_[peer];
      if (!pair) pair = std::make_unique<PairStream>(shared_, peer);
      pair->push(std::move(op));
    }
    return completedOnWait(
        what, timeoutOf(o), [outcome](Clock::time_point until) { return outcome->waitUntil(until); },
        [outcome] { return outcome->error; });
  }

  std::shared_ptr<Shared> shared_;
  std::mutex mutex_;  // submissions: the desync check submits from two threads
  std::map<int, std::unique_ptr<PairStream>> pairs_;
  int splits_ = 0;
};

}  // namespace

std::optional<NcclOrderOptions> ncclOrderFromEnv(const Environment& env) {
  auto on = env.getInt("LOCKSTEP_NCCL_ORDER", 0, 1);
  if (!on || *on == 0) return std::nullopt;
  NcclOrderOptions options;
  if (auto stall = env.getSeconds("LOCKSTEP_NCCL_ORDER_STALL_SECONDS")) options.stallLimit = *stall;
  return options;
}

std::shared_ptr<Communicator> withNcclOrder(std::shared_ptr<Communicator> inner, Store store,
                                            NcclOrderOptions options) {
  LOCKSTEP_CHECK(inner != nullptr, "withNcclOrder needs a communicator");
  LOCKSTEP_CHECK(options.stallLimit.count() > 0, "NCCL order: the stall limit must be positive");
  return std::make_shared<NcclOrderCommunicator>(std::move(inner), store.withPrefix("ncclorder"), options);
}

}  // namespace lockstep::detail
