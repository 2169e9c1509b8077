// aten_fused_steps.h — the fused optimizers' step off the CPU: ATen's multi-tensor kernels
// (at::_fused_sgd_, _fused_adam_, _fused_adamw_), one launch per parameter group and step
// count instead of several kernels per parameter. On the CPU lockstep's own one-pass kernels
// run instead (fused_optimizers.cpp), which match LibTorch's bits. Private to optim/.
#pragma once

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <vector>

namespace lockstep::detail {

/// A parameter a step updates: its group's options, its key in the optimizer's state map and its
/// state (null: none yet).
struct Planned {
  at::Tensor param;
  const torch::optim::OptimizerOptions* options;
  void* key;
  torch::optim::OptimizerParamState* state;
};

using OptimizerStates = ska::flat_hash_map<void*, std::unique_ptr<torch::optim::OptimizerParamState>>;

/// `e`'s Adam or AdamW state (`State`), created as LibTorch creates it (step 0, zeros) when it
/// has none yet.
template <typename State>
State& adamStateOf(const Planned& e, OptimizerStates& states) {
  if (e.state != nullptr) return static_cast<State&>(*e.state);
  auto fresh = std::make_unique<State>();
  fresh->step(0);
  fresh->exp_avg(at::zeros_like(e.param, at::MemoryFormat::Preserve));
  fresh->exp_avg_sq(at::zeros_like(e.param, at::MemoryFormat::Preserve));
  State& state = *fresh;
  states[e.key] = std::move(fresh);
  return state;
}

/// LibTorch's SGD over `planned` (dense float32 on one device): momentum buffers created on a
/// parameter's first step as LibTorch creates them (the step's direction).
void atenSgdStep(const std::vector<Planned>& planned, OptimizerStates& states);
/// LibTorch's Adam (`decoupled`: AdamW) over `planned`, without amsgrad: state created as
/// LibTorch creates it (step 0, zeros), the step counted on the host.
void atenAdamStep(const std::vector<Planned>& planned, OptimizerStates& states, bool decoupled);

}  // namespace lockstep::detail
