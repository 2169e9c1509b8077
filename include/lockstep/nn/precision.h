// lockstep/nn/precision.h — mixed precision: bf16 or fp16 compute, float32 weights.
//
//   {
//     lockstep::AutocastGuard amp(lockstep::Precision::kBf16);
//     loss = lossOf(model->forward(x), y);   // matmuls and convolutions run in bfloat16
//   }
//   loss.backward();                         // outside the guard; weight gradients are float32
//
// Precision::kBf16 turns on LibTorch's CPU autocast for the guard's scope on
// the calling thread: the ops on its lower-precision list (linear, matmul,
// convolutions, LSTM cells) cast their inputs to bfloat16 and compute there,
// the ops on its float32 list (losses, softmax, norms) stay in float32; the
// parameters, their gradients and the optimizer state stay float32, so DDP
// averages float32 gradients as in fp32 (ddp.compression is a separate knob).
// bfloat16 has float32's exponent range: no loss scaling is needed.
// Precision::kFp16 does the same in float16, whose range is narrow: small
// gradients underflow unless the loss is scaled (optim/loss_scaler.h; the
// Trainer does it). CPU autocast has no float16 LSTM kernel; CUDA has all.
// The guard's device type picks CPU or CUDA autocast (the run's device).
//
// The autocast state is thread-local and LibTorch's C++ API gives it no RAII
// guard: this one saves the enabled flag and the dtype, counts its nesting
// and clears the cast cache when the outermost guard ends, as PyTorch's
// Python context manager does. Guards nest; each restores what it found.
// Precision::kFp32 makes a guard that changes nothing.
//
// Not every CPU runs every layer in bfloat16: oneDNN's LSTM primitive has no
// bf16 kernel without AVX-512 and throws. runRecurrentLayer() probes that once
// per process and, where it fails, runs the recurrent layer in float32 inside
// the bf16 scope (one warning naming the layer and oneDNN's reason); the rest
// of the model stays in bf16 and training proceeds. The built-in models route
// their LSTMs through it.
#pragma once

#include <c10/core/DeviceType.h>

#include <functional>
#include <memory>
#include <string>

namespace at {
class Tensor;
}

namespace lockstep {

namespace detail {
class AutocastScope;
}

/// Config key `precision` (fp32, bf16, fp16).
enum class Precision { kFp32, kBf16, kFp16 };
const char* toString(Precision precision);
/// Any case; ConfigError naming `what` and the allowed values otherwise.
Precision parsePrecision(const std::string& text, const std::string& what);

/// How many times longer a bfloat16 matrix product takes than the same float32 one on this
/// CPU and thread (median of 5 timings each of a [128 x 512] x [512 x 512] product: short
/// enough to run at every start). Where LibTorch has fast bf16 kernels (oneDNN on AVX-512 BF16
/// or AMX) it is below 1; where it falls back to its generic ones it is several times above.
double measureBf16MatmulSlowdown();
/// The warning for `precision: bf16` given that slowdown: empty below 1.5, else a sentence
/// naming the measured factor and what it means for training.
std::string bf16SpeedWarning(double slowdown);

/// Whether this CPU runs an LSTM in bfloat16 (forward and backward of a two-step one, probed once per
/// process and cached); when not, `reason` gets LibTorch's message. Thread-safe.
bool cpuRunsBf16Recurrent(std::string* reason = nullptr);

/// `layer(input)` for the recurrent layer `name`. Where bf16 CPU autocast is on and
/// cpuRunsBf16Recurrent() is false, CPU autocast is off around the call and `input` is cast to
/// float32, so the layer computes (and returns) float32; the first such call in a process logs a
/// warning naming the layer and the reason. Otherwise the call as it is.
at::Tensor runRecurrentLayer(const std::string& name, const at::Tensor& input,
                             const std::function<at::Tensor(const at::Tensor&)>& layer);

class AutocastGuard {
 public:
  /// Autocast for `device` (CPU or CUDA) in the precision's dtype.
  explicit AutocastGuard(Precision precision, c10::DeviceType device = c10::DeviceType::CPU);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::unique_ptr<detail::AutocastScope> scope_;  // null for kFp32
};

}  // namespace lockstep
