#include "comm/collective.h"

#include <fmt/format.h>

namespace lockstep::detail {

std::string Collective::name() const {
  switch (kind) {
    case CollectiveKind::kAllreduce: return fmt::format("allreduce({})", toString(op));
    case CollectiveKind::kBroadcast: return fmt::format("broadcast(root={})", peer);
    case CollectiveKind::kAllgather: return "allgather";
    case CollectiveKind::kReduceScatter: return fmt::format("reduce_scatter({})", toString(op));
    case CollectiveKind::kBarrier: return "barrier";
    case CollectiveKind::kSend: return fmt::format("send(dst={}, tag={})", peer, tag);
    case CollectiveKind::kRecv: return fmt::format("recv(src={}, tag={})", peer, tag);
  }
  return fmt::format("an unknown operation (kind {})", static_cast<int64_t>(kind));
}

int64_t bytesOf(const at::Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; }

int64_t bytesOf(const std::vector<at::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += bytesOf(t);
  return n;
}

std::string rankNumbers(const std::vector<int>& ranks, size_t shown) {
  std::string s;
  size_t n = std::min(ranks.size(), shown);
  for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > n) s += fmt::format(" and {} more", ranks.size() - n);
  return s;
}

}  // namespace lockstep::detail
