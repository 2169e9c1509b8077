// autocast_scope.h — LibTorch's thread-local autocast state for one device
// type (CPU or CUDA), and a scope that sets it and restores it. Used by
// AutocastGuard (nn/precision.h) and by activation checkpointing, which
// replays the forward's autocast state in backward.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace lockstep::detail {

/// What autocast is for one device type on this thread.
struct AutocastState {
  bool enabled = false;
  c10::ScalarType dtype = c10::ScalarType::Float;
};

/// CPU and CUDA only (lockstep::Error otherwise).
AutocastState autocastState(c10::DeviceType type);

/// Sets autocast for `type` to `state` while alive, counting the nesting as
/// PyTorch's context manager does: the scope that brings the nesting back to
/// zero clears the cast cache (its low-precision copies of the weights are
/// stale once the optimizer steps). Puts back what it found. A disabled
/// `state` leaves everything as it is.
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType type, AutocastState state);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType type_;
  bool active_;
  AutocastState previous_;
};

}  // namespace lockstep::detail
