// mpi_communicator.cpp — the Communicator over OpenMPI.
//
// Why it looks different from the Gloo backend: MPI moves data only while some
// thread is inside an MPI call, and OpenMPI's shared-memory path between local
// ranks answers in microseconds, so a hop through a queue thread (tens of µs
// to wake) would cost more than the transfer. Operations are therefore issued
// as non-blocking MPI calls (MPI_Iallreduce, ...) on the caller's thread, in
// submission order, and then driven to completion by whoever gets there first:
//   - the thread in Work::wait(), which polls MPI_Test until its work is done;
//   - a background progress thread that polls every progressIntervalUs while
//     operations are outstanding, so gradient buckets launched during backward
//     move while the caller computes.
// Every MPI call holds one process-wide mutex (MPI_THREAD_SERIALIZED).
//
// Types: float16 and bfloat16 reduce with user-defined MPI operations (the
// arithmetic in float32, one rounding per pairwise step); AVG is SUM followed by
// a division; lists are fused into one buffer per dtype. MPI has no timeouts:
// a Work past its deadline fails with kTimeout and poisons the communicator
// (MPI cannot cancel a collective); the process then must exit, and mpirun
// stops the others.
// The C API only (mpi_runtime.h): OpenMPI's deprecated C++ bindings would need libmpi_cxx.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "comm/collective_args.h"
#include "comm/failure.h"
#include "comm/mpi_engine.h"
#include "comm/mpi_runtime.h"
#include "comm/split_plan.h"
#include "comm/work_access.h"
#include "common/worker_thread.h"
#include "lockstep/comm/communicator.h"
#include "lockstep/common/env.h"
#include "lockstep/common/error.h"

namespace lockstep {

bool mpiBackendBuilt() { return true; }

namespace {

using detail::describe;
using detail::mpiErrorText;
using detail::MpiRuntime;
using detail::mpiType;
using Clock = std::chrono::steady_clock;

// ---- the communicator -------------------------------------------------------

using detail::Engine;
using detail::Pending;

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(std::shared_ptr<Engine> engine, int rank, int world, const MpiOptions& options,
                  std::string group = "", std::vector<int> globalRanks = {})
      : engine_(std::move(engine)), rank_(rank), world_(world), timeout_(options.timeout),
        blockingBytes_(options.blockingBytes), args_(rank, world, "mpi"), options_(options), group_(std::move(group)),
        globalRanks_(std::move(globalRanks)) {
    if (globalRanks_.empty()) globalRanks_ = Communicator::globalRanks();
    args_.setGroup(group_, globalRanks_);
    commThread_ = detail::startThread([engine = engine_] { engine->runQueue(); });
    if (options.progressIntervalUs > 0) {
      progress_ = detail::startThread(&MpiCommunicator::runProgress, engine_, options.progressIntervalUs);
    }
  }

