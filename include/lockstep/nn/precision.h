// lockstep/nn/precision.h — mixed precision: bf16 compute, float32 weights.
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
// averages float32 gradients as before (ddp.compression is a separate knob).
// bfloat16 has float32's exponent range: no loss scaling is needed
// (optim/loss_scaler.h is for float16).
//
// The autocast state is thread-local and LibTorch's C++ API gives it no RAII
// guard: this one saves the enabled flag and the dtype, counts its nesting
// and clears the cast cache when the outermost guard ends, as PyTorch's
// Python context manager does. Guards nest; each restores what it found.
// Precision::kFp32 makes a guard that changes nothing.
#pragma once

#include <memory>
#include <string>

namespace lockstep {

namespace detail {
class AutocastScope;
}

/// Config key `precision` (fp32, bf16).
enum class Precision { kFp32, kBf16 };
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

class AutocastGuard {
 public:
  explicit AutocastGuard(Precision precision);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::unique_ptr<detail::AutocastScope> scope_;  // null for kFp32
};

}  // namespace lockstep
