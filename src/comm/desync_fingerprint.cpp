// desync_fingerprint.cpp — fingerprints and their comparison (desync_fingerprint.h).
#include "comm/desync_fingerprint.h"

#include <fmt/format.h>

#include <algorithm>

#include "lockstep/common/tensor_text.h"

namespace lockstep::detail {
namespace {

/// FNV-1a over (dtype, rank, sizes) of every tensor: equal element counts in other shapes differ here.
void hashTensor(uint64_t& h, const at::Tensor& t) {
  auto mix = [&](int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ULL;
    }
  };
  mix(static_cast<int64_t>(t.scalar_type()));
  mix(t.dim());
  for (int64_t d = 0; d < t.dim(); ++d) mix(t.size(d));
}

std::string dtypeText(int64_t code) {
  if (code < 0 || code >= static_cast<int64_t>(at::ScalarType::NumOptions)) return fmt::format("dtype#{}", code);
  return dtypeName(static_cast<at::ScalarType>(code));
}

/// The operation a fingerprint names, or what is wrong with its fields.
std::string operationText(const Fingerprint& fp) {
  const auto& f = fp.f;
  int64_t kind = f[Fingerprint::kKind];
  if (kind < static_cast<int64_t>(CollectiveKind::kAllreduce) || kind > static_cast<int64_t>(CollectiveKind::kRecv)) {
    return fmt::format("an unknown operation (fingerprint kind {})", kind);
  }
  Collective op{static_cast<CollectiveKind>(kind), ReduceOp::kSum, static_cast<int>(f[Fingerprint::kRoot]), 0};
  if (op.reduces()) {
    int64_t reduce = f[Fingerprint::kReduceOp];
    if (reduce < 0 || reduce > static_cast<int64_t>(ReduceOp::kMin)) {
      return fmt::format("{}(op#{})", op.kind == CollectiveKind::kAllreduce ? "allreduce" : "reduce_scatter", reduce);
    }
    op.op = static_cast<ReduceOp>(reduce);
  }
  return op.name();
}

std::string rankList(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rankNumbers(ranks);
}

}  // namespace

Fingerprint fingerprint(uint64_t sequence, const Collective& op, const std::vector<at::Tensor>& tensors) {
  Fingerprint fp;
  fp.f[Fingerprint::kMagic] = Fingerprint::kMagicValue;
  fp.f[Fingerprint::kSequence] = static_cast<int64_t>(sequence);
  fp.f[Fingerprint::kKind] = static_cast<int64_t>(op.kind);
  fp.f[Fingerprint::kReduceOp] = op.reduces() ? static_cast<int64_t>(op.op) : Fingerprint::kNone;
  fp.f[Fingerprint::kRoot] = op.rooted() ? op.peer : -1;
  fp.f[Fingerprint::kTensors] = static_cast<int64_t>(tensors.size());
  int64_t dtype = Fingerprint::kNone;
  int64_t elements = 0;
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const auto& t : tensors) {
    auto d = static_cast<int64_t>(t.scalar_type());
    dtype = dtype == Fingerprint::kNone || dtype == d ? d : Fingerprint::kMixed;
    elements += t.numel();
    hashTensor(hash, t);
  }
  fp.f[Fingerprint::kDtype] = dtype;
  fp.f[Fingerprint::kElements] = elements;
  fp.f[Fingerprint::kBytes] = bytesOf(tensors);
  fp.f[Fingerprint::kShapeHash] = static_cast<int64_t>(hash & 0xffffffffULL);
  return fp;
}

std::string describe(const Fingerprint& fp, bool hash) {
  const auto& f = fp.f;
  std::string text = operationText(fp);
  if (static_cast<CollectiveKind>(f[Fingerprint::kKind]) != CollectiveKind::kBarrier) {
    int64_t tensors = f[Fingerprint::kTensors];
    if (tensors != 1) text += fmt::format(" {} tensors,", tensors);
    if (f[Fingerprint::kDtype] == Fingerprint::kMixed) {
      text += fmt::format(" mixed dtypes, {} elements", f[Fingerprint::kElements]);
    } else if (f[Fingerprint::kDtype] != Fingerprint::kNone) {
      text += fmt::format(" {} x {}", dtypeText(f[Fingerprint::kDtype]), f[Fingerprint::kElements]);
    }
    text += fmt::format(" ({} B)", f[Fingerprint::kBytes]);
  }
  if (hash) text += fmt::format(" [shapes {:08x}]", static_cast<uint64_t>(f[Fingerprint::kShapeHash]));
  if (f[Fingerprint::kMagic] != Fingerprint::kMagicValue) text += " [not a lockstep fingerprint]";
  return text;
}

std::string compareFingerprints(const std::vector<Fingerprint>& all, uint64_t sequence) {
  std::vector<std::pair<Fingerprint, std::vector<int>>> views;  // in order of the lowest rank holding each
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    auto it = std::find_if(views.begin(), views.end(), [&](const auto& v) { return v.first == all[r]; });
    if (it == views.end())
      views.push_back({all[r], {r}});
    else
      it->second.push_back(r);
  }
  if (views.size() == 1) return "";
  std::vector<std::string> texts;
  for (const auto& v : views) texts.push_back(describe(v.first, false));
  // Views that read alike differ only in the shapes (or in something no sane call changes): show the hashes.
  bool alike = std::any_of(texts.begin(), texts.end(),
                           [&](const std::string& t) { return std::count(texts.begin(), texts.end(), t) > 1; });
  std::string message = fmt::format("collectives out of step at #{}: ", sequence);
  size_t shown = std::min<size_t>(views.size(), 4);
  for (size_t i = 0; i < shown; ++i) {
    const auto& ranks = views[i].second;
    std::string part = fmt::format("{} call{} {}", rankList(ranks), ranks.size() == 1 ? "s" : "",
                                   alike ? describe(views[i].first, true) : texts[i]);
    int64_t theirs = views[i].first.f[Fingerprint::kSequence];
    if (theirs != static_cast<int64_t>(sequence)) part += fmt::format(" as its collective #{}", theirs);
    message += (i == 0 ? "" : i == 1 ? " but " : "; ") + part;
  }
  if (views.size() > shown) message += fmt::format("; and {} other views", views.size() - shown);
  return message;
}

}  // namespace lockstep::detail
