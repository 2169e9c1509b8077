// One-pass steps of SGD, Adam and AdamW (lockstep/optim/fused_optimizers.h).
//
// Each kernel computes, element by element, what LibTorch 1.13's step does
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
#include <c10/util/string_utils.h>

#include <cmath>
#include <functional>
#include <memory>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define LOCKSTEP_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LOCKSTEP_VECTOR_CLONES
#endif

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

bool denseFloat(const at::Tensor& t) {
  return t.defined() && t.layout() == at::kStrided && t.device().is_cpu() && t.scalar_type() == at::kFloat &&
         t.is_contiguous();
}

/// Whether every parameter with a gradient, the gradient and `state(p)`'s tensors take the one-pass step.
template <typename StateCheck>
bool onePassFits(const torch::optim::Optimizer& optimizer, const StateCheck& stateFits) {
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!denseFloat(p) || !denseFloat(p.grad()) || p.grad().numel() != p.numel()) return false;
      auto it = optimizer.state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
      if (it != optimizer.state().end() && !stateFits(*it->second)) return false;
    }
  }
  return true;
}

std::string keyOf(const at::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

/// LibTorch's closure handling: evaluated with gradients on, before the update.
at::Tensor evaluate(const torch::optim::Optimizer::LossClosure& closure) {
  if (!closure) return {};
  at::AutoGradMode enable(true);
  return closure();
}

using States = ska::flat_hash_map<std::string, std::unique_ptr<torch::optim::OptimizerParamState>>;

/// LibTorch's Adam (decoupled: AdamW) step, one pass per parameter.
template <typename Options, typename State>
void adamStep(std::vector<torch::optim::OptimizerParamGroup>& groups, States& states, bool decoupled) {
  for (auto& group : groups) {
    const auto& o = static_cast<const Options&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& slot = states[keyOf(p)];
      if (!slot) {
        auto fresh = std::make_unique<State>();
        fresh->step(0);
        fresh->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& state = static_cast<State&>(*slot);
      state.step(state.step() + 1);
      const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
      const double biasCorrection1 = 1 - std::pow(beta1, state.step());
      const double biasCorrection2 = 1 - std::pow(beta2, state.step());
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
      float* w = p.data_ptr<float>();
      const float* g = p.grad().data_ptr<float>();
      const at::Tensor& expAvg = state.exp_avg();
      const at::Tensor& expAvgSq = state.exp_avg_sq();
      float* m = expAvg.data_ptr<float>();
      float* v = expAvgSq.data_ptr<float>();
      inChunks(p.numel(), [&](int64_t b, int64_t e) { adamKernel(w + b, g + b, m + b, v + b, e - b, s); });
    }
  }
}

template <typename State>
bool adamStateFits(const torch::optim::OptimizerParamState& base) {
  const auto& s = static_cast<const State&>(base);
  return denseFloat(s.exp_avg()) && denseFloat(s.exp_avg_sq()) && !s.max_exp_avg_sq().defined();
}

template <typename Options>
bool noAmsgrad(const torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups()) {
    if (static_cast<const Options&>(group.options()).amsgrad()) return false;
  }
  return true;
}

/// Adam's or AdamW's step: one pass per parameter where onePassFits, else LibTorch's (`libtorch`).
template <typename Options, typename State>
at::Tensor adamFamilyStep(torch::optim::Optimizer& optimizer, States& states,
                          const torch::optim::Optimizer::LossClosure& closure, bool decoupled,
                          const std::function<at::Tensor()>& libtorch) {
  if (!noAmsgrad<Options>(optimizer) || !onePassFits(optimizer, adamStateFits<State>)) return libtorch();
  torch::NoGradGuard noGrad;
  at::Tensor loss = evaluate(closure);
  adamStep<Options, State>(optimizer.param_groups(), states, decoupled);
  return loss;
}

}  // namespace

at::Tensor FusedSGD::step(LossClosure closure) {
  const bool fits = onePassFits(*this, [](const torch::optim::OptimizerParamState& base) {
    const at::Tensor& buf = static_cast<const torch::optim::SGDParamState&>(base).momentum_buffer();
    return !buf.defined() || denseFloat(buf);
  });
  if (!fits) return SGD::step(closure);
  torch::NoGradGuard noGrad;
  at::Tensor loss = evaluate(closure);
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
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
        auto& slot = state_[keyOf(p)];
        if (!slot) {
          auto fresh = std::make_unique<torch::optim::SGDParamState>();
          fresh->momentum_buffer(at::empty_like(p, at::MemoryFormat::Contiguous));
          slot = std::move(fresh);
          s.first = true;
        }
        buf = static_cast<torch::optim::SGDParamState&>(*slot).momentum_buffer().data_ptr<float>();
      }
      float* w = p.data_ptr<float>();
      const float* g = p.grad().data_ptr<float>();
      inChunks(p.numel(), [&](int64_t b, int64_t e) { sgdKernel(w + b, g + b, buf ? buf + b : nullptr, e - b, s); });
    }
  }
  return loss;
}

at::Tensor FusedAdam::step(LossClosure closure) {
  return adamFamilyStep<torch::optim::AdamOptions, torch::optim::AdamParamState>(*this, state_, closure, false,
                                                                                 [&] { return Adam::step(closure); });
}

at::Tensor FusedAdamW::step(LossClosure closure) {
  return adamFamilyStep<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(
      *this, state_, closure, true, [&] { return AdamW::step(closure); });
}

}  // namespace lockstep
