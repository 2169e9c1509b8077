// sharded_optimizer.cpp — ZeRO stage 1 (lockstep/optim/sharded_optimizer.h),
// and the cut of groups of parameters into equal parts that every sharded
// strategy uses.
#include "lockstep/optim/sharded_optimizer.h"

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "lockstep/common/error.h"
#include "lockstep/common/tensor_text.h"
#include "lockstep/optim/optimizer.h"
#include "optim/piece_optimizer.h"

namespace lockstep {

namespace {

/// The tag of zero1's gather messages (within MPI's guaranteed 0..32767).
constexpr int kGatherTag = 32001;

}  // namespace

std::vector<GradientPiece> gradientPieces(const std::vector<std::vector<size_t>>& groups,
                                          const std::vector<int64_t>& numels, int worldSize, int rank) {
  LOCKSTEP_CHECK(worldSize >= 1 && rank >= 0 && rank < worldSize, "gradientPieces: rank ", rank, " of ", worldSize);
  std::vector<GradientPiece> pieces;
  for (size_t g = 0; g < groups.size(); ++g) {
    int64_t elements = 0;
    for (size_t p : groups[g]) elements += numels.at(p);
    const int64_t part = (elements + worldSize - 1) / worldSize;
    const int64_t begin = part * rank, end = begin + part;
    int64_t offset = 0;
    for (size_t p : groups[g]) {
      const int64_t first = std::max(begin, offset), last = std::min(end, offset + numels[p]);
      if (first < last) pieces.push_back({p, g, first - offset, last - first, first - begin});
      offset += numels[p];
    }
  }
  return pieces;
}

ShardedOptimizer::ShardedOptimizer(std::unique_ptr<torch::optim::Optimizer> optimizer,
                                   std::shared_ptr<Communicator> comm)
    : impl_(std::make_unique<detail::PieceOptimizer>()) {
  LOCKSTEP_CHECK(optimizer != nullptr && comm != nullptr, "ShardedOptimizer needs an optimizer and a communicator");
  detail::PieceOptimizer& s = *impl_;
  s.comm = std::move(comm);
  const auto& groups = optimizer->param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& p : groups[g].params()) {
      const c10::Device device = s.params.empty() ? p.device() : s.params.front().device();
      LOCKSTEP_CHECK(p.scalar_type() == at::kFloat && p.device() == device && p.is_contiguous(), "zero1: parameter ",
                     s.params.size(), " of the optimizer (group ", g, ") is ", describeTensor(p), " on ",
                     p.device().str(), "; zero1 shards contiguous float32 parameters on one device (", device.str(),
                     ")");
      s.names.push_back(fmt::format("parameter {} of the optimizer", s.params.size()));
      s.params.push_back(p);
      s.numels.push_back(p.numel());
    }
  }
  std::vector<size_t> all(s.params.size());
  std::iota(all.begin(), all.end(), size_t{0});
  s.plan = {all};
  piecesOf_.resize(static_cast<size_t>(s.world()));
  for (int r = 0; r < s.world(); ++r) {
    auto pieces = gradientPieces(s.plan, s.numels, s.world(), r);
    for (const auto& piece : pieces) piecesOf_[static_cast<size_t>(r)].push_back(s.viewOf(piece));
    if (r == s.rank()) {
      s.pieces = std::move(pieces);
      s.pieceViews = piecesOf_[static_cast<size_t>(r)];
    }
  }
  s.buildOptimizer(*optimizer);
}

ShardedOptimizer::~ShardedOptimizer() = default;

torch::optim::Optimizer& ShardedOptimizer::optimizer() { return *impl_->optimizer; }
const std::vector<GradientPiece>& ShardedOptimizer::pieces() const { return impl_->pieces; }
int64_t ShardedOptimizer::ownedElements() const { return impl_->ownedElements(); }
int64_t ShardedOptimizer::stateBytes() const { return optimizerStateBytes(*impl_->optimizer); }

void ShardedOptimizer::step() {
  detail::PieceOptimizer& s = *impl_;
  for (size_t k = 0; k < s.pieces.size(); ++k) {
    const GradientPiece& piece = s.pieces[k];
    const at::Tensor& grad = s.params[piece.param].grad();
    // Without a gradient the piece is skipped, as the whole optimizer skips its parameter.
    s.pieceViews[k].mutable_grad() =
        grad.defined() ? grad.reshape({-1}).narrow(0, piece.paramOffset, piece.length) : at::Tensor();
  }
  s.optimizer->step();
  for (auto& view : s.pieceViews) view.mutable_grad() = at::Tensor();  // no alias of the gradients kept
  if (s.world() == 1) return;
  // Each rank's updated pieces to every other rank, point to point straight from and into the
  // parameters, all in flight at once. NCCL pairs the messages of two ranks in the order each
  // issued them, whatever their tags, and a send completes only once its receive is posted: of
  // each pair the lower rank sends first and the higher receives first, so that the two orders
  // match (both sending first deadlocks there; Gloo, which pairs by tag, hides it).
  std::vector<WorkHandle> works;
  for (int r = 0; r < s.world(); ++r) {
    if (r == s.rank()) continue;
    auto sendMine = [&] {
      for (auto& view : piecesOf_[static_cast<size_t>(s.rank())]) works.push_back(s.comm->send(view, r, kGatherTag));
    };
    auto receiveTheirs = [&] {
      for (auto& view : piecesOf_[static_cast<size_t>(r)]) works.push_back(s.comm->recv(view, r, kGatherTag));
    };
    if (s.rank() < r) {
      sendMine();
      receiveTheirs();
    } else {
      receiveTheirs();
      sendMine();
    }
  }
  for (auto& work : works) work->wait();
}

void ShardedOptimizer::saveState(TensorArchive* archive) { impl_->save(archive); }

void ShardedOptimizer::loadState(const TensorArchive& archive, bool report) { impl_->load(archive, report); }

}  // namespace lockstep
