// gloo_communicator.cpp — the Communicator over LibTorch's c10d ProcessGroupGloo.
//
// The reduce-scatter, the small floating-point allreduces and AVG are
// lockstep's own, over c10d's point-to-point messages, so that every rank adds
// the same values in the same (rank) order and chunks are paced by placement:
// the reduce-scatter sends every rank its block in chunks (Pacing) and reduces each
// chunk in rank order as it arrives (each rank sends (n-1)/n of the buffer, as
// a ring reduce-scatter does); small floating-point allreduces reduce in the
// same order (reduceBuffer says which go where); AVG is SUM then a division;
// bfloat16 travels as its raw 16-bit pattern (viewed as float16) and is added
// in float32.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <fmt/format.h>

#include <cstdlib>
#include <limits>
#include <map>

#include "comm/collective_args.h"
#include "comm/failure.h"
#include "comm/op_queue.h"
#include "comm/split_plan.h"
#include "comm/store/store_impl.h"
#include "lockstep/comm/communicator.h"
#include "lockstep/common/error.h"

namespace lockstep {

namespace {

/// Floating-point allreduces up to this size go as one all-gather of the whole buffers and a local
/// reduction in rank order (one round of messages).
constexpr int64_t kWholeBufferBytes = int64_t(64) << 10;
/// Chunks of a reduce-scatter received ahead of the one being reduced.
constexpr int64_t kChunksInFlight = 4;

/// How lockstep's own reduce-scatter and all-gather put their chunks on the wire. Between ranks of
/// one host (loopback) everything is posted at once, in 1 MiB chunks, which beats c10d's ring for
/// large buffers (docs/communicator.md). Across hosts, chunk c (128 KiB) goes to a peer only once chunk
/// c - 1 has come from every peer: all at once filled a slow link's queue in both directions and
/// ran at about half its rate (docs/communicator.md, "Pacing").
struct Pacing {
  int64_t chunkBytes;
  int64_t window;  ///< chunks sent ahead of the ones received
  bool oneHost;
};
constexpr Pacing kLoopbackPacing{int64_t(1) << 20, std::numeric_limits<int64_t>::max() / 2, true};
constexpr Pacing kNetworkPacing{int64_t(128) << 10, 1, false};

/// The tags of lockstep's own point-to-point messages (the all-gather's, the reduce-scatter's);
/// send() and recv() refuse tags from kAllgatherTag on, so a program's messages cannot be taken for them.
constexpr int kAllgatherTag = 1 << 30;
constexpr int kReduceScatterTag = kAllgatherTag + 1;

CommErrorKind classifyBackendMessage(const std::string& m) {
  auto has = [&](const char* s) { return m.find(s) != std::string::npos; };
  if (has("Timed out") || has("timed out") || has("Timeout") || has("timeout")) { return CommErrorKind::kTimeout; }
  if (has("Connection closed") || has("Connection reset") || has("Broken pipe") || has("Connection refused") ||
      has("closed by peer") || has("ECONNRESET") || has("EPIPE")) {
    return CommErrorKind::kPeerFailure;
  }
  return CommErrorKind::kBackend;
}

using detail::backendMessage;
using detail::describe;
using detail::flatten;
using detail::groupByDtype;
using detail::unflatten;

using c10d::ProcessGroupGloo;
using PG = c10::intrusive_ptr<ProcessGroupGloo>;

/// bfloat16 is moved as its bit pattern and added in float32 by lockstep's own reductions.
at::Tensor wireView(const at::Tensor& t) { return t.scalar_type() == at::kBFloat16 ? t.view(at::kHalf) : t; }

c10d::ReduceOp toC10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return c10d::ReduceOp::SUM;
    case ReduceOp::kMax: return c10d::ReduceOp::MAX;
    case ReduceOp::kMin: return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

/// Waits for a c10d work and converts its failure into CommError.
void waitBackend(const c10::intrusive_ptr<c10d::Work>& work, CommErrorInfo info) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    info.detail = backendMessage(e);
    info.kind = classifyBackendMessage(info.detail);
    throw CommError(info);
  }
}

