// The autocast guard: state set and restored, nesting, the cast cache dropped
// at the outermost exit, bf16 compute with float32 weights and gradients, and
// the models lockstep trains running under it, on CPUs with and without bf16
// LSTM kernels (the float32 fallback forced too).
#include "lockstep/nn/precision.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "lockstep/common/error.h"
#include "lockstep/models/char_lstm.h"
#include "lockstep/models/vision.h"
#include "nn/recurrent_precision.h"
#include "support/subprocess.h"

namespace lockstep {
namespace {

TEST(Precision, GuardSetsAndRestoresTheThreadsAutocastState) {
  ASSERT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  const auto dtypeBefore = at::autocast::get_autocast_dtype(at::kCPU);
  {
    AutocastGuard fp32(Precision::kFp32);
    EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  }
  {
    AutocastGuard outer(Precision::kBf16);
    EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU));
    EXPECT_EQ(at::autocast::get_autocast_dtype(at::kCPU), at::kBFloat16);
    {
      AutocastGuard inner(Precision::kBf16);
      EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU));
    }
    EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU))
        << "the inner guard switched autocast off for the outer one";
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  EXPECT_EQ(at::autocast::get_autocast_dtype(at::kCPU), dtypeBefore);
}

TEST(Precision, Bf16ComputesInBf16AndKeepsWeightsAndGradientsFloat32) {
  torch::manual_seed(0);
  torch::nn::Linear linear(64, 32);
  at::Tensor x = at::randn({16, 64});
  at::Tensor reference = linear->forward(x);
  at::Tensor y;
  {
    AutocastGuard amp(Precision::kBf16);
    y = linear->forward(x);
  }
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::allclose(y.to(at::kFloat), reference, /*rtol=*/2e-2, /*atol=*/5e-2));
  EXPECT_FALSE(at::equal(y.to(at::kFloat), reference)) << "nothing was computed in bf16";
  y.to(at::kFloat).sum().backward();
  EXPECT_EQ(linear->weight.scalar_type(), at::kFloat);
  ASSERT_TRUE(linear->weight.grad().defined());
  EXPECT_EQ(linear->weight.grad().scalar_type(), at::kFloat);
}

TEST(Precision, TheCastCacheIsDroppedWhenTheGuardEnds) {
  // Autocast caches the bf16 copy of each weight within a scope. After an
  // optimizer step the next scope must see the new weights, not the cached copy.
  torch::nn::Linear linear(4, 4);
  at::Tensor x = at::ones({1, 4});
  at::Tensor first, second;
  {
    AutocastGuard amp(Precision::kBf16);
    first = linear->forward(x);
  }
  {
    c10::NoGradGuard noGrad;
    linear->weight.add_(1.0);
  }
  {
    AutocastGuard amp(Precision::kBf16);
    second = linear->forward(x);
  }
  EXPECT_GT((second - first).to(at::kFloat).abs().min().item<float>(), 3.0f);
}

TEST(Precision, TheBuiltInModelsRunUnderBf16) {
  torch::manual_seed(1);
  CharLstm lstm(CharLstmOptions{12, 16, 2});
  auto conv = makeImageModel("convnet", ImageModelOptions{1, 28, 10, {}});
  at::Tensor logits, images;
  {
    AutocastGuard amp(Precision::kBf16);
    logits = lstm->forward(at::randint(0, 12, {4, 8}, at::kLong));
    images = conv->forward(at::randn({2, 1, 28, 28}));
  }
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{4, 8, 12}));
  EXPECT_EQ(images.sizes(), (std::vector<int64_t>{2, 10}));
  EXPECT_EQ(images.scalar_type(), at::kBFloat16);
  EXPECT_EQ(logits.scalar_type(), at::kBFloat16) << "the head runs in bf16 whether or not the LSTM can";
  images.to(at::kFloat).sum().backward();
  logits.to(at::kFloat).sum().backward();
  for (auto* model : {static_cast<torch::nn::Module*>(conv.get()), static_cast<torch::nn::Module*>(lstm.get())}) {
    for (auto& p : model->parameters()) {
      ASSERT_TRUE(p.grad().defined());
      EXPECT_EQ(p.grad().scalar_type(), at::kFloat);
    }
  }
  std::string reason;
  const bool native = cpuRunsBf16Recurrent(&reason);
  std::printf("bf16 LSTM on this CPU: %s\n", native ? "yes" : ("no: " + reason).c_str());
}

/// Forces the CPU's answer for the scope: the fallback runs where the CPU has bf16 LSTM kernels too.
struct ForcedBf16Recurrent {
  explicit ForcedBf16Recurrent(bool supported) { detail::overrideCpuBf16Recurrent(supported); }
  ~ForcedBf16Recurrent() { detail::overrideCpuBf16Recurrent(std::nullopt); }
};

