// collective_args.h — what every backend checks before it sends anything, and
// the small tensor utilities backends share (fusing a list into one buffer).
//
// Each check throws CommError kInvalidArgument naming the operation, the
// tensors and what was expected; nothing has been submitted at that point, so
// the communicator stays usable.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "comm/collective.h"
#include "lockstep/comm/communicator.h"
#include "lockstep/common/comm_error.h"
#include "lockstep/common/tensor_text.h"  // dtypeName, describeTensor

namespace lockstep::detail {

bool isFloating(at::ScalarType t);
/// float32/64, float16, bfloat16, int8, uint8, int32, int64.
bool isSupported(at::ScalarType t);
/// "2 tensors, 4096 B: float32[1024] float32[0]"
std::string describe(const std::vector<at::Tensor>& ts);

/// The non-empty tensors of `tensors` by dtype, each group in list order:
/// lists are fused into one message per dtype.
std::map<at::ScalarType, std::vector<at::Tensor>> groupByDtype(const std::vector<at::Tensor>& tensors);

/// One contiguous buffer holding `group` (same dtype) one after another.
at::Tensor flatten(const std::vector<at::Tensor>& group);
/// Copies `buffer` back into `group`, the inverse of flatten().
void unflatten(const at::Tensor& buffer, std::vector<at::Tensor>& group);

class CollectiveArgs {
 public:
  CollectiveArgs(int rank, int worldSize, std::string backend)
      : rank_(rank), world_(worldSize), backend_(std::move(backend)) {}

  /// The error context of one operation: op, sizes, this rank, the peer when
  /// the world has only one other rank.
  CommErrorInfo info(std::string op, std::string sizes) const;
  [[noreturn]] void invalid(CommErrorInfo info, const std::string& why) const;

  void tensor(const at::Tensor& t, const CommErrorInfo& info) const;
  void sameDtype(const at::Tensor& a, const at::Tensor& b, const CommErrorInfo& info) const;
  void rank(int r, const char* what, const CommErrorInfo& info) const;
  void reduceOp(ReduceOp op, const at::Tensor& t, const CommErrorInfo& info) const;

  // Whole-operation checks; each returns the operation's error context.
  CommErrorInfo allreduce(const std::vector<at::Tensor>& tensors, ReduceOp op) const;
  CommErrorInfo broadcast(const std::vector<at::Tensor>& tensors, int root) const;
  CommErrorInfo allgather(const at::Tensor& input, const at::Tensor& output) const;
  CommErrorInfo allgather(const at::Tensor& input, const std::vector<at::Tensor>& outputs) const;
  CommErrorInfo reduceScatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op) const;
  CommErrorInfo barrier() const { return info(Collective::barrier().name(), ""); }
  CommErrorInfo send(const at::Tensor& tensor, int dst, int tag) const;
  CommErrorInfo recv(const at::Tensor& tensor, int src, int tag) const;
  /// Where the backend takes tensors (default: the CPU).
  void setDevice(c10::Device device) { device_ = device; }
  /// A group's name and members' global ranks, for every error context (none for the world).
  void setGroup(std::string name, std::vector<int> globalRanks) {
    group_ = std::move(name);
    globalRanks_ = group_.empty() ? std::vector<int>{} : std::move(globalRanks);
  }

 private:
  int rank_;
  int world_;
  std::string backend_;
  c10::Device device_{c10::kCPU};
  std::string group_;
  std::vector<int> globalRanks_;
};

}  // namespace lockstep::detail
