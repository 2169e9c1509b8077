// lockstep/optim/optimizer.h — the optimizers the Trainer builds, and the
// state of any of them as checkpoint entries.
//
// OptimizerOptions names a built-in optimizer (SGD with momentum, Adam,
// AdamW) with its hyper-parameters; makeOptimizer() builds it over a
// parameter list. A program that wants another optimizer, or other parameter
// groups, passes an OptimizerFactory instead (TrainerOptions::optimizerFactory).
//
// saveOptimizerState()/loadOptimizerState() write and restore the state of an
// SGD, Adam or AdamW optimizer — built here or by a user's factory — keyed by
// parameter position, not by tensor address as LibTorch's own
// Optimizer::save does: the entries are then a pure function of the training
// state, the same in every process, so resumed and uninterrupted runs compare
// byte for byte. Keys written (under "optimizer/"):
//   type                       sgd, adam or adamw
//   groups                     number of parameter groups
//   group<g>/params            number of parameters in group g
//   group<g>/<option>          lr, weight_decay, and momentum, dampening, nesterov (sgd)
//                              or beta1, beta2, eps, amsgrad (adam, adamw)
//   param<i>/present           whether the i-th parameter (over all groups) has state
//   param<i>/<state>           momentum_buffer (sgd); step, exp_avg, exp_avg_sq,
//                              max_exp_avg_sq when defined (adam, adamw)
// Loading reads and checks every entry (kind, dtype, shape against its
// parameter, no entry left unused) before it changes the optimizer, so a
// checkpoint that does not fit leaves it untouched. Not thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace at {
class Tensor;
}
namespace torch::optim {
class Optimizer;
}

namespace lockstep {

class TensorArchive;

enum class OptimizerType { kSgd, kAdam, kAdamW };
const char* toString(OptimizerType type);
/// "sgd", "adam", "adamw" -> type; throws ConfigError naming `what` (the key or flag).
OptimizerType parseOptimizerType(const std::string& text, const std::string& what);

struct OptimizerOptions {
  OptimizerType type = OptimizerType::kAdam;
  double lr = 1e-3;     ///< base learning rate (before scaling for the global batch)
  double momentum = 0;  ///< sgd
  double weightDecay = 0;
  double beta1 = 0.9;    ///< adam, adamw
  double beta2 = 0.999;  ///< adam, adamw
};

/// Builds an optimizer over `params` (every parameter of the model, in order).
using OptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(const std::vector<at::Tensor>& params)>;

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const OptimizerOptions& options,
                                                       const std::vector<at::Tensor>& params);

/// The type of an optimizer whose state this file can save; throws Error for
/// any other (naming what it supports).
OptimizerType optimizerTypeOf(const torch::optim::Optimizer& optimizer);

/// The key under which LibTorch's Optimizer::state() holds `param`'s state (its TensorImpl).
void* optimizerStateKey(const at::Tensor& param);
/// Bytes of the state tensors an SGD, Adam or AdamW optimizer holds now
/// (throws Error for another optimizer, as optimizerTypeOf).
int64_t optimizerStateBytes(torch::optim::Optimizer& optimizer);

/// "optimizer/param<i>/" and "optimizer/group<g>/": the prefixes of the entries above.
std::string optimizerParamPrefix(size_t index);
std::string optimizerGroupPrefix(size_t index);

/// Writes the entries above. Throws Error for an optimizer that is not SGD, Adam or AdamW.
void saveOptimizerState(torch::optim::Optimizer& optimizer, TensorArchive& archive);
/// Restores what saveOptimizerState wrote. The archive's hyper-parameters win
/// over the optimizer's (an exact resume); with `report` each one that differs
/// is logged as a warning, except lr, which the schedule sets every step.
/// Throws CheckpointError naming the archive and the entry at fault.
void loadOptimizerState(torch::optim::Optimizer& optimizer, const TensorArchive& archive, bool report);

}  // namespace lockstep
