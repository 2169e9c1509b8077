#include "lockstep/comm/stall_inspector.h"

#include <ATen/core/Tensor.h>

#include <fmt/format.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "comm/collective.h"
#include "comm/forwarding.h"
#include "common/byte_text.h"
#include "common/worker_thread.h"
#include "lockstep/common/logging.h"

namespace lockstep {
namespace {

using detail::bytesOf;
using detail::Collective;
using detail::formatBytes;
using detail::rankNumbers;

using SystemClock = std::chrono::system_clock;

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(SystemClock::now().time_since_epoch()).count();
}

/// What a rank publishes: "submitted waiting sinceMs submittedMs|op of waiting|op of last submitted".
struct Progress {
  uint64_t submitted = 0;  ///< operations submitted so far
  uint64_t waiting = 0;    ///< the oldest unfinished operation, 0 when none
  int64_t waitingSinceMs = 0;
  int64_t submittedAtMs = 0;  ///< when the last one was submitted
  std::string waitingOp;
  std::string lastOp;

  std::string encode() const {
    return fmt::format("{} {} {} {}|{}|{}", submitted, waiting, waitingSinceMs, submittedAtMs, waitingOp, lastOp);
  }
  static std::optional<Progress> decode(const std::string& text) {
    Progress p;
    auto bar1 = text.find('|');
    auto bar2 = bar1 == std::string::npos ? std::string::npos : text.find('|', bar1 + 1);
    if (bar2 == std::string::npos) return std::nullopt;
    std::istringstream head(text.substr(0, bar1));
    if (!(head >> p.submitted >> p.waiting >> p.waitingSinceMs >> p.submittedAtMs)) return std::nullopt;
    p.waitingOp = text.substr(bar1 + 1, bar2 - bar1 - 1);
    p.lastOp = text.substr(bar2 + 1);
    return p;
  }
};

class StallInspectingCommunicator final : public detail::ForwardingCommunicator {
 public:
  StallInspectingCommunicator(std::shared_ptr<Communicator> inner, Store store, StallInspectorOptions options)
      : ForwardingCommunicator(std::move(inner)), root_(store), store_(store.withPrefix("lockstep/stall")),
        options_(std::move(options)) {
    if (!options_.report) options_.report = [](const std::string& m) { log::warn(m); };
    thread_ = detail::startThread([this] { run(); });
  }

  ~StallInspectingCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  /// A group is inspected too, its ranks publishing under keys of their own.
  std::shared_ptr<Communicator> split(int color, int key, const std::string& name) override {
    const int index = splits_++;
    auto group = inner_->split(color, key, name);
    if (!group) return nullptr;
    return withStallInspector(std::move(group), root_.withPrefix(fmt::format("split{}-color{}", index, color)),
                              options_);
  }

