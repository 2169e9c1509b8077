// async_ps checkpoints: the servers' ranges written as one Trainer checkpoint, and read back.
#include "train/async_ps_checkpoint.h"

#include <c10/core/GradMode.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <fmt/format.h>

#include <map>
#include <set>
#include <string>

#include "lockstep/comm/archive_transfer.h"
#include "lockstep/common/error.h"
#include "lockstep/common/logging.h"
#include "lockstep/optim/optimizer.h"
#include "train/training_state.h"

namespace lockstep::detail {

namespace {

constexpr const char* kFlat = "optimizer/param0/";

/// The servers' pieces of every flat tensor (the weights as "shard", then each optimizer state
/// tensor), concatenated in server order.
std::map<std::string, at::Tensor> gatherFlat(const PsCheckpointWriter& w, const TensorArchive& local) {
  std::map<std::string, std::vector<at::Tensor>> pieces;
  for (const auto& key : local.keys()) {
    if (local.kind(key) == TensorArchive::Kind::kTensor) pieces[key].push_back(local.getTensor(key).reshape({-1}));
  }
  for (int j = 1; j < w.role.servers; ++j) {
    TensorArchive theirs =
        receiveArchive(*w.world, w.role.workers + j, fmt::format("parameter server {}'s checkpoint part", j));
    for (auto& [key, list] : pieces) {
      if (!theirs.contains(key)) throw Error(fmt::format("parameter server {} sent no '{}'", j, key));
      list.push_back(theirs.getTensor(key).reshape({-1}));
    }
  }
  std::map<std::string, at::Tensor> whole;
  for (auto& [key, list] : pieces) whole[key] = at::cat(list);
  return whole;
}

}  // namespace

void PsCheckpointWriter::write(int64_t updates, const at::Tensor& shard, torch::optim::Optimizer& optimizer) const {
  TensorArchive local(fmt::format("parameter server {}'s checkpoint part", role.index));
  saveOptimizerState(optimizer, local);
  local.putTensor("shard", shard.detach());
  if (role.index != 0) {
    sendArchive(*world, local, role.workers);
    return;
  }
  std::map<std::string, at::Tensor> whole = gatherFlat(*this, local);
  const auto params = model->parameters();
  TensorArchive archive("checkpoint");
  {
    c10::NoGradGuard noGrad;
    int64_t offset = 0;
    for (auto& p : params) {
      p.copy_(whole["shard"].narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
  }
  saveModelState(*model, archive);
  for (const auto& key : local.keys("optimizer/")) {
    if (key.rfind("optimizer/param", 0) != 0) copyArchiveEntry(local, key, archive);
  }
  archive.putInt("optimizer/group0/params", static_cast<int64_t>(params.size()));
  const std::vector<std::string> stateKeys = local.keys(kFlat);
  int64_t offset = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    for (const auto& key : stateKeys) {
      const std::string target = optimizerParamPrefix(i) + key.substr(std::string(kFlat).size());
      if (local.kind(key) != TensorArchive::Kind::kTensor) {
        copyArchiveEntry(local, key, archive, target);
      } else {
        archive.putTensor(target, whole[key].narrow(0, offset, params[i].numel()).view(params[i].sizes()));
      }
    }
    offset += params[i].numel();
  }
  const int64_t batches = updates * accumulation;
  const Position at{updates, batches / batchesPerEpoch, batches % batchesPerEpoch};
  putTrainingMeta(archive, at, /*worldSize=*/1, *options, RunMetrics{});
  const std::string path = dir->save(updates, archive);
  log::info(fmt::format("checkpoint {} written ({} updates)", path, updates));
}

TensorArchive psShardOptimizerEntries(const TensorArchive& archive, const std::vector<at::Tensor>& params,
                                      std::pair<int64_t, int64_t> range) {
  const std::string& label = archive.label();
  TensorArchive mine(label);
  if (!archive.contains("optimizer/groups")) return mine;  // let loadOptimizerState name what is missing
  const int64_t groups = archive.getInt("optimizer/groups");
  const int64_t count = archive.contains("optimizer/group0/params") ? archive.getInt("optimizer/group0/params") : -1;
  if (groups != 1 || count != static_cast<int64_t>(params.size())) {
    throw CheckpointError(
        fmt::format("checkpoint {}: its optimizer has {} group(s), the first of {} parameters; async_ps servers "
                    "resume from one group over all {} parameters of the model",
                    label, groups, count, params.size()));
  }
  for (const auto& key : archive.keys("optimizer/")) {
    if (key.rfind("optimizer/param", 0) != 0) copyArchiveEntry(archive, key, mine);
  }
  mine.putInt("optimizer/group0/params", 1);
  // Which entries each parameter has: all must have the same (state for every parameter, or for none).
  std::set<std::string> names;
  for (const auto& key : archive.keys(optimizerParamPrefix(0)))
    names.insert(key.substr(optimizerParamPrefix(0).size()));
  for (size_t i = 1; i < params.size(); ++i) {
    std::set<std::string> theirs;
    for (const auto& key : archive.keys(optimizerParamPrefix(i)))
      theirs.insert(key.substr(optimizerParamPrefix(i).size()));
    if (theirs != names) {
      throw CheckpointError(fmt::format(
          "checkpoint {}: parameter {} has other optimizer entries than parameter 0; async_ps servers keep one "
          "state over all parameters and cannot resume from state kept for only some of them",
          label, i));
    }
  }
  for (const auto& name : names) {
    const std::string first = optimizerParamPrefix(0) + name, target = std::string(kFlat) + name;
    if (archive.kind(first) != TensorArchive::Kind::kTensor) {
      copyArchiveEntry(archive, first, mine, target);
      continue;
    }
    std::vector<at::Tensor> flat;
    for (size_t i = 0; i < params.size(); ++i) {
      at::Tensor t = archive.getTensor(optimizerParamPrefix(i) + name);
      if (t.numel() != params[i].numel()) {
        throw CheckpointError(fmt::format("checkpoint {}: '{}{}' has {} elements, the parameter {}", label,
                                          optimizerParamPrefix(i), name, t.numel(), params[i].numel()));
      }
      flat.push_back(t.reshape({-1}));
    }
    mine.putTensor(target, at::cat(flat).narrow(0, range.first, range.second - range.first).clone());
  }
  return mine;
}

}  // namespace lockstep::detail
