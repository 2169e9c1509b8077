// aten_fused_steps.cpp — src/optim/aten_fused_steps.h.
#include "optim/aten_fused_steps.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <map>
#include <tuple>
#include <utility>

namespace lockstep::detail {

namespace {

/// Tensor lists of the parameters one kernel launch updates.
struct Launch {
  std::vector<at::Tensor> params, grads, first, second;
};

/// One scalar float32 step count per parameter of `launch`, on its device (what the kernels read).
std::vector<at::Tensor> stepTensors(const Launch& launch, int64_t step) {
  const auto options = at::TensorOptions().dtype(at::kFloat).device(launch.params.front().device());
  return at::full({static_cast<int64_t>(launch.params.size())}, static_cast<double>(step), options).unbind(0);
}

template <typename Options, typename State>
void adamStep(const std::vector<Planned>& planned, OptimizerStates& states, bool decoupled) {
  // Parameters of one group at one step count share a launch.
  std::map<std::pair<const torch::optim::OptimizerOptions*, int64_t>, Launch> launches;
  for (const auto& e : planned) {
    State* state = &adamStateOf<State>(e, states);
    state->step(state->step() + 1);
    Launch& l = launches[{e.options, state->step()}];
    l.params.push_back(e.param);
    l.grads.push_back(e.param.grad());
    l.first.push_back(state->exp_avg());
    l.second.push_back(state->exp_avg_sq());
  }
  for (auto& [group, l] : launches) {
    const auto& o = static_cast<const Options&>(*group.first);
    const auto [beta1, beta2] = o.betas();
    const auto steps = stepTensors(l, group.second);
    if (decoupled) {
      at::_fused_adamw_(l.params, l.grads, l.first, l.second, {}, steps, o.lr(), beta1, beta2, o.weight_decay(),
                        o.eps(), /*amsgrad=*/false, /*maximize=*/false);
    } else {
      at::_fused_adam_(l.params, l.grads, l.first, l.second, {}, steps, o.lr(), beta1, beta2, o.weight_decay(), o.eps(),
                       /*amsgrad=*/false, /*maximize=*/false);
    }
  }
}

}  // namespace

void atenSgdStep(const std::vector<Planned>& planned, OptimizerStates& states) {
  // Parameters of one group share a launch, those taking their first momentum step apart.
  std::map<std::pair<const torch::optim::OptimizerOptions*, bool>, Launch> launches;
  for (const auto& e : planned) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(*e.options);
    bool first = false;
    at::Tensor buffer;
    if (o.momentum() != 0) {
      auto* state = static_cast<torch::optim::SGDParamState*>(e.state);
      if (state == nullptr) {  // the kernel writes the first step's direction into it
        auto fresh = std::make_unique<torch::optim::SGDParamState>();
        fresh->momentum_buffer(at::empty_like(e.param, at::MemoryFormat::Contiguous));
        state = fresh.get();
        states[e.key] = std::move(fresh);
        first = true;
      }
      buffer = state->momentum_buffer();
    }
    Launch& l = launches[{e.options, first}];
    l.params.push_back(e.param);
    l.grads.push_back(e.param.grad());
    if (buffer.defined()) l.first.push_back(buffer);
  }
  for (auto& [group, l] : launches) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(*group.first);
    at::_fused_sgd_(l.params, l.grads, l.first, o.weight_decay(), o.momentum(), o.lr(), o.dampening(), o.nesterov(),
                    /*maximize=*/false, /*is_first_step=*/group.second);
  }
}

void atenAdamStep(const std::vector<Planned>& planned, OptimizerStates& states, bool decoupled) {
  if (decoupled) {
    adamStep<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(planned, states, true);
  } else {
    adamStep<torch::optim::AdamOptions, torch::optim::AdamParamState>(planned, states, false);
  }
}

}  // namespace lockstep::detail