  ~MpiCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(engine_->wakeMutex);
      engine_->stop = true;
    }
    engine_->wake.notify_all();
    if (progress_.joinable()) progress_.join();
    {
      std::lock_guard<std::mutex> lock(engine_->queueMutex);
      engine_->queueStop = true;
    }
    engine_->queueCv.notify_all();
    // A thread stuck in a blocking call of a failed communicator is left to the process exit.
    if (engine_->failure)
      commThread_.detach();
    else
      commThread_.join();
    auto& runtime = MpiRuntime::get();
    std::lock_guard<std::mutex> lock(runtime.mutex());
    // A failed communicator may hold requests that never finish; leave it to the process exit.
    if (!engine_->failure && !runtime.finalized()) MPI_Comm_free(&engine_->comm);
  }

  int rank() const override { return rank_; }
  int size() const override { return world_; }
  std::string backendName() const override { return "mpi"; }
  std::vector<int> globalRanks() const override { return globalRanks_; }
  std::string groupName() const override { return group_; }

  std::shared_ptr<Communicator> split(int color, int key, const std::string& name) override {
    barrier(CollectiveOptions{})->wait();  // every earlier operation here has finished, on every rank
    auto engine = std::make_shared<Engine>();
    std::vector<int> global;
    {
      std::lock_guard<std::mutex> lock(MpiRuntime::get().mutex());
      int rc = detail::splitCommunicator(engine_->comm, color, key, globalRanks_[static_cast<size_t>(rank_)],
                                         &engine->comm, &global);
      if (rc != MPI_SUCCESS) {
        CommErrorInfo info = args_.info("split", "");
        info.detail = "MPI_Comm_split: " + mpiErrorText(rc);
        throw CommError(info);
      }
    }
    if (color < 0) return nullptr;
    int rank = static_cast<int>(std::find(global.begin(), global.end(), globalRanks_[rank_]) - global.begin());
    return std::make_shared<MpiCommunicator>(std::move(engine), rank, static_cast<int>(global.size()), options_,
                                             detail::groupName(name, color), std::move(global));
  }
  std::chrono::milliseconds defaultTimeout() const override { return timeout_; }

  WorkHandle allreduce(std::vector<at::Tensor>& tensors, ReduceOp op, const CollectiveOptions& options) override {
    CommErrorInfo info = args_.allreduce(tensors, op);
    // One buffer per dtype: a single tensor is reduced in place, a list is fused.
    auto groups = detail::groupByDtype(tensors);
    std::vector<std::pair<at::Tensor, std::vector<at::Tensor>>> buffers;
    for (auto& [dtype, group] : groups) {
      at::Tensor buffer = group.size() == 1 ? group[0].view({-1}) : detail::flatten(group);
      checkCount(buffer.numel(), info);
      buffers.emplace_back(buffer, std::move(group));
    }
    int world = world_;
    auto finish = [buffers, op, world]() mutable {
      for (auto& [buffer, group] : buffers) {
        if (op == ReduceOp::kAvg) buffer.div_(world);
        if (group.size() > 1) detail::unflatten(buffer, group);
      }
    };
    std::vector<at::Tensor> keep;
    int64_t bytes = 0;
    for (const auto& b : buffers) {
      keep.push_back(b.first);
      bytes += b.first.numel() * static_cast<int64_t>(b.first.element_size());
    }
    std::function<int()> blocking;
    if (blockingBytes_ >= 0 && bytes >= blockingBytes_ && !buffers.empty()) {
      blocking = [this, buffers, op]() {
        for (const auto& [buffer, group] : buffers) {
          int rc = MPI_Allreduce(MPI_IN_PLACE, buffer.data_ptr(), static_cast<int>(buffer.numel()),
                                 mpiType(buffer.scalar_type()), MpiRuntime::get().op(buffer.scalar_type(), op),
                                 engine_->comm);
          if (rc != MPI_SUCCESS) return rc;
        }
        return MPI_SUCCESS;
      };
    }
    return start(
        std::move(info), options, std::move(keep),
        [this, buffers, op](std::vector<MPI_Request>& requests) {
          for (const auto& [buffer, group] : buffers) {
            MPI_Request r;
            int rc = MPI_Iallreduce(MPI_IN_PLACE, buffer.data_ptr(), static_cast<int>(buffer.numel()),
                                    mpiType(buffer.scalar_type()), MpiRuntime::get().op(buffer.scalar_type(), op),
                                    engine_->comm, &r);
            if (rc != MPI_SUCCESS) return rc;
            requests.push_back(r);
          }
          return MPI_SUCCESS;
        },
        std::move(finish), std::move(blocking));
  }

  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root, const CollectiveOptions& options) override {
    CommErrorInfo info = args_.broadcast(tensors, root);
    // Every dtype travels as bytes, so a list is one message whatever it mixes.
    std::vector<at::Tensor> parts;
    for (const auto& t : tensors) {
      if (t.numel() > 0) parts.push_back(asBytes(t));
    }
    if (parts.empty()) return start(std::move(info), options, {}, nullptr, nullptr);
    at::Tensor buffer = parts.size() == 1
                            ? parts[0]
                            : (rank_ == root ? detail::flatten(parts) : at::empty({totalNumel(parts)}, at::kByte));
    checkCount(buffer.numel(), info);
    std::function<void()> finish;
    if (parts.size() > 1 && rank_ != root) finish = [buffer, parts]() mutable { detail::unflatten(buffer, parts); };
    return start(
        std::move(info), options, {buffer},
        [this, buffer, root](std::vector<MPI_Request>& requests) {
          MPI_Request r;
          int rc = MPI_Ibcast(buffer.data_ptr(), static_cast<int>(buffer.numel()), MPI_BYTE, root, engine_->comm, &r);
          if (rc == MPI_SUCCESS) requests.push_back(r);
          return rc;
        },
        std::move(finish));
  }

  WorkHandle allgather(const at::Tensor& input, at::Tensor& output, const CollectiveOptions& options) override {
    CommErrorInfo info = args_.allgather(input, output);
    return gatherInto(std::move(info), options, input, output, nullptr);
  }

  WorkHandle allgather(const at::Tensor& input, std::vector<at::Tensor>& outputs,
                       const CollectiveOptions& options) override {
    CommErrorInfo info = args_.allgather(input, outputs);
    at::Tensor gathered = at::empty({world_ * input.numel()}, input.options());
    int64_t n = input.numel();
    auto finish = [gathered, outputs, n]() mutable {
      for (size_t r = 0; r < outputs.size(); ++r) {
        outputs[r].view({-1}).copy_(gathered.narrow(0, static_cast<int64_t>(r) * n, n));
      }
    };
    return gatherInto(std::move(info), options, input, gathered, std::move(finish));
  }

  WorkHandle reduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op,
                           const CollectiveOptions& options) override {
    CommErrorInfo info = args_.reduceScatter(input, output, op);
    if (output.numel() == 0) return start(std::move(info), options, {}, nullptr, nullptr);
    checkCount(input.numel(), info);
    int world = world_;
    std::function<void()> finish;
    if (op == ReduceOp::kAvg) finish = [output, world]() mutable { output.div_(world); };
    return start(
        std::move(info), options, {input, output},
        [this, input, output, op](std::vector<MPI_Request>& requests) {
          MPI_Request r;
          int rc = MPI_Ireduce_scatter_block(input.data_ptr(), output.data_ptr(), static_cast<int>(output.numel()),
                                             mpiType(input.scalar_type()),
                                             MpiRuntime::get().op(input.scalar_type(), op), engine_->comm, &r);
          if (rc == MPI_SUCCESS) requests.push_back(r);
          return rc;
        },
        std::move(finish));
  }

  WorkHandle barrier(const CollectiveOptions& options) override {
    return start(
        args_.barrier(), options, {},
        [this](std::vector<MPI_Request>& requests) {
          MPI_Request r;
          int rc = MPI_Ibarrier(engine_->comm, &r);
          if (rc == MPI_SUCCESS) requests.push_back(r);
          return rc;
        },
        nullptr);
  }

  WorkHandle send(const at::Tensor& tensor, int dst, int tag, const CollectiveOptions& options) override {
    return pointToPoint(args_.send(tensor, dst, tag), tensor, dst, tag, options, &isendBytes);
  }

  WorkHandle recv(at::Tensor& tensor, int src, int tag, const CollectiveOptions& options) override {
    return pointToPoint(args_.recv(tensor, src, tag), tensor, src, tag, options, &irecvBytes);
  }

 private:
  using Issue = std::function<int(std::vector<MPI_Request>&)>;
  using PeerCall = int (*)(void* data, int count, int peer, int tag, MPI_Comm comm, MPI_Request* request);

  static int isendBytes(void* data, int count, int peer, int tag, MPI_Comm comm, MPI_Request* request) {
    return MPI_Isend(data, count, MPI_BYTE, peer, tag, comm, request);
  }
  static int irecvBytes(void* data, int count, int peer, int tag, MPI_Comm comm, MPI_Request* request) {
    return MPI_Irecv(data, count, MPI_BYTE, peer, tag, comm, request);
  }

  /// A send or receive of `tensor`'s bytes with `peer`; `call` is MPI_Isend or MPI_Irecv over bytes.
  WorkHandle pointToPoint(CommErrorInfo info, const at::Tensor& tensor, int peer, int tag,
                          const CollectiveOptions& options, PeerCall call) {
    checkTag(tag, info);
    if (tensor.numel() == 0) return start(std::move(info), options, {}, nullptr, nullptr);
    at::Tensor bytes = asBytes(tensor);
    checkCount(bytes.numel(), info);
    return start(
        std::move(info), options, {bytes},
        [this, bytes, peer, tag, call](std::vector<MPI_Request>& requests) {
          MPI_Request r;
          int rc = call(bytes.data_ptr(), static_cast<int>(bytes.numel()), peer, tag, engine_->comm, &r);
          if (rc == MPI_SUCCESS) requests.push_back(r);
          return rc;
        },
        nullptr);
  }

  static at::Tensor asBytes(const at::Tensor& t) {
    return at::from_blob(
        t.data_ptr(), {t.numel() * static_cast<int64_t>(t.element_size())}, [keep = t](void*) {},
        at::TensorOptions().dtype(at::kByte));
  }

  static int64_t totalNumel(const std::vector<at::Tensor>& ts) {
    int64_t n = 0;
    for (const auto& t : ts) n += t.numel();
    return n;
  }

  void checkCount(int64_t count, const CommErrorInfo& info) const {
    if (count > INT_MAX) {
      args_.invalid(
          info, fmt::format("{} elements in one message exceed MPI's limit of {}; split the tensor", count, INT_MAX));
    }
  }

  void checkTag(int tag, const CommErrorInfo& info) const {
    if (tag < 0 || tag > 32767)
      args_.invalid(info, fmt::format("tag {} must be in 0..32767 (MPI's guaranteed range)", tag));
  }

  WorkHandle gatherInto(CommErrorInfo info, const CollectiveOptions& options, const at::Tensor& input,
                        const at::Tensor& output, std::function<void()> finish) {
    if (input.numel() == 0) return start(std::move(info), options, {}, nullptr, nullptr);
    at::Tensor in = asBytes(input);
    at::Tensor out = asBytes(output);
    checkCount(out.numel(), info);
    return start(
        std::move(info), options, {in, out},
        [this, in, out](std::vector<MPI_Request>& requests) {
          MPI_Request r;
          // MPI forbids a send buffer inside the receive buffer; this rank's own chunk is MPI_IN_PLACE.
          const bool inPlace = in.data_ptr() == static_cast<char*>(out.data_ptr()) + rank_ * in.numel();
          int rc = MPI_Iallgather(inPlace ? MPI_IN_PLACE : in.data_ptr(), static_cast<int>(in.numel()), MPI_BYTE,
                                  out.data_ptr(), static_cast<int>(in.numel()), MPI_BYTE, engine_->comm, &r);
          if (rc == MPI_SUCCESS) requests.push_back(r);
          return rc;
        },
        std::move(finish));
  }

  /// Numbers the operation, issues it (non-blocking MPI calls) and registers it
  /// as outstanding. `issue` may be null for an operation with nothing to move.
  WorkHandle start(CommErrorInfo info, const CollectiveOptions& options, std::vector<at::Tensor> buffers, Issue issue,
                   std::function<void()> finish, std::function<int()> blocking = nullptr) {
    auto timeout = options.timeout.count() > 0 ? std::min(options.timeout, timeout_) : timeout_;
    info.sequence = nextSequence_++;
    info.timeoutMs = timeout.count();
    std::weak_ptr<Engine> weak = engine_;
    auto onTimeout = [weak, info]() -> std::exception_ptr {
      CommError timedOut = detail::timeoutError(info, " (MPI cannot cancel it: this process should exit)");
      auto error = std::make_exception_ptr(timedOut);
      if (auto engine = weak.lock()) {
        std::lock_guard<std::mutex> lock(MpiRuntime::get().mutex());
        engine->poisonLocked(timedOut.info(), error);
      }
      return error;
    };
    auto poll = [weak]() {
      if (auto engine = weak.lock()) engine->poll();
    };
    auto work = std::make_shared<Work>(fmt::format("{} #{}", info.op, info.sequence), Clock::now() + timeout,
                                       std::move(onTimeout), std::move(poll));
    auto pending = std::make_shared<Pending>();
    pending->work = work;
    pending->info = info;
    pending->finish = std::move(finish);
    pending->buffers = std::move(buffers);
    if (issue || blocking) {
      // Behind a blocking call, or one itself: the communication thread issues it, in order.
      std::lock_guard<std::mutex> qlock(engine_->queueMutex);
      if (blocking || engine_->commBusy || !engine_->queued.empty()) {
        engine_->queued.push_back(Engine::Queued{pending, blocking ? nullptr : std::move(issue), std::move(blocking)});
        engine_->commBusy = true;
        engine_->queueCv.notify_one();
        wakeProgress();
        return work;
      }
    }
    {
      std::lock_guard<std::mutex> lock(MpiRuntime::get().mutex());
      if (engine_->failure) {
        detail::completeWork(*work, engine_->abortedError(info));
        return work;
      }
      if (issue) {
        int rc = issue(pending->requests);
        if (rc != MPI_SUCCESS) {
          info.kind = CommErrorKind::kBackend;
          info.detail = mpiErrorText(rc);
          auto error = std::make_exception_ptr(CommError(info));
          engine_->poisonLocked(info, error);
          detail::completeWork(*work, error);
          return work;
        }
      }
      if (pending->requests.empty()) {
        detail::completeWork(*work, nullptr);
        return work;
      }
      engine_->pending.push_back(pending);
    }
    wakeProgress();
    return work;
  }

  void wakeProgress() {
    {
      std::lock_guard<std::mutex> lock(engine_->wakeMutex);  // orders this after the thread's last check
      engine_->submitted.fetch_add(1);
    }
    engine_->wake.notify_one();
  }

  static void runProgress(std::shared_ptr<Engine> engine, int intervalUs) {
    c10::GradMode::set_enabled(false);
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(engine->wakeMutex);
        engine->wake.wait(lock, [&] { return engine->stop || engine->submitted.load() != seen; });
        if (engine->stop) return;
      }
      seen = engine->submitted.load();
      // Drive what is outstanding until nothing is; new submissions wake us again.
      while (engine->poll()) {
        std::this_thread::sleep_for(std::chrono::microseconds(intervalUs));
        std::lock_guard<std::mutex> lock(engine->wakeMutex);
        if (engine->stop) return;
      }
    }
  }

  std::shared_ptr<Engine> engine_;
  int rank_;
  int world_;
  std::chrono::milliseconds timeout_;
  int64_t blockingBytes_;
  detail::CollectiveArgs args_;
  MpiOptions options_;
  std::string group_;
  std::vector<int> globalRanks_;
  uint64_t nextSequence_ = 1;
  std::thread commThread_;
  std::thread progress_;
};

}  // namespace

