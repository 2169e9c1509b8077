// lockstep/optim/fused_optimizers.h — LibTorch's SGD, Adam and AdamW with a
// step that makes one pass over each parameter.
//
//   lockstep::FusedAdam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
//   ... loss.backward(); opt.step();
//
// They are torch::optim::SGD, Adam and AdamW (same options, parameter groups,
// state objects and serialization; dynamic_cast to the LibTorch class works),
// and they compute LibTorch's float32 operations in the same order, with a
// fused multiply-add exactly where LibTorch's CPU kernels use one on a CPU with
// AVX2 (tested against LibTorch for every option): SGD's results are LibTorch's
// bit for bit; Adam's and AdamW's take the correctly rounded square root where
// LibTorch's CPU build takes MKL's vector one, which is a unit in the last place
// off for some elements, so they agree to the last bits. What differs is the memory traffic: LibTorch's Adam makes
// several passes over each parameter's size and allocates temporaries per parameter a step; here one loop reads the
// parameter, its gradient and the state once and writes them once (build/bench/kernel_times; docs/performance.md).
//
// The one-pass step covers dense, contiguous float32 CPU parameters and
// gradients. When they all lie on one GPU instead, the step is ATen's
// multi-tensor fused kernel (_fused_sgd_, _fused_adam_, _fused_adamw_: one
// launch per parameter group and step count, and for SGD per group and first
// momentum step, rather than several per parameter), which computes
// LibTorch's step up to rounding. With anything else among the parameters
// (another dtype, several devices, a sparse or strided gradient, Adam's
// amsgrad) step() is LibTorch's own. On a CPU without AVX2, LibTorch's
// kernels round a multiply and an add separately where these fuse them, so
// the two can differ in the last bit there.
// makeOptimizer (optim/optimizer.h), and so the Trainer, builds these.
#pragma once

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

namespace lockstep {

class FusedSGD : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  at::Tensor step(LossClosure closure = nullptr) override;
};

class FusedAdam : public torch::optim::Adam {
 public:
  using torch::optim::Adam::Adam;
  at::Tensor step(LossClosure closure = nullptr) override;
};

class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  at::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace lockstep
