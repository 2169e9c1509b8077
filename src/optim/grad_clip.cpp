// grad_clip.cpp — clipping by the global norm (lockstep/optim/grad_clip.h).
#include "lockstep/optim/grad_clip.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "lockstep/comm/communicator.h"
#include "lockstep/common/error.h"
#include "lockstep/common/tensor_text.h"

namespace lockstep {

namespace {

/// Sum of the squares of `grads`, in float64, a chunk at a time through one buffer.
double sumOfSquares(const std::vector<at::Tensor>& grads) {
  constexpr int64_t kChunk = int64_t{1} << 16;
  at::Tensor buffer;
  double sum = 0;
  for (const auto& grad : grads) {
    if (!grad.defined()) continue;
    LOCKSTEP_CHECK(grad.scalar_type() == at::kFloat, "clipGradNorm: a gradient is ", describeTensor(grad),
                   "; expected float32");
    const at::Tensor flat = grad.reshape({-1});
    for (int64_t first = 0; first < flat.numel(); first += kChunk) {
      const int64_t count = std::min(kChunk, flat.numel() - first);
      if (!buffer.defined() || buffer.numel() < count) buffer = at::empty({kChunk}, at::kDouble);
      at::Tensor part = buffer.narrow(0, 0, count);
      part.copy_(flat.narrow(0, first, count));
      sum += at::dot(part, part).item<double>();
    }
  }
  return sum;
}

}  // namespace

std::vector<at::Tensor> gradientsOf(const std::vector<at::Tensor>& parameters) {
  std::vector<at::Tensor> grads;
  grads.reserve(parameters.size());
  for (const auto& p : parameters) grads.push_back(p.grad());
  return grads;
}

double clipGradNorm(const std::vector<at::Tensor>& grads, double maxNorm, Communicator* sumOver) {
  LOCKSTEP_CHECK(maxNorm > 0, "clipGradNorm: maxNorm must be positive, got ", maxNorm);
  double squares = sumOfSquares(grads);
  if (sumOver != nullptr && sumOver->size() > 1) {
    std::vector<at::Tensor> total{at::tensor({squares}, at::kDouble)};
    sumOver->allreduce(total, ReduceOp::kSum)->wait();
    squares = total[0].item<double>();
  }
  const double norm = std::sqrt(squares);
  const float coefficient = static_cast<float>(maxNorm / (norm + 1e-6));
  if (coefficient < 1.0f) {
    for (const auto& grad : grads) {
      if (grad.defined()) at::Tensor(grad).mul_(coefficient);
    }
  }
  return norm;
}

}  // namespace lockstep
