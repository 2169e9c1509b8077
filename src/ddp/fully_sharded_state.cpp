// fully_sharded_state.cpp — ZeRO-3's model entries of a checkpoint: written
// whole by rank 0, one unit gathered at a time (the optimizer's entries are
// PieceOptimizer's), and read back into this rank's shards from a DDP or a
// sharded run's checkpoint.
#include <ATen/native/Resize.h>
#include <torch/nn/module.h>

#include <set>

#include "ddp/fully_sharded_impl.h"
#include "lockstep/common/tensor_archive.h"
#include "lockstep/train/checkpoint.h"

namespace lockstep {

void FullyShardedDataParallel::Impl::saveModel(TensorArchive* archive) {
  at::NoGradGuard noGrad;
  std::set<const void*> sharded;
  for (const auto& p : params) sharded.insert(p.unsafeGetTensorImpl());
  for (size_t u = 0; u < units.size(); ++u) {
    ensureGathered(u);
    if (u + 1 < units.size()) launchGather(u + 1);
    if (archive != nullptr) {
      for (size_t i : units[u].params) archive->putTensor("model/" + names[i], params[i].detach().clone());
    }
    free(u);
  }
  if (archive == nullptr) return;
  for (const auto& p : module->named_parameters(true)) {  // frozen parameters: whole on every rank
    if (p.value().defined() && !sharded.count(p.value().unsafeGetTensorImpl()))
      archive->putTensor("model/" + p.key(), p.value());
  }
  for (const auto& b : module->named_buffers(true)) {
    if (b.value().defined()) archive->putTensor("model/" + b.key(), b.value());
  }
}

void FullyShardedDataParallel::Impl::loadModel(const TensorArchive& archive) {
  at::NoGradGuard noGrad;
  freeAll();
  // Every unit whole for a moment (no communication: each rank reads the same archive), so the
  // model's own checks and copies apply; then each rank keeps its shard.
  for (auto& unit : units) {
    const auto bytes = static_cast<size_t>(unit.part * world()) * sizeof(float);
    c10::StorageImpl* storage = unit.whole.storage().unsafeGetStorageImpl();
    if (storage->nbytes() != bytes) at::native::resize_bytes_cpu(storage, bytes);
    unit.whole.zero_();
    unit.gathered = true;
  }
  try {
    loadModelState(archive, *module);
  } catch (...) {
    freeAll();
    throw;
  }
  for (auto& unit : units) unit.shard.copy_(unit.whole.narrow(0, unit.part * rank(), unit.part));
  freeAll();
}

}  // namespace lockstep
