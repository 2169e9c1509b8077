// desync_check.cpp — the fingerprint exchange before collectives (desync_check.h).
//
// Shape of the wrapper: operations that need no check and find nothing
// waiting go straight to the inner communicator on the caller's thread, with
// no lock taken (two atomic loads decide it). Everything else becomes an Item
// in `queue`; the issuer thread takes items in order, runs the fingerprint
// allgather for checked ones (waiting for its result: it runs after every
// earlier operation of the inner communicator), compares, and issues the real
// operation; the finisher thread waits for the real operations in order and
// completes the Work the caller holds. State lives in a block the threads share.
#include "lockstep/comm/desync_check.h"

#include <ATen/ATen.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

#include "comm/collective_args.h"
#include "comm/desync_fingerprint.h"
#include "comm/failure.h"
#include "comm/work_access.h"
#include "common/worker_thread.h"
#include "lockstep/common/error.h"

namespace lockstep {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool parseDebugFlag(const Environment& env) {
  auto value = env.get(env::kDebug);
  if (!value) return false;
  std::string v = lower(*value);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v.empty() || v == "0" || v == "false" || v == "no" || v == "off") return false;
  throw ConfigError(fmt::format("environment variable {}='{}' is not understood; expected 1 (debug checks on) or 0",
                                env::kDebug, *value));
}

}  // namespace

DesyncCheckOptions desyncCheckFromEnv(const Environment& env) {
  DesyncCheckOptions options;
  bool debug = parseDebugFlag(env);
  auto value = env.get(env::kDesyncCheck);
  if (!value) {
    if (debug) options.mode = DesyncCheckMode::kAll;
    return options;
  }
  std::string v = lower(*value);
  auto bad = [&] {
    return ConfigError(
        fmt::format("environment variable {}='{}' is not understood; expected off, all, sample "
                    "(every {}th collective and the first {}) or sample:N (every Nth, N >= 1)",
                    env::kDesyncCheck, *value, options.every, options.first));
  };
  if (v == "off" || v == "0") {
    options.mode = DesyncCheckMode::kOff;
  } else if (v == "all") {
    options.mode = DesyncCheckMode::kAll;
  } else if (v == "sample") {
    options.mode = DesyncCheckMode::kSampled;
  } else if (v.rfind("sample:", 0) == 0) {
    options.mode = DesyncCheckMode::kSampled;
    try {
      options.every = static_cast<int>(parseInt(v.substr(7), env::kDesyncCheck, 1, std::numeric_limits<int>::max()));
    } catch (const ConfigError&) {
      throw bad();  // names the whole value and every form accepted, not just the number
    }
  } else {
    throw bad();
  }
  return options;
}

namespace {

using detail::Collective;
using detail::compareFingerprints;
using detail::Fingerprint;
using detail::fingerprint;

class DesyncCheckingCommunicator final : public Communicator {
 public:
  DesyncCheckingCommunicator(std::shared_ptr<Communicator> inner, DesyncCheckOptions options)
      : state_(std::make_shared<State>()), args_(inner->rank(), inner->size(), inner->backendName()) {
    args_.setGroup(inner->groupName(), inner->globalRanks());
    state_->inner = std::move(inner);
    state_->options = options;
    issuer_ = detail::startThread(&DesyncCheckingCommunicator::runIssuer, state_);
    finisher_ = detail::startThread(&DesyncCheckingCommunicator::runFinisher, state_);
  }

