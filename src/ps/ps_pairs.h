// ps_pairs.h — the parameter servers' wiring (internal): one two-rank group
// per (worker, server) pair, the message layout, and flat parameter copies.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "lockstep/ps/parameter_server.h"

namespace lockstep::detail {

// A worker's message to server 0: header {kind, its pushes so far (this one included), the version of
// the weights the gradient was computed on, B or for kPsPush 1 when the update is skipped}, then for
// kPsPush the gradient's slice (ignored by a skip). kPsPark: wait until the server checkpointed B
// updates; its reply is a header only.
// Server 0's reply: header {version of the weights, staleness of the worker's last applied update,
// the grant's ticket}, then the weights' slice; with followers, a push is first acknowledged on
// kPsAckTag with {the update's place in the order (the version it applied to), the grants made of
// that version, its staleness, its lag}.
// To another server (a follower): kPsPush {kind, 1 when skipped} and the gradient's slice, then kPsOrder {kind, place,
// grants, staleness, lag} once server 0 acknowledged it; kPsRead {kind, version} for the weights of the version server
// 0 granted; kPsDone {kind, the ticket it leaves with unpushed or -1} when the worker finishes (sent
// with server 0's; its next read, of the final weights, is its last message); kPsPark as above. Its
// reply to a read: header {version}, then the weights' slice.
enum PsKind : int64_t { kPsPull = 1, kPsPush = 2, kPsDone = 3, kPsPark = 4, kPsOrder = 5, kPsRead = 6 };
constexpr int kPsHeaderTag = 81;
constexpr int kPsPayloadTag = 82;
constexpr int kPsAckTag = 83;
constexpr int kPsBufferTag = 84;  // worker 0 to server 0 after each push: its buffers, packed
constexpr int64_t kPsHeaderSize = 6;

struct PsPairs {
  PsRole role;
  /// A worker's: one group per server; a server's: one group per worker. In each, the worker
  /// is group rank 0 and the server group rank 1.
  std::vector<std::shared_ptr<Communicator>> peers;
  std::vector<int> peerRanks;  ///< the peer's rank in the world communicator
  /// A server's: the servers' group, server j its rank j (their optimizer's checkpoint entries
  /// travel over it); null on a worker.
  std::shared_ptr<Communicator> servers;
  int rank = 0;  ///< this rank in the world communicator
};

/// Collective over `comm`: checks the options and splits it into the pairs.
std::unique_ptr<PsPairs> connectPsPairs(const std::shared_ptr<Communicator>& comm, const PsOptions& options);

/// Float32 parameters (throws Error naming the first that is not) flattened into one tensor,
/// broadcast from rank 0 over `comm` (collective): every rank starts from rank 0's weights.
at::Tensor broadcastFlatParameters(Communicator& comm, const std::vector<at::Tensor>& parameters);
int64_t totalElements(const std::vector<at::Tensor>& parameters);

/// The bytes of `buffers` (any dtypes) one after another, on the CPU: what worker 0 sends with
/// each push so that server 0 holds its buffers (packBuffers writes them into `packed`, of
/// packedBufferBytes bytes), and their inverse (unpackBuffers copies `packed` into tensors of the
/// same dtypes and shapes).
void packBuffers(const std::vector<at::Tensor>& buffers, at::Tensor& packed);
int64_t packedBufferBytes(const std::vector<at::Tensor>& buffers);
void unpackBuffers(const at::Tensor& packed, const std::vector<at::Tensor>& buffers);

/// "parameter server 1 (rank 4)" / "worker 0 (rank 0)".
std::string psPeerName(const PsPairs& pairs, size_t peer);

}  // namespace lockstep::detail
