// desync_fingerprint.h — the pure part of the desync check (desync_check.h):
// what one rank says about the collective it is about to call, and the message
// naming every rank's view when they disagree. No communication here; the
// wrapper in desync_check.cpp allgathers the fingerprints.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/collective.h"

namespace lockstep::detail {

/// What one rank contributes: a fixed number of int64 fields, so every rank's
/// allgather has the same size whatever it was about to call.
struct Fingerprint {
  enum Field { kMagic, kSequence, kKind, kReduceOp, kRoot, kTensors, kDtype, kElements, kBytes, kShapeHash, kFields };
  static constexpr int64_t kMagicValue = 0x6c6b7364'00000001;  // "lksd", version 1
  static constexpr int64_t kNone = -1;
  static constexpr int64_t kMixed = -2;
  std::array<int64_t, kFields> f{};

  bool operator==(const Fingerprint& o) const { return f == o.f; }
  bool operator!=(const Fingerprint& o) const { return f != o.f; }
};

/// The fingerprint of collective number `sequence`, `op`, over `tensors`
/// (dtype, element and byte counts, and a hash of every tensor's shape).
Fingerprint fingerprint(uint64_t sequence, const Collective& op, const std::vector<at::Tensor>& tensors);

/// "allreduce(sum) float32 x 1024 (4096 B)"; with `hash`, the shapes' hash too.
/// Fields that are out of range (a peer that is not lockstep) are named as such.
std::string describe(const Fingerprint& fp, bool hash);

/// Empty when every rank sent the same fingerprint; else one message naming
/// each distinct view and the ranks holding it, e.g. "collectives out of step
/// at #7: rank 0 calls allreduce(sum) ... but rank 1 calls broadcast(root=0) ...".
std::string compareFingerprints(const std::vector<Fingerprint>& all, uint64_t sequence);

}  // namespace lockstep::detail
