// lockstep/comm/desync_check.h — catching ranks whose collectives are out of step.
//
// A Communicator that forwards every operation to another one and, before
// collective number k (counted per communicator, 1-based, point to point not
// counted) when k is checked, lets every rank contribute a fixed-size
// fingerprint of the call — k, the collective, its reduce op and root, dtype,
// element and byte counts, number of tensors and a hash of the shapes — in a
// small allgather on the inner communicator. When the fingerprints differ,
// the real collective is not issued (so the backend never sees mismatched
// buffers): its Work fails with CommError kDesync on every rank, naming every
// side's view, e.g.
//   collectives out of step at #12: rank 0 calls allreduce(sum) float32 x 1024
//   (4096 B) but rank 1 calls broadcast(root 0) float32 x 10 (40 B)
// and the communicator is poisoned: every later operation fails with kAborted
// naming #12, as after any backend failure (comm_error.h).
//
// Contract:
// - Every rank must wrap its communicator with the same options (the ranks
//   decide independently which k to check; identical options make them agree).
// - Submitting still never blocks on the network: a checked collective, and
//   every collective submitted after it until it is issued, waits in this
//   wrapper's queue while a background thread exchanges the fingerprints, then
//   goes to the inner communicator in submission order. Unchecked collectives
//   submitted while nothing waits go straight to the inner one on the caller's
//   thread, and their Work is the inner one's (this wrapper adds no lock and
//   no allocation: two atomic loads and a counter). Invalid arguments still
//   throw at submission.
// - Point-to-point operations (send/recv) are never checked — their peers and
//   sizes differ between ranks by design — and always go straight through.
// - Every wait is bounded: the fingerprint exchange runs under the operation's
//   timeout; a rank that never reaches the collective makes the others fail
//   with the inner error (kTimeout or kPeerFailure), labelled with the
//   collective it guarded.
// - A sampled check catches differences that persist (a different config or
//   model size shows at the first collectives) or fall on a checked k; a
//   one-off difference between two checks reaches the backend unchecked and
//   fails there (or times out). kAll pinpoints it.
// - The backend's own operation numbers (#n in its errors) count the
//   fingerprint allgathers too; the numbers in kDesync errors and in errors of
//   checked collectives are this wrapper's k.
// Different models are caught earlier and in more detail by DDP's
// construction-time check (checkModuleConsistency, docs/ddp.md).
#pragma once

#include <memory>

#include "lockstep/comm/communicator.h"
#include "lockstep/common/env.h"

namespace lockstep {

enum class DesyncCheckMode {
  kOff,      ///< no check: withDesyncCheck returns the inner communicator itself
  kSampled,  ///< collective k is checked when k <= first or k % every == 0
  kAll,      ///< every collective is checked
};

struct DesyncCheckOptions {
  DesyncCheckMode mode = DesyncCheckMode::kSampled;
  /// kSampled: check every `every`-th collective (>= 1). The default keeps the
  /// overhead on a small allreduce negligible (docs/communicator.md).
  int every = 100;
  /// kSampled: also check collectives 1..first, where different configs show.
  int first = 16;
};

namespace env {
/// off | all | sample | sample:N (N >= 1). Unset: "all" when LOCKSTEP_DEBUG=1, else sample:100.
inline constexpr const char* kDesyncCheck = "LOCKSTEP_DESYNC_CHECK";
/// 1 turns on lockstep's debug checks (LOCKSTEP_DESYNC_CHECK=all); 0 or unset: off.
inline constexpr const char* kDebug = "LOCKSTEP_DEBUG";
}  // namespace env

/// The options LOCKSTEP_DESYNC_CHECK and LOCKSTEP_DEBUG ask for; ConfigError
/// naming the variable, its value and what is expected when malformed.
DesyncCheckOptions desyncCheckFromEnv(const Environment& env);

/// Wraps `inner` (which the result shares). Returns `inner` itself when the
/// mode is kOff or the world has one rank. ConfigError for every/first < 1/0.
std::shared_ptr<Communicator> withDesyncCheck(std::shared_ptr<Communicator> inner, DesyncCheckOptions options);

}  // namespace lockstep
