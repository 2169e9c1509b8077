// reluMaxPool2x2 against at::max_pool2d(at::relu(x), {2, 2}), bit for bit:
// values and input gradients, float32 and bfloat16, odd sizes, ties, NaN.
#include "lockstep/nn/pooling.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace lockstep {
namespace {

struct Result {
  at::Tensor out, grad;
};

Result run(const at::Tensor& input, const at::Tensor& upstream, bool fused) {
  at::Tensor x = input.detach().clone().requires_grad_(true);
  at::Tensor y = fused ? reluMaxPool2x2(x) : at::max_pool2d(at::relu(x), {2, 2});
  y.backward(upstream);
  return {y.detach(), x.grad()};
}

void expectSameBits(const at::Tensor& input, const std::string& what) {
  SCOPED_TRACE(what);
  at::Tensor probe = at::max_pool2d(input.detach(), {2, 2});
  at::Tensor upstream = at::randn(probe.sizes()).to(input.scalar_type());
  Result plain = run(input, upstream, false);
  Result fused = run(input, upstream, true);
  ASSERT_EQ(fused.out.sizes(), plain.out.sizes());
  EXPECT_TRUE(at::equal(fused.out.isnan(), plain.out.isnan()));
  EXPECT_TRUE(at::equal(at::nan_to_num(fused.out), at::nan_to_num(plain.out)));
  EXPECT_TRUE(at::equal(fused.grad, plain.grad))
      << "largest gradient difference " << (fused.grad - plain.grad).abs().max().item<double>();
}

TEST(ReluMaxPool2x2, MatchesReluThenMaxPoolBitForBit) {
  at::manual_seed(5);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    const std::string name = dtype == at::kFloat ? "float32" : "bfloat16";
    expectSameBits(at::randn({4, 3, 8, 8}).to(dtype), name + " even");
    expectSameBits(at::randn({2, 5, 7, 9}).to(dtype), name + " odd sizes: the last row and column are dropped");
    // Ties everywhere: small integers, many windows all <= 0, repeated maxima.
    expectSameBits(at::randint(-2, 3, {3, 4, 6, 6}).to(dtype), name + " ties");
    at::Tensor nan = at::randn({1, 2, 4, 4}).to(dtype);
    nan[0][0][0][1] = std::numeric_limits<float>::quiet_NaN();
    nan[0][1][2][2] = std::numeric_limits<float>::quiet_NaN();
    nan[0][1][3][3] = std::numeric_limits<float>::quiet_NaN();
    expectSameBits(nan, name + " NaN propagates");
  }
}

TEST(ReluMaxPool2x2, StridedInputAndTheFallbacks) {
  at::manual_seed(6);
  // A non-contiguous input (a channels-last copy) and a 3-D one (the fallback).
  expectSameBits(at::randn({2, 3, 6, 6}).contiguous(at::MemoryFormat::ChannelsLast), "channels-last input");
  expectSameBits(at::randn({3, 6, 6}), "3-D input falls back to the LibTorch ops");
  expectSameBits(at::randn({2, 3, 6, 6}, at::kDouble), "float64 falls back");
}

}  // namespace
}  // namespace lockstep