TEST(Precision, WithoutBf16LstmKernelsTheLstmRunsInFloat32AndTheRestInBf16) {
  ForcedBf16Recurrent forced(false);
  for (int64_t segments : {0, 3}) {  // the whole LSTM; each layer as a checkpointed stage
    SCOPED_TRACE("checkpoint segments " + std::to_string(segments));
    torch::manual_seed(1);
    CharLstm lstm(CharLstmOptions{12, 16, 2, segments});
    at::Tensor input = at::randint(0, 12, {4, 8}, at::kLong);
    const int before = detail::bf16RecurrentFallbacks();
    at::Tensor logits;
    {
      AutocastGuard amp(Precision::kBf16);
      logits = lstm->forward(input);
    }
    EXPECT_EQ(detail::bf16RecurrentFallbacks() - before, segments == 0 ? 1 : 2);
    EXPECT_EQ(logits.scalar_type(), at::kBFloat16);
    logits.to(at::kFloat).sum().backward();
    for (auto& p : lstm->parameters()) {
      ASSERT_TRUE(p.grad().defined());
      EXPECT_EQ(p.grad().scalar_type(), at::kFloat);
    }
    // The LSTM's part is float32's: with the head outside autocast the logits are the fp32 model's.
    at::Tensor fp32 = lstm->forward(input);
    EXPECT_TRUE(at::allclose(logits.to(at::kFloat), fp32, 0.05, 0.05));
  }
  EXPECT_GE(detail::bf16RecurrentFallbacks(), 1);
  // Outside bf16 autocast the layer runs as it is, fallback or not.
  const int before = detail::bf16RecurrentFallbacks();
  CharLstm lstm(CharLstmOptions{12, 16, 2});
  EXPECT_EQ(lstm->forward(at::randint(0, 12, {2, 4}, at::kLong)).scalar_type(), at::kFloat);
  EXPECT_EQ(detail::bf16RecurrentFallbacks(), before) << "a float32 forward fell back";
}

TEST(Precision, Bf16PetNamesTrainOnThisCpuAndSayWhetherTheLstmFellBack) {
  const std::string dir = test::makeTempDir();
  const std::string bin = std::filesystem::absolute(test::lockstepBin()).string();
  auto r = test::runProcess(
      {"sh", "-c",
       "cd " + test::quote(dir) + " && exec " + test::quote(bin) + " run -np 2 --comm-timeout 60 -- " +
           test::quote(bin) + " train " + test::quote(LOCKSTEP_SOURCE_DIR "/configs/petnames.yaml") +
           " precision=bf16 trainer.max_steps=3 trainer.batch_size=64 trainer.validate=false generate.samples=0 "
           "checkpoint.dir=ckpt"},
      {.timeout = std::chrono::seconds(240)});
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  const std::string log = r.out + r.err;
  EXPECT_NE(log.find("done: 3 steps"), std::string::npos) << log;
  std::string reason;
  const bool fellBack = log.find("layer 'lstm' runs in float32") != std::string::npos;
  EXPECT_EQ(fellBack, !cpuRunsBf16Recurrent(&reason)) << reason << "\n" << log;
}

TEST(Precision, ParsesNamesAndRefusesOthers) {
  EXPECT_EQ(parsePrecision("bf16", "precision"), Precision::kBf16);
  EXPECT_EQ(parsePrecision("FP32", "precision"), Precision::kFp32);
  EXPECT_EQ(parsePrecision("float16", "precision"), Precision::kFp16);
  EXPECT_STREQ(toString(Precision::kBf16), "bf16");
  EXPECT_STREQ(toString(Precision::kFp16), "fp16");
  try {
    parsePrecision("fp8", "precision");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("precision 'fp8' is unknown; expected fp32, bf16 or fp16"), std::string::npos)
        << e.what();
  }
}

// The guard turns on the autocast of the run's device type (no GPU needed to set CUDA's state).
TEST(Precision, TheGuardSetsTheAutocastOfItsDeviceType) {
  {
    AutocastGuard fp16(Precision::kFp16);
    EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU));
    EXPECT_EQ(at::autocast::get_autocast_dtype(at::kCPU), at::kHalf);
    EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCUDA));
  }
  {
    AutocastGuard cuda(Precision::kBf16, c10::DeviceType::CUDA);
    EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCUDA));
    EXPECT_EQ(at::autocast::get_autocast_dtype(at::kCUDA), at::kBFloat16);
    EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCUDA));
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
}

TEST(Precision, WarnsOnlyWhereBf16MatrixProductsAreMeasuredSlow) {
  EXPECT_EQ(bf16SpeedWarning(0.7), "");
  EXPECT_EQ(bf16SpeedWarning(1.49), "");
  const std::string warning = bf16SpeedWarning(6.04);
  EXPECT_NE(warning.find("took 6.0x as long as the float32 one"), std::string::npos) << warning;
  // The probe runs in the Trainer before training: it must not draw from the global generator.
  torch::manual_seed(4);
  const at::Tensor expected = at::randn({8});
  torch::manual_seed(4);
  const double slowdown = measureBf16MatmulSlowdown();
  EXPECT_TRUE(at::equal(at::randn({8}), expected)) << "the probe moved the random stream";
  EXPECT_TRUE(std::isfinite(slowdown) && slowdown > 0) << slowdown;
  std::printf("bf16 matrix product on this CPU: %.2fx the float32 time\n", slowdown);
}

}  // namespace
}  // namespace lockstep
