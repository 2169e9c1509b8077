// One-pass steps of SGD, Adam and AdamW (lockstep/optim/fused_optimizers.h).
//
// Each kernel computes, element by element, what LibTorch's step does
// with whole-tensor operations, in the same order and rounding: a scalar
// option becomes float as ATen converts it; `x.add_(y, alpha)` is
// fma(y, alpha, x) and `x.addcmul_(y, y, value)` is fma(value * y, y, x), as
// ATen's AVX2/AVX-512 kernels compute them; `x.addcdiv_(y, z, value)` is
// value * y / z + x. This file is compiled with -ffp-contract=off (no fused
// multiply-add but those written), -fno-math-errno (sqrt vectorizes) and -O3,
// and each kernel also for x86-64-v3 and -v4, picked when the library loads.
// The steps are elementwise, so threads and the split into chunks do not
// change a bit.
#include "lockstep/optim/fused_optimizers.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/vector_clones.h"
#include "lockstep/optim/optimizer.h"
#include "optim/aten_fused_steps.h"

namespace lockstep {

namespace {

struct SgdStep {
  bool decay = false;  ///< weight_decay != 0: d = fma(p, weightDecay, g)
  float weightDecay = 0;
  bool momentum = false;  ///< momentum != 0
  bool first = false;     ///< no buffer yet: it starts as d
  float momentumFactor = 0, oneMinusDampening = 1;
  bool nesterov = false;
  float negLr = 0;
};

LOCKSTEP_VECTOR_CLONES void sgdKernel(float* __restrict p, const float* __restrict g, float* __restrict buf, int64_t n,
                                      SgdStep s) {
  for (int64_t i = 0; i < n; ++i) {
    float d = g[i];
    if (s.decay) d = std::fma(p[i], s.weightDecay, d);
    if (s.momentum) {
      const float b = s.first ? d : std::fma(d, s.oneMinusDampening, buf[i] * s.momentumFactor);
      buf[i] = b;
      d = s.nesterov ? std::fma(b, s.momentumFactor, d) : b;
    }
    p[i] = std::fma(d, s.negLr, p[i]);
  }
}

struct AdamStep {
  bool decayGradient = false;  ///< Adam's weight decay: g = fma(p, weightDecay, g)
  float weightDecay = 0;
  bool scaleParameter = false;  ///< AdamW's: p = p * (1 - lr * weight_decay)
  float parameterScale = 1;
  float beta1 = 0, oneMinusBeta1 = 0, beta2 = 0, oneMinusBeta2 = 0;
  float sqrtBiasCorrection2 = 1, eps = 0, negStepSize = 0;
};

LOCKSTEP_VECTOR_CLONES void adamKernel(float* __restrict p, const float* __restrict g, float* __restrict m,
                                       float* __restrict v, int64_t n, AdamStep s) {
  for (int64_t i = 0; i < n; ++i) {
    float w = p[i];
    if (s.scaleParameter) w = w * s.parameterScale;
    float gi = g[i];
    if (s.decayGradient) gi = std::fma(w, s.weightDecay, gi);
    const float mi = std::fma(gi, s.oneMinusBeta1, m[i] * s.beta1);
    const float vi = std::fma(s.oneMinusBeta2 * gi, gi, v[i] * s.beta2);
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / s.sqrtBiasCorrection2 + s.eps;
    p[i] = s.negStepSize * mi / denom + w;
  }
}

/// Runs f(begin, end) over [0, n) in chunks on the intra-op threads.
template <typename F>
void inChunks(int64_t n, const F& f) {
  at::parallel_for(0, n, int64_t{1} << 16, [&](int64_t begin, int64_t end) { f(begin, end); });
}

using detail::Planned;

bool denseFloat(const at::Tensor& t, c10::Device device) {
  return t.defined() && t.layout() == at::kStrided && t.device() == device && t.scalar_type() == at::kFloat &&
         t.is_contiguous();
}

/// Where this step runs: the device of the first parameter with a gradient (the CPU when none).
c10::Device stepDevice(const torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      if (p.grad().defined()) return p.device();
    }
  }
  return c10::kCPU;
}

/// Every parameter with a gradient, in LibTorch's order, into `planned`; false as soon as one
/// does not fit a fused step (a tensor that is not dense, contiguous float32 on `device`, or
/// `fits(options, state, device)` false): LibTorch's step then runs instead, nothing changed yet.
template <typename Fits>
bool plan(const torch::optim::Optimizer& optimizer, c10::Device device, const Fits& fits,
          std::vector<Planned>& planned) {
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!denseFloat(p, device) || !denseFloat(p.grad(), device) || p.grad().numel() != p.numel()) return false;
      void* key = optimizerStateKey(p);
      auto it = optimizer.state().find(key);
      torch::optim::OptimizerParamState* state = it == optimizer.state().end() ? nullptr : it->second.get();
      if (!fits(group.options(), state, device)) return false;
      planned.push_back({p, &group.options(), key, state});
    }
  }
  return true;
}

/// LibTorch's closure handling: evaluated with gradients on, before the update.
at::Tensor evaluate(const torch::optim::Optimizer::LossClosure& closure) {
  if (!closure) return {};
  c10::AutoGradMode enable(true);
  return closure();
}

using States = detail::OptimizerStates;

