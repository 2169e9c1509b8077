#include "comm/collective_args.h"

#include <ATen/ATen.h>

#include <fmt/format.h>

#include "lockstep/common/tensor_text.h"

namespace lockstep::detail {

bool isFloating(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

bool isSupported(at::ScalarType t) {
  return isFloating(t) || t == at::kChar || t == at::kByte || t == at::kInt || t == at::kLong;
}

std::string describe(const std::vector<at::Tensor>& ts) {
  std::string text = fmt::format("{} tensor{}, {} B", ts.size(), ts.size() == 1 ? "" : "s", bytesOf(ts));
  for (size_t i = 0; i < ts.size() && i < 4; ++i) { text += (i ? " " : ": ") + describeTensor(ts[i]); }
  if (ts.size() > 4) text += " ...";
  return text;
}

std::map<at::ScalarType, std::vector<at::Tensor>> groupByDtype(const std::vector<at::Tensor>& tensors) {
  std::map<at::ScalarType, std::vector<at::Tensor>> groups;
  for (const auto& t : tensors) {
    if (t.numel() > 0) groups[t.scalar_type()].push_back(t);
  }
  return groups;
}

at::Tensor flatten(const std::vector<at::Tensor>& group) {
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

void unflatten(const at::Tensor& buffer, std::vector<at::Tensor>& group) {
  int64_t offset = 0;
  for (auto& t : group) {
    t.view({-1}).copy_(buffer.narrow(0, offset, t.numel()));
    offset += t.numel();
  }
}

CommErrorInfo CollectiveArgs::info(std::string op, std::string sizes) const {
  CommErrorInfo info;
  info.op = std::move(op);
  info.sizes = std::move(sizes);
  info.rank = rank_;
  info.worldSize = world_;
  if (world_ == 2) info.peer = 1 - rank_;  // the only other rank
  info.group = group_;
  info.globalRanks = globalRanks_;
  return info;
}

void CollectiveArgs::invalid(CommErrorInfo info, const std::string& why) const {
  info.kind = CommErrorKind::kInvalidArgument;
  info.peer = -1;
  info.detail = why;
  throw CommError(info);
}

void CollectiveArgs::tensor(const at::Tensor& t, const CommErrorInfo& info) const {
  if (!t.defined()) invalid(info, "a tensor is undefined");
  if (t.device() != device_) {
    invalid(info, fmt::format("the {} backend needs {} tensors, got {}", backend_,
                              device_.is_cpu() ? "CPU" : device_.str(), t.device().str()));
  }
  if (t.is_sparse()) invalid(info, "sparse tensors are not supported");
  if (!t.is_contiguous()) invalid(info, "tensors must be contiguous; call .contiguous() first: " + describeTensor(t));
  if (!isSupported(t.scalar_type())) {
    invalid(info, "unsupported dtype " + dtypeName(t.scalar_type()) +
                      "; expected float32, float64, float16, bfloat16, int8, uint8, int32 or int64");
  }
}

void CollectiveArgs::sameDtype(const at::Tensor& a, const at::Tensor& b, const CommErrorInfo& info) const {
  if (a.scalar_type() != b.scalar_type()) {
    invalid(info, fmt::format("input and output dtypes differ: {} vs {}", dtypeName(a.scalar_type()),
                              dtypeName(b.scalar_type())));
  }
}

void CollectiveArgs::rank(int r, const char* what, const CommErrorInfo& info) const {
  if (r < 0 || r >= world_)
    invalid(info, fmt::format("{}={} is not a rank of this world (0..{})", what, r, world_ - 1));
}

void CollectiveArgs::reduceOp(ReduceOp op, const at::Tensor& t, const CommErrorInfo& info) const {
  if (op == ReduceOp::kAvg && !isFloating(t.scalar_type())) {
    invalid(info, "ReduceOp::kAvg needs a floating-point tensor, got " + describeTensor(t));
  }
}

CommErrorInfo CollectiveArgs::allreduce(const std::vector<at::Tensor>& tensors, ReduceOp op) const {
  CommErrorInfo i = info(Collective::allreduce(op).name(), describe(tensors));
  for (const auto& t : tensors) {
    tensor(t, i);
    reduceOp(op, t, i);
  }
  return i;
}

CommErrorInfo CollectiveArgs::broadcast(const std::vector<at::Tensor>& tensors, int root) const {
  CommErrorInfo i = info(Collective::broadcast(root).name(), describe(tensors));
  for (const auto& t : tensors) tensor(t, i);
  rank(root, "root", i);
  return i;
}

CommErrorInfo CollectiveArgs::allgather(const at::Tensor& input, const at::Tensor& output) const {
  CommErrorInfo i = info(Collective::allgather().name(), describe(std::vector<at::Tensor>{input, output}));
  tensor(input, i);
  tensor(output, i);
  sameDtype(input, output, i);
  if (output.numel() != input.numel() * world_) {
    invalid(i, fmt::format("output must have world size ({}) x input numel ({}) = {} elements, has {}", world_,
                           input.numel(), input.numel() * world_, output.numel()));
  }
  return i;
}

CommErrorInfo CollectiveArgs::allgather(const at::Tensor& input, const std::vector<at::Tensor>& outputs) const {
  std::vector<at::Tensor> all{input};
  all.insert(all.end(), outputs.begin(), outputs.end());
  CommErrorInfo i = info(Collective::allgather().name(), describe(all));
  tensor(input, i);
  if (static_cast<int>(outputs.size()) != world_) {
    invalid(i, fmt::format("needs one output per rank ({}), got {}", world_, outputs.size()));
  }
  for (const auto& o : outputs) {
    tensor(o, i);
    sameDtype(input, o, i);
    if (o.numel() != input.numel()) {
      invalid(i, fmt::format("every output must have input's {} elements, one has {}", input.numel(), o.numel()));
    }
  }
  return i;
}

CommErrorInfo CollectiveArgs::reduceScatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op) const {
  CommErrorInfo i = info(Collective::reduceScatter(op).name(), describe(std::vector<at::Tensor>{input, output}));
  tensor(input, i);
  tensor(output, i);
  sameDtype(input, output, i);
  if (input.numel() != output.numel() * world_) {
    invalid(i, fmt::format("input must have world size ({}) x output numel ({}) = {} elements, has {}", world_,
                           output.numel(), output.numel() * world_, input.numel()));
  }
  reduceOp(op, input, i);
  return i;
}

CommErrorInfo CollectiveArgs::send(const at::Tensor& t, int dst, int tag) const {
  CommErrorInfo i = info(Collective::send(dst, tag).name(), describe(std::vector<at::Tensor>{t}));
  i.peer = dst;
  tensor(t, i);
  rank(dst, "dst", i);
  if (dst == rank_) invalid(i, "cannot send to itself");
  return i;
}

CommErrorInfo CollectiveArgs::recv(const at::Tensor& t, int src, int tag) const {
  CommErrorInfo i = info(Collective::recv(src, tag).name(), describe(std::vector<at::Tensor>{t}));
  i.peer = src;
  tensor(t, i);
  rank(src, "src", i);
  if (src == rank_) invalid(i, "cannot receive from itself");
  return i;
}

}  // namespace lockstep::detail
