// FusedSGD, FusedAdam and FusedAdamW (optim/fused_optimizers.h) against
// LibTorch's SGD, Adam and AdamW, bit for bit: parameters and state after
// several steps, for every option they take, over two parameter groups,
// parameters of several sizes (one longer than a thread's chunk), a parameter
// without a gradient, one and two threads; the cases LibTorch's own step
// takes; the closure, evaluated once; the one-pass step allocates nothing;
// makeOptimizer builds them. The step off the CPU (ATen's multi-tensor fused
// kernels) is run here on CPU tensors, which ATen's kernels also take.
#include "lockstep/optim/fused_optimizers.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/common/tensor_memory.h"
#include "lockstep/optim/optimizer.h"
#include "optim/aten_fused_steps.h"

namespace lockstep {
namespace {

using Params = std::vector<at::Tensor>;
/// Builds an optimizer over two groups: the first two parameters with the defaults, the others
/// at half the learning rate.
using Factory = std::function<std::unique_ptr<torch::optim::Optimizer>(const Params&)>;

template <typename Optim, typename Options>
Factory factoryOf(const Options& options) {
  return [options](const Params& params) -> std::unique_ptr<torch::optim::Optimizer> {
    auto half = std::make_unique<Options>(options);
    half->lr(options.lr() * 0.5);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(Params{params[0], params[1]});
    groups.emplace_back(Params{params[2], params[3]}, std::move(half));
    return std::make_unique<Optim>(std::move(groups), options);
  };
}

/// Parameters of 70001 (two chunks of the one-pass loop), 33, 1 and 6 x 5 elements.
Params makeParams(at::ScalarType dtype = at::kFloat) {
  at::manual_seed(11);
  return {at::randn({70001}, dtype), at::randn({33}, dtype), at::randn({1}, dtype), at::randn({6, 5}, dtype)};
}

/// Steps `factory`'s optimizer over copies of `initial` with the same gradients each time; the
/// last parameter gets none in odd steps. Returns parameters and every state tensor.
Params train(const Factory& factory, const Params& initial, int steps, bool stridedGrad = false) {
  Params params;
  for (const auto& p : initial) params.push_back(p.clone().requires_grad_(true));
  auto optimizer = factory(params);
  at::Generator gen = at::detail::createCPUGenerator(5);
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < params.size(); ++i) {
      at::Tensor g = at::randn(params[i].sizes(), gen, params[i].scalar_type());
      if (stridedGrad && params[i].dim() == 2) g = g.t().contiguous().t();  // same values, column-major
      params[i].mutable_grad() = (i == 3 && s % 2 == 1) ? at::Tensor() : g;
    }
    optimizer->step();
  }
  Params out;
  for (const auto& p : params) out.push_back(p.detach().clone());
  for (const auto& p : params) {
    auto it = optimizer->state().find(optimizerStateKey(p));
    if (it == optimizer->state().end()) continue;
    if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(it->second.get())) out.push_back(sgd->momentum_buffer());
    if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(it->second.get())) {
      out.push_back(adam->exp_avg());
      out.push_back(adam->exp_avg_sq());
      out.push_back(at::full({1}, static_cast<double>(adam->step()), at::kDouble));
      if (adam->max_exp_avg_sq().defined()) out.push_back(adam->max_exp_avg_sq());
    }
    if (auto* adamw = dynamic_cast<torch::optim::AdamWParamState*>(it->second.get())) {
      out.push_back(adamw->exp_avg());
      out.push_back(adamw->exp_avg_sq());
      out.push_back(at::full({1}, static_cast<double>(adamw->step()), at::kDouble));
    }
  }
  return out;
}

void expectSameBits(const Params& fused, const Params& libtorch, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(fused.size(), libtorch.size());
  for (size_t i = 0; i < fused.size(); ++i) {
    EXPECT_TRUE(at::equal(fused[i], libtorch[i]))
        << "tensor " << i << ": largest difference " << (fused[i] - libtorch[i]).abs().max().item<double>();
  }
}

/// Equal to within `rtol` and `atol`. By default a few units in the last place, Adam's and AdamW's
/// one-pass step against LibTorch's: LibTorch's float32 sqrt on the CPU is MKL's vector math,
/// which is not correctly rounded (about one element in five is one unit off IEEE's sqrt); the
/// one-pass step uses the correctly rounded one, so the two may part in the last bit and stay
/// that close.
void expectClose(const Params& fused, const Params& libtorch, const std::string& what, double rtol = 2e-6,
                 double atol = 1e-8) {
  SCOPED_TRACE(what);
  ASSERT_EQ(fused.size(), libtorch.size());
  for (size_t i = 0; i < fused.size(); ++i) {
    EXPECT_TRUE(at::allclose(fused[i], libtorch[i], rtol, atol))
        << "tensor " << i << ": largest difference " << (fused[i] - libtorch[i]).abs().max().item<double>();
  }
}