  WorkHandle allreduce(std::vector<at::Tensor>& tensors, ReduceOp op, const CollectiveOptions& options) override {
    return track(Collective::allreduce(op), bytesOf(tensors), [&] { return inner_->allreduce(tensors, op, options); });
  }
  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root, const CollectiveOptions& options) override {
    return track(Collective::broadcast(root), bytesOf(tensors),
                 [&] { return inner_->broadcast(tensors, root, options); });
  }
  WorkHandle allgather(const at::Tensor& input, at::Tensor& output, const CollectiveOptions& options) override {
    return track(Collective::allgather(), bytesOf(input), [&] { return inner_->allgather(input, output, options); });
  }
  WorkHandle allgather(const at::Tensor& input, std::vector<at::Tensor>& outputs,
                       const CollectiveOptions& options) override {
    return track(Collective::allgather(), bytesOf(input), [&] { return inner_->allgather(input, outputs, options); });
  }
  WorkHandle reduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op,
                           const CollectiveOptions& options) override {
    return track(Collective::reduceScatter(op), bytesOf(input),
                 [&] { return inner_->reduceScatter(input, output, op, options); });
  }
  WorkHandle barrier(const CollectiveOptions& options) override {
    return track(Collective::barrier(), 0, [&] { return inner_->barrier(options); });
  }
  // Point-to-point operations are not collective: ranks legitimately differ, so they are not tracked.
  WorkHandle send(const at::Tensor& tensor, int dst, int tag, const CollectiveOptions& options) override {
    return inner_->send(tensor, dst, tag, options);
  }
  WorkHandle recv(at::Tensor& tensor, int src, int tag, const CollectiveOptions& options) override {
    return inner_->recv(tensor, src, tag, options);
  }

 private:
  /// What an operation is, kept unformatted: formatting happens once per check, not per collective.
  struct Label {
    Collective op;
    int64_t bytes = 0;
    std::string text() const { return bytes > 0 ? fmt::format("{} {}", op.name(), formatBytes(bytes)) : op.name(); }
  };
  struct Tracked {
    uint64_t sequence;
    Label label;
    int64_t submittedMs;
    WorkHandle work;
  };

  template <typename Submit>
  WorkHandle track(Collective op, int64_t bytes, Submit submit) {
    WorkHandle work = submit();  // invalid arguments throw here and are not counted
    std::lock_guard<std::mutex> lock(mutex_);
    ++submitted_;
    last_ = Label{op, bytes};
    lastSubmittedMs_ = nowMs();
    if (!work->isCompleted()) tracked_.push_back(Tracked{submitted_, last_, lastSubmittedMs_, work});
    return work;
  }

  Progress snapshot() {
    std::lock_guard<std::mutex> lock(mutex_);
    while (!tracked_.empty() && tracked_.front().work->isCompleted()) tracked_.pop_front();
    Progress p;
    p.submitted = submitted_;
    p.submittedAtMs = lastSubmittedMs_;
    p.lastOp = last_.text();
    if (!tracked_.empty()) {
      p.waiting = tracked_.front().sequence;
      p.waitingSinceMs = tracked_.front().submittedMs;
      p.waitingOp = tracked_.front().label.text();
    }
    return p;
  }

  void run() {
    std::string published;
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      cv_.wait_for(lock, options_.checkEvery, [this] { return stop_; });
      if (stop_) break;
      lock.unlock();
      try {
        std::string now = snapshot().encode();
        if (now != published) {
          store_.set(key(rank()), std::vector<uint8_t>(now.begin(), now.end()));
          published = now;
        }
        if (rank() == 0) inspect();
      } catch (const std::exception& e) {
        // The store is gone (rank 0 exited) or unreachable: nothing left to inspect.
        log::debug(fmt::format("stall inspector stops: {}", e.what()));
        lock.lock();
        break;
      }
      lock.lock();
    }
  }

  static std::string key(int rank) { return "rank" + std::to_string(rank); }

  void inspect() {
    int world = size();
    std::vector<std::optional<Progress>> all(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) {
      if (auto value = store_.tryGet(key(r))) all[r] = Progress::decode(std::string(value->begin(), value->end()));
    }
    int64_t now = nowMs();
    // The oldest operation some rank has waited in for too long.
    uint64_t stalled = 0;
    for (const auto& p : all) {
      if (p && p->waiting > 0 && now - p->waitingSinceMs >= options_.warnAfter.count() &&
          (stalled == 0 || p->waiting < stalled)) {
        stalled = p->waiting;
      }
    }
    if (stalled == 0) {
      lastReported_ = 0;
      return;
    }
    if (stalled == lastReported_ && now - lastReportMs_ < options_.warnAfter.count()) return;
    std::vector<int> waitingRanks;
    std::vector<int> missing;
    std::map<std::string, std::vector<int>> views;  // what the waiting ranks say operation #stalled is
    int64_t longest = 0;
    for (int r = 0; r < world; ++r) {
      const auto& p = all[r];
      if (!p || p->submitted < stalled) {
        missing.push_back(r);
      } else if (p->waiting == stalled) {
        waitingRanks.push_back(r);
        views[p->waitingOp].push_back(r);
        longest = std::max(longest, now - p->waitingSinceMs);
      }
    }
    std::string message;
    if (!missing.empty()) {
      message =
          fmt::format("stall: operation #{} has waited {:.0f} s on rank{} {}; rank{} {} ha{} not submitted it yet",
                      stalled, longest / 1000.0, waitingRanks.size() == 1 ? "" : "s", rankNumbers(waitingRanks),
                      missing.size() == 1 ? "" : "s", rankNumbers(missing), missing.size() == 1 ? "s" : "ve");
      for (int r : missing) {
        const auto& p = all[r];
        if (!p || p->submitted == 0) {
          message += fmt::format("; rank {} has submitted nothing", r);
        } else {
          message += fmt::format("; rank {} last submitted #{} {} {:.0f} s ago", r, p->submitted, p->lastOp,
                                 (now - p->submittedAtMs) / 1000.0);
        }
      }
    } else if (views.size() > 1) {
      message =
          fmt::format("stall: ranks disagree on operation #{} (a desync: different collectives or sizes):", stalled);
      for (const auto& [op, ranks] : views)
        message += fmt::format(" rank{} {}: {};", ranks.size() == 1 ? "" : "s", rankNumbers(ranks), op);
      message.pop_back();
    } else {
      message =
          fmt::format("stall: operation #{} {} has waited {:.0f} s on every rank that reported (ranks {})", stalled,
                      views.empty() ? "" : views.begin()->first, longest / 1000.0, rankNumbers(waitingRanks));
    }
    message += fmt::format(". Its timeout ({} s) will fail it.", inner_->defaultTimeout().count() / 1000);
    options_.report(message);
    lastReported_ = stalled;
    lastReportMs_ = now;
  }

  Store root_;   // as given: a group's inspector publishes below it
  Store store_;  // this communicator's progress keys
  StallInspectorOptions options_;
  int splits_ = 0;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  uint64_t submitted_ = 0;
  int64_t lastSubmittedMs_ = 0;
  Label last_;
  std::deque<Tracked> tracked_;
  uint64_t lastReported_ = 0;
  int64_t lastReportMs_ = 0;
  std::thread thread_;
};

}  // namespace

std::shared_ptr<Communicator> withStallInspector(std::shared_ptr<Communicator> inner, Store store,
                                                 StallInspectorOptions options) {
  return std::make_shared<StallInspectingCommunicator>(std::move(inner), std::move(store), std::move(options));
}

}  // namespace lockstep