/// The kernel's constants for one Adam (decoupled: AdamW) step of a parameter at `step`.
template <typename Options>
AdamStep adamConstants(const Options& o, int64_t step, bool decoupled) {
  const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
  const double biasCorrection1 = 1 - std::pow(beta1, step);
  const double biasCorrection2 = 1 - std::pow(beta2, step);
  AdamStep s;
  if (o.weight_decay() != 0) {
    s.decayGradient = !decoupled;
    s.weightDecay = static_cast<float>(o.weight_decay());
    s.scaleParameter = decoupled;
    s.parameterScale = static_cast<float>(1 - o.lr() * o.weight_decay());
  }
  s.beta1 = static_cast<float>(beta1);
  s.oneMinusBeta1 = static_cast<float>(1 - beta1);
  s.beta2 = static_cast<float>(beta2);
  s.oneMinusBeta2 = static_cast<float>(1 - beta2);
  s.sqrtBiasCorrection2 = static_cast<float>(std::sqrt(biasCorrection2));
  s.eps = static_cast<float>(o.eps());
  s.negStepSize = static_cast<float>(-(o.lr() / biasCorrection1));
  return s;
}

/// Adam's or AdamW's step: the closure, then one pass per parameter where every parameter fits,
/// else LibTorch's step without a closure (`libtorch`). State is created as LibTorch creates it
/// (step 0, zeros).
template <typename Options, typename State>
at::Tensor adamFamilyStep(torch::optim::Optimizer& optimizer, States& states,
                          const torch::optim::Optimizer::LossClosure& closure, bool decoupled,
                          const std::function<at::Tensor()>& libtorch) {
  std::vector<Planned> planned;
  auto fits = [](const torch::optim::OptimizerOptions& options, const torch::optim::OptimizerParamState* base,
                 c10::Device device) {
    if (static_cast<const Options&>(options).amsgrad()) return false;
    if (base == nullptr) return true;
    const auto& s = static_cast<const State&>(*base);
    return denseFloat(s.exp_avg(), device) && denseFloat(s.exp_avg_sq(), device) && !s.max_exp_avg_sq().defined();
  };
  at::Tensor loss = evaluate(closure);  // first: it makes the gradients the plan looks at
  const c10::Device device = stepDevice(optimizer);
  if (!plan(optimizer, device, fits, planned)) {
    libtorch();
    return loss;
  }
  torch::NoGradGuard noGrad;
  if (!device.is_cpu()) {
    detail::atenAdamStep(planned, states, decoupled);
    return loss;
  }
  for (auto& e : planned) {
    State* state = &detail::adamStateOf<State>(e, states);
    state->step(state->step() + 1);
    const AdamStep s = adamConstants(static_cast<const Options&>(*e.options), state->step(), decoupled);
    float* w = e.param.data_ptr<float>();
    const float* g = e.param.grad().data_ptr<float>();
    float* m = state->exp_avg().template data_ptr<float>();
    float* v = state->exp_avg_sq().template data_ptr<float>();
    inChunks(e.param.numel(), [&](int64_t begin, int64_t end) {
      adamKernel(w + begin, g + begin, m + begin, v + begin, end - begin, s);
    });
  }
  return loss;
}

}  // namespace

at::Tensor FusedSGD::step(LossClosure closure) {
  std::vector<Planned> planned;
  auto fits = [](const torch::optim::OptimizerOptions&, const torch::optim::OptimizerParamState* base,
                 c10::Device device) {
    return base == nullptr ||
           denseFloat(static_cast<const torch::optim::SGDParamState&>(*base).momentum_buffer(), device);
  };
  at::Tensor loss = evaluate(closure);  // first: it makes the gradients the plan looks at
  const c10::Device device = stepDevice(*this);
  if (!plan(*this, device, fits, planned)) {
    SGD::step(nullptr);
    return loss;
  }
  torch::NoGradGuard noGrad;
  if (!device.is_cpu()) {
    detail::atenSgdStep(planned, state_);
    return loss;
  }
  for (auto& e : planned) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(*e.options);
    SgdStep s;
    s.decay = o.weight_decay() != 0;
    s.weightDecay = static_cast<float>(o.weight_decay());
    s.momentum = o.momentum() != 0;
    s.momentumFactor = static_cast<float>(o.momentum());
    s.oneMinusDampening = static_cast<float>(1 - o.dampening());
    s.nesterov = o.nesterov();
    s.negLr = static_cast<float>(-1 * o.lr());
    float* buf = nullptr;
    if (s.momentum) {
      auto* state = static_cast<torch::optim::SGDParamState*>(e.state);
      if (state == nullptr) {  // LibTorch's first step: the buffer starts as the gradient (the kernel writes it)
        auto fresh = std::make_unique<torch::optim::SGDParamState>();
        fresh->momentum_buffer(at::empty_like(e.param, at::MemoryFormat::Contiguous));
        state = fresh.get();
        state_[e.key] = std::move(fresh);
        s.first = true;
      }
      buf = state->momentum_buffer().data_ptr<float>();
    }
    float* w = e.param.data_ptr<float>();
    const float* g = e.param.grad().data_ptr<float>();
    inChunks(e.param.numel(), [&](int64_t begin, int64_t end) {
      sgdKernel(w + begin, g + begin, buf ? buf + begin : nullptr, end - begin, s);
    });
  }
  return loss;
}

at::Tensor FusedAdam::step(LossClosure closure) {
  return adamFamilyStep<torch::optim::AdamOptions, torch::optim::AdamParamState>(
      *this, state_, closure, false, [this] { return Adam::step(nullptr); });
}

at::Tensor FusedAdamW::step(LossClosure closure) {
  return adamFamilyStep<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(
      *this, state_, closure, true, [this] { return AdamW::step(nullptr); });
}

}  // namespace lockstep
