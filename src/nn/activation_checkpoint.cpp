// Activation checkpointing as a reentrant custom autograd function: forward
// runs under no-grad (Function::apply's rule), backward recomputes with grad
// on and runs a nested backward through the recomputation. LibTorch's
// saved-tensor hooks take Python objects, so the non-reentrant kind is not
// available in C++.
#include "lockstep/nn/activation_checkpoint.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/modules/container/sequential.h>

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "lockstep/common/error.h"
#include "nn/autocast_scope.h"

namespace lockstep {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// A generator's state, with the device it belongs to.
struct RngState {
  at::Device device;
  at::Tensor state;
};

at::Generator defaultGenerator(const at::Device& device) { return at::globalContext().defaultGenerator(device); }

at::Tensor generatorState(const at::Device& device) {
  at::Generator gen = defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void setGeneratorState(const at::Device& device, const at::Tensor& state) {
  at::Generator gen = defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

/// The states of the CPU generator and of the default generator of every
/// other device an input lives on (a GPU's dropout draws from its own).
std::vector<RngState> captureRng(const std::vector<at::Tensor>& inputs) {
  std::vector<RngState> states{{at::Device(at::kCPU), generatorState(at::Device(at::kCPU))}};
  for (const auto& x : inputs) {
    if (!x.defined() || x.device().is_cpu()) continue;
    const bool seen =
        std::any_of(states.begin(), states.end(), [&](const RngState& s) { return s.device == x.device(); });
    if (!seen) states.push_back({x.device(), generatorState(x.device())});
  }
  return states;
}

/// Sets the generators to `states` while alive; puts the states it found back.
class ReplayRng {
 public:
  explicit ReplayRng(const std::vector<RngState>& states) {
    for (const auto& s : states) {
      saved_.push_back({s.device, generatorState(s.device)});
      setGeneratorState(s.device, s.state);
    }
  }
  ~ReplayRng() {
    for (const auto& s : saved_) setGeneratorState(s.device, s.state);
  }
  ReplayRng(const ReplayRng&) = delete;
  ReplayRng& operator=(const ReplayRng&) = delete;

 private:
  std::vector<RngState> saved_;
};

/// Copies the buffers of `modules` now and writes the copies back when destroyed.
class RestoreBuffers {
 public:
  explicit RestoreBuffers(const std::vector<std::shared_ptr<torch::nn::Module>>& modules) {
    for (const auto& m : modules) {
      if (!m) continue;
      for (auto& b : m->buffers(/*recurse=*/true)) {
        if (b.defined()) saved_.emplace_back(b, b.clone());
      }
    }
  }
  ~RestoreBuffers() {
    c10::NoGradGuard noGrad;
    for (auto& [buffer, copy] : saved_) buffer.copy_(copy);
  }
  RestoreBuffers(const RestoreBuffers&) = delete;
  RestoreBuffers& operator=(const RestoreBuffers&) = delete;

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> saved_;
};

/// What the backward needs besides the saved inputs. A CustomClassHolder so
/// that it travels through AutogradContext::saved_data (an IValue map) itself.
struct CheckpointState : torch::CustomClassHolder {
  TensorsFn ownedFn;
  ActivationCheckpointOptions options;
  std::vector<RngState> rngStates;  // empty unless options.preserveRngState
  // The forward's autocast state per device type: the recomputation runs under it too.
  detail::AutocastState cpuAutocast, cudaAutocast;
  size_t numInputs = 0;  // the caller's inputs; one more (the anchor) is passed to apply()
};

void checkOutputs(const std::vector<at::Tensor>& outputs, const std::string& name) {
  LOCKSTEP_CHECK(!outputs.empty(), name, " returned no tensor; a checkpointed function must return at least one");
  for (size_t i = 0; i < outputs.size(); ++i) {
    LOCKSTEP_CHECK(outputs[i].defined(), name, " returned an undefined tensor at output ", i);
  }
}

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  // `inputs` must be a TensorList: Function::apply sees the tensors of a
  // TensorList argument, while a std::vector would pass as an opaque value.
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<CheckpointState> state, at::TensorList inputs) {
    std::vector<at::Tensor> userInputs(inputs.begin(), inputs.begin() + static_cast<int64_t>(state->numInputs));
    if (state->options.preserveRngState) state->rngStates = captureRng(userInputs);
    std::vector<at::Tensor> outputs = state->ownedFn(userInputs);
    checkOutputs(outputs, state->options.name);
    ctx->save_for_backward(userInputs);
    ctx->set_materialize_grads(false);
    ctx->saved_data["state"] = c10::IValue::make_capsule(std::move(state));
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list gradOutputs) {
    auto capsule = ctx->saved_data["state"].toCapsule();
    const auto* state = static_cast<const CheckpointState*>(capsule.get());
    variable_list saved = ctx->get_saved_variables();
    std::vector<at::Tensor> detached;
    detached.reserve(saved.size());
    for (const auto& x : saved) {
      at::Tensor d = x.detach();
      if (x.requires_grad()) d.requires_grad_(true);
      detached.push_back(d);
    }
    // BatchNorm's backward reads the running statistics it saved, so they are
    // put back only after the nested backward below.
    RestoreBuffers buffers(state->options.modules);
    std::vector<at::Tensor> recomputed;
    {
      ReplayRng rng(state->rngStates);
      // Backward runs outside the caller's autocast scope (a GPU's on another
      // thread); the recomputation must compute in the precision the forward did.
      detail::AutocastScope cpuAmp(at::kCPU, state->cpuAutocast);
      detail::AutocastScope cudaAmp(at::kCUDA, state->cudaAutocast);
      c10::AutoGradMode gradOn(true);
      recomputed = state->ownedFn(detached);
    }
    checkOutputs(recomputed, state->options.name);
    LOCKSTEP_CHECK_EQ(recomputed.size(), gradOutputs.size(), state->options.name,
                      " returned a different number of outputs when recomputed");
    variable_list outs, grads;
    for (size_t i = 0; i < recomputed.size(); ++i) {
      if (gradOutputs[i].defined() && recomputed[i].requires_grad()) {
        outs.push_back(recomputed[i]);
        grads.push_back(gradOutputs[i]);
      }
    }
    if (!outs.empty()) torch::autograd::backward(outs, grads);
    variable_list result;
    result.reserve(detached.size() + 2);
    result.emplace_back();  // the state argument
    for (auto& d : detached) result.push_back(d.requires_grad() ? d.grad() : at::Tensor());
    result.emplace_back();  // the anchor
    return result;
  }
};

}  // namespace

