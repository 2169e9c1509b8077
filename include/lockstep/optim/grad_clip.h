// lockstep/optim/grad_clip.h — clipping gradients by their global 2-norm, the
// same however the gradients are cut across tensors and ranks.
//
//   double norm = lockstep::clipGradNorm(grads, 1.0);            // whole gradients
//   double norm = lockstep::clipGradNorm(myPieces, 1.0, &comm);  // sharded: pieces on each rank
//
// As torch::nn::utils::clip_grad_norm_ (norm type 2): when the norm over all
// the gradients exceeds maxNorm, every gradient is scaled by
// maxNorm / (norm + 1e-6). The squares are summed in float64 (the square of a
// float32 is exact there) and the coefficient is rounded to float32 before it
// scales the gradients, so a DDP rank holding whole gradients and ZeRO ranks
// holding pieces of them (their sums added by an allreduce) scale by the same
// float32 number and their updates stay equal bit for bit; LibTorch's version
// sums each tensor's squares in float32, in an order that depends on the
// tensor's extent, and its result differs with the cut. The norm costs one
// read of the gradients (AVX2 where the CPU has it, the same bits as the
// portable loop: optim/squares.h; 64 K-element blocks over the intra-op
// threads, added in block order, so the thread count does not change the
// bits), the scaling a second: slightly slower than LibTorch's, the price of
// bits that do not depend on the thread count (docs/training.md). Gradients must be float32
// (Error otherwise). Gradients on a GPU are summed there, per device, and read back once per
// device: no host synchronisation per tensor (their bits follow the device's reduction).
#pragma once

#include <vector>

namespace at {
class Tensor;
}

namespace lockstep {

class Communicator;

/// Scales `grads` (float32, on any device; undefined entries are skipped) in place so their
/// global 2-norm is at most maxNorm, and returns the norm before. With
/// `sumOver`, the sum of squares is summed over its ranks first (collective:
/// every rank calls it, each with its own part of the gradients).
double clipGradNorm(const std::vector<at::Tensor>& grads, double maxNorm, Communicator* sumOver = nullptr);

/// The .grad() of each parameter (undefined where it has none), for clipGradNorm.
std::vector<at::Tensor> gradientsOf(const std::vector<at::Tensor>& parameters);

}  // namespace lockstep