/// What a communicator needs to build groups: where its ranks meet, how they connect, who they are.
struct GlooGroupContext {
  Store store;
  c10::intrusive_ptr<ProcessGroupGloo::Options> options;
  std::string prefix;  // of this communicator's keys in the store; a group's lie below
  std::string name;    // empty for the world
  std::vector<int> globalRanks;
  Pacing pacing;  // the world's: a group's ranks are on one host when the world's are
};

PG connect(const Store& store, const std::string& prefix, int rank, int world,
           const c10::intrusive_ptr<ProcessGroupGloo::Options>& options, CommErrorInfo info);

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(PG pg, int rank, int world, std::chrono::milliseconds timeout, GlooGroupContext context)
      : pg_(std::move(pg)), rank_(rank), world_(world), timeout_(timeout), args_(rank, world, "gloo"),
        queue_(rank, world), context_(std::move(context)) {
    args_.setGroup(context_.name, context_.globalRanks);
  }

  std::vector<int> globalRanks() const override { return context_.globalRanks; }
  std::string groupName() const override { return context_.name; }

  std::shared_ptr<Communicator> split(int color, int key, const std::string& name) override {
    detail::SplitPlan plan = detail::planSplit(*this, color, key);
    const int index = splits_++;
    if (color < 0) return nullptr;
    GlooGroupContext child{context_.store,
                           context_.options,
                           fmt::format("{}/split{}/color{}", context_.prefix, index, color),
                           detail::groupName(name, color),
                           {},
                           context_.pacing};
    for (int member : plan.members) child.globalRanks.push_back(context_.globalRanks[static_cast<size_t>(member)]);
    const int size = static_cast<int>(plan.members.size());
    CommErrorInfo info;
    info.op = "connect group (gloo)";
    info.rank = plan.rank;
    info.worldSize = size;
    info.timeoutMs = timeout_.count();
    info.group = child.name;
    info.globalRanks = child.globalRanks;
    PG pg = connect(context_.store, child.prefix, plan.rank, size, context_.options, info);
    return std::make_shared<GlooCommunicator>(std::move(pg), plan.rank, size, timeout_, std::move(child));
  }

  int rank() const override { return rank_; }
  int size() const override { return world_; }
  std::string backendName() const override { return "gloo"; }
  std::chrono::milliseconds defaultTimeout() const override { return timeout_; }

  WorkHandle allreduce(std::vector<at::Tensor>& tensors, ReduceOp op, const CollectiveOptions& options) override {
    CommErrorInfo info = args_.allreduce(tensors, op);
    auto tensorsCopy = tensors;
    return submit(info, options, [pg = pg_, tensorsCopy, op, info, world = world_, pacing = context_.pacing]() mutable {
      // Fuse per dtype: one message per dtype, whatever the number of tensors.
      for (auto& [dtype, group] : groupByDtype(tensorsCopy)) {
        at::Tensor buffer = group.size() == 1 ? group[0].view({-1}) : flatten(group);
        reduceBuffer(pg, buffer, op, world, pacing, info);
        if (group.size() > 1) unflatten(buffer, group);
      }
    });
  }

  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root, const CollectiveOptions& options) override {
    CommErrorInfo info = args_.broadcast(tensors, root);
    auto tensorsCopy = tensors;
    return submit(info, options, [pg = pg_, tensorsCopy, root, info, rank = rank_]() mutable {
      for (auto& [dtype, group] : groupByDtype(tensorsCopy)) {
        at::Tensor buffer = group.size() == 1 ? group[0].view({-1}) : flatten(group);
        std::vector<at::Tensor> wire{wireView(buffer)};
        c10d::BroadcastOptions bo;
        bo.rootRank = root;
        waitBackend(pg->broadcast(wire, bo), info);
        if (group.size() > 1 && rank != root) unflatten(buffer, group);
      }
    });
  }

  WorkHandle allgather(const at::Tensor& input, at::Tensor& output, const CollectiveOptions& options) override {
    CommErrorInfo info = args_.allgather(input, output);
    std::vector<at::Tensor> outputs;
    auto flat = output.view({-1});
    for (int r = 0; r < world_; ++r) outputs.push_back(flat.narrow(0, r * input.numel(), input.numel()));
    return submitAllgather(input, outputs, info, options);
  }

  WorkHandle allgather(const at::Tensor& input, std::vector<at::Tensor>& outputs,
                       const CollectiveOptions& options) override {
    CommErrorInfo info = args_.allgather(input, outputs);
    std::vector<at::Tensor> flatOutputs;
    for (const auto& o : outputs) flatOutputs.push_back(o.view({-1}));
    return submitAllgather(input, flatOutputs, info, options);
  }

  WorkHandle reduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op,
                           const CollectiveOptions& options) override {
    CommErrorInfo info = args_.reduceScatter(input, output, op);
    return submit(info, options,
                  [pg = pg_, input, output, op, info, world = world_, pacing = context_.pacing]() mutable {
                    if (output.numel() == 0) return;
                    auto out = output.view({-1});
                    reduceScatterInto(pg, input.view({-1}), evenBounds(input.numel(), world), out, op, pacing, info);
                  });
  }

  WorkHandle barrier(const CollectiveOptions& options) override {
    CommErrorInfo info = args_.barrier();
    return submit(info, options, [pg = pg_, info]() { waitBackend(pg->barrier(), info); });
  }

  WorkHandle send(const at::Tensor& tensor, int dst, int tag, const CollectiveOptions& options) override {
    CommErrorInfo info = args_.send(tensor, dst, tag);
    refuseOwnTag(tag, info);
    return submitIssued(info, options, [pg = pg_, tensor, dst, tag, info]() -> std::function<void()> {
      if (tensor.numel() == 0) return {};
      std::vector<at::Tensor> wire{wireView(tensor).view({-1})};
      auto work = pg->send(wire, dst, tag);
      return [work, info] { waitBackend(work, info); };
    });
  }

  WorkHandle recv(at::Tensor& tensor, int src, int tag, const CollectiveOptions& options) override {
    CommErrorInfo info = args_.recv(tensor, src, tag);
    refuseOwnTag(tag, info);
    return submitIssued(info, options, [pg = pg_, tensor, src, tag, info]() -> std::function<void()> {
      if (tensor.numel() == 0) return {};
      std::vector<at::Tensor> wire{wireView(tensor).view({-1})};
      auto work = pg->recv(wire, src, tag);
      return [work, info] { waitBackend(work, info); };
    });
  }

 private:
  void refuseOwnTag(int tag, const CommErrorInfo& info) const {
    if (tag >= kAllgatherTag)
      args_.invalid(info, fmt::format("tag {} must be below {} (lockstep's own)", tag, kAllgatherTag));
  }

  WorkHandle submit(CommErrorInfo info, const CollectiveOptions& options, std::function<void()> body) {
    auto timeout = options.timeout.count() > 0 ? std::min(options.timeout, timeout_) : timeout_;
    return queue_.submit(std::move(info), timeout, std::move(body));
  }

  WorkHandle submitIssued(CommErrorInfo info, const CollectiveOptions& options, detail::OpQueue::Body body) {
    auto timeout = options.timeout.count() > 0 ? std::min(options.timeout, timeout_) : timeout_;
    return queue_.submitIssued(std::move(info), timeout, std::move(body));
  }

  WorkHandle submitAllgather(const at::Tensor& input, std::vector<at::Tensor> outputs, const CommErrorInfo& info,
                             const CollectiveOptions& options) {
    return submit(info, options, [pg = pg_, input, outputs, info, pacing = context_.pacing]() mutable {
      if (input.numel() > 0) allgatherInto(pg, input.view({-1}), outputs, pacing, info);
    });
  }

  /// outputs[r] = rank r's `in`, each part straight into its place by point-to-point messages in
  /// chunks sent as `pacing` says (no staging buffer, no copy but this rank's own part, none when
  /// `in` is it; c10d's Gloo all-gather receives into a flat buffer of all the outputs and copies
  /// them out).
  static void allgatherInto(const PG& pg, const at::Tensor& in, std::vector<at::Tensor>& outputs, const Pacing& pacing,
                            const CommErrorInfo& info) {
    const int rank = pg->getRank();
    const int world = static_cast<int>(outputs.size());
    at::Tensor& mine = outputs[static_cast<size_t>(rank)];
    if (mine.data_ptr() != in.data_ptr()) mine.copy_(in);
    const int64_t chunk = std::max<int64_t>(1, pacing.chunkBytes / static_cast<int64_t>(in.element_size()));
    const auto chunksOf = [&](int64_t n) { return (n + chunk - 1) / chunk; };
    const auto piece = [&](const at::Tensor& t, int64_t c) {
      return wireView(t.narrow(0, c * chunk, std::min(chunk, t.numel() - c * chunk)));
    };
    int64_t mostChunks = 0;
    for (const auto& out : outputs) mostChunks = std::max(mostChunks, chunksOf(out.numel()));
    std::vector<std::vector<c10::intrusive_ptr<c10d::Work>>> arrivals(static_cast<size_t>(mostChunks));
    for (int64_t c = 0; c < mostChunks; ++c) {
      for (int r = 0; r < world; ++r) {
        const at::Tensor& out = outputs[static_cast<size_t>(r)];
        if (r == rank || c >= chunksOf(out.numel())) continue;
        std::vector<at::Tensor> back{piece(out, c)};
        arrivals[static_cast<size_t>(c)].push_back(pg->recv(back, r, kAllgatherTag));
      }
    }
    std::vector<c10::intrusive_ptr<c10d::Work>> sends;
    int64_t posted = 0;
    const auto postSendsUpTo = [&](int64_t end) {
      for (; posted < std::min(end, chunksOf(in.numel())); ++posted) {
        for (int r = 0; r < world; ++r) {
          if (r == rank) continue;
          std::vector<at::Tensor> out{piece(in, posted)};
          sends.push_back(pg->send(out, r, kAllgatherTag));
        }
      }
    };
    postSendsUpTo(pacing.window);
    for (int64_t c = 0; c < mostChunks; ++c) {
      for (auto& work : arrivals[static_cast<size_t>(c)]) waitBackend(work, info);
      postSendsUpTo(c + 1 + pacing.window);
    }
    postSendsUpTo(chunksOf(in.numel()));
    for (auto& work : sends) waitBackend(work, info);
  }

  /// Allreduce of one flat buffer. Floating point up to kWholeBufferBytes: one round, every rank
  /// gets every rank's whole buffer and reduces it in rank order itself, the same bits as the
  /// reduce-scatter's (so DDP with small buckets equals ZeRO's reduce-scatter at any world size).
  /// bfloat16 and float16 beyond that, and float32/float64 between ranks of one host: the
  /// reduce-scatter then the all-gather (c10d has no bfloat16; they travel as 2 bytes and are added
  /// in float32). Large float32/float64 across hosts, and integers: c10d's allreduce, a ring, as fast
  /// as the paced reduce-scatter and all-gather over a 50 Mbit link and not paced by lockstep.
  static void reduceBuffer(const PG& pg, at::Tensor& buffer, ReduceOp op, int world, const Pacing& pacing,
                           const CommErrorInfo& info) {
    if (world == 1) return;  // sum, avg, max and min of one value are that value
    const bool lowPrecision = buffer.scalar_type() == at::kHalf || buffer.scalar_type() == at::kBFloat16;
    if (at::isFloatingType(buffer.scalar_type()) && buffer.nbytes() <= kWholeBufferBytes) {
      at::Tensor all = at::empty({world, buffer.numel()}, buffer.options());
      std::vector<at::Tensor> rows;
      for (int r = 0; r < world; ++r) rows.push_back(all[r]);
      allgatherInto(pg, buffer, rows, pacing, info);
      reduceInRankOrder(rows, buffer, op, world);
      return;
    }
    if (lowPrecision || (pacing.oneHost && at::isFloatingType(buffer.scalar_type()))) {
      const std::vector<int64_t> bounds = evenBounds(buffer.numel(), world);
      std::vector<at::Tensor> parts;
      for (int r = 0; r < world; ++r) parts.push_back(buffer.narrow(0, bounds[r], bounds[r + 1] - bounds[r]));
      at::Tensor& mine = parts[static_cast<size_t>(pg->getRank())];
      reduceScatterInto(pg, buffer, bounds, mine, op, pacing, info);
      allgatherInto(pg, mine, parts, pacing, info);
      return;
    }
    std::vector<at::Tensor> wire{buffer};
    c10d::AllreduceOptions ao;
    ao.reduceOp = toC10d(op);
    waitBackend(pg->allreduce(wire, ao), info);
    if (op == ReduceOp::kAvg) buffer.div_(world);
  }

  /// Rank r's block of n elements split as evenly as possible: bounds[r] up to bounds[r + 1].
  static std::vector<int64_t> evenBounds(int64_t n, int world) {
    std::vector<int64_t> bounds(static_cast<size_t>(world) + 1);
    for (int r = 0; r <= world; ++r) bounds[static_cast<size_t>(r)] = n * r / world;
    return bounds;
  }

  /// output = the reduction over ranks of block `rank` of `input` (bounds[r] up to bounds[r + 1] is
  /// block r); output may be that block of input itself. Every block goes to its rank in chunks
  /// sent as `pacing` says, each chunk reduced as soon as every rank's has come while later ones are
  /// still on the wire. Each element is reduced in rank order (((x0 + x1) + x2) + ...).
  static void reduceScatterInto(const PG& pg, const at::Tensor& input, const std::vector<int64_t>& bounds,
                                at::Tensor& output, ReduceOp op, const Pacing& pacing, const CommErrorInfo& info) {
    const int rank = pg->getRank();
    const int world = static_cast<int>(bounds.size()) - 1;
    const auto blockOf = [&](const at::Tensor& t, int r) {
      return t.narrow(0, bounds[static_cast<size_t>(r)],
                      bounds[static_cast<size_t>(r) + 1] - bounds[static_cast<size_t>(r)]);
    };
    const at::Tensor own = blockOf(input, rank);
    if (world == 1) {  // sum, avg, max and min of one value are that value
      if (output.data_ptr() != own.data_ptr()) output.copy_(own);
      return;
    }
    const int64_t k = own.numel();
    const int64_t chunk = std::max<int64_t>(1, pacing.chunkBytes / static_cast<int64_t>(input.element_size()));
    const auto chunksOf = [&](int64_t n) { return (n + chunk - 1) / chunk; };
    const int64_t ownChunks = chunksOf(k);
    int64_t mostChunks = 0;
    for (int r = 0; r < world; ++r) mostChunks = std::max(mostChunks, chunksOf(blockOf(input, r).numel()));
    // Chunk c goes to every rank once chunk c - window of this rank's block has come from every
    // rank (Pacing).
    std::vector<c10::intrusive_ptr<c10d::Work>> sends;
    int64_t posted = 0;
    const auto postSendsUpTo = [&](int64_t end) {
      for (; posted < std::min(end, mostChunks); ++posted) {
        for (int r = 0; r < world; ++r) {
          at::Tensor block = blockOf(input, r);
          if (r == rank || posted >= chunksOf(block.numel())) continue;
          std::vector<at::Tensor> out{
              wireView(block.narrow(0, posted * chunk, std::min(chunk, block.numel() - posted * chunk)))};
          sends.push_back(pg->send(out, r, kReduceScatterTag));
        }
      }
    };
    postSendsUpTo(pacing.window);
    // Chunk c from rank r arrives in slot c % slots, row r (the row of this rank is unused):
    // a few MiB that stay in cache, however large the block.
    const int64_t slots = std::min(kChunksInFlight, ownChunks);
    at::Tensor received = at::empty({slots, world, std::min(chunk, k)}, input.options());
    std::vector<std::vector<c10::intrusive_ptr<c10d::Work>>> arrivals(static_cast<size_t>(ownChunks));
    const auto slice = [&](const at::Tensor& t, int64_t c) {
      return t.narrow(0, c * chunk, std::min(chunk, k - c * chunk));
    };
    const auto landing = [&](int64_t c, int r) {
      return received[c % slots][r].narrow(0, 0, std::min(chunk, k - c * chunk));
    };
    const auto expect = [&](int64_t c) {
      for (int r = 0; r < world; ++r) {
        if (r == rank) continue;
        std::vector<at::Tensor> in{wireView(landing(c, r))};
        arrivals[static_cast<size_t>(c)].push_back(pg->recv(in, r, kReduceScatterTag));
      }
    };
    for (int64_t c = 0; c < slots; ++c) expect(c);
    for (int64_t c = 0; c < ownChunks; ++c) {
      for (auto& work : arrivals[static_cast<size_t>(c)]) waitBackend(work, info);
      std::vector<at::Tensor> pieces;
      for (int r = 0; r < world; ++r) pieces.push_back(r == rank ? slice(own, c) : landing(c, r));
      at::Tensor out = slice(output, c);
      reduceInRankOrder(pieces, out, op, world);
      if (c + slots < ownChunks) expect(c + slots);
      postSendsUpTo(c + 1 + pacing.window);
    }
    postSendsUpTo(mostChunks);
    for (auto& work : sends) waitBackend(work, info);
  }

  /// out = pieces[0] op pieces[1] op ... in that order; out may share its memory with one of the
  /// pieces. bfloat16 and float16 are reduced in float32 and rounded once.
  static void reduceInRankOrder(const std::vector<at::Tensor>& pieces, at::Tensor& out, ReduceOp op, int world) {
    const auto combine = [op](at::Tensor& dst, const at::Tensor& a, const at::Tensor& b) {
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg: at::add_out(dst, a, b); break;
        case ReduceOp::kMax: at::maximum_out(dst, a, b); break;
        case ReduceOp::kMin: at::minimum_out(dst, a, b); break;
      }
    };
    const bool lowPrecision = out.scalar_type() == at::kHalf || out.scalar_type() == at::kBFloat16;
    // Element by element, out may be written where it is read: unless it is a piece still to be read.
    bool laterPiece = false;
    for (size_t i = 2; i < pieces.size(); ++i) laterPiece = laterPiece || out.data_ptr() == pieces[i].data_ptr();
    at::Tensor acc = lowPrecision ? pieces[0].to(at::kFloat) : laterPiece ? at::empty_like(out) : out;
    combine(acc, lowPrecision ? acc : pieces[0], pieces[1]);
    for (size_t i = 2; i < pieces.size(); ++i) combine(acc, acc, pieces[i]);
    if (op == ReduceOp::kAvg) acc.div_(world);
    if (acc.data_ptr() != out.data_ptr()) out.copy_(acc);
  }

  PG pg_;
  int rank_;
  int world_;
  std::chrono::milliseconds timeout_;
  detail::CollectiveArgs args_;
  detail::OpQueue queue_;
  GlooGroupContext context_;
  int splits_ = 0;  // split() calls so far: the same on every rank, so it names the group's keys
};