template <typename Fused, typename Plain, typename Options>
void compare(const Options& options, const std::string& what, int threads = 1, bool exact = true) {
  const int before = at::get_num_threads();
  at::set_num_threads(threads);
  const Params initial = makeParams();
  const Params fused = train(factoryOf<Fused>(options), initial, 6),
               plain = train(factoryOf<Plain>(options), initial, 6);
  if (exact) {
    expectSameBits(fused, plain, what);
  } else {
    expectClose(fused, plain, what);
  }
  at::set_num_threads(before);
}

TEST(FusedOptimizers, SgdEqualsLibTorchBitForBitForEveryOption) {
  using torch::optim::SGDOptions;
  compare<FusedSGD, torch::optim::SGD>(SGDOptions(0.1), "plain");
  compare<FusedSGD, torch::optim::SGD>(SGDOptions(0.1).momentum(0.9), "momentum");
  compare<FusedSGD, torch::optim::SGD>(SGDOptions(0.1).momentum(0.9).dampening(0.25), "dampening");
  compare<FusedSGD, torch::optim::SGD>(SGDOptions(0.1).momentum(0.9).nesterov(true), "nesterov");
  compare<FusedSGD, torch::optim::SGD>(SGDOptions(0.05).momentum(0.8).weight_decay(0.01), "weight decay");
  compare<FusedSGD, torch::optim::SGD>(SGDOptions(0.1).weight_decay(0.02), "weight decay, no momentum");
  compare<FusedSGD, torch::optim::SGD>(SGDOptions(0.1).momentum(0.9), "two threads", 2);
}

TEST(FusedOptimizers, AdamAndAdamWMatchLibTorchToTheLastBitsForEveryOption) {
  using torch::optim::AdamOptions;
  using torch::optim::AdamWOptions;
  constexpr bool kClose = false;
  compare<FusedAdam, torch::optim::Adam>(AdamOptions(0.01), "adam", 1, kClose);
  compare<FusedAdam, torch::optim::Adam>(AdamOptions(0.003).betas({0.8, 0.99}).eps(1e-6), "adam, betas and eps", 1,
                                         kClose);
  compare<FusedAdam, torch::optim::Adam>(AdamOptions(0.01).weight_decay(0.1), "adam, weight decay", 1, kClose);
  compare<FusedAdam, torch::optim::Adam>(AdamOptions(0.01), "adam, two threads", 2, kClose);
  compare<FusedAdamW, torch::optim::AdamW>(AdamWOptions(0.01), "adamw", 1, kClose);
  compare<FusedAdamW, torch::optim::AdamW>(AdamWOptions(0.01).weight_decay(0.05).betas({0.85, 0.995}),
                                           "adamw, weight decay and betas", 1, kClose);
}

TEST(FusedOptimizers, WhatTheOnePassDoesNotCoverIsLibTorchsOwnStep) {
  using torch::optim::AdamOptions;
  // amsgrad, float64 parameters and a column-major gradient: LibTorch's step, so equal too.
  compare<FusedAdam, torch::optim::Adam>(AdamOptions(0.01).amsgrad(true), "amsgrad");
  const Params doubles = makeParams(at::kDouble);
  const auto options = torch::optim::SGDOptions(0.1).momentum(0.9);
  const Factory fused = factoryOf<FusedSGD>(options), plain = factoryOf<torch::optim::SGD>(options);
  expectSameBits(train(fused, doubles, 4), train(plain, doubles, 4), "float64");
  const Params floats = makeParams();
  expectSameBits(train(fused, floats, 4, true), train(plain, floats, 4, true), "column-major gradient");
}

TEST(FusedOptimizers, TheClosureIsEvaluatedOnceWithGradientsOnBeforeTheUpdate) {
  // The one-pass step, and LibTorch's (amsgrad), which must not evaluate it a second time.
  for (bool amsgrad : {false, true}) {
    SCOPED_TRACE(amsgrad ? "amsgrad: LibTorch's step" : "one pass");
    at::Tensor w = at::ones({3}).requires_grad_(true);
    FusedAdam optimizer(Params{w}, torch::optim::AdamOptions(0.1).amsgrad(amsgrad));
    int calls = 0;
    bool gradMode = false;
    c10::NoGradGuard callerHasGradientsOff;
    at::Tensor loss = optimizer.step([&] {
      ++calls;
      gradMode = at::GradMode::is_enabled();
      optimizer.zero_grad();
      at::Tensor l = (w * w).sum();
      l.backward();
      return l;
    });
    EXPECT_EQ(calls, 1);
    EXPECT_TRUE(gradMode);
    EXPECT_DOUBLE_EQ(loss.item<double>(), 3.0);
    EXPECT_TRUE(at::all(w.detach() < 1.0).item<bool>()) << "the step used the closure's gradients";
  }
}

