// The counting allocator: exact byte counts for tensors made after it was
// installed, the peak and its reset; and what activation checkpointing saves,
// measured with it on a 64-block residual MLP.
#include "lockstep/common/tensor_memory.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "lockstep/nn/activation_checkpoint.h"

namespace lockstep {
namespace {

TEST(TensorMemory, CountsLiveBytesAndThePeak) {
  trackTensorMemory();
  trackTensorMemory();  // idempotent
  ASSERT_TRUE(tensorMemoryTracked());
  const int64_t before = liveTensorBytes();
  resetPeakTensorBytes();
  {
    at::Tensor a = at::empty({1000}, at::kFloat);
    EXPECT_EQ(liveTensorBytes() - before, 4000);
    {
      at::Tensor b = at::empty({250, 4}, at::kDouble);
      EXPECT_EQ(liveTensorBytes() - before, 12000);
    }
    EXPECT_EQ(liveTensorBytes() - before, 4000);
    EXPECT_EQ(peakTensorBytes() - before, 12000);
  }
  EXPECT_EQ(liveTensorBytes(), before);
  resetPeakTensorBytes();
  EXPECT_EQ(peakTensorBytes(), before);
  // The data is usable and 64-byte aligned, like the default allocator's.
  at::Tensor c = at::arange(100, at::kFloat);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c.data_ptr()) % 64, 0u);
  EXPECT_FLOAT_EQ(c.sum().item<float>(), 4950.0f);
}

TEST(TensorMemory, CountsFromManyThreads) {
  trackTensorMemory();
  const int64_t before = liveTensorBytes();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 2000; ++i) at::Tensor x = at::empty({64 + i % 7}, at::kFloat);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(liveTensorBytes(), before);
}

TEST(TensorMemory, ReusesFreedLargeBlocksUpToTheLimitOldestGivenBackFirst) {
  trackTensorMemory();
  setTensorCacheLimit(int64_t{7} << 19);  // 3.5 MiB: three 1 MiB blocks (and their headers)
  const int64_t live = liveTensorBytes();
  const int64_t cachedBefore = cachedTensorBytes();
  void* first = nullptr;
  {
    at::Tensor a = at::empty({1 << 18}, at::kFloat);  // 1 MiB
    first = a.data_ptr();
  }
  EXPECT_GT(cachedTensorBytes(), cachedBefore) << "a freed 1 MiB block is kept";
  {
    at::Tensor b = at::ones({1 << 18}, at::kFloat);
    EXPECT_EQ(b.data_ptr(), first) << "the next tensor of the same size gets the same block";
    EXPECT_EQ(liveTensorBytes() - live, 4 << 18) << "a reused block counts as live tensor bytes again";
    EXPECT_FLOAT_EQ(b.sum().item<float>(), static_cast<float>(1 << 18));
  }
  // Five freed 1 MiB blocks under a 3.5 MiB limit: the oldest two go back to the C library.
  std::vector<void*> order;
  {
    std::vector<at::Tensor> held;
    for (int i = 0; i < 5; ++i) held.push_back(at::empty({1 << 18}, at::kFloat));
    for (auto& t : held) order.push_back(t.data_ptr());
    for (auto& t : held) t.reset();  // freed in allocation order: order[0] is the oldest
  }
  EXPECT_LE(cachedTensorBytes(), int64_t{7} << 19);
  std::vector<void*> again;
  std::vector<at::Tensor> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(at::empty({1 << 18}, at::kFloat));
    again.push_back(held.back().data_ptr());
  }
  for (int i = 2; i < 5; ++i) EXPECT_NE(std::find(again.begin(), again.end(), order[i]), again.end()) << i;
  held.clear();
  // Small tensors are the C library's business; a limit of 0 keeps nothing.
  setTensorCacheLimit(0);
  EXPECT_EQ(cachedTensorBytes(), 0);
  { at::Tensor big = at::empty({1 << 18}, at::kFloat); }
  EXPECT_EQ(cachedTensorBytes(), 0);
  setTensorCacheLimit(int64_t{1} << 30);
  EXPECT_EQ(liveTensorBytes(), live);
}

/// Peak tensor bytes above the bytes live before one forward+backward of a
/// residual MLP, plain (segments 0) or checkpointed.
int64_t activationPeak(int64_t segments) {
  const int64_t blocks = 64, width = 64, batch = 1024;
  torch::manual_seed(0);
  std::vector<torch::nn::Linear> layers;
  for (int64_t b = 0; b < blocks; ++b) layers.emplace_back(width, width);
  std::vector<CheckpointStage> stages;
  for (auto& l : layers) {
    auto layer = l.ptr();
    stages.push_back({[layer](const at::Tensor& x) { return x + at::relu(layer->forward(x)); }, nullptr});
  }
  at::Tensor input = at::randn({batch, width});
  for (auto& l : layers) {  // gradients exist before the measured step, as in training after step one
    for (auto& p : l->parameters()) p.mutable_grad() = at::zeros_like(p);
  }
  const int64_t before = liveTensorBytes();
  resetPeakTensorBytes();
  at::Tensor y;
  if (segments > 0) {
    y = checkpointSequence(stages, segments, input);
  } else {
    y = input;
    for (auto& s : stages) y = s.fn(y);
  }
  y.pow(2).mean().backward();
  return peakTensorBytes() - before;
}

TEST(TensorMemory, CheckpointingA64BlockResidualMlpIn8SegmentsCutsThePeakToAQuarter) {
  trackTensorMemory();
  const int64_t plain = activationPeak(0);
  const int64_t checkpointed = activationPeak(8);
  const double ratio = static_cast<double>(checkpointed) / static_cast<double>(plain);
  std::printf("activation peak: plain %.1f MB, 8 segments %.1f MB, ratio %.3f\n", plain / 1e6, checkpointed / 1e6,
              ratio);
  EXPECT_GT(plain, 64 * 1024 * 64 * 4) << "the plain run must hold at least one activation per block";
  EXPECT_LE(ratio, 0.25);
}

}  // namespace
}  // namespace lockstep
