// lockstep/comm/archive_transfer.h — a TensorArchive sent from one rank to
// another (sharded optimizers gather their shards into the checkpoint writer).
//
// The archive travels serialized, as two point-to-point messages: its length,
// then its bytes. Both sides call in the same order for the same pair of ranks.
#pragma once

#include <string>

#include "lockstep/comm/communicator.h"
#include "lockstep/common/tensor_archive.h"

namespace lockstep {

/// Sends `archive` to rank `dst`; returns when it is on its way.
void sendArchive(Communicator& comm, const TensorArchive& archive, int dst);
/// Receives what rank `src` sent with sendArchive; `label` names it in errors.
TensorArchive receiveArchive(Communicator& comm, int src, std::string label);

/// Copies entry `key` of `from` into `to` under `toKey` (empty: the same key), whatever its kind.
void copyArchiveEntry(const TensorArchive& from, const std::string& key, TensorArchive& to,
                      const std::string& toKey = {});

}  // namespace lockstep
