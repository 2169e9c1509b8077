// collective.h — one description of a communicator operation, shared by the
// argument checks (error context), the stall inspector (what each rank waits
// in) and the desync check (what each rank is about to call).
//
// A Collective is a few integers: wrappers record one per operation without
// formatting anything; name() formats it only when a message needs it, so
// every message names an operation the same way ("allreduce(sum)",
// "broadcast(root=0)", "send(dst=1, tag=7)").
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/comm/communicator.h"

namespace lockstep::detail {

/// Stable numbers: the desync check sends them between ranks.
enum class CollectiveKind : int64_t { kAllreduce = 1, kBroadcast, kAllgather, kReduceScatter, kBarrier, kSend, kRecv };

struct Collective {
  CollectiveKind kind = CollectiveKind::kBarrier;
  ReduceOp op = ReduceOp::kSum;  ///< allreduce and reduce_scatter only
  int peer = -1;                 ///< broadcast's root, send's dst, recv's src; -1 otherwise
  int tag = 0;                   ///< send and recv only

  static Collective allreduce(ReduceOp op) { return {CollectiveKind::kAllreduce, op, -1, 0}; }
  static Collective broadcast(int root) { return {CollectiveKind::kBroadcast, ReduceOp::kSum, root, 0}; }
  static Collective allgather() { return {CollectiveKind::kAllgather, ReduceOp::kSum, -1, 0}; }
  static Collective reduceScatter(ReduceOp op) { return {CollectiveKind::kReduceScatter, op, -1, 0}; }
  static Collective barrier() { return {}; }
  static Collective send(int dst, int tag) { return {CollectiveKind::kSend, ReduceOp::kSum, dst, tag}; }
  static Collective recv(int src, int tag) { return {CollectiveKind::kRecv, ReduceOp::kSum, src, tag}; }

  bool reduces() const { return kind == CollectiveKind::kAllreduce || kind == CollectiveKind::kReduceScatter; }
  bool rooted() const { return kind == CollectiveKind::kBroadcast; }
  /// "allreduce(sum)", "broadcast(root=0)", "allgather", "barrier", "send(dst=1, tag=7)".
  std::string name() const;
};

/// Bytes an operation moves (undefined tensors count 0).
int64_t bytesOf(const at::Tensor& t);
int64_t bytesOf(const std::vector<at::Tensor>& ts);
/// "0, 1, 3" — at most `shown` numbers, then " and N more".
std::string rankNumbers(const std::vector<int>& ranks, size_t shown = 8);

}  // namespace lockstep::detail