std::vector<at::Tensor> checkpoint(const TensorsFn& fn, const std::vector<at::Tensor>& inputs,
                                   const ActivationCheckpointOptions& options) {
  LOCKSTEP_CHECK(static_cast<bool>(fn), options.name, " is empty (no callable)");
  if (!c10::GradMode::is_enabled()) {
    std::vector<at::Tensor> outputs = fn(inputs);
    checkOutputs(outputs, options.name);
    return outputs;
  }
  auto state = c10::make_intrusive<CheckpointState>();
  state->ownedFn = fn;
  state->options = options;
  state->numInputs = inputs.size();
  state->cpuAutocast = detail::autocastState(at::kCPU);
  state->cudaAutocast = detail::autocastState(at::kCUDA);
  // Parameters are not inputs of the function: when no input requires grad
  // (the first segment sees the data) autograd would record nothing. An
  // anchor that requires grad makes sure the node is recorded.
  variable_list args(inputs.begin(), inputs.end());
  args.push_back(at::empty({0}, at::kFloat).requires_grad_(true));
  return CheckpointFunction::apply(std::move(state), at::TensorList(args));
}

at::Tensor checkpoint(const TensorFn& fn, const at::Tensor& input, const ActivationCheckpointOptions& options) {
  LOCKSTEP_CHECK(static_cast<bool>(fn), options.name, " is empty (no callable)");
  // Copied into the closure: backward calls it after this returns.
  auto outputs = checkpoint([fn](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{fn(in[0])}; },
                            std::vector<at::Tensor>{input}, options);
  return outputs[0];
}

at::Tensor checkpointSequence(const std::vector<CheckpointStage>& stages, int64_t segments, const at::Tensor& input,
                              bool preserveRngState) {
  const auto n = static_cast<int64_t>(stages.size());
  if (segments < 1 || segments > n) {
    throw ConfigError(
        fmt::format("checkpoint segments must be between 1 and the number of stages ({}), got {}", n, segments));
  }
  at::Tensor x = input;
  int64_t begin = 0;
  for (int64_t s = 0; s < segments; ++s) {
    // The longer segments come last: the last one is never recomputed, so
    // its extra stage costs no second forward.
    const int64_t end = begin + n / segments + (s >= segments - n % segments ? 1 : 0);
    // The segment's stages are copied: backward recomputes after this returns.
    std::vector<TensorFn> fns;
    for (int64_t i = begin; i < end; ++i) fns.push_back(stages[static_cast<size_t>(i)].fn);
    auto run = [fns = std::move(fns)](const at::Tensor& in) {
      at::Tensor y = in;
      for (const auto& f : fns) y = f(y);
      return y;
    };
    if (s + 1 == segments) {
      x = run(x);
    } else {
      ActivationCheckpointOptions options;
      options.preserveRngState = preserveRngState;
      options.name = fmt::format("checkpoint segment {} of {} (stages {}..{})", s + 1, segments, begin, end - 1);
      for (int64_t i = begin; i < end; ++i) options.modules.push_back(stages[static_cast<size_t>(i)].module);
      x = checkpoint(TensorFn(run), x, options);
    }
    begin = end;
  }
  return x;
}

at::Tensor checkpointSequential(torch::nn::SequentialImpl& sequential, int64_t segments, const at::Tensor& input,
                                bool preserveRngState) {
  std::vector<CheckpointStage> stages;
  for (const auto& child : sequential) {
    // A copy of the AnyModule (it holds the module by shared pointer): the
    // stage stays valid for the backward whatever happens to `sequential`.
    torch::nn::AnyModule any = child;
    stages.push_back({[any](const at::Tensor& x) mutable { return any.forward<at::Tensor>(x); }, child.ptr()});
  }
  return checkpointSequence(stages, segments, input, preserveRngState);
}

}  // namespace lockstep
