// sharded_optimizer.cpp — ZeRO stage 1 (lockstep/optim/sharded_optimizer.h).
#include "lockstep/optim/sharded_optimizer.h"

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "lockstep/comm/archive_transfer.h"
#include "lockstep/common/error.h"
#include "lockstep/common/tensor_archive.h"
#include "lockstep/optim/optimizer.h"

namespace lockstep {
namespace {

std::string paramPrefix(size_t index) { return fmt::format("optimizer/param{}/", index); }

// send/recv tag of the state tensors a worker sends the writer, in the order the file takes them.
constexpr int kStateTag = 7301;

}  // namespace

std::vector<int> shardParameters(const std::vector<int64_t>& numels, int worldSize) {
  LOCKSTEP_CHECK(worldSize >= 1, "shardParameters: worldSize = ", worldSize, ", expected at least 1");
  std::vector<int64_t> load(static_cast<size_t>(worldSize), 0);
  std::vector<int> owners;
  owners.reserve(numels.size());
  for (int64_t n : numels) {
    int owner = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    load[static_cast<size_t>(owner)] += n;
    owners.push_back(owner);
  }
  return owners;
}

ShardedOptimizer::ShardedOptimizer(std::unique_ptr<torch::optim::Optimizer> optimizer,
                                   std::shared_ptr<Communicator> comm)
    : optimizer_(std::move(optimizer)), comm_(std::move(comm)) {
  LOCKSTEP_CHECK(optimizer_ != nullptr && comm_ != nullptr, "ShardedOptimizer needs an optimizer and a communicator");
  optimizerTypeOf(*optimizer_);  // SGD, Adam or AdamW: their step() skips a parameter without a gradient
  std::vector<int64_t> numels;
  for (auto& group : optimizer_->param_groups()) {
    for (const auto& p : group.params()) {
      params_.push_back(p);
      numels.push_back(p.numel());
    }
  }
  owners_ = shardParameters(numels, comm_->size());
  ownedBy_.resize(static_cast<size_t>(comm_->size()));
  for (size_t i = 0; i < params_.size(); ++i) {
    // Detached aliases: the broadcast writes into them on the communicator's thread, outside autograd.
    ownedBy_[static_cast<size_t>(owners_[i])].push_back(params_[i].detach());
  }
}

ShardedOptimizer::~ShardedOptimizer() = default;

int64_t ShardedOptimizer::ownedElements() const {
  int64_t n = 0;
  for (const auto& p : ownedBy_[static_cast<size_t>(comm_->rank())]) n += p.numel();
  return n;
}

int64_t ShardedOptimizer::stateBytes() const { return optimizerStateBytes(*optimizer_); }

void ShardedOptimizer::step() {
  const int rank = comm_->rank();
  // Hide the gradients of parameters other ranks own, so the optimizer neither
  // updates them nor creates state for them; put them back afterwards (DDP may
  // hold them as views of its buckets).
  std::vector<std::pair<size_t, at::Tensor>> hidden;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (owners_[i] != rank && params_[i].grad().defined()) {
      hidden.emplace_back(i, params_[i].grad());
      params_[i].mutable_grad() = at::Tensor();
    }
  }
  auto restore = [&] {
    for (auto& [i, grad] : hidden) params_[i].mutable_grad() = grad;
  };
  try {
    optimizer_->step();
  } catch (...) {
    restore();
    throw;
  }
  restore();
  if (comm_->size() == 1) return;
  std::vector<WorkHandle> works;
  for (int r = 0; r < comm_->size(); ++r) {
    auto& owned = ownedBy_[static_cast<size_t>(r)];
    if (!owned.empty()) works.push_back(comm_->broadcast(owned, r));
  }
  for (auto& work : works) work->wait();
}

void ShardedOptimizer::saveState(TensorArchive* archive) {
  const int writer = 0;
  if (comm_->rank() != writer) {
    LOCKSTEP_CHECK(archive == nullptr, "ShardedOptimizer::saveState: rank ", comm_->rank(),
                   " was given an archive; only rank 0 writes the checkpoint");
    sendShard(writer);
    return;
  }
  LOCKSTEP_CHECK(archive != nullptr, "ShardedOptimizer::saveState: rank 0 writes the checkpoint and needs an archive");
  saveOptimizerState(*optimizer_, *archive);  // its own shard, and every group's options
  for (int r = 0; r < comm_->size(); ++r) {
    if (r != writer) receiveShard(r, *archive);
  }
}

void ShardedOptimizer::sendShard(int writer) {
  TensorArchive shard("optimizer shard");
  saveOptimizerState(*optimizer_, shard);  // state only for the owned parameters
  sendArchive(*comm_, skeletonOf(shard), writer);
  std::vector<WorkHandle> sends;
  for (const auto& key : shard.keys()) {  // the order the writer writes them
    if (shard.kind(key) == TensorArchive::Kind::kTensor) {
      sends.push_back(comm_->send(shard.getTensor(key).contiguous(), writer, kStateTag));
    }
  }
  for (auto& work : sends) work->wait();
}

void ShardedOptimizer::receiveShard(int from, TensorArchive& archive) {
  TensorArchive skeleton = receiveArchive(*comm_, from, fmt::format("rank {}'s optimizer shard", from));
  for (size_t i = 0; i < params_.size(); ++i) {
    if (owners_[i] != from) continue;
    for (const auto& key : skeleton.keys(paramPrefix(i))) {
      if (skeleton.kind(key) != TensorArchive::Kind::kTensor) {
        copyArchiveEntry(skeleton, key, archive);
        continue;
      }
      // SGD's momentum and Adam's moments have their parameter's shape; the owner sends it whole.
      AssembledTensor whole{skeleton.getTensor(key).scalar_type(), params_[i].sizes().vec(), {}};
      whole.parts.push_back({from, 0, params_[i].numel(), at::Tensor()});
      putAssembledTensor(archive, key, std::move(whole), comm_, kStateTag);
    }
  }
}

void ShardedOptimizer::loadState(const TensorArchive& archive, bool report) {
  loadOptimizerState(*optimizer_, archive, report);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (owners_[i] != comm_->rank()) optimizer_->state().erase(optimizerStateKey(params_[i]));
  }
}

}  // namespace lockstep
