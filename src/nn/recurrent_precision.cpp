// recurrent_precision.cpp — the bf16 fallback of recurrent layers (lockstep/nn/precision.h).
#include "nn/recurrent_precision.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/GradMode.h>

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "lockstep/common/logging.h"
#include "lockstep/nn/precision.h"
#include "nn/autocast_scope.h"

namespace lockstep {

namespace {

struct Probe {
  std::mutex mutex;
  std::optional<bool> overridden;
  std::optional<bool> supported;  ///< the probe's answer, once run
  std::string reason;
  int fallbacks = 0;  ///< layer calls run in float32; the first one warned
};

Probe& probe() {
  static Probe state;
  return state;
}

/// A two-step, one-layer float32 LSTM under bf16 CPU autocast, forward and backward, as a model
/// runs it (autocast's casts give oneDNN a mix of dtypes that some CPUs refuse while they run an
/// all-bf16 LSTM), from constant tensors: the probe must not move the training's random stream.
std::string tryBf16Lstm() {
  try {
    c10::AutoGradMode grad(true);  // whatever the caller's mode: the probe runs a backward too
    detail::AutocastScope bf16(c10::DeviceType::CPU, detail::AutocastState{true, at::kBFloat16});
    const auto options = at::TensorOptions().dtype(at::kFloat);
    at::Tensor input = at::linspace(-1, 1, 8, options).view({1, 2, 4});
    at::Tensor state = at::zeros({1, 1, 4}, options);
    std::vector<at::Tensor> weights{
        at::full({16, 4}, 0.1, options).requires_grad_(), at::full({16, 4}, -0.1, options).requires_grad_(),
        at::zeros({16}, options).requires_grad_(), at::zeros({16}, options).requires_grad_()};
    at::Tensor out = std::get<0>(at::lstm(input, {state, state}, weights, /*has_biases=*/true, /*num_layers=*/1,
                                          /*dropout=*/0.0, /*train=*/true, /*bidirectional=*/false,
                                          /*batch_first=*/true));
    out.to(at::kFloat).sum().backward();
    return "";
  } catch (const std::exception& e) {  // oneDNN throws its own dnnl::error, LibTorch c10::Error
    const auto* error = dynamic_cast<const c10::Error*>(&e);
    std::string what = error != nullptr ? error->what_without_backtrace() : e.what();
    what = what.substr(0, std::min(what.find('\n'), what.find(". Run workload")));  // oneDNN's first sentence
    return what.empty() ? "LibTorch's bf16 LSTM failed" : what;
  }
}

/// CPU autocast off while alive; puts back what it found.
class CpuAutocastOff {
 public:
  CpuAutocastOff() : previous_(at::autocast::is_autocast_enabled(c10::DeviceType::CPU)) {
    at::autocast::set_autocast_enabled(c10::DeviceType::CPU, false);
  }
  ~CpuAutocastOff() { at::autocast::set_autocast_enabled(c10::DeviceType::CPU, previous_); }
  CpuAutocastOff(const CpuAutocastOff&) = delete;
  CpuAutocastOff& operator=(const CpuAutocastOff&) = delete;

 private:
  bool previous_;
};

}  // namespace

bool cpuRunsBf16Recurrent(std::string* reason) {
  Probe& p = probe();
  std::lock_guard<std::mutex> lock(p.mutex);
  if (p.overridden) {
    if (reason != nullptr) *reason = *p.overridden ? "" : "forced by a test";
    return *p.overridden;
  }
  if (!p.supported) {
    p.reason = tryBf16Lstm();
    p.supported = p.reason.empty();
  }
  if (reason != nullptr) *reason = p.reason;
  return *p.supported;
}

at::Tensor runRecurrentLayer(const std::string& name, const at::Tensor& input,
                             const std::function<at::Tensor(const at::Tensor&)>& layer) {
  const bool bf16 = !input.is_cuda() && at::autocast::is_autocast_enabled(c10::DeviceType::CPU) &&
                    at::autocast::get_autocast_dtype(c10::DeviceType::CPU) == at::kBFloat16;
  std::string reason;
  if (!bf16 || cpuRunsBf16Recurrent(&reason)) return layer(input);
  {
    Probe& p = probe();
    std::lock_guard<std::mutex> lock(p.mutex);
    if (p.fallbacks++ == 0) {
      log::warn(fmt::format(
          "precision bf16: layer '{}' runs in float32 (the rest of the model in bf16): this CPU cannot run an LSTM "
          "in bfloat16 ({}); oneDNN's bf16 RNN kernels need AVX-512 (docs/activations-and-precision.md)",
          name, reason));
    }
  }
  CpuAutocastOff off;
  return layer(input.to(at::kFloat));
}

namespace detail {

void overrideCpuBf16Recurrent(std::optional<bool> supported) {
  Probe& p = probe();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.overridden = supported;
}

int bf16RecurrentFallbacks() {
  Probe& p = probe();
  std::lock_guard<std::mutex> lock(p.mutex);
  return p.fallbacks;
}

}  // namespace detail

}  // namespace lockstep