/// Turns c10d's flight recorder off unless the user set its size: it captures a traceback with
/// every collective, and it registers each process group in a map without its lock, which
/// crashes when several groups of one process start collectives at once (lockstep's groups and
/// thread-per-rank tests do); the stall inspector and the desync check give what it would. Set
/// when the library loads, before any thread or process group: the recorder reads it once.
const bool kFlightRecorderOff = [] { return ::setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0) == 0; }();

/// The process group of `world` ranks meeting under `prefix` of `store`; CommError when they do not all join.
PG connect(const Store& store, const std::string& prefix, int rank, int world,
           const c10::intrusive_ptr<ProcessGroupGloo::Options>& options, CommErrorInfo info) {
  auto prefixed = store.withPrefix(prefix);
  try {
    return c10::make_intrusive<ProcessGroupGloo>(detail::StoreAccess::impl(prefixed)->store, rank, world, options);
  } catch (const std::exception& e) {
    info.detail = fmt::format("ranks did not all join through {}: {}", detail::StoreAccess::impl(store)->description,
                              backendMessage(e));
    info.kind = classifyBackendMessage(info.detail);
    throw CommError(info);
  }
}

/// kLoopbackPacing when every rank's transport binds the same address (one host), else
/// kNetworkPacing. An interface name says nothing about the host: kNetworkPacing.
Pacing pacingOf(const Store& store, const GlooOptions& o) {
  const std::string address = o.interface.empty() ? o.hostname : "";
  Store keys = store.withPrefix("lockstep/gloo/address");
  keys.set(std::to_string(o.rank), std::vector<uint8_t>(address.begin(), address.end()));
  bool same = !address.empty();
  for (int r = 0; r < o.worldSize; ++r) {
    const std::vector<uint8_t> theirs = keys.get(std::to_string(r));
    same = same && std::string(theirs.begin(), theirs.end()) == address;
  }
  return same ? kLoopbackPacing : kNetworkPacing;
}

}  // namespace

