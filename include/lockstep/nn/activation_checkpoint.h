// lockstep/nn/activation_checkpoint.h — trade compute for memory: activation checkpointing.
//
//   // inside a module's forward():
//   x = lockstep::checkpoint([block](const at::Tensor& in) { return block->forward(in); }, x, {{block}});
//   // or a chain of stages in `segments` groups:
//   x = lockstep::checkpointSequential(sequential, /*segments=*/4, x);
//
// A checkpointed function runs forward without keeping its intermediate
// activations (autograd records one node for the whole call, holding only the
// inputs); when backward reaches that node it runs the function again with
// autograd on and backpropagates through the recomputation. Peak activation
// memory of a chain of k segments then holds the segment inputs plus one
// segment's activations, for about one extra forward per step.
//
// Exactness, which the tests check bit for bit against the plain call:
// - RNG: the states of the CPU generator and of the default generator of
//   every other device an input lives on (a GPU's) are saved before the first
//   forward and restored for the recomputation (dropout draws the same mask),
//   then put back, so the random stream after backward is the plain run's.
// - Buffers: the recomputation must not update BatchNorm running statistics a
//   second time. The buffers of the modules named in `modules` are copied just
//   before the recomputation and restored after it, so they change once per
//   forward, as without checkpointing. A generic callable must name the
//   modules whose buffers it updates; checkpointSequential names its own.
// - Autocast: the recomputation runs under the CPU and CUDA autocast state
//   the forward ran under (backward itself runs outside the caller's scope).
// - DDP: the parameters' gradients are produced inside the outer backward by
//   a nested one, so their autograd hooks (gradient buckets) fire once per
//   backward, in segment order — for a parameter used in one place only. A
//   parameter used in two segments, or in a segment and outside it (tied
//   weights), gets its hook once per backward pass it appears in, and DDP
//   then reports its gradient as arriving twice.
//
// The closure is called again in backward, after this call returned: capture
// by value what it uses (a module's shared pointer, not a reference to a local).
//
// With grad mode off (validation, generation) the function simply runs.
// Errors: a function that returns no tensor, or an undefined one, throws
// lockstep::Error naming the segment (`name`). Not for functions whose
// output depends on state other than the inputs, the parameters, the
// generators above and the named buffers.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
class SequentialImpl;
}  // namespace torch::nn

namespace lockstep {

struct ActivationCheckpointOptions {
  /// Modules (and their submodules) whose buffers the recomputation restores.
  std::vector<std::shared_ptr<torch::nn::Module>> modules;
  /// Save and replay the generators' states (dropout). Off: slightly cheaper, masks differ.
  bool preserveRngState = true;
  /// How errors name this call ("segment 2 of 4").
  std::string name = "checkpointed function";
};

using TensorsFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
using TensorFn = std::function<at::Tensor(const at::Tensor&)>;

/// Runs fn(inputs) without storing its activations; recomputes them in backward.
std::vector<at::Tensor> checkpoint(const TensorsFn& fn, const std::vector<at::Tensor>& inputs,
                                   const ActivationCheckpointOptions& options = {});
/// One tensor in, one out.
at::Tensor checkpoint(const TensorFn& fn, const at::Tensor& input, const ActivationCheckpointOptions& options = {});

/// One stage of a chain: what to run, and the module whose buffers it owns (may be null).
struct CheckpointStage {
  TensorFn fn;
  std::shared_ptr<torch::nn::Module> module;
};

/// Runs `stages` in order, split into `segments` groups of consecutive stages
/// (sizes differing by at most one, the longer ones last). Every group but the
/// last is checkpointed; the last runs normally, since backward needs its
/// activations at once (5 stages in 3 segments: 1, 2, 2 — three stages
/// recomputed, not four).
/// segments == 1 runs the chain plainly. segments < 1 or more segments than
/// stages -> lockstep::ConfigError naming both numbers.
at::Tensor checkpointSequence(const std::vector<CheckpointStage>& stages, int64_t segments, const at::Tensor& input,
                              bool preserveRngState = true);
/// The same over the children of a torch::nn::Sequential (each child one stage).
at::Tensor checkpointSequential(torch::nn::SequentialImpl& sequential, int64_t segments, const at::Tensor& input,
                                bool preserveRngState = true);

}  // namespace lockstep