  /// Joins the threads: they only ever wait on inner Works, which end by their deadlines, so
  /// unlike a backend's queue nothing here can be stuck for longer than an operation's timeout.
  ~DesyncCheckingCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->stop = true;
    }
    state_->cv.notify_all();
    issuer_.join();
    finisher_.join();
  }

  int rank() const override { return state_->inner->rank(); }
  int size() const override { return state_->inner->size(); }
  std::string backendName() const override { return state_->inner->backendName(); }
  std::chrono::milliseconds defaultTimeout() const override { return state_->inner->defaultTimeout(); }
  std::vector<int> globalRanks() const override { return state_->inner->globalRanks(); }
  std::string groupName() const override { return state_->inner->groupName(); }

  /// The inner communicator splits once every operation queued here has run; the group is checked too.
  std::shared_ptr<Communicator> split(int color, int key, const std::string& name) override {
    barrier(CollectiveOptions{})->wait();
    auto group = state_->inner->split(color, key, name);
    return group ? withDesyncCheck(std::move(group), state_->options) : nullptr;
  }

  // Each collective hands collective() its argument check (which also builds the error context),
  // its fingerprint, and the call of the inner communicator followed by the call's tensor
  // arguments: made at once with the caller's own, or, when queued, later with copies of the
  // tensor handles (the same storage).
  WorkHandle allreduce(std::vector<at::Tensor>& tensors, ReduceOp op, const CollectiveOptions& options) override {
    return collective(
        [&] { return args_.allreduce(tensors, op); },
        [&](uint64_t k) { return fingerprint(k, Collective::allreduce(op), tensors); }, options,
        [op, options](Communicator& c, std::vector<at::Tensor>& t) { return c.allreduce(t, op, options); }, tensors);
  }

  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root, const CollectiveOptions& options) override {
    return collective(
        [&] { return args_.broadcast(tensors, root); },
        [&](uint64_t k) { return fingerprint(k, Collective::broadcast(root), tensors); }, options,
        [root, options](Communicator& c, std::vector<at::Tensor>& t) { return c.broadcast(t, root, options); },
        tensors);
  }

  WorkHandle allgather(const at::Tensor& input, at::Tensor& output, const CollectiveOptions& options) override {
    return gather(input, output, options);
  }

  WorkHandle allgather(const at::Tensor& input, std::vector<at::Tensor>& outputs,
                       const CollectiveOptions& options) override {
    return gather(input, outputs, options);
  }

  WorkHandle reduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op,
                           const CollectiveOptions& options) override {
    return collective([&] { return args_.reduceScatter(input, output, op); },
                      [&](uint64_t k) { return fingerprint(k, Collective::reduceScatter(op), {input}); }, options,
                      [op, options](Communicator& c, const at::Tensor& in, at::Tensor& out) {
                        return c.reduceScatter(in, out, op, options);
                      },
                      input, output);
  }

  WorkHandle barrier(const CollectiveOptions& options) override {
    return collective([&] { return args_.info("barrier", ""); },
                      [&](uint64_t k) { return fingerprint(k, Collective::barrier(), {}); }, options,
                      [options](Communicator& c) { return c.barrier(options); });
  }

  // Point to point: peers and sizes differ between ranks by design, so never checked, never queued
  // (the backends issue them without blocking later operations, so no order between ranks is at stake).
  WorkHandle send(const at::Tensor& tensor, int dst, int tag, const CollectiveOptions& options) override {
    if (state_->poisoned) return aborted(args_.send(tensor, dst, tag));  // arguments checked first, as backends do
    return state_->inner->send(tensor, dst, tag, options);
  }
  WorkHandle recv(at::Tensor& tensor, int src, int tag, const CollectiveOptions& options) override {
    if (state_->poisoned) return aborted(args_.recv(tensor, src, tag));
    return state_->inner->recv(tensor, src, tag, options);
  }

 private:
  using Issue = std::function<WorkHandle()>;
  enum class Phase { kQueued, kChecking, kIssued };
  struct Item {
    WorkHandle outer;                        ///< what the caller holds
    CommErrorInfo info;                      ///< the operation's error context; sequence = k
    std::optional<Fingerprint> fingerprint;  ///< set when k is checked
    Issue issue;                             ///< submits the real operation to the inner communicator
    CollectiveOptions options;
    WorkHandle inner;                           ///< the real operation, once issued
    std::shared_ptr<std::atomic<Phase>> phase;  ///< where it is, for the timeout's message
  };
  struct State {
    std::shared_ptr<Communicator> inner;
    DesyncCheckOptions options;
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<Item> queue;      // waiting to be issued (in submission order)
    std::deque<Item> finishing;  // issued, waiting for the inner operation
    bool stop = false;
    uint64_t lastChecked = 0;              // k of the last check that matched
    std::optional<CommErrorInfo> failure;  // first failure seen by this wrapper: poisons it
    // Written under the mutex; read without it by the submitting thread to pick the direct path.
    std::atomic<int> unissued{0};       // items queued or held by the issuer, not yet issued or failed
    std::atomic<bool> poisoned{false};  // failure has a value
  };

  static bool shouldCheck(const DesyncCheckOptions& o, uint64_t k) {
    if (o.mode == DesyncCheckMode::kAll) return true;
    return k <= static_cast<uint64_t>(o.first) || k % static_cast<uint64_t>(o.every) == 0;
  }

  static WorkHandle completedWork(const CommErrorInfo& info, std::exception_ptr error) {
    auto work = std::make_shared<Work>(fmt::format("{} #{}", info.op, info.sequence), Work::Clock::now(), nullptr);
    detail::completeWork(*work, std::move(error));
    return work;
  }

  /// The failed Work of operation `info`, submitted after the wrapper was poisoned.
  WorkHandle aborted(const CommErrorInfo& info) {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return completedWork(info, detail::abortedError(info, *state_->failure));
  }

  /// Records the first failure and fails every queued item. Caller holds the mutex.
  static void poisonLocked(State& state, const CommErrorInfo& info) {
    if (state.failure) return;
    state.failure = info;
    state.poisoned = true;
    for (auto& item : state.queue) detail::completeWork(*item.outer, detail::abortedError(item.info, info));
    state.unissued -= static_cast<int>(state.queue.size());
    state.queue.clear();
  }

  template <typename Output>
  WorkHandle gather(const at::Tensor& input, Output& output, const CollectiveOptions& options) {
    return collective(
        [&] { return args_.allgather(input, output); },
        [&](uint64_t k) { return fingerprint(k, Collective::allgather(), {input}); }, options,
        [options](Communicator& c, const at::Tensor& in, Output& out) { return c.allgather(in, out, options); }, input,
        output);
  }

  template <typename Validate, typename Print, typename Call, typename... Args>
  WorkHandle collective(Validate validate, Print print, const CollectiveOptions& options, Call call, Args&... args) {
    State& s = *state_;
    uint64_t k = collectives_ + 1;
    bool check = shouldCheck(s.options, k);
    if (!check && s.unissued == 0 && !s.poisoned) {
      // Nothing of this wrapper's waits to be issued, and only this thread adds any: straight to the
      // inner communicator, no lock. Counted only once the backend accepted it: an invalid call
      // throws there and, as in the backend, is not counted.
      WorkHandle work = call(*s.inner, args...);
      collectives_ = k;
      return work;
    }
    CommErrorInfo info = validate();  // kInvalidArgument throws here, at submission, nothing counted
    info.sequence = k;
    collectives_ = k;
    std::unique_lock<std::mutex> lock(s.mutex);
    if (s.failure) return completedWork(info, detail::abortedError(info, *s.failure));
    auto timeout =
        options.timeout.count() > 0 ? std::min(options.timeout, s.inner->defaultTimeout()) : s.inner->defaultTimeout();
    info.timeoutMs = timeout.count();
    std::weak_ptr<State> weak = state_;
    auto phase = std::make_shared<std::atomic<Phase>>(Phase::kQueued);
    auto onTimeout = [weak, info, phase]() -> std::exception_ptr {
      const char* where = "";
      switch (phase->load()) {
        case Phase::kQueued: where = "; it had not started: an earlier operation was still running"; break;
        case Phase::kChecking:
          where =
              "; it was still in the desync check before it (exchanging fingerprints): some rank has not "
              "reached this collective — it stopped, is slow, or called fewer collectives";
          break;
        case Phase::kIssued: break;
      }
      CommError timedOut = detail::timeoutError(info, where);
      if (auto state = weak.lock()) {
        std::lock_guard<std::mutex> l(state->mutex);
        poisonLocked(*state, timedOut.info());
      }
      return std::make_exception_ptr(timedOut);
    };
    Item item;
    item.outer =
        std::make_shared<Work>(fmt::format("{} #{}", info.op, k), Work::Clock::now() + timeout, std::move(onTimeout));
    item.info = std::move(info);
    if (check) item.fingerprint = print(k);
    item.issue = [c = s.inner, call, args...]() mutable { return call(*c, args...); };
    item.options = options;
    item.phase = phase;
    WorkHandle outer = item.outer;
    s.queue.push_back(std::move(item));
    ++s.unissued;
    lock.unlock();
    s.cv.notify_all();
    return outer;
  }

  /// Exchanges fingerprints for `item`; returns the error to fail it with, or null when every rank agrees.
  static std::exception_ptr exchange(State& s, const Item& item) {
    int world = s.inner->size();
    at::Tensor mine = at::empty({Fingerprint::kFields}, at::kLong);
    std::copy(item.fingerprint->f.begin(), item.fingerprint->f.end(), mine.data_ptr<int64_t>());
    at::Tensor all = at::empty({world * Fingerprint::kFields}, at::kLong);
    try {
      s.inner->allgather(mine, all, item.options)->wait();
    } catch (const std::exception& e) {
      // The inner communicator failed (and poisoned itself): report it as this collective's failure.
      CommErrorInfo info = item.info;
      const auto* comm = dynamic_cast<const CommError*>(&e);
      info.kind = comm ? comm->kind() : CommErrorKind::kBackend;
      if (comm && comm->info().peer >= 0) info.peer = comm->info().peer;
      info.timeoutMs = comm ? comm->info().timeoutMs : -1;
      info.detail = fmt::format("in the desync check before it (an allgather of {} B fingerprints{}): {}",
                                Fingerprint::kFields * 8,
                                comm ? fmt::format(", backend operation #{}", comm->info().sequence) : "",
                                comm ? comm->info().detail : std::string(e.what()));
      std::lock_guard<std::mutex> lock(s.mutex);
      poisonLocked(s, info);
      return std::make_exception_ptr(CommError(info));
    }
    std::vector<Fingerprint> prints(static_cast<size_t>(world));
    const int64_t* data = all.data_ptr<int64_t>();
    for (int r = 0; r < world; ++r) {
      std::copy(data + r * Fingerprint::kFields, data + (r + 1) * Fingerprint::kFields, prints[r].f.begin());
    }
    uint64_t k = item.info.sequence;
    std::string message = compareFingerprints(prints, k);
    std::lock_guard<std::mutex> lock(s.mutex);
    if (message.empty()) {
      s.lastChecked = k;
      return nullptr;
    }
    CommErrorInfo info = item.info;
    info.kind = CommErrorKind::kDesync;
    int me = s.inner->rank();
    info.peer = -1;
    for (int r = 0; r < world && info.peer < 0; ++r) {
      if (prints[r] != prints[me]) info.peer = r;
    }
    info.timeoutMs = -1;
    info.detail = message;
    if (s.options.mode == DesyncCheckMode::kSampled && k > s.lastChecked + 1) {
      info.detail += fmt::format(
          " (sampled check: {}they went apart in #{}..#{}; LOCKSTEP_DESYNC_CHECK=all finds "
          "the first collective that differs)",
          s.lastChecked > 0 ? fmt::format("the ranks agreed at #{}, so ", s.lastChecked) : "", s.lastChecked + 1, k);
    }
    info.detail += ". Every rank must call the same collectives in the same order with the same sizes";
    poisonLocked(s, info);
    return std::make_exception_ptr(CommError(info));
  }

  /// Submits `item` to the inner communicator; returns the error to fail it with. Caller holds the mutex.
  static std::exception_ptr issueLocked(State& s, Item& item) {
    try {
      item.inner = item.issue();
      item.phase->store(Phase::kIssued);
      return nullptr;
    } catch (const CommError& e) {
      if (e.kind() != CommErrorKind::kInvalidArgument) poisonLocked(s, e.info());
      return std::current_exception();
    } catch (const std::exception& e) {
      CommErrorInfo info = item.info;
      info.kind = CommErrorKind::kBackend;
      info.detail = e.what();
      poisonLocked(s, info);
      return std::make_exception_ptr(CommError(info));
    }
  }

  static void runIssuer(std::shared_ptr<State> state) {
    State& s = *state;
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(s.mutex);
        s.cv.wait(lock, [&] { return s.stop || !s.queue.empty(); });
        if (s.queue.empty()) return;  // stop requested and nothing left
        item = std::move(s.queue.front());
        s.queue.pop_front();  // still counted in unissued until issued or failed
      }
      std::exception_ptr error;
      if (item.fingerprint && !s.poisoned) {
        item.phase->store(Phase::kChecking);
        error = exchange(s, item);
      }
      std::lock_guard<std::mutex> lock(s.mutex);
      if (!error && s.failure) error = detail::abortedError(item.info, *s.failure);  // e.g. an earlier timeout
      if (!error) error = issueLocked(s, item);
      // Only after the issue: the direct path may go ahead of nothing that was submitted before it.
      --s.unissued;
      if (error) {
        detail::completeWork(*item.outer, error);
      } else {
        s.finishing.push_back(std::move(item));
      }
      s.cv.notify_all();
    }
  }

  static void runFinisher(std::shared_ptr<State> state) {
    State& s = *state;
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(s.mutex);
        s.cv.wait(lock, [&] { return (s.stop && s.unissued == 0) || !s.finishing.empty(); });
        if (s.finishing.empty()) return;
        item = std::move(s.finishing.front());
        s.finishing.pop_front();
      }
      // Collectives of one communicator complete in order, so waiting in order costs nothing.
      std::exception_ptr error;
      try {
        item.inner->wait();  // bounded by the inner operation's own deadline
      } catch (...) { error = std::current_exception(); }
      detail::completeWork(*item.outer, error);
    }
  }

  std::shared_ptr<State> state_;
  detail::CollectiveArgs args_;
  uint64_t collectives_ = 0;  // collectives counted so far (k of the last one); only the submitting thread uses it
  std::thread issuer_;
  std::thread finisher_;
};

}  // namespace

std::shared_ptr<Communicator> withDesyncCheck(std::shared_ptr<Communicator> inner, DesyncCheckOptions options) {
  LOCKSTEP_CHECK(inner != nullptr, "withDesyncCheck needs a communicator");
  if (options.mode == DesyncCheckMode::kSampled) {
    if (options.every < 1) {
      throw ConfigError(fmt::format("DesyncCheckOptions::every={} must be at least 1", options.every));
    }
    if (options.first < 0) {
      throw ConfigError(fmt::format("DesyncCheckOptions::first={} must not be negative", options.first));
    }
  }
  if (options.mode == DesyncCheckMode::kOff || inner->size() == 1) return inner;
  return std::make_shared<DesyncCheckingCommunicator>(std::move(inner), options);
}

}  // namespace lockstep
