// Clipping by the global norm (optim/grad_clip.h): the norm exact to float64
// rounding, and LibTorch's clip_grad_norm_ (which sums in float32) to within
// its float32 accumulation error, both the norm and the scaled gradients; the
// same float32 coefficient, so bit-for-bit the same gradients, whether the
// gradients are whole on one rank or cut into pieces over ranks; untouched
// below the bound; bad input named.
#include "lockstep/optim/grad_clip.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/types.h>

// After torch/types.h, which it needs.
#include <torch/nn/utils/clip_grad.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "lockstep/common/error.h"
#include "optim/squares.h"
#include "support/thread_ranks.h"

namespace lockstep {
namespace {

/// Gradients of mixed sizes and scales (lengths not multiples of 8, the norm's running sums).
std::vector<at::Tensor> someGradients() {
  at::manual_seed(5);
  return {at::randn({300, 700}) * 3, at::randn({17}) * 1e-3, at::randn({40, 9}), at::randn({1}) * 50};
}

std::vector<at::Tensor> cloned(const std::vector<at::Tensor>& grads) {
  std::vector<at::Tensor> copies;
  for (const auto& g : grads) copies.push_back(g.clone());
  return copies;
}

TEST(GradClip, IsTheExactNormAndMatchesLibTorchsClipGradNormToItsFloat32Rounding) {
  for (double maxNorm : {1.0, 1e4}) {
    auto ours = cloned(someGradients());
    std::vector<at::Tensor> flat;
    for (const auto& g : ours) flat.push_back(g.reshape({-1}).to(at::kDouble));
    const double exact = at::cat(flat).norm().item<double>();
    auto params = cloned(ours);  // LibTorch's clips parameters' .grad
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = ours[i].clone();
    const double libtorch = torch::nn::utils::clip_grad_norm_(params, maxNorm);
    const double norm = clipGradNorm(ours, maxNorm);
    EXPECT_NEAR(norm, exact, 1e-12 * exact);
    // LibTorch's float32 sums of 210 000 squares are off by about 1e-6 of the norm.
    EXPECT_NEAR(libtorch, exact, 1e-5 * exact);
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_TRUE(at::allclose(ours[i], params[i].grad(), 1e-5, 0)) << "gradient " << i << ", maxNorm " << maxNorm;
    }
  }
}

TEST(GradClip, BelowTheBoundLeavesTheGradientsBitForBit) {
  auto grads = someGradients();
  auto before = cloned(grads);
  const double norm = clipGradNorm(grads, 1e6);
  EXPECT_GT(norm, 0);
  for (size_t i = 0; i < grads.size(); ++i) EXPECT_TRUE(at::equal(grads[i], before[i])) << "gradient " << i;
}

TEST(GradClip, PiecesOnSeveralRanksScaleExactlyAsTheWholeGradients) {
  // ZeRO's cut: rank r holds a contiguous part of the flattened gradients (here cutting the first
  // tensor across the ranks); the pieces' squares are summed by an allreduce.
  for (int world : {2, 3}) {
    auto whole = someGradients();
    std::vector<at::Tensor> flat;
    for (const auto& g : whole) flat.push_back(g.reshape({-1}));
    const at::Tensor all = at::cat(flat);
    auto expected = cloned(whole);
    const double expectedNorm = clipGradNorm(expected, 1.0);
    ASSERT_GT(expectedNorm, 1.0) << "the gradients must be clipped for the test to mean anything";
    std::vector<at::Tensor> parts(static_cast<size_t>(world));
    std::vector<double> norms(static_cast<size_t>(world));
    const int64_t part = (all.numel() + world - 1) / world;
    test::runRanks(world, [&](int rank, Communicator& comm) {
      const int64_t first = part * rank, count = std::min(part, all.numel() - first);
      at::Tensor mine = all.narrow(0, first, count).clone();
      // Cut again inside the rank, at an odd place, as a part covers several parameters.
      std::vector<at::Tensor> pieces{mine.narrow(0, 0, count / 3), mine.narrow(0, count / 3, count - count / 3)};
      norms[static_cast<size_t>(rank)] = clipGradNorm(pieces, 1.0, &comm);
      parts[static_cast<size_t>(rank)] = mine;
    });
    std::vector<at::Tensor> expectedFlat;
    for (const auto& g : expected) expectedFlat.push_back(g.reshape({-1}));
    EXPECT_TRUE(at::equal(at::cat(parts), at::cat(expectedFlat))) << world << " ranks";
    for (double norm : norms) EXPECT_NEAR(norm, expectedNorm, 1e-12 * expectedNorm) << world << " ranks";
  }
}

TEST(GradClip, TheAvx2AndPortableSumsOfSquaresGiveTheSameBits) {
  // Lengths around the 16 running sums, magnitudes from 1e-30 to 1e30 (each square exact in float64).
  std::printf("this CPU %s AVX2 and FMA\n", detail::hasAvx2() ? "has" : "lacks (both are the portable sum)");
  at::manual_seed(9);
  for (int64_t n : {0, 1, 15, 16, 17, 31, 33, 1000, 100003}) {
    const at::Tensor x = at::randn({n}) * at::pow(10.0, at::randint(-30, 31, {n}).to(at::kFloat));
    const float* data = x.data_ptr<float>();
    const double portable = detail::squaresPortable(data, n), avx2 = detail::squaresAvx2(data, n);
    EXPECT_EQ(std::memcmp(&portable, &avx2, sizeof(double)), 0) << n << " elements: " << portable << " vs " << avx2;
    EXPECT_NEAR(portable, x.to(at::kDouble).pow(2).sum().item<double>(), 1e-12 * portable) << n << " elements";
  }
}

TEST(GradClip, TheNumberOfThreadsDoesNotChangeTheBits) {
  // The norm's 64 K-element blocks run on the intra-op threads and are added in block order.
  const int threads = at::get_num_threads();
  std::vector<double> norms;
  at::manual_seed(4);
  const int64_t n = 40 * 65536 + 123;  // 41 blocks, magnitudes over seven decades
  const at::Tensor grad = at::randn({n}) * at::pow(10.0, at::randint(-3, 4, {n}).to(at::kFloat));
  for (int count : {1, 2, 3, 5}) {
    at::set_num_threads(count);
    norms.push_back(clipGradNorm({grad}, 1e30));
  }
  at::set_num_threads(threads);
  for (double norm : norms) EXPECT_EQ(std::memcmp(&norm, &norms[0], sizeof(double)), 0) << norm << " vs " << norms[0];
}

TEST(GradClip, SkipsUndefinedGradientsAndNamesBadInput) {
  auto grads = someGradients();
  grads.push_back(at::Tensor());
  EXPECT_GT(clipGradNorm(grads, 1.0), 1.0);
  EXPECT_EQ(clipGradNorm({at::Tensor()}, 1.0), 0.0);
  try {
    clipGradNorm({at::ones({3}, at::kDouble)}, 1.0);
    FAIL() << "a float64 gradient was accepted";
  } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find("expected float32"), std::string::npos) << e.what(); }
  EXPECT_THROW(clipGradNorm(someGradients(), 0.0), Error);
}

}  // namespace
}  // namespace lockstep
