// piece_optimizer.cpp — a sharded strategy's optimizer over this rank's pieces, and its
// checkpoint entries in the whole optimizer's format (optim/optimizer.h):
// saving assembles each parameter's state from the ranks' pieces on the
// writing rank, one rank at a time; loading cuts this rank's pieces out of
// the whole state after checking every entry against its parameter.
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <fmt/format.h>

#include <map>
#include <set>

#include "lockstep/comm/archive_transfer.h"
#include "lockstep/common/error.h"
#include "lockstep/common/tensor_archive.h"
#include "lockstep/common/tensor_text.h"
#include "lockstep/optim/fused_optimizers.h"
#include "lockstep/optim/grad_clip.h"
#include "lockstep/optim/optimizer.h"
#include "optim/piece_optimizer.h"

namespace lockstep::detail {
namespace {

// send/recv tags of the pieces a checkpoint is assembled from, in the order the writer writes them.
constexpr int kStateTag = 7201;

template <typename Optim, typename Options>
std::unique_ptr<torch::optim::Optimizer> rebuild(std::vector<torch::optim::OptimizerParamGroup> groups,
                                                 const torch::optim::OptimizerOptions& defaults) {
  return std::make_unique<Optim>(std::move(groups), static_cast<const Options&>(defaults));
}

}  // namespace

void PieceOptimizer::collectParameters(torch::nn::Module& module, const char* strategy) {
  for (const auto& p : module.named_parameters(true)) {
    if (!p.value().requires_grad()) continue;
    const c10::Device device = params.empty() ? p.value().device() : params.front().device();
    LOCKSTEP_CHECK(p.value().scalar_type() == at::kFloat && p.value().device() == device && p.value().is_contiguous(),
                   strategy, ": parameter '", p.key(), "' is ", describeTensor(p.value()), " on ",
                   p.value().device().str(), "; ", strategy, " shards contiguous float32 parameters on one device (",
                   device.str(), ")");
    params.push_back(p.value());
    names.push_back(p.key());
    numels.push_back(p.value().numel());
  }
}

int64_t PieceOptimizer::ownedElements() const {
  int64_t n = 0;
  for (const auto& piece : pieces) n += piece.length;
  return n;
}

double PieceOptimizer::clipGradNorm(double maxNorm) {
  return lockstep::clipGradNorm(gradientsOf(pieceViews), maxNorm, comm.get());
}

int64_t PieceOptimizer::wholeGradientBytes() const {
  int64_t bytes = 0;
  for (const auto& p : params) {
    if (p.grad().defined()) bytes += static_cast<int64_t>(p.grad().nbytes());
  }
  return bytes;
}

void PieceOptimizer::buildOptimizer(torch::optim::Optimizer& whole) {
  OptimizerType type = OptimizerType::kSgd;
  try {
    type = optimizerTypeOf(whole);
  } catch (const Error&) {
    throw Error(
        "a sharded optimizer (zero1-3, the parameter servers) steps torch::optim::SGD, Adam or AdamW over its pieces "
        "of the parameters; the optimizer given is none of them");
  }
  std::map<const void*, size_t> indexOf;
  for (size_t i = 0; i < params.size(); ++i) indexOf[params[i].unsafeGetTensorImpl()] = i;
  std::vector<int> pieceOf(params.size(), -1);
  for (size_t k = 0; k < pieces.size(); ++k) pieceOf[pieces[k].param] = static_cast<int>(k);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (auto& group : whole.param_groups()) {
    std::vector<at::Tensor> mine;
    for (const auto& p : group.params()) {
      auto it = indexOf.find(p.unsafeGetTensorImpl());
      LOCKSTEP_CHECK(it != indexOf.end(), "the optimizer given to a sharded strategy holds a tensor (",
                     describeTensor(p), ") that is not a trainable parameter of its module");
      optimizerParams.push_back(it->second);
      if (pieceOf[it->second] >= 0) mine.push_back(pieceViews[static_cast<size_t>(pieceOf[it->second])]);
    }
    groupSizes.push_back(static_cast<int64_t>(group.params().size()));
    groups.emplace_back(std::move(mine), group.options().clone());
  }
  switch (type) {
    case OptimizerType::kSgd:
      optimizer = rebuild<FusedSGD, torch::optim::SGDOptions>(std::move(groups), whole.defaults());
      break;
    case OptimizerType::kAdam:
      optimizer = rebuild<FusedAdam, torch::optim::AdamOptions>(std::move(groups), whole.defaults());
      break;
    case OptimizerType::kAdamW:
      optimizer = rebuild<FusedAdamW, torch::optim::AdamWOptions>(std::move(groups), whole.defaults());
      break;
  }
}

std::vector<std::pair<size_t, GradientPiece>> PieceOptimizer::optimizerOrder(int r) const {
  std::vector<GradientPiece> theirs = r == rank() ? pieces : gradientPieces(plan, numels, world(), r);
  std::vector<int> pieceOf(params.size(), -1);
  for (size_t k = 0; k < theirs.size(); ++k) pieceOf[theirs[k].param] = static_cast<int>(k);
  std::vector<std::pair<size_t, GradientPiece>> order;
  for (size_t i = 0; i < optimizerParams.size(); ++i) {
    int k = pieceOf[optimizerParams[i]];
    if (k >= 0) order.emplace_back(i, theirs[static_cast<size_t>(k)]);
  }
  return order;
}

void PieceOptimizer::save(TensorArchive* archive, const std::function<void()>& afterSkeleton) {
  const int writer = 0;
  TensorArchive local(fmt::format("rank {}'s optimizer pieces", rank()));
  saveOptimizerState(*optimizer, local);
  if (rank() != writer) {
    LOCKSTEP_CHECK(archive == nullptr, "the sharded optimizer's saveState: rank ", rank(),
                   " was given an archive; only rank 0 writes the checkpoint");
    // The writer learns which entries exist from a skeleton (no tensor bytes), then receives each
    // piece while it writes the file, in the order it writes them: the entries' keys.
    sendArchive(*comm, skeletonOf(local), writer);
    if (afterSkeleton) afterSkeleton();
    std::map<std::string, at::Tensor> outgoing;
    auto order = optimizerOrder(rank());
    for (size_t j = 0; j < order.size(); ++j) {
      const std::string from = optimizerParamPrefix(j), to = optimizerParamPrefix(order[j].first);
      for (const auto& key : local.keys(from)) {
        if (local.kind(key) == TensorArchive::Kind::kTensor)
          outgoing[to + key.substr(from.size())] = local.getTensor(key);
      }
    }
    for (auto& [key, tensor] : outgoing) pendingSends.push_back(comm->send(tensor.contiguous(), writer, kStateTag));
    finishSends();
    return;
  }
  LOCKSTEP_CHECK(archive != nullptr,
                 "the sharded optimizer's saveState: rank 0 writes the checkpoint and needs an archive");
  for (const auto& key : local.keys("optimizer/")) {
    if (key.rfind("optimizer/param", 0) != 0) copyArchiveEntry(local, key, *archive);
  }
  for (size_t g = 0; g < groupSizes.size(); ++g) archive->putInt(optimizerGroupPrefix(g) + "params", groupSizes[g]);
  // Each state tensor is assembled from the ranks' pieces only when the file is written, one at a time.
  std::map<std::string, AssembledTensor> assembled;
  for (int r = 0; r < world(); ++r) {
    TensorArchive skeleton =
        r == writer ? TensorArchive() : receiveArchive(*comm, r, fmt::format("rank {}'s optimizer pieces", r));
    const TensorArchive& entries = r == writer ? local : skeleton;
    auto order = optimizerOrder(r);
    for (size_t j = 0; j < order.size(); ++j) {
      const auto& [i, piece] = order[j];
      const std::string from = optimizerParamPrefix(j), to = optimizerParamPrefix(i);
      for (const auto& key : entries.keys(from)) {
        const std::string target = to + key.substr(from.size());
        if (entries.kind(key) != TensorArchive::Kind::kTensor) {
          if (!archive->contains(target)) copyArchiveEntry(entries, key, *archive, target);
          continue;
        }
        AssembledTensor& whole = assembled[target];
        whole.dtype = entries.getTensor(key).scalar_type();
        whole.sizes = params[piece.param].sizes().vec();
        whole.parts.push_back(
            {r, piece.paramOffset, piece.length, r == writer ? entries.getTensor(key) : at::Tensor()});
      }
    }
  }
  for (auto& [key, whole] : assembled) putAssembledTensor(*archive, key, std::move(whole), comm, kStateTag);
  for (size_t i = 0; i < optimizerParams.size(); ++i) {
    if (!archive->contains(optimizerParamPrefix(i) + "present"))
      archive->putBool(optimizerParamPrefix(i) + "present", false);
  }
}

void PieceOptimizer::finishSends() {
  for (auto& work : pendingSends) work->wait();
  pendingSends.clear();
}

void PieceOptimizer::load(const TensorArchive& archive, bool report) {
  const std::string& label = archive.label();
  // Every optimizer entry must belong to this optimizer: type, groups, a group's option, a parameter's state.
  std::set<std::string> known{"optimizer/type", "optimizer/groups"};
  for (const auto& key : archive.keys("optimizer/")) {
    bool ok = known.count(key) > 0;
    for (size_t g = 0; !ok && g < groupSizes.size(); ++g) ok = key.rfind(optimizerGroupPrefix(g), 0) == 0;
    if (!ok && key.rfind("optimizer/param", 0) == 0) {
      size_t end = key.find('/', 15);
      std::string digits = key.substr(15, end == std::string::npos ? std::string::npos : end - 15);
      ok = end != std::string::npos && !digits.empty() && digits.size() < 10 &&
           digits.find_first_not_of("0123456789") == std::string::npos && std::stoul(digits) < optimizerParams.size();
    }
    if (!ok) {
      throw CheckpointError(
          fmt::format("checkpoint {} has an optimizer entry '{}' that this run's optimizer does not have", label, key));
    }
  }
  TensorArchive mine(label);
  for (const auto& key : {"optimizer/type", "optimizer/groups"}) copyArchiveEntry(archive, key, mine);
  auto order = optimizerOrder(rank());
  std::vector<int64_t> mineInGroup(groupSizes.size(), 0);
  size_t first = 0;
  for (size_t g = 0; g < groupSizes.size(); ++g) {
    const std::string prefix = optimizerGroupPrefix(g);
    if (archive.contains(prefix + "params") && archive.getInt(prefix + "params") != groupSizes[g]) {
      throw CheckpointError(fmt::format("checkpoint {}: optimizer group {} has {} parameters, this run's has {}", label,
                                        g, archive.getInt(prefix + "params"), groupSizes[g]));
    }
    for (const auto& key : archive.keys(prefix)) copyArchiveEntry(archive, key, mine);
    for (const auto& [i, piece] : order) {
      if (i >= first && i < first + static_cast<size_t>(groupSizes[g])) ++mineInGroup[g];
    }
    mine.putInt(prefix + "params", mineInGroup[g]);
    first += static_cast<size_t>(groupSizes[g]);
  }
  for (size_t j = 0; j < order.size(); ++j) {
    const auto& [i, piece] = order[j];
    const at::Tensor& p = params[piece.param];
    const std::string from = optimizerParamPrefix(i), to = optimizerParamPrefix(j);
    for (const auto& key : archive.keys(from)) {
      const std::string target = to + key.substr(from.size());
      if (archive.kind(key) != TensorArchive::Kind::kTensor) {
        copyArchiveEntry(archive, key, mine, target);
        continue;
      }
      at::Tensor whole = archive.getTensor(key);
      if (whole.scalar_type() != p.scalar_type() || !whole.sizes().equals(p.sizes())) {
        throw CheckpointError(fmt::format("checkpoint {}: optimizer state '{}' is {} but its parameter is {}", label,
                                          key, describeTensor(whole), describeTensor(p)));
      }
      mine.putTensor(target, whole.reshape({-1}).narrow(0, piece.paramOffset, piece.length).clone());
    }
  }
  loadOptimizerState(*optimizer, mine, report);
}

}  // namespace lockstep::detail
