// grad_clip.cpp — clipping by the global norm (lockstep/optim/grad_clip.h).
#include "lockstep/optim/grad_clip.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "lockstep/comm/communicator.h"
#include "lockstep/common/error.h"
#include "lockstep/common/tensor_text.h"
#include "optim/squares.h"

namespace lockstep {

namespace detail {

// The sum of the squares of n floats, in float64 (a float's square is exact there), is kept in 16
// running sums, element i going to sum i % 16 (the tail to sum 0), added up in one fixed order at
// the end. The AVX2 version keeps the same 16 sums in four registers (a fused multiply-add of an
// exact square rounds as the add alone), so both give the same bits on any CPU.
namespace {

constexpr int kSums = 16;

double addUp(const double* sums) {
  double pairs[kSums / 2];
  for (int k = 0; k < kSums / 2; ++k) pairs[k] = sums[2 * k] + sums[2 * k + 1];
  return ((pairs[0] + pairs[1]) + (pairs[2] + pairs[3])) + ((pairs[4] + pairs[5]) + (pairs[6] + pairs[7]));
}

}  // namespace

double squaresPortable(const float* x, int64_t n) {
  double sums[kSums] = {};
  int64_t i = 0;
  for (; i + kSums <= n; i += kSums) {
    for (int k = 0; k < kSums; ++k) {
      const double v = x[i + k];
      sums[k] += v * v;
    }
  }
  for (; i < n; ++i) {
    const double v = x[i];
    sums[0] += v * v;
  }
  return addUp(sums);
}

#if defined(__x86_64__) && defined(__GNUC__)
bool hasAvx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2;
}

__attribute__((target("avx2,fma"))) double squaresAvx2(const float* x, int64_t n) {
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  int64_t i = 0;
  for (; i + kSums <= n; i += kSums) {
    for (int half = 0; half < 2; ++half) {
      const __m256 v = _mm256_loadu_ps(x + i + 8 * half);
      const __m256d low = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
      const __m256d high = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
      acc[2 * half] = _mm256_fmadd_pd(low, low, acc[2 * half]);
      acc[2 * half + 1] = _mm256_fmadd_pd(high, high, acc[2 * half + 1]);
    }
  }
  double sums[kSums];
  for (int r = 0; r < 4; ++r) _mm256_storeu_pd(sums + 4 * r, acc[r]);
  for (; i < n; ++i) {
    const double v = x[i];
    sums[0] += v * v;
  }
  return addUp(sums);
}

#else
bool hasAvx2() { return false; }
double squaresAvx2(const float* x, int64_t n) { return squaresPortable(x, n); }
#endif

double squaresOf(const float* x, int64_t n) { return hasAvx2() ? squaresAvx2(x, n) : squaresPortable(x, n); }

}  // namespace detail

namespace {

/// Sum of the squares of n floats in 64 K-element blocks, summed in block order: the same bits
/// whatever the number of intra-op threads that compute the blocks.
double squaresInBlocks(const float* x, int64_t n) {
  constexpr int64_t kBlock = int64_t{1} << 16;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  if (blocks <= 1) return detail::squaresOf(x, n);
  std::vector<double> partial(static_cast<size_t>(blocks));
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      partial[static_cast<size_t>(b)] = detail::squaresOf(x + b * kBlock, std::min(kBlock, n - b * kBlock));
    }
  });
  double sum = 0;
  for (double p : partial) sum += p;
  return sum;
}

/// Sum of the squares of `grads`, in float64. CPU gradients in fixed blocks (the same bits for any
/// thread count); the others on their device, read back once per device rather than per tensor.
double sumOfSquares(const std::vector<at::Tensor>& grads) {
  double sum = 0;
  std::map<std::string, at::Tensor> onDevice;  // per device: the running sum, a float64 scalar there
  for (const auto& grad : grads) {
    if (!grad.defined()) continue;
    LOCKSTEP_CHECK(grad.scalar_type() == at::kFloat, "clipGradNorm: a gradient is ", describeTensor(grad), " on ",
                   grad.device().str(), "; expected float32");
    if (!grad.device().is_cpu()) {
      at::Tensor squares = at::linalg_vector_norm(grad, 2, {}, false, at::kDouble).square();
      at::Tensor& total = onDevice[grad.device().str()];
      total = total.defined() ? total + squares : squares;
      continue;
    }
    const at::Tensor dense = grad.contiguous();
    sum += squaresInBlocks(dense.data_ptr<float>(), dense.numel());
  }
  for (const auto& [device, total] : onDevice) sum += total.item<double>();
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
