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

/// The tensor's bit patterns as integers of its width.
at::Tensor bits(const at::Tensor& t) {
  const auto size = t.element_size();
  return t.contiguous().view(size == 2 ? at::kShort : size == 4 ? at::kInt : at::kLong);
}

void expectSameBits(const at::Tensor& input, const std::string& what, at::Tensor upstream = {}) {
  SCOPED_TRACE(what);
  at::Tensor probe = at::max_pool2d(input.detach(), {2, 2});
  if (!upstream.defined()) upstream = at::randn(probe.sizes()).to(input.scalar_type());
  Result plain = run(input, upstream, false);
  Result fused = run(input, upstream, true);
  ASSERT_EQ(fused.out.sizes(), plain.out.sizes());
  EXPECT_TRUE(at::equal(fused.out.isnan(), plain.out.isnan()));
  EXPECT_TRUE(at::equal(at::nan_to_num(fused.out), at::nan_to_num(plain.out)));
  // Bits, not values: -0 against +0 counts. NaN is NaN whatever its payload: LibTorch's own
  // bfloat16 conversions disagree on it (its vectorized one writes 0xFFFF, its scalar one 0x7FC0).
  const at::Tensor nan = fused.grad.isnan().reshape(-1);
  EXPECT_TRUE(at::equal(nan, plain.grad.isnan().reshape(-1))) << "NaN gradients in other places";
  const at::Tensor fusedBits = bits(fused.grad).view(-1), plainBits = bits(plain.grad).view(-1);
  const at::Tensor differ = fusedBits.ne(plainBits).logical_and(nan.logical_not()).nonzero();
  EXPECT_EQ(differ.numel(), 0) << differ.numel() << " gradient elements differ; the first, at "
                               << (differ.numel() ? differ[0].item<int64_t>() : -1) << ": bits "
                               << (differ.numel() ? fusedBits[differ[0].item<int64_t>()].item<int64_t>() : 0)
                               << " here against LibTorch's "
                               << (differ.numel() ? plainBits[differ[0].item<int64_t>()].item<int64_t>() : 0);
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
    // Rows wider than any vector the kernels run on (AVX-512: 16 floats, 32 bfloat16s).
    expectSameBits(at::randn({2, 3, 6, 70}).to(dtype), name + " wide rows");
    at::Tensor wideNan = at::randn({1, 2, 4, 80}).to(dtype);
    wideNan[0][1][1][37] = std::numeric_limits<float>::quiet_NaN();
    expectSameBits(wideNan, name + " a NaN in a wide row");
  }
}

TEST(ReluMaxPool2x2, SignedZerosAndSpecialGradientsMatchBitForBit) {
  at::manual_seed(7);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    const std::string name = dtype == at::kFloat ? "float32" : "bfloat16";
    // Windows of -0, +0 and -1 only: +0 and -0 compare equal, so the first one wins. 21 windows a
    // row: the kernels' groups of four and a remainder of one.
    at::Tensor zeros = at::randint(0, 3, {2, 3, 8, 42});
    at::Tensor input =
        at::where(zeros.eq(0), at::full({}, -0.0), at::where(zeros.eq(1), at::full({}, 0.0), at::full({}, -1.0)));
    expectSameBits(input.to(dtype), name + " signed zeros");
    // Positive inputs (every gradient passes ReLU) and gradients of -0, NaN and -infinity
    // scattered over both the groups and the remainders.
    at::Tensor positive = at::rand({2, 3, 8, 42}).add_(0.5).to(dtype);
    at::Tensor upstream = at::randn({2, 3, 4, 21});
    at::Tensor flat = upstream.view(-1);
    flat.slice(0, 0, flat.numel(), 7).fill_(-0.0);
    flat.slice(0, 3, flat.numel(), 11).fill_(std::numeric_limits<float>::quiet_NaN());
    flat.slice(0, 5, flat.numel(), 13).fill_(-std::numeric_limits<float>::infinity());
    expectSameBits(positive, name + " -0, NaN and infinite gradients", upstream.to(dtype));
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
