// lockstep/optim/sharded_optimizer.h — ZeRO stage 1: the optimizer state split
// across the ranks instead of held whole by each.
//
// Every rank keeps the whole model and receives the whole averaged gradients
// (DistributedDataParallel does that). The parameters, flattened one after the
// other in the optimizer's order, are cut into N equal parts (the last one
// shorter by the padding): rank r updates part r only — a piece of each
// parameter the part covers, a view into the parameter — so it keeps optimizer
// state for 1/N of the elements whatever the sizes of the parameters (one
// 4096×4096 layer does not land on one rank). After the update every rank
// sends its pieces to every other rank, point to point from and into the
// parameters themselves (of each pair the lower rank sends first, the order
// NCCL needs), so each rank ends the step with the parameters a DDP run
// with the whole optimizer would have: bit for bit, since SGD, Adam and AdamW
// update each element from its own gradient and state only.
//
// The optimizer passed in is over ALL parameters, as for DDP (SGD, Adam or
// AdamW, any parameter groups; contiguous float32 parameters on one device, the
// CPU or a GPU); it is
// rebuilt over this rank's pieces with the same type, groups and options, and
// optimizer() is that one (set learning rates there).
//
// Checkpoints: saveState() writes exactly the entries saveOptimizerState()
// writes for the whole optimizer (optim/optimizer.h), each parameter's state
// assembled from the ranks' pieces on the writing rank, so a sharded run's
// checkpoint loads into a DDP run and the other way round; loadState()
// restores the whole state's entries for this rank's pieces.
//
// Collective: construction, step(), saveState() and loadState() are called by
// every rank in the same order. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "lockstep/comm/communicator.h"

namespace torch::optim {
class Optimizer;
}

namespace lockstep {

class TensorArchive;
namespace detail {
struct PieceOptimizer;
}

/// The sharded strategies cut groups of parameters (ZeRO-1: all of them;
/// ZeRO-2: a gradient bucket; ZeRO-3: a unit) into equal parts, one per rank.
/// A piece is where one rank's part of a group cuts one parameter.
struct GradientPiece {
  size_t param = 0;         ///< index among the parameters the groups are made of
  size_t bucket = 0;        ///< the group's index
  int64_t paramOffset = 0;  ///< first element, in the flattened parameter
  int64_t length = 0;       ///< elements
  int64_t chunkOffset = 0;  ///< first element, in the rank's part of the group
};

/// The pieces of `rank` for groups of the given parameters (numels, in group
/// order each) over `worldSize` ranks, in group then parameter order. A
/// group's n elements are cut into parts of ceil(n / worldSize).
std::vector<GradientPiece> gradientPieces(const std::vector<std::vector<size_t>>& groups,
                                          const std::vector<int64_t>& numels, int worldSize, int rank);

class ShardedOptimizer {
 public:
  /// `optimizer` is over every parameter of the model; `comm` the data-parallel group.
  ShardedOptimizer(std::unique_ptr<torch::optim::Optimizer> optimizer, std::shared_ptr<Communicator> comm);
  ~ShardedOptimizer();
  ShardedOptimizer(const ShardedOptimizer&) = delete;
  ShardedOptimizer& operator=(const ShardedOptimizer&) = delete;

  /// Updates this rank's pieces from the parameters' gradients (every gradient
  /// must already be averaged), then sends them to every other rank and
  /// receives theirs (point to point, into the parameters).
  /// Gradients are left as they were.
  void step();
  /// The optimizer over this rank's pieces: same type, groups and options as the one given.
  torch::optim::Optimizer& optimizer();

  /// This rank's pieces (the parameters in the optimizer's order, one group).
  const std::vector<GradientPiece>& pieces() const;
  /// Parameter elements this rank updates.
  int64_t ownedElements() const;
  /// Bytes of optimizer state this rank holds now.
  int64_t stateBytes() const;

  /// Collective. `archive` is non-null on rank 0 only (the rank that writes
  /// checkpoints, as in the Trainer), which receives the whole optimizer's
  /// entries; the others pass null and send it their pieces: each state tensor
  /// only when rank 0 writes the archive (its entry is assembled then), so
  /// they return once it has and rank 0 must write it (once).
  void saveState(TensorArchive* archive);
  /// Restores the whole optimizer's state from `archive` (as loadOptimizerState)
  /// and keeps only this rank's pieces of it. Every rank passes the same archive.
  void loadState(const TensorArchive& archive, bool report);

 private:
  std::unique_ptr<detail::PieceOptimizer> impl_;
  std::vector<std::vector<at::Tensor>> piecesOf_;  ///< each rank's pieces: views of the parameters it updates
};

}  // namespace lockstep
