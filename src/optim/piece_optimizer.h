// piece_optimizer.h — the optimizer of a sharded strategy over this rank's
// pieces of the parameters, and its checkpoint entries in the whole
// optimizer's format (optim/optimizer.h): ZeRO-1 (sharded_optimizer.cpp),
// ZeRO-2 (ddp/sharded_data_parallel.cpp) and ZeRO-3
// (ddp/fully_sharded_data_parallel.cpp) cut the parameters into groups (all of
// them; buckets; units), each group's flattened elements split evenly over the
// ranks (gradientPieces), and step an optimizer over the rank's pieces. The
// parameter servers (ps/) cut one group of all parameters over the servers and
// step it over views of a server's shard.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/comm/communicator.h"
#include "lockstep/optim/sharded_optimizer.h"

namespace lockstep {

class TensorArchive;

namespace detail {

struct PieceOptimizer {
  std::shared_ptr<Communicator> comm;
  std::vector<at::Tensor> params;  ///< trainable parameters, registration order (shapes, identity)
  std::vector<std::string> names;
  std::vector<int64_t> numels;
  std::vector<std::vector<size_t>> plan;  ///< the groups (buckets, units): parameter indices, in order
  std::vector<GradientPiece> pieces;      ///< this rank's
  std::vector<at::Tensor> pieceViews;     ///< what the optimizer updates: one flat float32 view per piece

  std::unique_ptr<torch::optim::Optimizer> optimizer;  ///< over pieceViews
  std::vector<size_t> optimizerParams;                 ///< whole optimizer position -> parameter index
  std::vector<int64_t> groupSizes;                     ///< parameters per group of the whole optimizer

  int rank() const { return comm->rank(); }

  /// Takes `module`'s trainable parameters into params, names and numels; each must be a
  /// contiguous float32 CPU tensor (Error naming it and `strategy` otherwise).
  void collectParameters(torch::nn::Module& module, const char* strategy);
  int world() const { return comm->size(); }
  /// float32 on the parameters' device (the CPU when there are none): the buckets' and parts' options.
  at::TensorOptions floatOptions() const {
    return at::TensorOptions()
        .dtype(at::kFloat)
        .device(params.empty() ? c10::Device(c10::kCPU) : params.front().device());
  }

  /// A piece's elements as a flat view of its parameter, detached: updates and collectives write
  /// into the parameter outside autograd.
  at::Tensor viewOf(const GradientPiece& piece) const {
    return params[piece.param].detach().view({-1}).narrow(0, piece.paramOffset, piece.length);
  }
  /// Parameter elements this rank updates (its pieces').
  int64_t ownedElements() const;
  /// Collective: scales the pieces' gradients so the norm over the whole model is at most maxNorm
  /// (as torch::nn::utils::clip_grad_norm_, the squares summed in float64); returns the norm before.
  double clipGradNorm(double maxNorm);
  /// Bytes of the parameters' own .grad (what noSync() accumulated).
  int64_t wholeGradientBytes() const;

  /// Rebuilds `whole` (over params) over pieceViews: same type (SGD, Adam, AdamW), groups and options.
  void buildOptimizer(torch::optim::Optimizer& whole);
  /// Position in the whole optimizer of each of `rank`'s pieces, in the
  /// pieces optimizer's order, with the piece.
  std::vector<std::pair<size_t, GradientPiece>> optimizerOrder(int rank) const;
  /// Collective: rank 0 (archive non-null) gets the whole optimizer's entries, each state tensor
  /// assembled from the ranks' pieces only when the archive is written (the other ranks send them
  /// then and return once sent): rank 0 holds one whole state tensor at a time.
  /// `afterSkeleton` runs on the other ranks once the writer has their skeleton, before their
  /// pieces are sent: sends of entries the writer writes before the optimizer's (ZeRO-3's model)
  /// go there, since a rank's sends complete in the order they were posted.
  void save(TensorArchive* archive, const std::function<void()>& afterSkeleton = {});
  /// Waits for the sends of this rank's pieces (they complete while rank 0 writes the file).
  void finishSends();
  std::vector<WorkHandle> pendingSends;
  /// Keeps this rank's pieces of the whole optimizer's state in `archive`, checking it all first.
  void load(const TensorArchive& archive, bool report);
};

}  // namespace detail
}  // namespace lockstep