std::shared_ptr<Communicator> makeGlooCommunicator(const Store& store, const GlooOptions& o) {
  detail::checkMembership(o.rank, o.worldSize, o.timeout);
  detail::ignoreBrokenPipeSignal();  // a dead peer: an error naming it, not a SIGPIPE
  auto options = ProcessGroupGloo::Options::create(o.timeout);
  options->threads = 1;  // lockstep runs one operation at a time (op_queue.h)
  CommErrorInfo info;
  info.op = "connect (gloo)";
  info.rank = o.rank;
  info.worldSize = o.worldSize;
  info.timeoutMs = o.timeout.count();
  try {
    if (!o.interface.empty()) {
      options->devices.push_back(ProcessGroupGloo::createDeviceForInterface(o.interface));
    } else if (!o.hostname.empty()) {
      options->devices.push_back(ProcessGroupGloo::createDeviceForHostname(o.hostname));
    } else {
      options->devices.push_back(ProcessGroupGloo::createDefaultDevice());
    }
  } catch (const std::exception& e) {
    info.kind = CommErrorKind::kInvalidArgument;
    info.detail = fmt::format("cannot bind the transport to {}: {}",
                              o.interface.empty() ? "host '" + o.hostname + "'" : "interface '" + o.interface + "'",
                              backendMessage(e));
    throw CommError(info);
  }
  PG pg = connect(store, "lockstep/gloo", o.rank, o.worldSize, options, info);
  GlooGroupContext world{store, options, "lockstep/gloo", "", {}, pacingOf(store, o)};
  for (int r = 0; r < o.worldSize; ++r) world.globalRanks.push_back(r);
  return std::make_shared<GlooCommunicator>(std::move(pg), o.rank, o.worldSize, o.timeout, std::move(world));
}

}  // namespace lockstep
