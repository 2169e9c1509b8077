// fully_sharded_state.cpp — ZeRO-3's model entries of a checkpoint: each
// parameter assembled on rank 0 from the ranks' shards while the file is
// written (the optimizer's entries are PieceOptimizer's, made the same way),
// and read back into this rank's shards from a DDP or a sharded run's checkpoint.
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <map>
#include <set>

#include "ddp/fully_sharded_impl.h"
#include "lockstep/comm/archive_transfer.h"
#include "lockstep/common/tensor_archive.h"
#include "lockstep/nn/model_state.h"

namespace lockstep {

void FullyShardedDataParallel::Impl::saveModelAndOptimizer(TensorArchive* archive) {
  // Each parameter is assembled on rank 0 from the ranks' pieces of their shards only when the file
  // is written (putAssembledTensor, comm/archive_transfer.h), in the entries' key order; the others send theirs
  // in that order now and wait for them with the optimizer's (save()).
  constexpr int kModelTag = 7202;
  std::map<std::string, size_t> byKey;
  for (size_t i = 0; i < params.size(); ++i) byKey[modelEntryKey(names[i])] = i;
  std::vector<std::vector<GradientPiece>> all(static_cast<size_t>(world()));
  for (int r = 0; r < world(); ++r)
    all[static_cast<size_t>(r)] = r == rank() ? pieces : gradientPieces(plan, numels, world(), r);
  auto pieceOf = [&](int r, size_t i) -> const GradientPiece* {
    for (const auto& piece : all[static_cast<size_t>(r)]) {
      if (piece.param == i) return &piece;  // a rank holds at most one piece of a parameter
    }
    return nullptr;
  };
  auto dataOf = [&](const GradientPiece& piece) {
    return units[piece.bucket].shard.narrow(0, piece.chunkOffset, piece.length);
  };
  if (rank() != 0) {
    LOCKSTEP_CHECK(archive == nullptr, "ZeRO-3 saveState: rank ", rank(), " was given an archive; rank 0 writes");
    // Posted after the optimizer's skeleton went (PieceOptimizer::save): sends complete in order.
    save(nullptr, [&] {
      for (const auto& [key, i] : byKey) {
        if (const GradientPiece* piece = pieceOf(rank(), i)) {
          pendingSends.push_back(comm->send(dataOf(*piece), 0, kModelTag));
        }
      }
    });
    return;
  }
  LOCKSTEP_CHECK(archive != nullptr, "ZeRO-3 saveState: rank 0 writes the checkpoint and needs an archive");
  for (const auto& [key, i] : byKey) {
    AssembledTensor whole{at::kFloat, params[i].sizes().vec(), {}};
    for (int r = 0; r < world(); ++r) {
      if (const GradientPiece* piece = pieceOf(r, i)) {
        whole.parts.push_back({r, piece->paramOffset, piece->length, r == 0 ? dataOf(*piece) : at::Tensor()});
      }
    }
    putAssembledTensor(*archive, key, std::move(whole), comm, kModelTag);
  }
  std::set<const void*> sharded;
  for (const auto& p : params) sharded.insert(p.unsafeGetTensorImpl());
  // Frozen parameters and buffers: whole on every rank.
  for (const auto& [key, tensor] : modelEntries(*module)) {
    if (!sharded.count(tensor.unsafeGetTensorImpl())) archive->putTensor(key, tensor);
  }
  save(archive);
}

void FullyShardedDataParallel::Impl::loadModel(const TensorArchive& archive) {
  c10::NoGradGuard noGrad;
  freeAll();
  // Every unit whole for a moment (no communication: each rank reads the same archive), so the
  // model's own checks and copies apply; then each rank keeps its shard.
  for (auto& unit : units) {
    unit.allocate();
    unit.whole.zero_();
    unit.gathered = true;
  }
  try {
    loadModelState(archive, *module);
  } catch (...) {
    freeAll();
    throw;
  }
  for (size_t u = 0; u < units.size(); ++u) {
    units[u].shard.copy_(units[u].whole.narrow(0, buckets[u].part * rank(), buckets[u].part));
  }
  freeAll();
}

}  // namespace lockstep
