// piece_optimizer.h — the optimizer of a sharded strategy over this rank's
// pieces of the parameters, and its checkpoint entries in the whole
// optimizer's format (optim/optimizer.h): ZeRO-2 (sharded_data_parallel.cpp)
// and ZeRO-3 (fully_sharded_data_parallel.cpp) both cut the parameters into
// groups (buckets, units), each group's flattened elements split evenly over
// the ranks (gradientPieces), and step an optimizer over the rank's pieces.
#pragma once

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <utility>
#include <vector>

#include "lockstep/comm/communicator.h"
#include "lockstep/ddp/sharded_data_parallel.h"

namespace lockstep {

class TensorArchive;

namespace detail {

struct PieceOptimizer {
  std::shared_ptr<Communicator> comm;
  std::vector<at::Tensor> params;  ///< trainable parameters, registration order (shapes, identity)
  std::vector<int64_t> numels;
  std::vector<std::vector<size_t>> plan;  ///< the groups (buckets, units): parameter indices, in order
  std::vector<GradientPiece> pieces;      ///< this rank's
  std::vector<at::Tensor> pieceViews;     ///< what the optimizer updates: one flat float32 view per piece

  std::unique_ptr<torch::optim::Optimizer> optimizer;  ///< over pieceViews
  std::vector<size_t> optimizerParams;                 ///< whole optimizer position -> parameter index
  std::vector<int64_t> groupSizes;                     ///< parameters per group of the whole optimizer

  int rank() const { return comm->rank(); }
  int world() const { return comm->size(); }

  /// Rebuilds `whole` (over params) over pieceViews: same type (SGD, Adam, AdamW), groups and options.
  void buildOptimizer(torch::optim::Optimizer& whole);
  /// Position in the whole optimizer of each of `rank`'s pieces, in the
  /// pieces optimizer's order, with the piece.
  std::vector<std::pair<size_t, GradientPiece>> optimizerOrder(int rank) const;
  /// Collective: rank 0 (archive non-null) receives the whole optimizer's entries.
  void save(TensorArchive* archive);
  /// Keeps this rank's pieces of the whole optimizer's state in `archive`, checking it all first.
  void load(const TensorArchive& archive, bool report);
};

}  // namespace detail
}  // namespace lockstep
