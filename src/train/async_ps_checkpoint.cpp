// async_ps checkpoints: the servers' ranges and optimizer pieces written as one Trainer checkpoint.
#include "train/async_ps_checkpoint.h"

#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <fmt/format.h>

#include <string>
#include <vector>

#include "lockstep/comm/archive_transfer.h"
#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "train/training_state.h"

namespace lockstep::detail {

namespace {

constexpr const char* kShard = "shard";

/// The servers' ranges concatenated in server order: the flattened parameters (server 0).
at::Tensor gatherWeights(const PsCheckpointWriter& w, const at::Tensor& shard) {
  std::vector<at::Tensor> pieces{shard.detach()};
  for (int j = 1; j < w.role.servers; ++j) {
    TensorArchive theirs =
        receiveArchive(*w.world, w.role.workers + j, fmt::format("parameter server {}'s checkpoint part", j));
    if (!theirs.contains(kShard)) throw Error(fmt::format("parameter server {} sent no weights", j));
    pieces.push_back(theirs.getTensor(kShard).reshape({-1}));
  }
  return at::cat(pieces);
}

}  // namespace

void PsCheckpointWriter::write(int64_t updates, ParameterServer& server) const {
  if (role.index != 0) {
    TensorArchive local(fmt::format("parameter server {}'s checkpoint part", role.index));
    local.putTensor(kShard, server.shard().detach());
    sendArchive(*world, local, role.workers);
    server.saveOptimizerState(nullptr);
    return;
  }
  const at::Tensor whole = gatherWeights(*this, server.shard());
  TensorArchive archive("checkpoint");
  {
    c10::NoGradGuard noGrad;
    int64_t offset = 0;
    for (auto& p : model->parameters()) {
      p.copy_(whole.narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
  }
  saveModelState(*model, archive);
  server.saveOptimizerState(&archive);
  const int64_t batches = updates * accumulation;
  const Position at{updates, batches / batchesPerEpoch, batches % batchesPerEpoch};
  putTrainingMeta(archive, at, /*worldSize=*/1, *options, RunMetrics{});
  const std::string path = dir->save(updates, archive);
  log::info(fmt::format("checkpoint {} written ({} updates)", path, updates));
}

}  // namespace lockstep::detail