std::shared_ptr<Communicator> makeMpiCommunicator(const MpiOptions& input) {
  MpiOptions options = input;
  LOCKSTEP_CHECK(options.timeout.count() > 0, "the communicator timeout must be positive");
  auto env = Environment::fromProcess();
  if (auto us = env.getInt("LOCKSTEP_MPI_PROGRESS_US", 0, 1000000)) options.progressIntervalUs = static_cast<int>(*us);
  if (auto b = env.getInt("LOCKSTEP_MPI_BLOCKING_BYTES", -1, int64_t(1) << 40)) options.blockingBytes = *b;
  detail::ignoreBrokenPipeSignal();  // a dead peer: an error naming it, not a SIGPIPE
  auto engine = std::make_shared<Engine>();
  int rank = 0;
  int world = 1;
  {
    auto& runtime = MpiRuntime::get();
    std::lock_guard<std::mutex> lock(runtime.mutex());
    if (runtime.finalized()) throw Error("MPI was already finalised in this process");
    runtime.ensureInitializedLocked();
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &engine->comm);
    if (rc != MPI_SUCCESS) throw Error("MPI_Comm_dup(MPI_COMM_WORLD) failed: " + mpiErrorText(rc));
    MPI_Comm_set_errhandler(engine->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(engine->comm, &rank);
    MPI_Comm_size(engine->comm, &world);
  }
  return std::make_shared<MpiCommunicator>(std::move(engine), rank, world, options);
}

}  // namespace lockstep
