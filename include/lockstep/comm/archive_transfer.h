// lockstep/comm/archive_transfer.h — a TensorArchive sent from one rank to
// another (sharded optimizers gather their shards into the checkpoint writer).
//
// The archive travels serialized, as two point-to-point messages: its length,
// then its bytes. Both sides call in the same order for the same pair of ranks.
//
// A checkpoint writer need not hold the other ranks' tensors at once: they
// send a skeleton (skeletonOf), then each tensor's part in the key order of the
// writer's archive, where each entry is a tensor source (putAssembledTensor)
// that receives the parts only when the archive is written.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "lockstep/comm/communicator.h"
#include "lockstep/common/tensor_archive.h"

namespace lockstep {

/// Sends `archive` to rank `dst`; returns when it is on its way.
void sendArchive(Communicator& comm, const TensorArchive& archive, int dst);
/// Receives what rank `src` sent with sendArchive; `label` names it in errors.
TensorArchive receiveArchive(Communicator& comm, int src, std::string label);

/// Collective: rank `root`'s `archive` (null elsewhere) on every rank, serialized once on the root
/// (a tensor source is read there: its parts arrive as it is written); `label` names it in errors.
TensorArchive broadcastArchive(Communicator& comm, const TensorArchive* archive, int root, std::string label);
/// Copies entry `key` of `from` into `to` under `toKey` (empty: the same key), whatever its kind.
void copyArchiveEntry(const TensorArchive& from, const std::string& key, TensorArchive& to,
                      const std::string& toKey = {});

/// `archive` without tensor bytes: each tensor replaced by an empty one of its dtype.
TensorArchive skeletonOf(const TensorArchive& archive);

/// A tensor the writer assembles from the ranks' parts of it while it writes the entry.
struct AssembledTensor {
  struct Part {
    int rank;
    int64_t offset, length;  ///< elements of the flattened tensor
    at::Tensor local;        ///< the writer's own part; the others arrive by recv
  };
  c10::ScalarType dtype;
  std::vector<int64_t> sizes;
  std::vector<Part> parts;  ///< in rank order, covering every element once
};
/// On the writer: `key` becomes a tensor source that, when `archive` is written, fills a new
/// tensor from `whole`'s parts (recv from their ranks with `tag`); each other rank sends its parts
/// in the key order of the archive. Checks the parts cover the tensor (InternalError).
void putAssembledTensor(TensorArchive& archive, const std::string& key, AssembledTensor whole,
                        std::shared_ptr<Communicator> comm, int tag);

}  // namespace lockstep