TEST(FusedOptimizers, TheOnePassStepAllocatesNothingWhereLibTorchsDoes) {
  // Also what shows the one-pass step ran at all: LibTorch's Adam makes two temporaries per parameter.
  trackTensorMemory();
  auto peakOfAStep = [](torch::optim::Optimizer& optimizer) {
    optimizer.step();  // the first step creates the state
    resetPeakTensorBytes();
    const int64_t before = liveTensorBytes();
    optimizer.step();
    return peakTensorBytes() - before;
  };
  const Params initial = makeParams();
  Params a, b;
  for (const auto& p : initial) {
    a.push_back(p.clone().requires_grad_(true));
    a.back().mutable_grad() = at::ones_like(p);
    b.push_back(p.clone().requires_grad_(true));
    b.back().mutable_grad() = at::ones_like(p);
  }
  torch::optim::Adam plain(a, torch::optim::AdamOptions(0.01));
  FusedAdam fused(b, torch::optim::AdamOptions(0.01));
  EXPECT_GT(peakOfAStep(plain), 70001 * 4) << "LibTorch's step should allocate: the check would not see a fallback";
  EXPECT_EQ(peakOfAStep(fused), 0);
}

/// `Base` stepping through the GPU's path (ATen's fused multi-tensor kernels) wherever it is.
template <typename Base, int kKind>  // 0: SGD, 1: Adam, 2: AdamW
class AtenStepped : public Base {
 public:
  using Base::Base;
  at::Tensor step(typename Base::LossClosure /*closure*/ = nullptr) override {
    std::vector<detail::Planned> planned;
    for (const auto& group : this->param_groups()) {
      for (const auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        void* key = optimizerStateKey(p);
        auto it = this->state().find(key);
        planned.push_back({p, &group.options(), key, it == this->state().end() ? nullptr : it->second.get()});
      }
    }
    c10::NoGradGuard noGrad;
    if (kKind == 0) {
      detail::atenSgdStep(planned, this->state_);
    } else {
      detail::atenAdamStep(planned, this->state_, kKind == 2);
    }
    return {};
  }
};

TEST(FusedOptimizers, TheDeviceStepIsLibTorchsStepUpToRounding) {
  // Two groups (one launch each), and a parameter without a gradient every other step: Adam's
  // step counts then differ within a group, and SGD's momentum starts later for it.
  using torch::optim::AdamOptions;
  using torch::optim::AdamWOptions;
  using torch::optim::SGDOptions;
  const Params initial = makeParams();
  auto both = [&](const Factory& aten, const Factory& plain, const std::string& what) {
    // To rounding: ATen's fused kernels compute in another order than LibTorch's whole-tensor ops.
    expectClose(train(aten, initial, 6), train(plain, initial, 6), what, 1e-5, 1e-6);
  };
  using AtenSgd = AtenStepped<torch::optim::SGD, 0>;
  both(factoryOf<AtenSgd>(SGDOptions(0.1)), factoryOf<torch::optim::SGD>(SGDOptions(0.1)), "sgd");
  const auto momentum = SGDOptions(0.05).momentum(0.9).dampening(0.1).weight_decay(0.01);
  both(factoryOf<AtenSgd>(momentum), factoryOf<torch::optim::SGD>(momentum), "sgd, momentum and weight decay");
  const auto nesterov = SGDOptions(0.1).momentum(0.9).nesterov(true);
  both(factoryOf<AtenSgd>(nesterov), factoryOf<torch::optim::SGD>(nesterov), "sgd, nesterov");
  const auto adam = AdamOptions(0.01).betas({0.8, 0.99}).weight_decay(0.1);
  both(factoryOf<AtenStepped<torch::optim::Adam, 1>>(adam), factoryOf<torch::optim::Adam>(adam), "adam");
  const auto adamw = AdamWOptions(0.01).weight_decay(0.05).eps(1e-6);
  both(factoryOf<AtenStepped<torch::optim::AdamW, 2>>(adamw), factoryOf<torch::optim::AdamW>(adamw), "adamw");
}

TEST(FusedOptimizers, MakeOptimizerBuildsThem) {
  const Params params = {at::zeros({2}).requires_grad_(true)};
  OptimizerOptions o;
  o.type = OptimizerType::kSgd;
  EXPECT_NE(dynamic_cast<FusedSGD*>(makeOptimizer(o, params).get()), nullptr);
  o.type = OptimizerType::kAdam;
  EXPECT_NE(dynamic_cast<FusedAdam*>(makeOptimizer(o, params).get()), nullptr);
  o.type = OptimizerType::kAdamW;
  EXPECT_NE(dynamic_cast<FusedAdamW*>(makeOptimizer(o, params).get()), nullptr);
}

}  // namespace
}  // namespace lockstep
