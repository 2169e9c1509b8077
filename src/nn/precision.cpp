// The scoped CPU autocast of nn/precision.h.
#include "lockstep/nn/precision.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "lockstep/common/enum_names.h"
#include "nn/autocast_scope.h"

namespace lockstep {

namespace {
constexpr EnumName<Precision> kPrecisionNames[] = {{Precision::kFp32, "fp32"},     {Precision::kBf16, "bf16"},
                                                   {Precision::kFp16, "fp16"},     {Precision::kFp32, "float32"},
                                                   {Precision::kBf16, "bfloat16"}, {Precision::kFp16, "float16"}};
}  // namespace

const char* toString(Precision precision) { return enumName(kPrecisionNames, precision); }

Precision parsePrecision(const std::string& text, const std::string& what) {
  return parseEnum(kPrecisionNames, text, what);
}

double measureBf16MatmulSlowdown() {
  c10::NoGradGuard noGrad;
  // Not from the global generator: the probe must not move the training's random stream.
  const at::Tensor a = at::linspace(-1, 1, 128 * 512).view({128, 512});
  const at::Tensor b = at::linspace(1, -1, 512 * 512).view({512, 512});
  auto medianSeconds = [](const at::Tensor& x, const at::Tensor& y) {
    at::mm(x, y);  // warm-up: kernel selection, first-touch of the output
    std::vector<double> seconds;
    for (int i = 0; i < 5; ++i) {
      auto start = std::chrono::steady_clock::now();
      at::mm(x, y);
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::nth_element(seconds.begin(), seconds.begin() + 2, seconds.end());
    return seconds[2];
  };
  const double fp32 = medianSeconds(a, b);
  const double bf16 = medianSeconds(a.to(at::kBFloat16), b.to(at::kBFloat16));
  return bf16 / std::max(fp32, 1e-9);
}

std::string bf16SpeedWarning(double slowdown) {
  if (slowdown < 1.5) return "";
  return fmt::format(
      "precision bf16: on this CPU a bfloat16 matrix product took {:.1f}x as long as the float32 one (LibTorch has "
      "no fast bf16 kernel for it here); where that was so, bf16 training ran 5-8x slower than fp32 "
      "(docs/activations-and-precision.md, bf16 mixed precision)",
      slowdown);
}

AutocastGuard::AutocastGuard(Precision precision, c10::DeviceType device) {
  if (precision == Precision::kFp32) return;
  const c10::ScalarType dtype = precision == Precision::kBf16 ? at::kBFloat16 : at::kHalf;
  scope_ = std::make_unique<detail::AutocastScope>(device, detail::AutocastState{true, dtype});
}

AutocastGuard::~AutocastGuard() = default;

}  // namespace lockstep
