// gloo_communicator.cpp — the Communicator over LibTorch's c10d ProcessGroupGloo.
//
// Gloo in LibTorch 1.13 has no AVG reduction, no reduce_scatter and no
// bfloat16. We build them here: AVG is SUM then a division; reduce-scatter is
// an all-to-all followed by a local reduction (each rank sends (n-1)/n of the
// buffer, as a ring reduce-scatter does); bfloat16 travels as its raw 16-bit
// pattern (viewed as float16) for data moves, and bf16 reductions run as
// reduce-scatter + allgather with the sum done locally in float32, so the wire
// still carries 2 bytes per element.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <fmt/format.h>

#include <map>

#include "comm/c10d_errors.h"
#include "comm/op_queue.h"
#include "comm/store_impl.h"
#include "lockstep/comm/communicator.h"
#include "lockstep/common/error.h"

namespace lockstep {
namespace {

using c10d::ProcessGroupGloo;
using PG = c10::intrusive_ptr<ProcessGroupGloo>;

bool isFloating(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}
bool isSupported(at::ScalarType t) {
  return isFloating(t) || t == at::kChar || t == at::kByte || t == at::kInt || t == at::kLong;
}

std::string dtypeName(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    default: return c10::toString(t);
  }
}

std::string describe(const at::Tensor& t) {
  std::string shape;
  for (int64_t d = 0; d < t.dim(); ++d) shape += (d ? "," : "") + std::to_string(t.size(d));
  return fmt::format("{}[{}]", dtypeName(t.scalar_type()), shape);
}

std::string describe(const std::vector<at::Tensor>& ts) {
  int64_t bytes = 0;
  for (const auto& t : ts) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  std::string text = fmt::format("{} tensor{}, {} B", ts.size(), ts.size() == 1 ? "" : "s", bytes);
  for (size_t i = 0; i < ts.size() && i < 4; ++i) text += (i ? " " : ": ") + describe(ts[i]);
  if (ts.size() > 4) text += " ...";
  return text;
}

/// bfloat16 is moved as its bit pattern: Gloo in this LibTorch rejects the dtype.
at::Tensor wireView(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 ? t.view(at::kHalf) : t;
}

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
    info.detail = detail::backendMessage(e);
    info.kind = detail::classifyBackendMessage(info.detail);
    throw CommError(info);
  }
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(PG pg, int rank, int world, std::chrono::milliseconds timeout)
      : pg_(std::move(pg)), rank_(rank), world_(world), timeout_(timeout), queue_(rank, world) {}

  int rank() const override { return rank_; }
  int size() const override { return world_; }
  std::string backendName() const override { return "gloo"; }
  std::chrono::milliseconds defaultTimeout() const override { return timeout_; }

  WorkHandle allreduce(std::vector<at::Tensor>& tensors, ReduceOp op,
                       const CollectiveOptions& options) override {
    CommErrorInfo info = makeInfo(fmt::format("allreduce({})", toString(op)), describe(tensors));
    for (const auto& t : tensors) {
      checkTensor(t, info);
      if (op == ReduceOp::kAvg && !isFloating(t.scalar_type())) {
        invalid(info, "ReduceOp::kAvg needs a floating-point tensor, got " + describe(t));
      }
    }
    auto tensorsCopy = tensors;
    return submit(info, options, [pg = pg_, tensorsCopy, op, info, world = world_]() mutable {
      // Fuse per dtype: one message per dtype, whatever the number of tensors.
      std::map<at::ScalarType, std::vector<at::Tensor>> groups;
      for (auto& t : tensorsCopy) {
        if (t.numel() > 0) groups[t.scalar_type()].push_back(t);
      }
      for (auto& [dtype, group] : groups) {
        at::Tensor buffer = group.size() == 1 ? group[0].view({-1}) : flatten(group);
        reduceBuffer(pg, buffer, op, world, info);
        if (group.size() > 1) unflatten(buffer, group);
      }
    });
  }

  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root,
                       const CollectiveOptions& options) override {
    CommErrorInfo info = makeInfo(fmt::format("broadcast(root={})", root), describe(tensors));
    for (const auto& t : tensors) checkTensor(t, info);
    checkRank(root, "root", info);
    auto tensorsCopy = tensors;
    return submit(info, options, [pg = pg_, tensorsCopy, root, info, rank = rank_]() mutable {
      std::map<at::ScalarType, std::vector<at::Tensor>> groups;
      for (auto& t : tensorsCopy) {
        if (t.numel() > 0) groups[t.scalar_type()].push_back(t);
      }
      for (auto& [dtype, group] : groups) {
        at::Tensor buffer = group.size() == 1 ? group[0].view({-1}) : flatten(group);
        std::vector<at::Tensor> wire{wireView(buffer)};
        c10d::BroadcastOptions bo;
        bo.rootRank = root;
        waitBackend(pg->broadcast(wire, bo), info);
        if (group.size() > 1 && rank != root) unflatten(buffer, group);
      }
    });
  }

  WorkHandle allgather(const at::Tensor& input, at::Tensor& output,
                       const CollectiveOptions& options) override {
    CommErrorInfo info = makeInfo("allgather", describe(std::vector<at::Tensor>{input, output}));
    checkTensor(input, info);
    checkTensor(output, info);
    checkSameDtype(input, output, info);
    if (output.numel() != input.numel() * world_) {
      invalid(info, fmt::format("output must have world size ({}) x input numel ({}) = {} elements, has {}",
                                world_, input.numel(), input.numel() * world_, output.numel()));
    }
    std::vector<at::Tensor> outputs;
    auto flat = output.view({-1});
    for (int r = 0; r < world_; ++r) outputs.push_back(flat.narrow(0, r * input.numel(), input.numel()));
    return submitAllgather(input, outputs, info, options);
  }

  WorkHandle allgather(const at::Tensor& input, std::vector<at::Tensor>& outputs,
                       const CollectiveOptions& options) override {
    std::vector<at::Tensor> all{input};
    all.insert(all.end(), outputs.begin(), outputs.end());
    CommErrorInfo info = makeInfo("allgather", describe(all));
    checkTensor(input, info);
    if (static_cast<int>(outputs.size()) != world_) {
      invalid(info, fmt::format("needs one output per rank ({}), got {}", world_, outputs.size()));
    }
    for (const auto& o : outputs) {
      checkTensor(o, info);
      checkSameDtype(input, o, info);
      if (o.numel() != input.numel()) {
        invalid(info, fmt::format("every output must have input's {} elements, one has {}",
                                  input.numel(), o.numel()));
      }
    }
    std::vector<at::Tensor> flatOutputs;
    for (const auto& o : outputs) flatOutputs.push_back(o.view({-1}));
    return submitAllgather(input, flatOutputs, info, options);
  }

  WorkHandle reduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op,
                           const CollectiveOptions& options) override {
    CommErrorInfo info = makeInfo(fmt::format("reduce_scatter({})", toString(op)),
                                  describe(std::vector<at::Tensor>{input, output}));
    checkTensor(input, info);
    checkTensor(output, info);
    checkSameDtype(input, output, info);
    if (input.numel() != output.numel() * world_) {
      invalid(info, fmt::format("input must have world size ({}) x output numel ({}) = {} elements, has {}",
                                world_, output.numel(), output.numel() * world_, input.numel()));
    }
    if (op == ReduceOp::kAvg && !isFloating(input.scalar_type())) {
      invalid(info, "ReduceOp::kAvg needs a floating-point tensor, got " + describe(input));
    }
    return submit(info, options, [pg = pg_, input, output, op, info, world = world_]() mutable {
      if (output.numel() == 0) return;
      auto out = output.view({-1});
      reduceScatterFlat(pg, input.view({-1}), out, op, world, info);
    });
  }

  WorkHandle barrier(const CollectiveOptions& options) override {
    CommErrorInfo info = makeInfo("barrier", "");
    return submit(info, options, [pg = pg_, info]() { waitBackend(pg->barrier(), info); });
  }

  WorkHandle send(const at::Tensor& tensor, int dst, int tag,
                  const CollectiveOptions& options) override {
    CommErrorInfo info = makeInfo(fmt::format("send(dst={}, tag={})", dst, tag),
                                  describe(std::vector<at::Tensor>{tensor}));
    info.peer = dst;
    checkTensor(tensor, info);
    checkRank(dst, "dst", info);
    if (dst == rank_) invalid(info, "cannot send to itself");
    return submitIssued(info, options, [pg = pg_, tensor, dst, tag, info]() -> std::function<void()> {
      if (tensor.numel() == 0) return {};
      std::vector<at::Tensor> wire{wireView(tensor).view({-1})};
      auto work = pg->send(wire, dst, tag);
      return [work, info] { waitBackend(work, info); };
    });
  }

  WorkHandle recv(at::Tensor& tensor, int src, int tag, const CollectiveOptions& options) override {
    CommErrorInfo info = makeInfo(fmt::format("recv(src={}, tag={})", src, tag),
                                  describe(std::vector<at::Tensor>{tensor}));
    info.peer = src;
    checkTensor(tensor, info);
    checkRank(src, "src", info);
    if (src == rank_) invalid(info, "cannot receive from itself");
    return submitIssued(info, options, [pg = pg_, tensor, src, tag, info]() -> std::function<void()> {
      if (tensor.numel() == 0) return {};
      std::vector<at::Tensor> wire{wireView(tensor).view({-1})};
      auto work = pg->recv(wire, src, tag);
      return [work, info] { waitBackend(work, info); };
    });
  }

 private:
  CommErrorInfo makeInfo(std::string op, std::string sizes) const {
    CommErrorInfo info;
    info.op = std::move(op);
    info.sizes = std::move(sizes);
    info.rank = rank_;
    info.worldSize = world_;
    if (world_ == 2) info.peer = 1 - rank_;  // the only other rank
    return info;
  }

  [[noreturn]] void invalid(CommErrorInfo info, const std::string& why) const {
    info.kind = CommErrorKind::kInvalidArgument;
    info.peer = -1;
    info.detail = why;
    throw CommError(info);
  }

  void checkTensor(const at::Tensor& t, const CommErrorInfo& info) const {
    if (!t.defined()) invalid(info, "a tensor is undefined");
    if (!t.device().is_cpu()) invalid(info, "the gloo backend needs CPU tensors, got " + t.device().str());
    if (t.is_sparse()) invalid(info, "sparse tensors are not supported");
    if (!t.is_contiguous()) invalid(info, "tensors must be contiguous; call .contiguous() first: " + describe(t));
    if (!isSupported(t.scalar_type())) {
      invalid(info, "unsupported dtype " + dtypeName(t.scalar_type()) +
                        "; expected float32, float64, float16, bfloat16, int8, uint8, int32 or int64");
    }
  }

  void checkSameDtype(const at::Tensor& a, const at::Tensor& b, const CommErrorInfo& info) const {
    if (a.scalar_type() != b.scalar_type()) {
      invalid(info, fmt::format("input and output dtypes differ: {} vs {}", dtypeName(a.scalar_type()),
                                dtypeName(b.scalar_type())));
    }
  }

  void checkRank(int r, const char* what, const CommErrorInfo& info) const {
    if (r < 0 || r >= world_) invalid(info, fmt::format("{}={} is not a rank of this world (0..{})", what, r, world_ - 1));
  }

  WorkHandle submit(CommErrorInfo info, const CollectiveOptions& options, std::function<void()> body) {
    auto timeout = options.timeout.count() > 0 ? std::min(options.timeout, timeout_) : timeout_;
    return queue_.submit(std::move(info), timeout, std::move(body));
  }

  WorkHandle submitIssued(CommErrorInfo info, const CollectiveOptions& options, detail::OpQueue::Body body) {
    auto timeout = options.timeout.count() > 0 ? std::min(options.timeout, timeout_) : timeout_;
    return queue_.submitIssued(std::move(info), timeout, std::move(body));
  }

  WorkHandle submitAllgather(const at::Tensor& input, std::vector<at::Tensor> outputs,
                             const CommErrorInfo& info, const CollectiveOptions& options) {
    return submit(info, options, [pg = pg_, input, outputs, info]() {
      if (input.numel() == 0) return;
      std::vector<std::vector<at::Tensor>> wireOut(1);
      for (const auto& o : outputs) wireOut[0].push_back(wireView(o));
      std::vector<at::Tensor> wireIn{wireView(input).view({-1})};
      waitBackend(pg->allgather(wireOut, wireIn), info);
    });
  }

  static at::Tensor flatten(const std::vector<at::Tensor>& group) {
    int64_t total = 0;
    for (const auto& t : group) total += t.numel();
    at::Tensor buffer = at::empty({total}, group[0].options());
    int64_t offset = 0;
    for (const auto& t : group) {
      buffer.narrow(0, offset, t.numel()).copy_(t.view({-1}));
      offset += t.numel();
    }
    return buffer;
  }

  static void unflatten(const at::Tensor& buffer, std::vector<at::Tensor>& group) {
    int64_t offset = 0;
    for (auto& t : group) {
      t.view({-1}).copy_(buffer.narrow(0, offset, t.numel()));
      offset += t.numel();
    }
  }

  static void reduceBuffer(const PG& pg, at::Tensor& buffer, ReduceOp op, int world,
                           const CommErrorInfo& info) {
    if (world == 1) return;  // sum, avg, max and min of one value are that value
    if (buffer.scalar_type() == at::kBFloat16) {
      // Reduce-scatter (all-to-all + local float32 reduction) then allgather:
      // the wire carries bf16, the arithmetic is float32.
      int64_t n = buffer.numel();
      int64_t chunk = (n + world - 1) / world;
      at::Tensor padded = at::zeros({chunk * world}, buffer.options());
      padded.narrow(0, 0, n).copy_(buffer);
      at::Tensor mine = at::empty({chunk}, buffer.options());
      reduceScatterFlat(pg, padded, mine, op, world, info);
      std::vector<std::vector<at::Tensor>> out(1);
      for (int r = 0; r < world; ++r) out[0].push_back(wireView(padded.narrow(0, r * chunk, chunk)));
      std::vector<at::Tensor> in{wireView(mine)};
      waitBackend(pg->allgather(out, in), info);
      buffer.copy_(padded.narrow(0, 0, n));
      return;
    }
    std::vector<at::Tensor> wire{buffer};
    c10d::AllreduceOptions ao;
    ao.reduceOp = toC10d(op);
    waitBackend(pg->allreduce(wire, ao), info);
    if (op == ReduceOp::kAvg) buffer.div_(world);
  }

  /// output (k elements) = reduction over ranks of chunk `rank` of input (world*k elements).
  static void reduceScatterFlat(const PG& pg, const at::Tensor& input, at::Tensor& output,
                                ReduceOp op, int world, const CommErrorInfo& info) {
    int64_t k = output.numel();
    at::Tensor gathered;
    if (world == 1) {
      gathered = input.clone();
    } else {
      gathered = at::empty({world * k}, input.options());
      std::vector<int64_t> equalSplits;  // empty = equal splits
      at::Tensor wireOut = wireView(gathered);
      at::Tensor wireIn = wireView(input).contiguous();
      waitBackend(pg->alltoall_base(wireOut, wireIn, equalSplits, equalSplits), info);
    }
    at::Tensor blocks = gathered.view({world, k});
    bool lowPrecision = blocks.scalar_type() == at::kHalf || blocks.scalar_type() == at::kBFloat16;
    if (lowPrecision) blocks = blocks.to(at::kFloat);
    at::Tensor reduced;
    switch (op) {
      case ReduceOp::kSum: reduced = blocks.sum(0); break;
      case ReduceOp::kAvg: reduced = blocks.sum(0).div_(world); break;
      case ReduceOp::kMax: reduced = std::get<0>(blocks.max(0)); break;
      case ReduceOp::kMin: reduced = std::get<0>(blocks.min(0)); break;
    }
    output.copy_(reduced.to(output.scalar_type()));
  }

  PG pg_;
  int rank_;
  int world_;
  std::chrono::milliseconds timeout_;
  detail::OpQueue queue_;
};

}  // namespace

std::shared_ptr<Communicator> makeGlooCommunicator(const Store& store, const GlooOptions& o) {
  LOCKSTEP_CHECK(o.worldSize >= 1, "world size ", o.worldSize, " must be at least 1");
  LOCKSTEP_CHECK(o.rank >= 0 && o.rank < o.worldSize, "rank ", o.rank,
                 " must be in 0..", o.worldSize - 1, " (world size ", o.worldSize, ")");
  LOCKSTEP_CHECK(o.timeout.count() > 0, "the communicator timeout must be positive");
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
                              detail::backendMessage(e));
    throw CommError(info);
  }
  auto prefixed = store.withPrefix("lockstep/gloo");
  try {
    auto pg = c10::make_intrusive<ProcessGroupGloo>(prefixed.impl()->store, o.rank, o.worldSize, options);
    return std::make_shared<GlooCommunicator>(std::move(pg), o.rank, o.worldSize, o.timeout);
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    info.detail = fmt::format("ranks did not all join through {}: {}", store.impl()->description,
                              detail::backendMessage(e));
    info.kind = detail::classifyBackendMessage(info.detail);
    throw CommError(info);
  }
}

}  // namespace lockstep
